package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// Series defaults (Config.SeriesFlushInterval, Config.SeriesMaintenanceInterval).
const (
	DefaultSeriesFlushInterval       = time.Second
	DefaultSeriesMaintenanceInterval = time.Minute
)

// SeriesMetadataArgs is the periodic job of the series metadata updater (seed 001, "Metadata
// Update"): api.series_metadata_flush (sql/series/05_metadata.sql) writes the pending updates whose
// cooldown (silo.settings series.cooldown, 10 s) or staleLimit (series.stale_limit, 300 s) has
// passed to their holder events, and publishes the series notifications the per-user throttle
// held back. The pending updates live in PostgreSQL, so a restart loses none and any number of
// processes share them; River runs the job on one of them.
type SeriesMetadataArgs struct{}

// Kind is the job kind.
func (SeriesMetadataArgs) Kind() string { return "series_metadata" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (SeriesMetadataArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// SeriesMetadataWorker flushes the due metadata updates, a thousand per call, until none is due.
type SeriesMetadataWorker struct {
	river.WorkerDefaults[SeriesMetadataArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Timeout bounds one run.
func (w *SeriesMetadataWorker) Timeout(*river.Job[SeriesMetadataArgs]) time.Duration {
	return time.Minute
}

// Work flushes until a call finds fewer than a thousand updates due.
func (w *SeriesMetadataWorker) Work(ctx context.Context, job *river.Job[SeriesMetadataArgs]) error {
	const batch = 1000
	total := 0
	for {
		n, err := w.queries.SeriesMetadataFlush(ctx, batch)
		if err != nil {
			return fmt.Errorf("error flushing series metadata: %w", err)
		}
		total += int(n)
		if n < batch {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if total > 0 {
		w.logger.Debug("series metadata flushed", "holders", total)
	}
	return nil
}
