package worker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// seedReaper writes, for profile id, five grains past their time to live (e1 to e5, oldest first),
// one past its time to notify (n) and one due in a day (keep); it sets the batch size to 2 and adds
// a reaper event older than the retention (reaper.event_retention, 7 days).
func seedReaper(t *testing.T, q db.DBTX, id string) {
	t.Helper()
	ctx := context.Background()
	const past = 1577836800000 // 2020-01-01T00:00:00Z
	_, err := q.Exec(ctx, `SELECT api.profile_apply_batch($1::jsonb)`, fmt.Sprintf(`[
		{"_id":%[1]q,"_path":["e1"],"_value":{"_v":"x","_in":%[3]d,"_ttl":"PT1S"}},
		{"_id":%[1]q,"_path":["e2"],"_value":{"_v":"x","_in":%[4]d,"_ttl":"PT1S"}},
		{"_id":%[1]q,"_path":["e3"],"_value":{"_v":"x","_in":%[5]d,"_ttl":"PT1S"}},
		{"_id":%[1]q,"_path":["e4"],"_value":{"_v":"x","_in":%[6]d,"_ttl":"PT1S"}},
		{"_id":%[1]q,"_path":["e5"],"_value":{"_v":"x","_in":%[7]d,"_ttl":"PT1S"}},
		{"_id":%[1]q,"_path":["n"],"_value":{"_v":"x","_in":%[2]d,"_ttn":"PT1S","_reader":"analysts"}},
		{"_id":%[1]q,"_path":["keep"],"_value":{"_v":"x","_ttl":"P1D"}}]`, id, past, past+1, past+2, past+3, past+4, past+5))
	require.NoError(t, err)
	_, err = q.Exec(ctx, `UPDATE silo.settings SET value = '2' WHERE key = 'reaper.batch_size'`)
	require.NoError(t, err)
	_, err = q.Exec(ctx, `
		INSERT INTO profile.reaper_events (kind, correlation_id, profile_type, path, pit, grain_type, inserted,
		                                   ttl, ttn, reader, certainty, due, created)
		VALUES ('ttl', $1, '_d', '/old', '_latest', 't', 0, 'PT1S', 'P100Y', '_auth', 1, now(), now() - interval '8 days')`, id)
	require.NoError(t, err)
}

// reaped returns what is left of profile id (path and notify_at) and its reaper events with the
// change each published (event kind, path, change kind, change readers), in event order.
func reaped(t *testing.T, q db.DBTX, id string) (left, events []string) {
	t.Helper()
	ctx := context.Background()
	rows, err := q.Query(ctx, `SELECT path || ' ' || coalesce(notify_at::text, '-') FROM profile.profilestore
		WHERE correlation_id = $1 ORDER BY path`, id)
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	rows, err = q.Query(ctx, `
		SELECT e.kind || ' ' || e.path || ' ' || coalesce(c.kind || ' ' || array_to_string(c.readers, ','), 'no change')
		FROM profile.reaper_events e
		LEFT JOIN silo.change_pending c ON c.channel = 'reaper' AND (c.payload->>'id')::bigint = e.id
		WHERE e.correlation_id = $1
		ORDER BY e.id`, id)
	require.NoError(t, err)
	events, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return left, events
}

// Work reaps batch after batch until nothing is due, or until the budget is used (checked after
// each batch, so a spent budget still runs one); each deletion and notification is a reaper event
// with its change on channel reaper; then events older than the retention are trimmed.
func TestReaperWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		budget time.Duration
		left   []string
		events []string
	}{
		{
			name:   "every batch within the budget",
			budget: time.Hour,
			left:   []string{"/keep -", "/n -"},
			events: []string{"ttn /n ttn analysts", "ttl /e1 ttl _auth", "ttl /e2 ttl _auth",
				"ttl /e3 ttl _auth", "ttl /e4 ttl _auth", "ttl /e5 ttl _auth"},
		},
		{
			name:   "one batch when the budget is spent",
			budget: 0,
			left:   []string{"/e3 -", "/e4 -", "/e5 -", "/keep -", "/n -"},
			events: []string{"ttn /n ttn analysts", "ttl /e1 ttl _auth", "ttl /e2 ttl _auth"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tx := dbtest.Tx(t)
			id := "reap-" + tc.name
			seedReaper(t, tx, id)

			work(t, tx, &ReaperWorker{queries: db.New(tx), budget: tc.budget, logger: slog.New(slog.DiscardHandler)}, ReaperArgs{})
			left, events := reaped(t, tx, id)
			require.Equal(t, tc.left, left)
			require.Equal(t, tc.events, events, "the old event is trimmed, the run's are recorded")
		})
	}
}

// The leader runs the reaper on start.
func TestReaperRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	seedReaper(t, pool, "r")

	runOnStart(t, pool, Config{ReaperInterval: time.Hour}, ReaperArgs{}.Kind())
	left, events := reaped(t, pool, "r")
	require.Equal(t, []string{"/keep -", "/n -"}, left)
	require.Len(t, events, 6)
}
