package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// EventTrimArgs is the periodic job that applies the event store's retention (silo.settings
// event.retention, 90 days by default) through api.event_trim (sql/event/): the partitions or
// chunks of event.events older than that are dropped whole, with the ids and pending deliveries
// of their events. It runs every Config.MaintenanceInterval.
type EventTrimArgs struct{}

// Kind is the job kind.
func (EventTrimArgs) Kind() string { return "event_trim" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (EventTrimArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// EventTrimWorker calls api.event_trim with the retention of silo.settings.
type EventTrimWorker struct {
	river.WorkerDefaults[EventTrimArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work drops the events past the retention.
func (w *EventTrimWorker) Work(ctx context.Context, job *river.Job[EventTrimArgs]) error {
	r, err := w.queries.EventTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming the event store: %w", err)
	}
	if r.DroppedPartitions > 0 || r.DeletedIds > 0 || r.DeletedDeliveries > 0 {
		w.logger.Info("event store trimmed", "dropped_partitions", r.DroppedPartitions, "deleted_ids", r.DeletedIds,
			"deleted_deliveries", r.DeletedDeliveries)
	}
	return nil
}
