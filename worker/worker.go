package worker

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/silo-db/silo/db"
)

// Queue names.
const (
	QueueMaintenance = "maintenance"
)

// singletonMaintenanceJob is how a periodic maintenance job is inserted: in the maintenance queue,
// up to three attempts, and never a second one while one is queued, running or waiting to retry,
// so a slow run is not followed by a pile of them.
func singletonMaintenanceJob() river.InsertOpts {
	return river.InsertOpts{
		Queue:       QueueMaintenance,
		MaxAttempts: 3,
		UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// Config configures the River client.
type Config struct {
	Logger *slog.Logger
	// DeadLetterRetention: dead letters resolved longer ago than this are trimmed (0: never, the
	// trim job is not scheduled).
	DeadLetterRetention time.Duration
	// MaintenanceInterval is how often the dead-letter, idempotency-key and event-store trims run
	// (default an hour).
	MaintenanceInterval time.Duration
	// ReaperInterval is how often the reaper runs (0: DefaultReaperInterval; negative: never).
	ReaperInterval time.Duration
	// ReaperBudget is how long one reaper run goes on while grains are due (0: DefaultReaperBudget).
	ReaperBudget time.Duration
	// ChangeTrimInterval is how often the change log is trimmed (0: DefaultChangeTrimInterval;
	// negative: never). The retention is the silo.settings row change_retention.
	ChangeTrimInterval time.Duration
	// JobTrimInterval is how often finished jobs and ended deduplication claims are deleted
	// (default a minute: claims end after deduper.unique_id_expiry).
	JobTrimInterval time.Duration
	// PartitionMaintenanceInterval is how often the time-partitioned tables are maintained (0:
	// DefaultPartitionMaintenanceInterval; negative: never).
	PartitionMaintenanceInterval time.Duration
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
	if c.JobTrimInterval <= 0 {
		c.JobTrimInterval = time.Minute
	}
	if c.ReaperBudget <= 0 {
		c.ReaperBudget = DefaultReaperBudget
	}
	if c.ChangeTrimInterval == 0 {
		c.ChangeTrimInterval = DefaultChangeTrimInterval
	}
	if c.PartitionMaintenanceInterval == 0 {
		c.PartitionMaintenanceInterval = DefaultPartitionMaintenanceInterval
	}
}

// NewClient returns a River client that works Silo's queues and schedules its periodic jobs. The
// workers query through pool, each call its own transaction.
func NewClient(pool *pgxpool.Pool, cfg Config) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(pool, cfg))
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	return client, nil
}

// riverConfig is the River configuration of NewClient: the workers, the maintenance queue and the
// periodic jobs that cfg enables.
func riverConfig(pool *pgxpool.Pool, cfg Config) *river.Config {
	cfg.defaults()
	workers := river.NewWorkers()
	river.AddWorker(workers, &DeadLetterTrimWorker{queries: db.New(pool), retention: cfg.DeadLetterRetention})
	river.AddWorker(workers, &ReaperWorker{queries: db.New(pool), budget: cfg.ReaperBudget, logger: cfg.Logger})
	river.AddWorker(workers, &ChangeTrimWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &IdempotencyTrimWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &PartitionMaintenanceWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &EventTrimWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &BeltDeadLetterTrimWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &JobTrimWorker{queries: db.New(pool), logger: cfg.Logger})

	periodic := []*river.PeriodicJob{river.NewPeriodicJob(
		river.PeriodicInterval(cfg.MaintenanceInterval),
		func() (river.JobArgs, *river.InsertOpts) { return IdempotencyTrimArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "idempotency_trim"},
	), river.NewPeriodicJob(
		river.PeriodicInterval(cfg.MaintenanceInterval),
		func() (river.JobArgs, *river.InsertOpts) { return EventTrimArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "event_trim"},
	), river.NewPeriodicJob(
		river.PeriodicInterval(cfg.MaintenanceInterval),
		func() (river.JobArgs, *river.InsertOpts) { return BeltDeadLetterTrimArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "belt_dead_letter_trim"},
	), river.NewPeriodicJob(
		river.PeriodicInterval(cfg.JobTrimInterval),
		func() (river.JobArgs, *river.InsertOpts) { return JobTrimArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true, ID: "job_trim"},
	)}
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
	if cfg.PartitionMaintenanceInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.PartitionMaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return PartitionMaintenanceArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "partition_maintenance"},
		))
	}
	return &river.Config{
		Logger:       cfg.Logger,
		Queues:       map[string]river.QueueConfig{QueueMaintenance: {MaxWorkers: 2}},
		Workers:      workers,
		PeriodicJobs: periodic,
	}
}
