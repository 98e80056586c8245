package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// SeriesMaintenanceArgs is the periodic job that removes series points nobody may read any more
// (sql/series/05_metadata.sql): the points of deleted holder events (api.series_cleanup: the seed's
// series storage removed later, by an id unrelated to the event id), then the points past their
// retention (api.series_retain: whole chunks or partitions where every series is past it, rows
// of shorter-lived series otherwise).
type SeriesMaintenanceArgs struct{}

// Kind is the job kind.
func (SeriesMaintenanceArgs) Kind() string { return "series_maintenance" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (SeriesMaintenanceArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// SeriesMaintenanceWorker removes deleted series, a hundred per call until none is left, then
// applies retention.
type SeriesMaintenanceWorker struct {
	river.WorkerDefaults[SeriesMaintenanceArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work removes deleted series, then applies retention.
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
	r, err := w.queries.SeriesRetain(ctx)
	if err != nil {
		return fmt.Errorf("error applying series retention: %w", err)
	}
	if removed > 0 || r.DroppedChunks > 0 || r.DeletedPoints > 0 {
		w.logger.Info("series maintained", "deleted_series", removed, "dropped_chunks", r.DroppedChunks, "deleted_points", r.DeletedPoints)
	}
	return nil
}
