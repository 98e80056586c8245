package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// BeltDeadLetterTrimArgs is the periodic job that deletes belt dead letters older than the
// setting belt.dead_letter_retention (30 days by default) through api.belt_dead_letter_trim. It
// runs every Config.MaintenanceInterval.
type BeltDeadLetterTrimArgs struct{}

// Kind is the job kind.
func (BeltDeadLetterTrimArgs) Kind() string { return "belt_dead_letter_trim" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (BeltDeadLetterTrimArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// BeltDeadLetterTrimWorker calls api.belt_dead_letter_trim with the retention of silo.settings.
type BeltDeadLetterTrimWorker struct {
	river.WorkerDefaults[BeltDeadLetterTrimArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work deletes the dead letters past the retention.
func (w *BeltDeadLetterTrimWorker) Work(ctx context.Context, job *river.Job[BeltDeadLetterTrimArgs]) error {
	n, err := w.queries.BeltDeadLetterTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming belt dead letters: %w", err)
	}
	if n > 0 {
		w.logger.Info("belt dead letters trimmed", "deleted", n)
	}
	return nil
}
