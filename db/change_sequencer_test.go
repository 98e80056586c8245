package db_test

// The awake sequencer (sql/change/02_sequence.sql): writers notify silo_change_pending only while
// no hub is awake, and a hub sleeps only when no writer that read its lease can still commit.
// Each step of the protocol is driven by hand here, in the order of one interleaving.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

type sequencerBundle struct {
	t        *testing.T
	ctx      context.Context
	pool     *pgxpool.Pool
	q        *db.Queries
	listener *pgxpool.Conn
}

func setupSequencer(t *testing.T) *sequencerBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(listener.Release)
	_, err = listener.Exec(ctx, `LISTEN silo_change_pending`)
	require.NoError(t, err)
	return &sequencerBundle{t: t, ctx: ctx, pool: pool, q: db.New(pool), listener: listener}
}

// publish publishes one change in tx (nil: a transaction of its own).
func (b *sequencerBundle) publish(tx pgx.Tx) {
	b.t.Helper()
	var err error
	if tx == nil {
		_, err = b.pool.Exec(b.ctx, `SELECT api.change_publish('test:seq', 'changed', '{}', '{_all}')`)
	} else {
		_, err = tx.Exec(b.ctx, `SELECT api.change_publish('test:seq', 'changed', '{}', '{_all}')`)
	}
	require.NoError(b.t, err)
}

// notified says whether a writer notified silo_change_pending since the last call: notifications
// arrive in commit order, so everything before a marker committed now is what was sent before.
func (b *sequencerBundle) notified() bool {
	b.t.Helper()
	_, err := b.pool.Exec(b.ctx, `SELECT pg_notify('silo_change_pending', 'marker')`)
	require.NoError(b.t, err)
	got := false
	for {
		wctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		n, err := b.listener.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(b.t, err)
		if n.Payload == "marker" {
			return got
		}
		got = true
	}
}

func (b *sequencerBundle) wake(hub int32, lease time.Duration) bool {
	b.t.Helper()
	ok, err := b.q.ChangeSequencerWake(b.ctx, db.ChangeSequencerWakeParams{Hub: hub, LeaseMs: int32(lease / time.Millisecond)})
	require.NoError(b.t, err)
	return ok
}

func (b *sequencerBundle) sleep(hub int32) bool {
	b.t.Helper()
	ok, err := b.q.ChangeSequencerSleep(b.ctx, hub)
	require.NoError(b.t, err)
	return ok
}

func (b *sequencerBundle) sequence() {
	b.t.Helper()
	_, err := b.q.ChangeSequence(b.ctx, false)
	require.NoError(b.t, err)
}

func (b *sequencerBundle) awakeUntil() *time.Time {
	b.t.Helper()
	var until *time.Time
	require.NoError(b.t, b.pool.QueryRow(b.ctx, `SELECT sequencer_awake_until FROM api.change_status()`).Scan(&until))
	return until
}

// A writer notifies while every hub sleeps, and not while one holds the lease; a second hub cannot
// take a standing lease, and a lease that ran out counts as asleep.
func TestChangeSequencerWritersNotifyOnlyWhileNoHubIsAwake(t *testing.T) {
	t.Parallel()
	b := setupSequencer(t)

	require.Nil(t, b.awakeUntil())
	b.publish(nil)
	require.True(t, b.notified(), "a writer did not notify with every hub asleep")

	require.True(t, b.wake(7, time.Minute))
	require.NotNil(t, b.awakeUntil())
	b.publish(nil)
	require.False(t, b.notified(), "a writer notified while a hub was awake")

	// Hub 8 can neither take the lease nor end it: hub 7 sequences.
	require.False(t, b.wake(8, time.Minute))
	require.True(t, b.sleep(8))
	b.publish(nil)
	require.False(t, b.notified(), "a writer notified while a hub was awake")

	// Hub 7 ends its lease; the changes are still pending, so it may not sleep yet, but writers
	// notify from now on.
	require.False(t, b.sleep(7))
	require.Nil(t, b.awakeUntil())
	b.publish(nil)
	require.True(t, b.notified(), "a writer did not notify after the lease ended")
	b.sequence()
	require.True(t, b.sleep(7))

	// A lease that ran out is no lease.
	require.True(t, b.wake(7, time.Millisecond))
	for b.awakeUntil() != nil {
		time.Sleep(time.Millisecond)
	}
	b.publish(nil)
	require.True(t, b.notified(), "a writer did not notify after the lease ran out")
	require.True(t, b.wake(8, time.Minute), "hub 8 could not take a lease that ran out")
}

// A hub does not sleep while a writer that read its lease runs: that writer will not notify. Once
// the writer committed, its changes are pending; once it rolled back, nothing holds the hub.
func TestChangeSequencerSleepWaitsForWritersInFlight(t *testing.T) {
	t.Parallel()
	b := setupSequencer(t)

	// Committed.
	require.True(t, b.wake(7, time.Minute))
	w, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer w.Rollback(b.ctx)
	b.publish(w)
	require.False(t, b.sleep(7), "slept while a writer that read the lease runs")
	require.False(t, b.sleep(7), "slept while a writer that read the lease runs")
	require.NoError(t, w.Commit(b.ctx))
	require.False(t, b.notified(), "a writer that read the lease notified")
	require.False(t, b.sleep(7), "slept with its changes pending")
	b.sequence()
	require.True(t, b.sleep(7))

	// Rolled back, also in a subtransaction.
	require.True(t, b.wake(7, time.Minute))
	w, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer w.Rollback(b.ctx)
	b.publish(w)
	require.False(t, b.sleep(7))
	require.NoError(t, w.Rollback(b.ctx))
	require.True(t, b.sleep(7), "a rolled-back writer keeps the hub awake")

	require.True(t, b.wake(7, time.Minute))
	w, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer w.Rollback(b.ctx)
	_, err = w.Exec(b.ctx, `SAVEPOINT s`)
	require.NoError(t, err)
	b.publish(w)
	require.False(t, b.sleep(7))
	_, err = w.Exec(b.ctx, `ROLLBACK TO SAVEPOINT s`)
	require.NoError(t, err)
	require.True(t, b.sleep(7), "a rolled-back subtransaction keeps the hub awake")
	require.NoError(t, w.Commit(b.ctx))
	require.False(t, b.notified())

	// Many writers that rolled back leave gaps in the pending ids: nothing waits for them.
	require.True(t, b.wake(7, time.Minute))
	for range 20 {
		w, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		b.publish(w)
		require.NoError(t, w.Rollback(b.ctx))
	}
	require.True(t, b.sleep(7), "rolled-back writers keep the hub awake")
	require.Nil(t, b.awakeUntil())
}

// A writer whose snapshot is older than the end of the lease still sees it ended: the state is
// read outside transactions. (A table row would show a REPEATABLE READ writer the lease of its
// start, and its change would wait for the safety net.)
func TestChangeSequencerStateIgnoresSnapshots(t *testing.T) {
	t.Parallel()
	b := setupSequencer(t)
	require.True(t, b.wake(7, time.Minute))
	w, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer w.Rollback(b.ctx)
	_, err = w.Exec(b.ctx, `SELECT count(*) FROM silo.change_pending`) // the snapshot is taken
	require.NoError(t, err)
	require.True(t, b.sleep(7))
	b.publish(w)
	require.NoError(t, w.Commit(b.ctx))
	require.True(t, b.notified(), "a REPEATABLE READ writer did not notify after the lease ended")
}

// The hub number and lease are checked; the sleep needs READ COMMITTED, where each statement sees
// the commits before it.
func TestChangeSequencerArguments(t *testing.T) {
	t.Parallel()
	b := setupSequencer(t)
	code := func(err error) string {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code
		}
		return ""
	}
	_, err := b.q.ChangeSequencerWake(b.ctx, db.ChangeSequencerWakeParams{Hub: 0, LeaseMs: 1000})
	require.Equal(t, "SLINV", code(err))
	_, err = b.q.ChangeSequencerWake(b.ctx, db.ChangeSequencerWakeParams{Hub: 1, LeaseMs: 0})
	require.Equal(t, "SLINV", code(err))
	_, err = b.q.ChangeSequencerSleep(b.ctx, 1000000)
	require.Equal(t, "SLINV", code(err))
	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)
	_, err = db.New(tx).ChangeSequencerSleep(b.ctx, 1)
	require.Equal(t, "SLINV", code(err))
}
