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

// DefaultChangeTrimInterval is how often the change log is trimmed (Config.ChangeTrimInterval).
const DefaultChangeTrimInterval = 10 * time.Minute

// ChangeTrimArgs is the periodic job that keeps the change log (silo.changes) bounded: it deletes
// the changes older than the retention in silo.settings (change_retention) through api.change_trim
// (sql/change/).
type ChangeTrimArgs struct{}

// Kind is the job kind.
func (ChangeTrimArgs) Kind() string { return "change_trim" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (ChangeTrimArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// ChangeTrimWorker calls api.change_trim, which also drops pending changes past the retention that
// no process sequenced (none served websockets).
type ChangeTrimWorker struct {
	river.WorkerDefaults[ChangeTrimArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work trims with the retention of silo.settings.
func (w *ChangeTrimWorker) Work(ctx context.Context, job *river.Job[ChangeTrimArgs]) error {
	n, err := w.queries.ChangeTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming the change log: %w", err)
	}
	if n > 0 {
		w.logger.Info("change log trimmed", "deleted", n)
	}
	return nil
}
