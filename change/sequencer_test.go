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
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
)

// quickSequencer wakes and sleeps at every occasion: it sequences every millisecond while awake
// and sleeps 2 ms after the last change.
var quickSequencer = change.Config{PollInterval: time.Hour, AwakePollInterval: time.Millisecond, AwakeLinger: 2 * time.Millisecond}

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
// and wake it, the later ones find it awake and do not, and the hub goes to sleep while some of
// them are still running (slow writers, writers of several statements, writers in REPEATABLE
// READ, writers that roll back). After each round every committed change reaches the subscriber.
func TestHubSequencerLosesNoWakeup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, quickSequencer, false)
	c := b.dial(t, "?channels=ops:*", bearer(b.admin))
	c.nextType("ready")
	c.nextType("subscribed")

	const rounds, writers = 25, 6
	seen := map[string]bool{}
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
				time.Sleep(time.Duration(r.IntN(4000)) * time.Microsecond)
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
					time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
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
}

// Writers that roll back leave gaps among the pending ids and hold nothing: the hub goes to sleep.
// A writer that stays open while the hub tries to sleep has its change delivered when it commits:
// it read the lease and does not notify, or found the hub asleep and does.
func TestHubSequencerSleepsAfterRollbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, quickSequencer, false)
	c := b.dial(t, "?channels=ops:*", bearer(b.admin))
	c.nextType("ready")
	c.nextType("subscribed")

	publish := func(tx pgx.Tx, name string) {
		t.Helper()
		_, err := tx.Exec(ctx, `SELECT api.change_publish($1, 'k')`, name)
		require.NoError(t, err)
	}
	commit := func(name string) {
		t.Helper()
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		publish(tx, name)
		require.NoError(t, tx.Commit(ctx))
	}
	b.waitAsleep(t)
	commit("ops:wake")
	require.Equal(t, "ops:wake", c.nextType("change").Channel)
	for i := range 50 {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		publish(tx, fmt.Sprintf("ops:rolled-back-%d", i))
		require.NoError(t, tx.Rollback(ctx))
	}
	b.waitAsleep(t)

	// Awake again, with a writer that stays open while the hub tries to sleep.
	commit("ops:wake-again")
	require.Equal(t, "ops:wake-again", c.nextType("change").Channel)
	open, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer open.Rollback(ctx)
	publish(open, "ops:late")
	time.Sleep(20 * time.Millisecond) // the hub tries to sleep meanwhile (it may not: the writer runs)
	require.NoError(t, open.Commit(ctx))
	require.Equal(t, "ops:late", c.nextType("change").Channel)
	b.waitAsleep(t)
}
