package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

const seedDeadLetters = `
	INSERT INTO profile.dead_letters (message, reason, sqlstate, created, resolved) VALUES
		('{"n":1}', 'old, resolved', 'SPVAL', now() - interval '40 days', now() - interval '31 days'),
		('{"n":2}', 'old, unresolved', 'SPVAL', now() - interval '40 days', NULL),
		('{"n":3}', 'recently resolved', 'SPVAL', now() - interval '40 days', now() - interval '1 day')`

func deadLetterReasons(t *testing.T, q db.DBTX) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), `SELECT reason FROM profile.dead_letters ORDER BY id`)
	require.NoError(t, err)
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return reasons
}

// Work trims the dead letters resolved longer ago than the retention; unresolved ones stay
// whatever their age, and a retention of zero trims nothing.
func TestDeadLetterTrimWorker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		left      []string
	}{
		{"resolved past the retention go", 30 * 24 * time.Hour, []string{"old, unresolved", "recently resolved"}},
		{"zero retention keeps all", 0, []string{"old, resolved", "old, unresolved", "recently resolved"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tx := dbtest.Tx(t)
			_, err := tx.Exec(context.Background(), seedDeadLetters)
			require.NoError(t, err)

			work(t, tx, &DeadLetterTrimWorker{queries: db.New(tx), retention: tc.retention}, DeadLetterTrimArgs{})
			require.Equal(t, tc.left, deadLetterReasons(t, tx))
		})
	}
}

// The leader runs the dead-letter trim on start.
func TestDeadLetterTrimRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), seedDeadLetters)
	require.NoError(t, err)

	runOnStart(t, pool, Config{DeadLetterRetention: 30 * 24 * time.Hour, ReaperInterval: -1},
		DeadLetterTrimArgs{}.Kind())
	require.Equal(t, []string{"old, unresolved", "recently resolved"}, deadLetterReasons(t, pool))
}
