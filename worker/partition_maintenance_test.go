package worker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// A time-partitioned table with rows far in the past and the future, on the test database's
// backend (TimescaleDB when installed, else native); db/partition_test.go tests both.
const seedPartitioned = `
	CREATE SCHEMA wtest;
	CREATE TABLE wtest.points (at timestamptz NOT NULL, v double precision) PARTITION BY RANGE (at);
	SELECT partition.create_time_partitioned('wtest.points', 'at', interval '1 day');
	INSERT INTO wtest.points (at, v) VALUES ('1970-01-01Z', 1), (now(), 2), ('2200-01-01Z', 3)`

// inDefault counts the rows of wtest.points that wait in a default partition (native only), and
// whether a partition covers three days ahead of now (made ahead natively; a hypertable's chunks
// are made as rows come, so there it counts as covered).
func partitionState(t *testing.T, q db.DBTX) (inDefault int, ahead bool) {
	t.Helper()
	require.NoError(t, q.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM wtest.points p JOIN api.partition_chunks('wtest.points') c
		          ON c.part = p.tableoid::regclass::text WHERE c.is_default),
		       api.partition_backend() = 'timescaledb' OR EXISTS (
		          SELECT FROM api.partition_chunks('wtest.points') c
		           WHERE NOT c.is_default AND c.range_start <= now() + interval '3 days' AND now() + interval '3 days' < c.range_end)`).
		Scan(&inDefault, &ahead))
	return inDefault, ahead
}

// Work maintains: no row is left in a default partition, partitions are ready ahead of now.
func TestPartitionMaintenanceWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	_, err := tx.Exec(ctx, seedPartitioned)
	require.NoError(t, err)
	// A premade partition lost, for maintenance to make again.
	_, err = tx.Exec(ctx, `DO $$ DECLARE v text; BEGIN
		SELECT part INTO v FROM api.partition_chunks('wtest.points')
		 WHERE backend = 'native' AND range_start <= now() + interval '3 days' AND now() + interval '3 days' < range_end;
		IF v IS NOT NULL THEN EXECUTE 'DROP TABLE ' || v; END IF; END $$`)
	require.NoError(t, err)

	work(t, tx, &PartitionMaintenanceWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, PartitionMaintenanceArgs{})
	inDefault, ahead := partitionState(t, tx)
	require.Zero(t, inDefault)
	require.True(t, ahead)
}

// The leader runs the partition maintenance on start.
func TestPartitionMaintenanceRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), seedPartitioned)
	require.NoError(t, err)

	runOnStart(t, pool, Config{ReaperInterval: -1}, PartitionMaintenanceArgs{}.Kind())
	inDefault, ahead := partitionState(t, pool)
	require.Zero(t, inDefault)
	require.True(t, ahead)
}

// A table that cannot be maintained fails the job, after the others were maintained.
func TestPartitionMaintenanceWorkerFails(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	_, err := tx.Exec(ctx, seedPartitioned+`;
		CREATE TABLE wtest.broken (at timestamptz NOT NULL) PARTITION BY RANGE (at);
		INSERT INTO partition.tables (relation, time_column, backend) VALUES ('wtest.broken', 'at', 'native')`)
	require.NoError(t, err)

	w := &PartitionMaintenanceWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}
	err = w.Work(ctx, &river.Job[PartitionMaintenanceArgs]{})
	var tables int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM partition.tables`).Scan(&tables))
	require.ErrorContains(t, err, fmt.Sprintf("1 of %d time-partitioned tables not maintained", tables))
	inDefault, ahead := partitionState(t, tx)
	require.Zero(t, inDefault)
	require.True(t, ahead)
}
