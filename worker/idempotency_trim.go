package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// IdempotencyTrimArgs is the periodic job that keeps silo.idempotency_keys bounded: it deletes the
// keys older than the window in silo.settings (idempotency.window, 24 hours by default) through
// api.idempotency_trim (sql/idempotency/). A key past the window counts as new whether or not it
// was trimmed, so the trim only frees space; it runs every Config.MaintenanceInterval.
type IdempotencyTrimArgs struct{}

// Kind is the job kind.
func (IdempotencyTrimArgs) Kind() string { return "idempotency_trim" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (IdempotencyTrimArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// IdempotencyTrimWorker calls api.idempotency_trim with the window of silo.settings.
type IdempotencyTrimWorker struct {
	river.WorkerDefaults[IdempotencyTrimArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work trims the keys past the window.
func (w *IdempotencyTrimWorker) Work(ctx context.Context, job *river.Job[IdempotencyTrimArgs]) error {
	n, err := w.queries.IdempotencyTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming idempotency keys: %w", err)
	}
	if n > 0 {
		w.logger.Info("idempotency keys trimmed", "deleted", n)
	}
	return nil
}
