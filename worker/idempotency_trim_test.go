package worker

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

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

func TestIdempotencyTrimWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(context.Background(), seedKeys)
	require.NoError(t, err)
	work(t, tx, &IdempotencyTrimWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, IdempotencyTrimArgs{})
	require.Equal(t, []string{"c"}, keysLeft(t, tx))
}

// The leader runs the idempotency trim on start.
func TestIdempotencyTrimRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), seedKeys)
	require.NoError(t, err)
	runOnStart(t, pool, Config{ReaperInterval: -1, ChangeTrimInterval: -1}, IdempotencyTrimArgs{}.Kind())
	require.Equal(t, []string{"c"}, keysLeft(t, pool))
}
