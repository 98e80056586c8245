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

func TestEventTrimWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(context.Background(), seedEvents)
	require.NoError(t, err)
	work(t, tx, &EventTrimWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, EventTrimArgs{})
	require.Equal(t, []string{"id:new", "new"}, eventIDsLeft(t, tx))
}

// The leader runs the event trim on start.
func TestEventTrimRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), seedEvents)
	require.NoError(t, err)
	runOnStart(t, pool, Config{ReaperInterval: -1, ChangeTrimInterval: -1}, EventTrimArgs{}.Kind())
	require.Equal(t, []string{"id:new", "new"}, eventIDsLeft(t, pool))
}
