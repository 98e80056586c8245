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
	// MaintenanceInterval is how often the dead-letter trim runs (default an hour).
	MaintenanceInterval time.Duration
	// ReaperInterval is how often the reaper runs (0: DefaultReaperInterval; negative: never).
	ReaperInterval time.Duration
	// ReaperBudget is how long one reaper run goes on while grains are due (0: DefaultReaperBudget).
	ReaperBudget time.Duration
	// RetentionInterval is how often the retention job applies the retention of the event store,
	// series points, the change log, idempotency keys and every other target of
	// purge.retention_targets (0: DefaultRetentionInterval; negative: never). Each retention is a
	// silo.settings row.
	RetentionInterval time.Duration
	// PartitionMaintenanceInterval is how often the time-partitioned tables are maintained (0:
	// DefaultPartitionMaintenanceInterval; negative: never).
	PartitionMaintenanceInterval time.Duration
	// PurgeTick is how often the ODS purge job is scheduled (0: DefaultPurgeTick; negative: never).
	// Whether it purges, how and how often is purge.config's (enabled, mode, frequency).
	PurgeTick time.Duration
	// SeriesFlushInterval is how often the series metadata updater flushes due updates and held
	// back notifications (0: DefaultSeriesFlushInterval; negative: never).
	SeriesFlushInterval time.Duration
	// SeriesMaintenanceInterval is how often the points of deleted series are removed (0:
	// DefaultSeriesMaintenanceInterval; negative: never). Series retention is the retention job's.
	SeriesMaintenanceInterval time.Duration
	// RescueStuckJobsAfter is how long a job may stay running before River's leader takes it for
	// the job of a dead process and ends it (0: DefaultRescueStuckJobsAfter, or twice the reaper's
	// budget when that is longer). The periodic jobs are singletons: while a killed process's job
	// looks running, no other of its kind is scheduled, so this bounds how long a crash stalls the
	// purge, the reaper or a trim. Under two minutes, jobs time out after half of it.
	RescueStuckJobsAfter time.Duration
}

// DefaultRescueStuckJobsAfter is Config.RescueStuckJobsAfter's default: well past any job's run
// (the purge's runs last a tick, the reaper's its budget, a minute by default).
const DefaultRescueStuckJobsAfter = 5 * time.Minute

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
	if c.RetentionInterval == 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.PartitionMaintenanceInterval == 0 {
		c.PartitionMaintenanceInterval = DefaultPartitionMaintenanceInterval
	}
	if c.SeriesFlushInterval == 0 {
		c.SeriesFlushInterval = DefaultSeriesFlushInterval
	}
	if c.SeriesMaintenanceInterval == 0 {
		c.SeriesMaintenanceInterval = DefaultSeriesMaintenanceInterval
	}
	if c.PurgeTick == 0 {
		c.PurgeTick = DefaultPurgeTick
	}
}

// purgeTick is how long one purge job goes on: the tick it is scheduled at.
func purgeTick(tick time.Duration) time.Duration {
	if tick <= 0 {
		return DefaultPurgeTick
	}
	return tick
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
	river.AddWorker(workers, &RetentionWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &legacyTrimWorker[EventTrimArgs]{queries: db.New(pool), target: "event"})
	river.AddWorker(workers, &legacyTrimWorker[ChangeTrimArgs]{queries: db.New(pool), target: "change"})
	river.AddWorker(workers, &legacyTrimWorker[IdempotencyTrimArgs]{queries: db.New(pool), target: "idempotency"})
	river.AddWorker(workers, &PartitionMaintenanceWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &PurgeWorker{queries: db.New(pool), logger: cfg.Logger, tick: purgeTick(cfg.PurgeTick)})
	river.AddWorker(workers, &SeriesMetadataWorker{queries: db.New(pool), logger: cfg.Logger})
	river.AddWorker(workers, &SeriesMaintenanceWorker{queries: db.New(pool), logger: cfg.Logger})

	var periodic []*river.PeriodicJob
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
	if cfg.RetentionInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.RetentionInterval),
			func() (river.JobArgs, *river.InsertOpts) { return RetentionArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "retention"},
		))
	}
	if cfg.PartitionMaintenanceInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.PartitionMaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return PartitionMaintenanceArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "partition_maintenance"},
		))
	}
	if cfg.PurgeTick > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.PurgeTick),
			func() (river.JobArgs, *river.InsertOpts) { return PurgeArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "purge"},
		))
	}
	if cfg.SeriesFlushInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.SeriesFlushInterval),
			func() (river.JobArgs, *river.InsertOpts) { return SeriesMetadataArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "series_metadata"},
		))
	}
	if cfg.SeriesMaintenanceInterval > 0 {
		periodic = append(periodic, river.NewPeriodicJob(
			river.PeriodicInterval(cfg.SeriesMaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return SeriesMaintenanceArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true, ID: "series_maintenance"},
		))
	}
	rescue := cfg.RescueStuckJobsAfter
	if rescue <= 0 {
		rescue = max(DefaultRescueStuckJobsAfter, 2*cfg.ReaperBudget)
	}
	// A job may not run longer than it takes to be rescued: under River's default job timeout (a
	// minute), a shorter rescue also shortens the timeout, to half of it.
	var jobTimeout time.Duration
	if rescue < 2*time.Minute {
		jobTimeout = rescue / 2
	}
	return &river.Config{
		Logger:               cfg.Logger,
		RescueStuckJobsAfter: rescue,
		JobTimeout:           jobTimeout,
		Queues:               map[string]river.QueueConfig{QueueMaintenance: {MaxWorkers: 2}, QueuePurge: {MaxWorkers: 1}},
		Workers:              workers,
		PeriodicJobs:         periodic,
	}
}
