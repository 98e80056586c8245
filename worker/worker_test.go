package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// The River client elects a leader, which runs the periodic trim on start: resolved dead letters
// past the retention go, unresolved ones stay.
func TestDeadLetterTrimRunsPeriodically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO profile.dead_letters (message, reason, sqlstate, created, resolved) VALUES
			('{"n":1}', 'old, resolved', 'SPVAL', now() - interval '40 days', now() - interval '31 days'),
			('{"n":2}', 'old, unresolved', 'SPVAL', now() - interval '40 days', NULL),
			('{"n":3}', 'recently resolved', 'SPVAL', now() - interval '40 days', now() - interval '1 day')`)
	require.NoError(t, err)

	client, err := NewClient(pool, Config{DeadLetterRetention: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		var reasons []string
		rows, err := pool.Query(ctx, `SELECT reason FROM profile.dead_letters ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var r string
			require.NoError(t, rows.Scan(&r))
			reasons = append(reasons, r)
		}
		require.NoError(t, rows.Err())
		if len(reasons) == 2 {
			require.Equal(t, []string{"old, unresolved", "recently resolved"}, reasons)
			break
		}
		require.True(t, time.Now().Before(deadline), "the trim job did not run: %v", reasons)
		time.Sleep(200 * time.Millisecond)
	}
	// River records the completion asynchronously.
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed' AND kind = 'profile_dead_letter_trim'`).Scan(&n))
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the trim job was never marked completed")
		time.Sleep(100 * time.Millisecond)
	}
}
