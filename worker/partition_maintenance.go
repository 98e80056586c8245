package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/silo-db/silo/db"
)

// DefaultPartitionMaintenanceInterval is how often the time-partitioned tables are maintained
// (Config.PartitionMaintenanceInterval).
const DefaultPartitionMaintenanceInterval = 10 * time.Minute

// PartitionMaintenanceArgs is the periodic job that keeps the time-partitioned tables ready for
// their rows through api.partition_maintain (sql/partition/): natively, rows waiting in a default
// partition move into partitions of their own, and partitions are made ahead of now (pg_partman's
// premake); hypertables need nothing, TimescaleDB makes their chunks as rows arrive.
type PartitionMaintenanceArgs struct{}

// Kind is the job kind.
func (PartitionMaintenanceArgs) Kind() string { return "partition_maintenance" }

// InsertOpts puts the job in the maintenance queue; while one is queued or running, the next
// period adds none.
func (PartitionMaintenanceArgs) InsertOpts() river.InsertOpts {
	return singletonMaintenanceJob()
}

// PartitionMaintenanceWorker calls api.partition_maintain, which maintains every table and reports
// each one's outcome.
type PartitionMaintenanceWorker struct {
	river.WorkerDefaults[PartitionMaintenanceArgs]
	queries *db.Queries
	logger  *slog.Logger
}

// Work maintains every time-partitioned table. A table that failed is logged and fails the job
// (River tries again); the others' work is kept.
func (w *PartitionMaintenanceWorker) Work(ctx context.Context, job *river.Job[PartitionMaintenanceArgs]) error {
	rows, err := w.queries.PartitionMaintain(ctx)
	if err != nil {
		return fmt.Errorf("error maintaining time-partitioned tables: %w", err)
	}
	failed := 0
	for _, r := range rows {
		switch {
		case r.SQLState != "":
			failed++
			w.logger.Error("time-partitioned table not maintained", "table", r.TableName, "backend", r.Backend,
				"sqlstate", r.SQLState, "err", r.Message)
		case r.MovedRows > 0 || r.CreatedPartitions > 0:
			w.logger.Info("time-partitioned table maintained", "table", r.TableName, "backend", r.Backend,
				"moved_rows", r.MovedRows, "created_partitions", r.CreatedPartitions)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d time-partitioned tables not maintained (see the log)", failed, len(rows))
	}
	return nil
}
