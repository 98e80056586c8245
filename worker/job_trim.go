package worker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// JobTrimArgs is the periodic job that deletes finished jobs past their retention (silo.settings
// job.retention, 7 days by default) and the deduplication claims that ended, through api.job_trim
// (sql/job/05_read.sql). It runs every Config.MaintenanceInterval, once per cluster (River's
// leader enqueues it).
type JobTrimArgs struct{}

// Kind is the job kind.
func (JobTrimArgs) Kind() string { return "job_trim" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (JobTrimArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// JobTrimWorker calls api.job_trim with the retention of silo.settings.
type JobTrimWorker struct {
	river.WorkerDefaults[JobTrimArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work deletes the finished jobs past the retention and the ended claims.
func (w *JobTrimWorker) Work(ctx context.Context, job *river.Job[JobTrimArgs]) error {
	r, err := w.queries.JobTrim(ctx, pgtype.Interval{})
	if err != nil {
		return fmt.Errorf("error trimming the jobs: %w", err)
	}
	if deref64(r.Jobs) > 0 || deref64(r.Claims) > 0 {
		w.logger.Info("jobs trimmed", "jobs", deref64(r.Jobs), "claims", deref64(r.Claims))
	}
	return nil
}
