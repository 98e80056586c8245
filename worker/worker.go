package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/silo-db/silo/db"
)

// Queue names.
const (
	QueueMaintenance = "maintenance"
)

// Config configures the River client.
type Config struct {
	Logger *slog.Logger
	// DeadLetterRetention: resolved dead letters older than this are trimmed (0 keeps them).
	DeadLetterRetention time.Duration
	// MaintenanceInterval is how often the maintenance jobs run.
	MaintenanceInterval time.Duration
	// ReaperInterval is how often the reaper runs (0: DefaultReaperInterval; negative: never).
	ReaperInterval time.Duration
	// ReaperBudget is how long one reaper run goes on while grains are due (0: DefaultReaperBudget).
	ReaperBudget time.Duration
	// ChangeTrimInterval is how often the change log is trimmed (0: DefaultChangeTrimInterval;
	// negative: never). The retention is the silo.settings row change_retention.
	ChangeTrimInterval time.Duration
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaintenanceInterval <= 0 {
		c.MaintenanceInterval = time.Hour
	}
	if c.ReaperInterval == 0 {
		c.ReaperInterval = DefaultReaperInterval
	}
	if c.ReaperBudget <= 0 {
		c.ReaperBudget = DefaultReaperBudget
	}
	if c.ChangeTrimInterval == 0 {
		c.ChangeTrimInterval = DefaultChangeTrimInterval
	}
}

// NewClient returns a River client that works Silo's queues and schedules its periodic jobs.
func NewClient(pool *pgxpool.Pool, cfg Config) (*river.Client[pgx.Tx], error) {
	cfg.defaults()
	workers := river.NewWorkers()
	river.AddWorker(workers, &DeadLetterTrimWorker{queries: db.New(pool), retention: cfg.DeadLetterRetention})
	river.AddWorker(workers, &ReaperWorker{queries: db.New(pool), budget: cfg.ReaperBudget, logger: cfg.Logger})
	river.AddWorker(workers, &ChangeTrimWorker{queries: db.New(pool), logger: cfg.Logger})

	periodic := []*river.PeriodicJob{}
	if cfg.DeadLetterRetention > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.MaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return DeadLetterTrimArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "profile_dead_letter_trim"},
		))
	}
	if cfg.ReaperInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.ReaperInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ReaperArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "profile_reap"},
		))
	}
	if cfg.ChangeTrimInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.ChangeTrimInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ChangeTrimArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "change_trim"},
		))
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:       cfg.Logger,
		Queues:       map[string]river.QueueConfig{QueueMaintenance: {MaxWorkers: 2}},
		Workers:      workers,
		PeriodicJobs: periodic,
	})
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	return client, nil
}

// NewInsertClient returns a River client that only inserts jobs (for processes that serve HTTP
// without working queues): jobs are enqueued with InsertTx in the transaction of the change they
// follow from.
func NewInsertClient(pool *pgxpool.Pool, logger *slog.Logger) (*river.Client[pgx.Tx], error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &DeadLetterTrimWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, Workers: workers})
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	return client, nil
}

// DeadLetterTrimArgs is the periodic job that trims resolved dead letters.
type DeadLetterTrimArgs struct{}

// Kind is the job kind.
func (DeadLetterTrimArgs) Kind() string { return "profile_dead_letter_trim" }

// InsertOpts puts the job in the maintenance queue, once per period.
func (DeadLetterTrimArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: time.Minute}}
}

// DeadLetterTrimWorker calls api.profile_dead_letter_trim.
type DeadLetterTrimWorker struct {
	river.WorkerDefaults[DeadLetterTrimArgs]
	queries   *db.Queries
	retention time.Duration
}

// Work trims resolved dead letters older than the retention.
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
