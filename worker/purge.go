package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/silo-db/silo/db"
)

// DefaultPurgeTick is how often the purge job is scheduled (Config.PurgeTick): the seed's default
// frequency. A configured frequency shorter than the tick gives several runs per job; a longer one
// makes most jobs find the purge not due.
const DefaultPurgeTick = time.Second

// QueuePurge is the purge's own queue, one worker per process, so that a long purge run never
// holds up the maintenance jobs.
const QueuePurge = "purge"

// purgeAttempts is how many times a batch that met a transient error (api.error_class) is tried
// at once before the failure is left to the next run: the report is written in the batch's
// transaction, so retrying the batch retries the report's write.
const purgeAttempts = 3

// PurgeArgs is the periodic job of the ODS purge (sql/purge/). River's leader schedules it, so one
// process in the cluster triggers the purge (the seed's cluster singleton), and while one job is
// queued or running no other is added, so runs never pile up.
type PurgeArgs struct{}

// Kind is the job kind.
func (PurgeArgs) Kind() string { return "purge" }

// InsertOpts puts the job in the purge queue, one at a time, without River's retries: what fails
// is picked up by the next run a tick later.
func (PurgeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueuePurge,
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// PurgeWorker runs the recurring purge for one tick: api.purge_tick says whether purging is enabled,
// due and in which mode; in STANDARD mode a run deletes the configured fetch-size in parallelism
// concurrent batches (api.purge_batch, each its own transaction); in TTL mode it calls
// api.purge_ttl_run. It runs again every frequency until the tick is over or nothing is left.
// Errors are logged as warnings: the next run picks up what failed.
type PurgeWorker struct {
	river.WorkerDefaults[PurgeArgs]
	queries *db.Queries
	logger  *slog.Logger
	tick    time.Duration
}

// Work runs the purge for one tick.
func (w *PurgeWorker) Work(ctx context.Context, job *river.Job[PurgeArgs]) error {
	end := time.Now().Add(w.tick)
	for {
		start := time.Now()
		t, err := w.queries.PurgeTick(ctx, start)
		if err != nil {
			w.logger.Warn("purge: error reading the configuration", "err", err)
			return nil
		}
		if !t.Enabled || !t.Due || (t.Finished && t.Mode == "STANDARD") {
			return nil
		}
		var more bool
		if t.Mode == "TTL" {
			more = w.ttlRun(ctx, start)
		} else {
			more = w.standardRun(ctx, start, t.BatchSizes)
		}
		next := start.Add(time.Duration(t.FrequencyMs) * time.Millisecond)
		if !more || !next.Before(end) {
			return nil
		}
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return nil
		}
	}
}

// standardRun deletes the batches of one run concurrently; it tells whether anything was deleted
// (and the day's purge may go on).
func (w *PurgeWorker) standardRun(ctx context.Context, now time.Time, sizes []int32) bool {
	var wg sync.WaitGroup
	var mu sync.Mutex
	deleted := 0
	for _, size := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 1; ; attempt++ {
				b, err := w.queries.PurgeBatch(ctx, db.PurgeBatchParams{Now: now, BatchLimit: size})
				if err == nil {
					mu.Lock()
					deleted += int(b.UnitOfWorksDeleted)
					mu.Unlock()
					return
				}
				if attempt >= purgeAttempts || !w.transient(ctx, err) {
					w.logger.Warn("purge: batch failed; the next run picks it up", "err", err, "attempts", attempt)
					return
				}
			}
		}()
	}
	wg.Wait()
	if deleted > 0 {
		w.logger.Debug("purge: run", "deleted", deleted)
	}
	return deleted > 0
}

// ttlRun runs TTL mode once; it tells whether anything expired.
func (w *PurgeWorker) ttlRun(ctx context.Context, now time.Time) bool {
	r, err := w.queries.PurgeTTLRun(ctx, now)
	if err != nil {
		w.logger.Warn("purge: TTL run failed; the next run picks it up", "err", err)
		return false
	}
	if r.DroppedPartitions > 0 || r.UnitOfWorksDeleted > 0 {
		w.logger.Info("purge: TTL run", "dropped_partitions", r.DroppedPartitions, "unit_of_works_deleted", r.UnitOfWorksDeleted,
			"objects_deleted", r.ObjectsDeleted, "postponed", r.Postponed)
	}
	return false
}

// transient asks api.error_class whether err may succeed when tried again.
func (w *PurgeWorker) transient(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	class, cerr := w.queries.ErrorClass(ctx, pgErr.Code)
	if cerr != nil {
		w.logger.Warn("purge: error classifying an error", "err", fmt.Errorf("error calling api.error_class: %w", cerr))
		return false
	}
	return class == "transient"
}
