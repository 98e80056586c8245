package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// Reaper defaults (Config.ReaperInterval, Config.ReaperBudget).
const (
	DefaultReaperInterval = time.Minute
	DefaultReaperBudget   = time.Minute
)

// ReaperArgs is the periodic job that reaps the profile store: deletes grains past their time to
// live, notifies grains past their time to notify (api.profile_reap), then trims old reaper events
// (api.profile_reaper_event_trim). Both functions are in sql/profile/.
type ReaperArgs struct{}

// Kind is the job kind.
func (ReaperArgs) Kind() string { return "profile_reap" }

// InsertOpts puts the job in the maintenance queue. While one run is queued or running, the next
// period adds none: a long run is not joined by a second one (which would be safe, only useless).
func (ReaperArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// ReaperWorker runs one reaper run: api.profile_reap batches until nothing is due or the budget is
// used, then api.profile_reaper_event_trim. On the pool of NewClient each batch is its own
// transaction, so a run holds its locks one batch at a time. The batch size and the event retention
// are silo.settings rows (reaper.batch_size, reaper.event_retention) read by SQL.
type ReaperWorker struct {
	river.WorkerDefaults[ReaperArgs]
	queries *db.Queries
	budget  time.Duration
	logger  *slog.Logger
}

// Timeout leaves the run its budget plus time to finish the batch in flight and trim.
func (w *ReaperWorker) Timeout(*river.Job[ReaperArgs]) time.Duration { return w.budget + time.Minute }

// Work reaps until nothing is due or the budget is used (checked after each batch, so a run does at
// least one); the next period goes on from there.
func (w *ReaperWorker) Work(ctx context.Context, job *river.Job[ReaperArgs]) error {
	deadline := time.Now().Add(w.budget)
	var ttl, ttn int64
	batches := 0
	for {
		r, err := w.queries.ProfileReap(ctx, nil)
		if err != nil {
			return fmt.Errorf("error reaping the profile store: %w", err)
		}
		batches++
		ttl += r.TTLDeleted
		ttn += r.TTNNotified
		if !r.More || !time.Now().Before(deadline) {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	trimmed, err := w.queries.ProfileReaperEventTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming reaper events: %w", err)
	}
	if ttl > 0 || ttn > 0 || trimmed > 0 {
		w.logger.Info("profile store reaped", "ttl_deleted", ttl, "ttn_notified", ttn, "batches", batches, "events_trimmed", trimmed)
	}
	return nil
}
