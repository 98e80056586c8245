package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// History follows apply order: a transaction that began before another one's write of a grain
// committed, and writes the grain after it, gives its value a later insertion time, so the value
// it replaces is archived as the older one.
func TestProfileApplyLaterWriteGetsLaterTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(ctx)
	// The late transaction starts first: its now() is fixed from here.
	_, err = late.Exec(ctx, `SELECT now()`)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	_, err = pool.Exec(ctx, `SELECT api.profile_apply('{"_id": "order", "_path": ["g"], "_operation": "_set_with_history", "_value": {"_v": "first"}}')`)
	require.NoError(t, err)
	_, err = late.Exec(ctx, `SELECT api.profile_apply('{"_id": "order", "_path": ["g"], "_operation": "_set_with_history", "_value": {"_v": "second"}}')`)
	require.NoError(t, err)
	require.NoError(t, late.Commit(ctx))

	rows, err := pool.Query(ctx, `SELECT value #>> '{}', pit, inserted FROM profile.profilestore
		WHERE correlation_id = 'order' ORDER BY inserted`)
	require.NoError(t, err)
	type pit struct {
		Value, Pit string
		Inserted   int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pit])
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "first", got[0].Value, "the value written first is the older one")
	require.NotEqual(t, "_latest", got[0].Pit)
	require.Equal(t, "second", got[1].Value)
	require.Equal(t, "_latest", got[1].Pit)
	require.Greater(t, got[1].Inserted, got[0].Inserted)
}

// The asynchronous updater's case: a step whose transaction began before the previous step on the
// same lane committed applies the later update with a later time.
func TestProfileInboxLaterStepGetsLaterTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	enqueue := func(v string) {
		_, err := pool.Exec(ctx, `SELECT * FROM api.profile_enqueue(jsonb_build_object(
			'_id', 'lane-order', '_path', '["g"]'::jsonb, '_operation', '_set_with_history',
			'_value', jsonb_build_object('_v', $1::text)))`, v)
		require.NoError(t, err)
	}
	step := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) {
		var taken int
		require.NoError(t, q.QueryRow(ctx, `SELECT taken FROM api.profile_inbox_process('high')`).Scan(&taken))
		require.Equal(t, 1, taken)
	}
	enqueue("first")
	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(ctx)
	_, err = late.Exec(ctx, `SELECT now()`) // the late step's transaction begins here
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	step(pool) // the first step applies "first" and commits
	enqueue("second")
	step(late) // then the step that began earlier takes the lane and applies "second"
	require.NoError(t, late.Commit(ctx))

	var order []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(value #>> '{}' ORDER BY inserted, pit = '_latest')
		FROM profile.profilestore WHERE correlation_id = 'lane-order'`).Scan(&order))
	require.Equal(t, []string{"first", "second"}, order)
	var latest string
	require.NoError(t, pool.QueryRow(ctx, `SELECT value #>> '{}' FROM profile.profilestore
		WHERE correlation_id = 'lane-order' AND pit = '_latest'`).Scan(&latest))
	require.Equal(t, "second", latest)
}

// A writer that read the clock, then waited for another writer's lock on the grain, does not give
// its value an earlier time than the value it waited for.
func TestProfileApplyAfterALockWaitGetsLaterTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `SELECT api.profile_apply('{"_id": "wait", "_path": ["g"], "_value": {"_v": "zero", "_in": 1000}}')`)
	require.NoError(t, err)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	_, err = first.Exec(ctx, `SELECT 1 FROM profile.profilestore WHERE correlation_id = 'wait' FOR UPDATE`)
	require.NoError(t, err)

	// The second writer reads the clock, then waits for the first one's lock.
	second, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer second.Release()
	var pid int
	require.NoError(t, second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		_, err := second.Exec(ctx, `SELECT api.profile_apply('{"_id": "wait", "_path": ["g"], "_operation": "_set_with_history", "_value": {"_v": "second"}}')`)
		done <- err
	}()
	waitForLock(t, pool, pid)
	time.Sleep(20 * time.Millisecond)
	_, err = first.Exec(ctx, `SELECT api.profile_apply('{"_id": "wait", "_path": ["g"], "_operation": "_set_with_history", "_value": {"_v": "first"}}')`)
	require.NoError(t, err)
	require.NoError(t, first.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the second writer did not finish")
	}

	var latest string
	var latestIn, firstIn int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT value #>> '{}', inserted FROM profile.profilestore
		WHERE correlation_id = 'wait' AND pit = '_latest'`).Scan(&latest, &latestIn))
	require.Equal(t, "second", latest)
	require.NoError(t, pool.QueryRow(ctx, `SELECT inserted FROM profile.profilestore
		WHERE correlation_id = 'wait' AND value #>> '{}' = 'first'`).Scan(&firstIn))
	require.GreaterOrEqual(t, latestIn, firstIn, "the value written last is not older than the one it replaced")
}

// A writer that read the clock and then waited (here for the lock of another grain of its batch)
// while a concurrent writer created a grain it writes too, does not give its value an earlier
// time than the value the other writer created: the upsert's conflict path follows the same rule
// as an update of an existing grain.
func TestProfileApplyOverAConcurrentNewGrainGetsLaterTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `SELECT api.profile_apply('{"_id": "held", "_path": ["g"], "_value": {"_v": "zero", "_in": 1000}}')`)
	require.NoError(t, err)

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	_, err = holder.Exec(ctx, `SELECT 1 FROM profile.profilestore WHERE correlation_id = 'held' FOR UPDATE`)
	require.NoError(t, err)

	// The late writer reads the clock, then waits for the held grain, which its batch archives.
	late, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer late.Release()
	var pid int
	require.NoError(t, late.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		_, err := late.Exec(ctx, `SELECT * FROM api.profile_apply_batch('[
			{"_id": "held", "_path": ["g"], "_operation": "_set_with_history", "_value": {"_v": "late"}},
			{"_id": "fresh", "_path": ["g"], "_value": {"_v": "late"}},
			{"_id": "fresh", "_path": ["n"], "_operation": "_inc", "_value": {"_v": "0|1|1"}}]')`)
		done <- err
	}()
	waitForLock(t, pool, pid)
	time.Sleep(20 * time.Millisecond)
	// Meanwhile another writer creates the grains.
	_, err = pool.Exec(ctx, `SELECT * FROM api.profile_apply_batch('[
		{"_id": "fresh", "_path": ["g"], "_value": {"_v": "early"}},
		{"_id": "fresh", "_path": ["n"], "_operation": "_inc", "_value": {"_v": "0|1|1"}}]')`)
	require.NoError(t, err)
	var earlyIn int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(inserted) FROM profile.profilestore WHERE correlation_id = 'fresh'`).Scan(&earlyIn))
	require.NoError(t, holder.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the late writer did not finish")
	}

	rows, err := pool.Query(ctx, `SELECT path, value::text, inserted FROM profile.profilestore
		WHERE correlation_id = 'fresh' AND pit = '_latest' ORDER BY path`)
	require.NoError(t, err)
	type grain struct {
		Path, Value string
		Inserted    int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[grain])
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, `"late"`, got[0].Value, "the later write wins")
	require.Contains(t, got[1].Value, `"_current": 2`, "the counter adds up")
	for _, g := range got {
		require.GreaterOrEqual(t, g.Inserted, earlyIn, "%s: written after the value it replaced", g.Path)
	}
}

// waitForLock waits until backend pid waits for a lock.
func waitForLock(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(),
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 10*time.Millisecond, "backend %d did not wait for a lock", pid)
}
