package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// The leader runs the reaper on start: one run works through every batch (batch size 2, five
// grains expired, one due for notification), records the events, leaves the rest, and trims
// events older than the retention.
func TestReaperRunsPeriodically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	const past = 1577836800000 // 2020-01-01T00:00:00Z
	_, err := pool.Exec(ctx, `SELECT api.profile_apply_batch($1::jsonb)`, fmt.Sprintf(`[
		{"_id":"r","_path":["e1"],"_value":{"_v":"x","_in":%[2]d,"_ttl":"PT1S"}},
		{"_id":"r","_path":["e2"],"_value":{"_v":"x","_in":%[3]d,"_ttl":"PT1S"}},
		{"_id":"r","_path":["e3"],"_value":{"_v":"x","_in":%[4]d,"_ttl":"PT1S"}},
		{"_id":"r","_path":["e4"],"_value":{"_v":"x","_in":%[5]d,"_ttl":"PT1S"}},
		{"_id":"r","_path":["e5"],"_value":{"_v":"x","_in":%[6]d,"_ttl":"PT1S"}},
		{"_id":"r","_path":["n"],"_value":{"_v":"x","_in":%[1]d,"_ttn":"PT1S","_reader":"analysts"}},
		{"_id":"r","_path":["keep"],"_value":{"_v":"x","_ttl":"P1D"}}]`, past, past+1, past+2, past+3, past+4, past+5))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = '2' WHERE key = 'reaper.batch_size'`)
	require.NoError(t, err)
	// An event older than the retention (reaper.event_retention, 7 days): the run trims it.
	_, err = pool.Exec(ctx, `
		INSERT INTO profile.reaper_events (kind, correlation_id, profile_type, path, pit, grain_type, inserted,
		                                   ttl, ttn, reader, certainty, due, created)
		VALUES ('ttl', 'old', '_d', '/old', '_latest', 't', 0, 'PT1S', 'P100Y', '_auth', 1, now(), now() - interval '8 days')`)
	require.NoError(t, err)

	client, err := NewClient(pool, Config{ReaperInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed' AND kind = 'profile_reap'`).Scan(&n))
		if n > 0 {
			require.Equal(t, 1, n)
			break
		}
		require.True(t, time.Now().Before(deadline), "the reaper job did not complete")
		time.Sleep(200 * time.Millisecond)
	}

	rows, err := pool.Query(ctx, `SELECT path || ' ' || coalesce(notify_at::text, '-') FROM profile.profilestore ORDER BY path`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"/keep -", "/n -"}, left)

	rows, err = pool.Query(ctx, `
		SELECT e.kind || ' ' || e.path || ' ' || c.kind || ' ' || array_to_string(c.readers, ',')
		FROM profile.reaper_events e
		JOIN silo.change_pending c ON c.channel = 'reaper' AND (c.payload->>'id')::bigint = e.id
		ORDER BY e.id`)
	require.NoError(t, err)
	events, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ttn /n ttn analysts", "ttl /e1 ttl _auth", "ttl /e2 ttl _auth",
		"ttl /e3 ttl _auth", "ttl /e4 ttl _auth", "ttl /e5 ttl _auth"}, events)
	var old int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM profile.reaper_events WHERE path = '/old'`).Scan(&old))
	require.Zero(t, old)
}
