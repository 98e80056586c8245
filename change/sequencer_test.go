package change_test

// Tests of the awake sequencer through a running hub: writers that stop notifying while it is
// awake lose nothing when it goes to sleep, and writers that roll back do not keep it awake. The
// hub's safety net is an hour here, so a change left pending would never arrive.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
)

// quickSequencer wakes and sleeps at every occasion: it wakes when two writers come within 10 ms,
// sequences every millisecond while awake and sleeps 10 ms after the last change.
var quickSequencer = change.Config{PollInterval: time.Hour, AwakePollInterval: time.Millisecond, AwakeLinger: 10 * time.Millisecond}

// watchAwake reports, once stop is called, whether the hub was ever seen awake meanwhile (an
// awake hub stays so for at least its AwakeLinger, far longer than the sampling period).
func (b *testBundle) watchAwake() (stop func() bool) {
	done := make(chan struct{})
	seen := make(chan bool, 1)
	go func() {
		awake := false
		for {
			select {
			case <-done:
				seen <- awake
				return
			case <-time.After(100 * time.Microsecond):
				awake = awake || b.hub.Awake()
			}
		}
	}()
	return func() bool {
		close(done)
		return <-seen
	}
}

// wake makes the hub the awake sequencer: writers close together, until it is.
func (b *testBundle) wake(t *testing.T, c *wsClient) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !b.hub.Awake(); i++ {
		require.True(t, time.Now().Before(deadline), "the sequencer does not wake")
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.pool.Exec(ctx, `SELECT api.change_publish($1, 'k')`, fmt.Sprintf("ops:wake-%d-%d", i, w))
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		c.nextType("change")
		c.nextType("change")
	}
}

// waitAsleep waits until the hub sleeps and no lease stands.
func (b *testBundle) waitAsleep(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var until *time.Time
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT sequencer_awake_until FROM api.change_status()`).Scan(&until))
		if !b.hub.Awake() && until == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "the sequencer stays awake")
		time.Sleep(time.Millisecond)
	}
}

// Rounds of concurrent writers, each round starting with the hub asleep: the first writers notify
// and wake it (they come within 10 ms), later ones find it awake and do not, and the hub tries to
// sleep while some of them are still open (writers that stay open longer than the hub lingers,
// writers of several statements, writers in REPEATABLE READ, writers that roll back). After each
// round every committed change reaches the subscriber.
func TestHubSequencerLosesNoWakeup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, quickSequencer, false)
	c := b.dial(t, "?channels=ops:*", bearer(b.admin))
	c.nextType("ready")
	c.nextType("subscribed")

	const rounds, writers = 25, 8
	seen := map[string]bool{}
	watched := b.watchAwake()
	for round := range rounds {
		b.waitAsleep(t)
		var mu sync.Mutex
		var committed []string
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				if w >= 2 { // the first two come together and wake the hub
					time.Sleep(time.Duration(r.IntN(15000)) * time.Microsecond)
				}
				opts := pgx.TxOptions{}
				if w%3 == 2 {
					opts.IsoLevel = pgx.RepeatableRead
				}
				tx, err := b.pool.BeginTx(ctx, opts)
				if err != nil {
					t.Error(err)
					return
				}
				defer tx.Rollback(ctx)
				var names []string
				for s := range 1 + r.IntN(2) {
					name := fmt.Sprintf("ops:r%dw%ds%d", round, w, s)
					if _, err := tx.Exec(ctx, `SELECT api.change_publish($1, 'k')`, name); err != nil {
						t.Error(err)
						return
					}
					names = append(names, name)
					// Open across the hub's 10 ms of lingering, now and then.
					time.Sleep(time.Duration(r.IntN(25000)) * time.Microsecond)
				}
				if r.IntN(5) == 0 {
					return // rolled back
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				committed = append(committed, names...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, name := range committed {
			for !seen[name] {
				m := c.nextType("change") // fails after 30 s without a message
				seen[m.Channel] = true
			}
		}
	}
	b.waitAsleep(t)
	require.True(t, watched(), "writers close together never woke the hub")
}

// Writers that roll back leave gaps among the pending ids and hold nothing: the awake hub goes to
// sleep. A writer that is open while the hub tries to sleep keeps it from sleeping (it read the
// lease, it will not notify); when it commits, its change arrives and the hub sleeps.
func TestHubSequencerSleepsAfterRollbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, change.Config{PollInterval: time.Hour, AwakePollInterval: time.Millisecond, AwakeLinger: 200 * time.Millisecond}, false)
	c := b.dial(t, "?channels=ops:*", bearer(b.admin))
	c.nextType("ready")
	c.nextType("subscribed")
	publish := func(tx pgx.Tx, name string) {
		t.Helper()
		_, err := tx.Exec(ctx, `SELECT api.change_publish($1, 'k')`, name)
		require.NoError(t, err)
	}

	b.wake(t, c)
	for i := range 50 {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		publish(tx, fmt.Sprintf("ops:rolled-back-%d", i))
		require.NoError(t, tx.Rollback(ctx))
	}
	b.waitAsleep(t)

	b.wake(t, c)
	open, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer open.Rollback(ctx)
	publish(open, "ops:late") // reads the lease: the hub is awake for 200 ms more at least
	time.Sleep(400 * time.Millisecond)
	require.True(t, b.hub.Awake(), "the hub slept while a writer that read its lease runs")
	require.NoError(t, open.Commit(ctx))
	require.Equal(t, "ops:late", c.nextType("change").Channel)
	b.waitAsleep(t)
}

// The hub sleeps in a transaction of its own at READ COMMITTED, whatever the database's default
// isolation.
func TestHubSequencerSleepsUnderRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, change.Config{PollInterval: time.Hour, AwakePollInterval: time.Millisecond, AwakeLinger: 200 * time.Millisecond}, false,
		func(pool *pgxpool.Pool) {
			_, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_isolation = ''repeatable read''', current_database()); END $$`)
			require.NoError(t, err)
			pool.Reset() // connections made from now on take the setting
		})
	c := b.dial(t, "?channels=ops:*", bearer(b.admin))
	c.nextType("ready")
	c.nextType("subscribed")
	var iso string
	require.NoError(t, b.pool.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&iso))
	require.Equal(t, "repeatable read", iso)
	b.wake(t, c)
	b.waitAsleep(t)
}
