package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// DeadLetterTrimArgs is the periodic job that trims resolved dead letters
// (api.profile_dead_letter_trim, sql/profile/).
type DeadLetterTrimArgs struct{}

// Kind is the job kind.
func (DeadLetterTrimArgs) Kind() string { return "profile_dead_letter_trim" }

// InsertOpts puts the job in the maintenance queue, once per period.
func (DeadLetterTrimArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// DeadLetterTrimWorker calls api.profile_dead_letter_trim. Unresolved dead letters are never
// trimmed: they wait for a replay.
type DeadLetterTrimWorker struct {
	river.WorkerDefaults[DeadLetterTrimArgs]
	queries   *db.Queries
	retention time.Duration
}

// Work trims the dead letters resolved longer ago than the retention; a retention of zero trims
// none.
func (w *DeadLetterTrimWorker) Work(ctx context.Context, job *river.Job[DeadLetterTrimArgs]) error {
	if w.retention <= 0 {
		return nil
	}
	_, err := w.queries.ProfileDeadLetterTrim(ctx, pgtype.Interval{Microseconds: w.retention.Microseconds(), Valid: true})
	if err != nil {
		return fmt.Errorf("error trimming dead letters: %w", err)
	}
	return nil
}
