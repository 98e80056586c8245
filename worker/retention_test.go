package worker

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// An event 200 days old and one of now; the retention is 90 days (the default).
const seedEvents = `
	SELECT api.event_ingest(jsonb_build_array(
		jsonb_build_object('event_headers', jsonb_build_object('grnry-event-id', 'old', 'grnry-event-type', 't',
			'grnry-correlation-id', 'c', 'grnry-event-timestamp', (extract(epoch FROM now() - interval '200 days') * 1000)::bigint),
			'event_payload', 1),
		jsonb_build_object('event_headers', jsonb_build_object('grnry-event-id', 'new', 'grnry-event-type', 't',
			'grnry-correlation-id', 'c'), 'event_payload', 2)))`

func eventIDsLeft(t *testing.T, q db.DBTX) []string {
	t.Helper()
	var ids []string
	require.NoError(t, q.QueryRow(context.Background(), `
		SELECT array(SELECT event_id FROM event.events UNION ALL SELECT 'id:' || event_id FROM event.event_ids ORDER BY 1)`).Scan(&ids))
	return ids
}

// Keys used 2 days, 2 hours and a minute ago; a window of one hour.
const seedKeys = `
	INSERT INTO silo.idempotency_keys (scope, key, request, request_hash, answer, created) VALUES
		('token:1', 'a', 'POST /profile-updates', '\x00', '[]', now() - interval '2 days'),
		('token:1', 'b', 'POST /profile-updates', '\x00', '[]', now() - interval '2 hours'),
		('token:1', 'c', 'POST /profile-updates', '\x00', '[]', now() - interval '1 minute');
	UPDATE silo.settings SET value = '1 hour' WHERE key = 'idempotency.window'`

func keysLeft(t *testing.T, q db.DBTX) []string {
	t.Helper()
	var keys []string
	require.NoError(t, q.QueryRow(context.Background(), `SELECT array(SELECT key FROM silo.idempotency_keys ORDER BY key)`).Scan(&keys))
	return keys
}

// Changes sequenced 3 days, 2 days and 1 hour ago; pending changes written 2 days and 1 hour ago;
// a retention of one day.
const seedChanges = `
	INSERT INTO silo.changes (id, channel, kind, payload, readers, created, sequenced) VALUES
		(1, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '3 days', now() - interval '3 days'),
		(2, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '2 days', now() - interval '2 days'),
		(3, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '1 hour', now() - interval '1 hour');
	INSERT INTO silo.change_pending (channel, kind, readers, created) VALUES
		('reaper', 'old', '{_auth}', now() - interval '2 days'),
		('reaper', 'new', '{_auth}', now() - interval '1 hour');
	UPDATE silo.settings SET value = '1 day' WHERE key = 'change_retention'`

// changeLog returns the ids left in the change log, the trim horizon and the kinds left pending.
func changeLog(t *testing.T, q db.DBTX) (kept []int64, horizon int64, pending []string) {
	t.Helper()
	require.NoError(t, q.QueryRow(context.Background(), `SELECT array(SELECT id FROM silo.changes ORDER BY id),
		(SELECT trimmed_through FROM silo.change_horizon),
		array(SELECT kind FROM silo.change_pending ORDER BY pending_id)`).Scan(&kept, &horizon, &pending))
	return kept, horizon, pending
}

// seedRetention seeds the three targets.
func seedRetention(t *testing.T, q db.DBTX) {
	t.Helper()
	for _, seed := range []string{seedEvents, seedKeys, seedChanges} {
		_, err := q.Exec(context.Background(), seed)
		require.NoError(t, err)
	}
}

// requireTrimmed checks that each target kept what its retention keeps.
func requireTrimmed(t *testing.T, q db.DBTX) {
	t.Helper()
	require.Equal(t, []string{"id:new", "new"}, eventIDsLeft(t, q))
	require.Equal(t, []string{"c"}, keysLeft(t, q))
	kept, horizon, pending := changeLog(t, q)
	require.Equal(t, []int64{3}, kept)
	require.Equal(t, int64(2), horizon)
	require.Equal(t, []string{"new"}, pending)
}

// Work applies every target's retention from silo.settings: events by whole partitions, changes
// (with every lower id; the trim horizon moves) and idempotency keys by rows.
func TestRetentionWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	seedRetention(t, tx)
	work(t, tx, &RetentionWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, RetentionArgs{})
	requireTrimmed(t, tx)
}

// Jobs of the kinds the retention job replaced, queued before an upgrade, apply their own target.
func TestRetentionLegacyKinds(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	seedRetention(t, tx)
	q := db.New(tx)
	work(t, tx, &legacyTrimWorker[EventTrimArgs]{queries: q, target: "event"}, EventTrimArgs{})
	work(t, tx, &legacyTrimWorker[IdempotencyTrimArgs]{queries: q, target: "idempotency"}, IdempotencyTrimArgs{})
	work(t, tx, &legacyTrimWorker[ChangeTrimArgs]{queries: q, target: "change"}, ChangeTrimArgs{})
	requireTrimmed(t, tx)
}

// The leader runs the retention job on start.
func TestRetentionRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	seedRetention(t, pool)
	runOnStart(t, pool, Config{ReaperInterval: -1, PurgeTick: -1}, RetentionArgs{}.Kind())
	requireTrimmed(t, pool)
}
