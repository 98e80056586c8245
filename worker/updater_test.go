package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
	"github.com/silo-db/silo/worker"
)

func appendMsg(id string, v int) string {
	return fmt.Sprintf(`{"_operation":"_array_append","_id":%q,"_path":["seq"],"_value":{"_v":["%d"]}}`, id, v)
}

// enqueueSequences enqueues, in requests of `per` updates, n appends per id interleaved across ids.
func enqueueSequences(t *testing.T, q *db.Queries, prio string, ids []string, n, per int) {
	t.Helper()
	var batch []string
	flush := func() {
		if len(batch) == 0 {
			return
		}
		_, err := q.ProfileEnqueue(context.Background(), db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(batch, ",") + "]"), Priority: prio})
		require.NoError(t, err)
		batch = batch[:0]
	}
	for i := 0; i < n; i++ {
		for _, id := range ids {
			batch = append(batch, appendMsg(id, i))
			if len(batch) == per {
				flush()
			}
		}
	}
	flush()
}

// waitApplied polls until the stream's backlog is empty.
func waitApplied(t *testing.T, pool *pgxpool.Pool, prio int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM profile.inbox WHERE priority = $1`, prio).Scan(&n)
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox not drained within %s (%d left, err %v)", within, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkSequences asserts that every id holds 0..n-1 in order, each once.
func checkSequences(t *testing.T, pool *pgxpool.Pool, ids []string, n int) {
	t.Helper()
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	for _, id := range ids {
		var raw []byte
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT value FROM profile.profilestore WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest'`, id).Scan(&raw))
		var got []string
		require.NoError(t, json.Unmarshal(raw, &got))
		require.Equal(t, want, got, id)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("cid-%03d", i)
	}
	return out
}

// Two updaters on separate pools (two processes), four workers per stream each, small steps:
// every id's appends come out in acceptance order, each exactly once.
func TestUpdaterOrderAcrossWorkersAndProcesses(t *testing.T) {
	url := dbtest.URL(t)
	ctx := context.Background()
	var pools []*pgxpool.Pool
	for i := 0; i < 2; i++ {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
	}
	_, err := pools[0].Exec(ctx, `UPDATE silo.settings SET value = '40' WHERE key = 'updater.batch_size';
		UPDATE silo.settings SET value = '2' WHERE key = 'updater.lanes_per_step'`)
	require.NoError(t, err)
	all := ids(60)
	q := db.New(pools[0])
	// Accepted while the workers run, in many requests.
	for i := 0; i < 2; i++ {
		u := worker.NewUpdater(pools[i], worker.UpdaterConfig{Workers: 4, Registerer: prometheus.NewRegistry(), IdleMax: 20 * time.Millisecond})
		u.Start(ctx)
		t.Cleanup(func() { require.NoError(t, u.Stop(context.Background())) })
	}
	enqueueSequences(t, q, "high", all, 30, 37)
	enqueueSequences(t, q, "low", all[:10], 10, 7)
	waitApplied(t, pools[0], 0, 60*time.Second)
	checkSequences(t, pools[0], all[10:], 30)
	waitApplied(t, pools[0], 1, 60*time.Second)
	// The low stream appended 0..9 to the first ten ids after or between the high ones: per stream
	// the order holds; check the high stream's part separately by counting.
	for _, id := range all[:10] {
		var n int
		require.NoError(t, pools[0].QueryRow(ctx, `SELECT jsonb_array_length(value) FROM profile.profilestore
			WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest'`, id).Scan(&n))
		require.Equal(t, 40, n, id)
	}
}

// While the high stream's backlog is above the barrier, the low stream applies one message per
// wait; when the high stream drains, the low one goes on at full speed.
func TestUpdaterThrottlesTheLowStream(t *testing.T) {
	pool := dbtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `UPDATE silo.settings SET value = '5' WHERE key = 'updater.lag_barrier';
		UPDATE silo.settings SET value = '400' WHERE key = 'updater.wait_time_ms';
		UPDATE silo.settings SET value = '0' WHERE key = 'updater.check_interval_ms';
		UPDATE profile.inbox_lanes SET retry_at = 'infinity', attempts = 1 WHERE priority = 0`)
	require.NoError(t, err)
	q := db.New(pool)
	enqueueSequences(t, q, "high", ids(20), 1, 100) // held: every high lane is blocked
	enqueueSequences(t, q, "low", ids(20), 1, 100)
	u := worker.NewUpdater(pool, worker.UpdaterConfig{Workers: 2, IdleMax: 20 * time.Millisecond})
	u.Start(ctx)
	t.Cleanup(func() { require.NoError(t, u.Stop(context.Background())) })

	time.Sleep(time.Second)
	var low int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM profile.inbox WHERE priority = 1`).Scan(&low))
	// Two workers, one message per 400 ms each: at most about 6 of 20 in a second.
	require.GreaterOrEqual(t, low, 12, "the low stream is throttled")
	require.Less(t, low, 20, "the low stream still moves while throttled")

	_, err = pool.Exec(ctx, `UPDATE profile.inbox_lanes SET retry_at = NULL, attempts = 0 WHERE priority = 0`)
	require.NoError(t, err)
	waitApplied(t, pool, 0, 30*time.Second)
	waitApplied(t, pool, 1, 30*time.Second)
}

// PostgreSQL restarts while the updater works: every update is applied exactly once.
func TestUpdaterSurvivesDatabaseRestart(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "silo-restart-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	port := 0
	start := func() *embedpg.Cluster {
		c, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, Settings: dbtest.TestSettings, Port: port})
		require.NoError(t, err)
		port = c.Port()
		return c
	}
	cluster := start()
	t.Cleanup(func() { _ = cluster.Stop() })
	url := cluster.URL("postgres")
	mig, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, mig, nil))
	_, err = mig.Exec(ctx, `UPDATE silo.settings SET value = '50' WHERE key = 'updater.batch_size'`)
	require.NoError(t, err)
	all := ids(40)
	enqueueSequences(t, db.New(mig), "high", all, 50, 200)
	mig.Close()

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	u := worker.NewUpdater(pool, worker.UpdaterConfig{Workers: 3, IdleMax: 20 * time.Millisecond})
	u.Start(ctx)
	t.Cleanup(func() { _ = u.Stop(context.Background()) })

	// Restart as soon as some but not all updates are applied.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if pool.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&n) == nil && n < 2000 {
			require.Greater(t, n, 0, "the restart must come while work is left")
			break
		}
		require.True(t, time.Now().Before(deadline), "the updater did not start applying")
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, cluster.Stop())
	time.Sleep(300 * time.Millisecond)
	cluster = start()

	waitApplied(t, pool, 0, 60*time.Second)
	checkSequences(t, pool, all, 50)
}
