package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
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

func backlog(t *testing.T, pool *pgxpool.Pool, prio int) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM profile.inbox WHERE priority = $1`, prio).Scan(&n))
	return n
}

// waitBacklog polls until the stream's backlog is n.
func waitBacklog(t *testing.T, pool *pgxpool.Pool, prio, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var left int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM profile.inbox WHERE priority = $1`, prio).Scan(&left)
		if err == nil && left == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog of priority %d not %d within %s (%d left, err %v)", prio, n, within, left, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitApplied(t *testing.T, pool *pgxpool.Pool, prio int, within time.Duration) {
	t.Helper()
	waitBacklog(t, pool, prio, 0, within)
}

func seqOf(t *testing.T, pool *pgxpool.Pool, id string) []string {
	t.Helper()
	var raw []byte
	err := pool.QueryRow(context.Background(),
		`SELECT coalesce((SELECT value FROM profile.profilestore WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest'), '[]')`, id).Scan(&raw)
	require.NoError(t, err)
	var got []string
	require.NoError(t, json.Unmarshal(raw, &got))
	return got
}

func upTo(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

// checkSequences asserts that every id holds 0..n-1 in order, each once.
func checkSequences(t *testing.T, pool *pgxpool.Pool, ids []string, n int) {
	t.Helper()
	for _, id := range ids {
		require.Equal(t, upTo(n), seqOf(t, pool, id), id)
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func setSettings(t *testing.T, pool *pgxpool.Pool, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		tag, err := pool.Exec(context.Background(), `UPDATE silo.settings SET value = $2 WHERE key = $1`, kv[i], kv[i+1])
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected(), kv[i])
	}
}

func startUpdater(t *testing.T, pool *pgxpool.Pool, cfg UpdaterConfig) *Updater {
	t.Helper()
	u := NewUpdater(pool, cfg)
	u.Start(context.Background())
	t.Cleanup(func() { require.NoError(t, u.Stop(context.Background())) })
	return u
}

// Three updaters on separate pools (three processes), four workers per stream each, small steps,
// three clients enqueueing at the same time while the workers run: every id's appends come out in
// acceptance order, each exactly once, in both streams.
func TestUpdaterOrderAcrossWorkersAndProcesses(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	var pools []*pgxpool.Pool
	for i := 0; i < 3; i++ {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
	}
	setSettings(t, pools[0], "updater.batch_size", "40", "updater.lanes_per_step", "3", "updater.throttle_enabled", "false")
	for i := range pools {
		startUpdater(t, pools[i], UpdaterConfig{Workers: 4, Registerer: prometheus.NewRegistry(), IdleMax: 20 * time.Millisecond})
	}
	// Each client owns its ids and sends them in requests that cut the sequences at odd places.
	var wg sync.WaitGroup
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := db.New(pools[c])
			enqueueSequences(t, q, "high", ids(fmt.Sprintf("h%d", c), 20), 30, 37+c)
			enqueueSequences(t, q, "low", ids(fmt.Sprintf("l%d", c), 5), 20, 7+c)
		}()
	}
	wg.Wait()
	waitApplied(t, pools[0], 0, 60*time.Second)
	waitApplied(t, pools[0], 1, 60*time.Second)
	for c := 0; c < 3; c++ {
		checkSequences(t, pools[0], ids(fmt.Sprintf("h%d", c), 20), 30)
		checkSequences(t, pools[0], ids(fmt.Sprintf("l%d", c), 5), 20)
	}
	var dead int
	require.NoError(t, pools[0].QueryRow(ctx, `SELECT count(*) FROM profile.dead_letters`).Scan(&dead))
	require.Zero(t, dead)
}

// While the high stream's backlog is above the barrier, each low worker applies one message and
// then waits the throttle's time; a DBA raising the barrier lets the low stream run at full speed.
func TestUpdaterThrottlesTheLowStream(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	setSettings(t, pool, "updater.lag_barrier", "5", "updater.wait_time_ms", "3600000", "updater.check_interval_ms", "0")
	_, err := pool.Exec(ctx, `UPDATE profile.inbox_lanes SET retry_at = 'infinity', attempts = 1 WHERE priority = 0`)
	require.NoError(t, err)
	q := db.New(pool)
	enqueueSequences(t, q, "high", ids("c", 20), 1, 100) // held: every high lane is blocked
	enqueueSequences(t, q, "low", ids("c", 20), 1, 100)

	reg := prometheus.NewRegistry()
	u := NewUpdater(pool, UpdaterConfig{Workers: 2, Registerer: reg, IdleMax: 20 * time.Millisecond})
	u.Start(ctx)
	t.Cleanup(func() { _ = u.Stop(context.Background()) })
	// Two low workers, one message each, then an hour's wait.
	waitBacklog(t, pool, 1, 18, 30*time.Second)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 18, backlog(t, pool, 1), "the throttled workers wait")
	require.Equal(t, 20, backlog(t, pool, 0))
	require.Contains(t, scrape(t, reg), "silo_profile_updater_low_throttled 1")
	require.NoError(t, u.Stop(ctx), "a throttled wait ends at Stop")

	// The barrier goes up: 20 waiting high updates are no longer too many.
	setSettings(t, pool, "updater.lag_barrier", "1000")
	startUpdater(t, pool, UpdaterConfig{Workers: 2, IdleMax: 20 * time.Millisecond})
	waitApplied(t, pool, 1, 30*time.Second)
	require.Equal(t, 20, backlog(t, pool, 0))

	_, err = pool.Exec(ctx, `UPDATE profile.inbox_lanes SET retry_at = NULL, attempts = 0 WHERE priority = 0`)
	require.NoError(t, err)
	waitApplied(t, pool, 0, 30*time.Second)
	for _, id := range ids("c", 20) {
		require.Equal(t, []string{"0", "0"}, seqOf(t, pool, id), id)
	}
}

func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Gauge != nil:
				fmt.Fprintf(&b, "%s %g\n", name, m.GetGauge().GetValue())
			case m.Counter != nil:
				fmt.Fprintf(&b, "%s %g\n", name, m.GetCounter().GetValue())
			case m.Histogram != nil:
				fmt.Fprintf(&b, "%s_count %d\n", name, m.GetHistogram().GetSampleCount())
			}
		}
	}
	return b.String()
}

// An unexpected error (a trigger failing for one correlation id) blocks that id's lane, with its
// retry state visible, while the other lanes go on; once the cause is gone the lane applies in
// order by itself. Nothing is dead-lettered.
func TestUpdaterRetriesABlockedLane(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE FUNCTION public.poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.correlation_id = 'poison' THEN RAISE EXCEPTION 'disk on fire' USING ERRCODE = 'io_error'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON profile.profilestore
			FOR EACH ROW EXECUTE FUNCTION public.poison();`)
	require.NoError(t, err)
	setSettings(t, pool, "updater.retry_base_ms", "20", "updater.retry_max_ms", "200")
	all := append(ids("ok", 10), "poison")
	enqueueSequences(t, db.New(pool), "high", all, 5, 13)
	reg := prometheus.NewRegistry()
	startUpdater(t, pool, UpdaterConfig{Workers: 2, Registerer: reg, IdleMax: 20 * time.Millisecond})

	q := db.New(pool)
	require.Eventually(t, func() bool {
		lanes, err := q.ProfileInboxBlockedLanes(ctx)
		return err == nil && len(lanes) == 1 && lanes[0].Attempts >= 3 && lanes[0].CorrelationID == "poison" &&
			strings.Contains(*lanes[0].LastError, "disk on fire") && *lanes[0].LastSQLState == "58030"
	}, 30*time.Second, 20*time.Millisecond, "the poisoned lane waits and retries")
	lanes, err := q.ProfileInboxBlockedLanes(ctx)
	require.NoError(t, err)
	// The healthy ids of other lanes are applied; ids sharing the poisoned lane wait with it.
	var poisonLane int32 = lanes[0].Lane
	for _, id := range ids("ok", 10) {
		var lane int32
		require.NoError(t, pool.QueryRow(ctx, `SELECT profile_private.inbox_lane(jsonb_build_object('_id', $1::text), 64)`, id).Scan(&lane))
		if lane != poisonLane {
			require.Eventually(t, func() bool { return len(seqOf(t, pool, id)) == 5 }, 30*time.Second, 20*time.Millisecond, id)
		}
	}
	require.Contains(t, scrape(t, reg), `silo_profile_inbox_blocked_lanes{priority="high"} 1`)

	_, err = pool.Exec(ctx, `DROP TRIGGER poison ON profile.profilestore`)
	require.NoError(t, err)
	waitApplied(t, pool, 0, 30*time.Second)
	checkSequences(t, pool, all, 5)
	lanes, err = q.ProfileInboxBlockedLanes(ctx)
	require.NoError(t, err)
	require.Empty(t, lanes)
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM profile.dead_letters`).Scan(&dead))
	require.Zero(t, dead)
}

// A notification from api.profile_enqueue wakes the idle workers of its stream.
func TestUpdaterListenWakesIdleWorkers(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	u := NewUpdater(pool, UpdaterConfig{Workers: 1})
	t.Cleanup(func() { require.NoError(t, u.Stop(context.Background())) })
	// Once listening, the listener wakes every stream (for what was enqueued before): then it hears.
	listening := []<-chan struct{}{u.wake["high"].channel(), u.wake["low"].channel()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		listenLoop(ctx, u.pool, "silo profile updater listener", InboxChannel, u.cfg.Logger, u.notified)
	}()
	t.Cleanup(func() { cancel(); <-done })
	for _, c := range listening {
		select {
		case <-c:
		case <-time.After(30 * time.Second):
			t.Fatal("the listener did not start")
		}
	}

	high, low := u.wake["high"].channel(), u.wake["low"].channel()
	_, err := db.New(pool).ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(appendMsg("w", 1)), Priority: "low"})
	require.NoError(t, err)
	select {
	case <-low:
	case <-time.After(30 * time.Second):
		t.Fatal("the low stream's workers were not woken")
	}
	select {
	case <-high:
		t.Fatal("the high stream's workers were woken by a low priority enqueue")
	default:
	}
}

// PostgreSQL restarts while the updater works: every update is applied exactly once, in order.
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
	setSettings(t, mig, "updater.batch_size", "50")
	all := ids("r", 80)
	const n = 60
	enqueueSequences(t, db.New(mig), "high", all, n, 250)
	mig.Close()

	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	startUpdater(t, pool, UpdaterConfig{Workers: 3, IdleMax: 20 * time.Millisecond})

	// Restart as soon as some but not all updates are applied.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if pool.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&left) == nil && left < len(all)*n {
			require.Greater(t, left, 0, "the restart must come while work is left")
			break
		}
		require.True(t, time.Now().Before(deadline), "the updater did not start applying")
		time.Sleep(2 * time.Millisecond)
	}
	require.NoError(t, cluster.Stop())
	time.Sleep(300 * time.Millisecond)
	cluster = start()

	waitApplied(t, pool, 0, 60*time.Second)
	checkSequences(t, pool, all, n)
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Arrays of thousands of elements go through the updater; a step above updater.long_running_ms is
// logged as a warning, and every update shows in the per-operation execution time histogram.
func TestUpdaterLargeArraysAndLongRunningSteps(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	setSettings(t, pool, "updater.long_running_ms", "1")
	vals := make([]string, 4000)
	for i := range vals {
		vals[i] = fmt.Sprintf(`"v%05d"`, i)
	}
	big := `{"_operation":"_array_append","_id":"big","_path":["seq"],"_value":{"_v":[` + strings.Join(vals, ",") + `]}}`
	put := `{"_operation":"_array_put","_id":"big","_path":["seq"],"_value":{"_v":["v00001","new"]}}`
	_, err := db.New(pool).ProfileEnqueue(context.Background(), db.ProfileEnqueueParams{
		Updates: []byte("[" + strings.Join([]string{big, big, big, appendMsg("big", 7), put}, ",") + "]"), Priority: "high"})
	require.NoError(t, err)

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	startUpdater(t, pool, UpdaterConfig{Workers: 1, Registerer: reg, IdleMax: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitApplied(t, pool, 0, 60*time.Second)
	got := seqOf(t, pool, "big")
	require.Len(t, got, 12002)
	require.Equal(t, []string{"7", "new"}, got[12000:])
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "long running step") }, 10*time.Second, 10*time.Millisecond)
	m := scrape(t, reg)
	require.Contains(t, m, `silo_profile_update_apply_seconds{operation="_array_append"}_count 4`)
	require.Contains(t, m, `silo_profile_update_apply_seconds{operation="_array_put"}_count 1`)
	require.Contains(t, m, `silo_profile_updater_updates_total{priority="high",status="ok"} 5`)
}

// The updater's connections are named apart from the process's pool, so a DBA can count them.
func TestUpdaterConnectionsAreNamed(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	startUpdater(t, pool, UpdaterConfig{Workers: 1})
	var dbname string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbname))
	deadline := time.Now().Add(30 * time.Second)
	for {
		var names []string
		require.NoError(t, pool.QueryRow(context.Background(), `
			SELECT coalesce(array_agg(DISTINCT application_name ORDER BY application_name), '{}')
			FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'silo profile updater%'`, dbname).Scan(&names))
		if len(names) == 2 {
			require.Equal(t, []string{"silo profile updater", "silo profile updater listener"}, names)
			return
		}
		require.True(t, time.Now().Before(deadline), "named connections seen: %v", names)
		time.Sleep(50 * time.Millisecond)
	}
}
