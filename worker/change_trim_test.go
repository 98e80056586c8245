package worker

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

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

// Work trims with the retention of silo.settings: changes sequenced longer ago go (with every
// lower id), the trim horizon moves, pending changes written before the cutoff go, newer ones stay.
func TestChangeTrimWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(context.Background(), seedChanges)
	require.NoError(t, err)

	work(t, tx, &ChangeTrimWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, ChangeTrimArgs{})
	kept, horizon, pending := changeLog(t, tx)
	require.Equal(t, []int64{3}, kept)
	require.Equal(t, int64(2), horizon)
	require.Equal(t, []string{"new"}, pending)
}

// The leader runs the change trim on start.
func TestChangeTrimRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), seedChanges)
	require.NoError(t, err)

	runOnStart(t, pool, Config{ReaperInterval: -1}, ChangeTrimArgs{}.Kind())
	kept, horizon, _ := changeLog(t, pool)
	require.Equal(t, []int64{3}, kept)
	require.Equal(t, int64(2), horizon)
}
