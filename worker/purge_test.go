package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// seedPurge makes n units of work that finished three years ago (each with a Summary, two Process
// objects and one MDS object) and one that finished yesterday.
func seedPurge(t *testing.T, q db.DBTX, n int) {
	t.Helper()
	_, err := q.Exec(context.Background(), `
		SELECT * FROM api.ods_ingest((SELECT jsonb_agg(e) FROM (
			SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'PENDING', 'createdAt', now() - interval '3 years') e
			FROM generate_series(1, $1) i
			UNION ALL
			SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'COMPLETED', 'createdAt', now() - interval '3 years')
			FROM generate_series(1, $1) i
			UNION ALL
			SELECT jsonb_build_object('unitOfWorkId', 'young', 'globalStatus', 'COMPLETED', 'createdAt', now() - interval '1 day')) x))`, n)
	require.NoError(t, err)
	_, err = q.Exec(context.Background(), `SELECT * FROM api.ods_append((SELECT jsonb_agg(jsonb_build_object('unitOfWorkId', 'u' || i, 'kind', 'MDS', 'type', 't',
			'createdAt', now() - interval '3 years', 'payload', i)) FROM generate_series(1, $1) i))`, n)
	require.NoError(t, err)
}

func unitsLeft(t *testing.T, q db.DBTX) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(context.Background(), `SELECT count(*) FROM ods.unit_of_works`).Scan(&n))
	return n
}

// Work purges while enabled, one run per frequency within the tick, and nothing while disabled.
func TestPurgeWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	seedPurge(t, tx, 30)
	w := &PurgeWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler), tick: time.Second}

	work(t, tx, w, PurgeArgs{})
	require.Equal(t, 31, unitsLeft(t, tx), "purging is disabled by default")

	// One batch per run (the test's transaction is one connection): 10 per run every 300 ms, so
	// the tick of a second makes four runs and the thirty units of work are gone.
	_, err := tx.Exec(ctx, `SELECT api.purge_config_set('{"enabled": true, "fetch-size": 10, "parallelism": 1, "frequency": "300ms"}')`)
	require.NoError(t, err)
	work(t, tx, w, PurgeArgs{})
	require.Equal(t, 1, unitsLeft(t, tx))
	var deleted, toDelete int
	var finished bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT unit_of_works_deleted, unit_of_works_to_delete, finished_at IS NOT NULL
		FROM purge.reports WHERE execution_date = (now() AT TIME ZONE 'UTC')::date`).Scan(&deleted, &toDelete, &finished))
	require.Equal(t, 30, deleted)
	require.Equal(t, 30, toDelete)
	require.True(t, finished)
}

// Two worker processes (River clients) on one database: River's leader alone schedules the purge,
// purge jobs never run at the same time, and every unit of work is deleted and counted once.
func TestPurgeSingleScheduler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	seedPurge(t, pool, 400)
	_, err := pool.Exec(ctx, `SELECT api.purge_config_set('{"enabled": true, "fetch-size": 24, "parallelism": 4, "frequency": "100ms"}')`)
	require.NoError(t, err)

	start := func(p *pgxpool.Pool) *river.Client[pgx.Tx] {
		rc := riverConfig(p, Config{ReaperInterval: -1, PartitionMaintenanceInterval: -1, PurgeTick: 500 * time.Millisecond})
		rc.TestOnly = true
		client, err := river.NewClient(riverpgxv5.New(p), rc)
		require.NoError(t, err)
		require.NoError(t, client.Start(ctx))
		t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })
		return client
	}
	other, err := pgxpool.New(ctx, pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	start(pool)
	start(other)

	// The guard only keeps a broken scheduler from hanging the run; it measures nothing.
	deadline := time.Now().Add(time.Minute)
	for unitsLeft(t, pool) > 1 {
		require.True(t, time.Now().Before(deadline), "the purge did not finish")
		time.Sleep(100 * time.Millisecond)
	}
	var deleted, toDelete int
	require.NoError(t, pool.QueryRow(ctx, `SELECT unit_of_works_deleted, unit_of_works_to_delete
		FROM purge.reports WHERE execution_date = (now() AT TIME ZONE 'UTC')::date`).Scan(&deleted, &toDelete))
	require.Equal(t, 400, deleted)
	require.Equal(t, 400, toDelete)

	var jobs, overlaps int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM river_job WHERE kind = 'purge' AND attempted_at IS NOT NULL),
		       (SELECT count(*) FROM river_job a JOIN river_job b ON a.id < b.id
		         WHERE a.kind = 'purge' AND b.kind = 'purge' AND a.attempted_at IS NOT NULL AND b.attempted_at IS NOT NULL
		           AND tstzrange(a.attempted_at, coalesce(a.finalized_at, 'infinity')) && tstzrange(b.attempted_at, coalesce(b.finalized_at, 'infinity')))`).
		Scan(&jobs, &overlaps))
	require.Greater(t, jobs, 1)
	require.Zero(t, overlaps, "two purge jobs ran at once")
}
