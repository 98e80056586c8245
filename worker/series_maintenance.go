package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// SeriesMaintenanceArgs is the periodic job that removes the points of deleted holder events
// (api.series_cleanup, sql/series/05_metadata.sql: the seed's series storage removed later, by an
// id unrelated to the event id). Retention is not its work: the retention job applies it with
// Silo's other time-ordered data (api.retention_run, target series).
type SeriesMaintenanceArgs struct{}

// Kind is the job kind.
func (SeriesMaintenanceArgs) Kind() string { return "series_maintenance" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (SeriesMaintenanceArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// SeriesMaintenanceWorker removes deleted series, a hundred per call until none is left.
type SeriesMaintenanceWorker struct {
	river.WorkerDefaults[SeriesMaintenanceArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work removes deleted series.
func (w *SeriesMaintenanceWorker) Work(ctx context.Context, job *river.Job[SeriesMaintenanceArgs]) error {
	const batch = 100
	removed := 0
	for {
		n, err := w.queries.SeriesCleanup(ctx, batch)
		if err != nil {
			return fmt.Errorf("error removing deleted series: %w", err)
		}
		removed += int(n)
		if n < batch {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if removed > 0 {
		w.logger.Info("series maintained", "deleted_series", removed)
	}
	return nil
}
