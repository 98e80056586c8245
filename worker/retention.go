package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// DefaultRetentionInterval is how often the retention job runs (Config.RetentionInterval).
const DefaultRetentionInterval = 10 * time.Minute

// RetentionArgs is the periodic job that keeps Silo's time-ordered data bounded: api.retention_run
// (sql/purge/05_retention.sql) applies the retention of every target of purge.retention_targets
// (the event store, series points, the change log, idempotency keys, and whatever a domain adds),
// each with its retention setting in silo.settings: whole partitions or chunks dropped for
// time-partitioned tables, rows deleted for small ones.
type RetentionArgs struct{}

// Kind is the job kind.
func (RetentionArgs) Kind() string { return "retention" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (RetentionArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// RetentionWorker calls api.retention_run and logs what each target trimmed. A failing target does
// not stop the others; the job fails after them, so River retries it and the failure shows.
type RetentionWorker struct {
	river.WorkerDefaults[RetentionArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work applies every enabled target's retention.
func (w *RetentionWorker) Work(ctx context.Context, job *river.Job[RetentionArgs]) error {
	return runRetention(ctx, w.queries, w.logger, nil)
}

func runRetention(ctx context.Context, q *db.Queries, logger *slog.Logger, target *string) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	rows, err := q.RetentionRun(ctx, db.RetentionRunParams{Now: time.Now(), Target: target})
	if err != nil {
		return fmt.Errorf("error applying retention: %w", err)
	}
	var failed []error
	for _, r := range rows {
		if r.SQLState != nil {
			failed = append(failed, fmt.Errorf("retention of %s failed: %s %s", r.Target, *r.SQLState, deref(r.Message)))
			continue
		}
		logger.Debug("retention applied", "target", r.Target, "result", string(r.Result))
	}
	return errors.Join(failed...)
}

// EventTrimArgs, ChangeTrimArgs and IdempotencyTrimArgs are the kinds of the trims the retention
// job replaced. They are no longer scheduled; a job of theirs still queued in a database upgraded
// meanwhile applies its own target of the retention job.
type (
	EventTrimArgs       struct{}
	ChangeTrimArgs      struct{}
	IdempotencyTrimArgs struct{}
)

// Kind is the job kind.
func (EventTrimArgs) Kind() string { return "event_trim" }

// Kind is the job kind.
func (ChangeTrimArgs) Kind() string { return "change_trim" }

// Kind is the job kind.
func (IdempotencyTrimArgs) Kind() string { return "idempotency_trim" }

// legacyTrimWorker works a job of a replaced trim kind: the retention of its target alone.
type legacyTrimWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	queries *db.Queries
	target  string
}

// Work applies the retention of the worker's target.
func (w *legacyTrimWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return runRetention(ctx, w.queries, nil, &w.target)
}
