package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// work inserts a job of args and works it with w inside tx, as River would, and requires it to
// complete. The worker must query through tx (its queries built on it) for its effect to be seen
// by the test and rolled back with it.
func work[T river.JobArgs](t *testing.T, tx pgx.Tx, w river.Worker[T], args T) {
	t.Helper()
	res, err := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, w).Work(context.Background(), t, tx, args, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
}

// runOnStart starts on pool a River client configured as NewClient configures it, in River's test
// mode, and waits until the leader has run the periodic job of kind, which every periodic job does
// on start; it fails when the job fails.
func runOnStart(t *testing.T, pool *pgxpool.Pool, cfg Config, kind string) {
	t.Helper()
	ctx := context.Background()
	rc := riverConfig(pool, cfg)
	rc.TestOnly = true // no random pause of up to a second before the leader's periodic jobs start
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	require.NoError(t, err)
	events, unsubscribe := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer unsubscribe()
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()
	// The guard only keeps a broken client from hanging the run; it measures nothing.
	guard := time.After(time.Minute)
	for {
		select {
		case ev := <-events:
			if ev.Job.Kind != kind {
				continue
			}
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "job %s: %v", kind, ev.Job.Errors)
			return
		case <-guard:
			t.Fatalf("the leader did not run %s on start", kind)
		}
	}
}
