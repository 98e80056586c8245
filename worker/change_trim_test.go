package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// The leader runs the change trim on start: changes sequenced longer ago than the retention go
// (with every lower id), the trim horizon moves, newer changes stay.
func TestChangeTrimRunsPeriodically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO silo.changes (id, channel, kind, payload, readers, created, sequenced) VALUES
			(1, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '3 days', now() - interval '3 days'),
			(2, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '2 days', now() - interval '2 days'),
			(3, 'reaper', 'ttl', '{}', '{_auth}', now() - interval '1 hour', now() - interval '1 hour');
		UPDATE silo.settings SET value = '1 day' WHERE key = 'change_retention'`)
	require.NoError(t, err)

	client, err := NewClient(pool, Config{ChangeTrimInterval: time.Hour, ReaperInterval: -1})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed' AND kind = 'change_trim'`).Scan(&n))
		if n > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the change trim job did not complete")
		time.Sleep(200 * time.Millisecond)
	}
	var kept []int64
	var horizon int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT array(SELECT id FROM silo.changes ORDER BY id),
		(SELECT trimmed_through FROM silo.change_horizon)`).Scan(&kept, &horizon))
	require.Equal(t, []int64{3}, kept)
	require.Equal(t, int64(2), horizon)
}
