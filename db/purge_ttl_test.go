package db_test

// TTL mode (sql/purge/04_ttl.sql) on both partitioning backends: a unit of work expires whole when
// not modified for its own ttl or the table-wide one; partitions holding only expired units of
// work's objects are dropped whole, the rest goes by batched deletes; unfinished and not-yet-
// archived units of work are postponed; the report says what expires in the next day.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

func TestPurgeTTLBackends(t *testing.T) {
	t.Parallel()
	onBothBackends(t, testPurgeTTL)
}

func testPurgeTTL(t *testing.T, pool *pgxpool.Pool, backend string) {
	ctx := context.Background()
	var got string
	require.NoError(t, pool.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'ods.objects'::regclass`).Scan(&got))
	require.Equal(t, backend, got)
	q := db.New(pool)
	setPurgeConfig(t, pool, `{"mode": "TTL", "ttl-expire-after-seconds": 2592000, "terminal-unit-of-works-only": true,
		"archived-dependent-journey-types": ["PAYMENT"]}`)

	// seed makes a unit of work whose events and five objects are ageDays old.
	seed := func(id, journey string, finished bool, ttl int, ageDays int) {
		t.Helper()
		_, err := pool.Exec(ctx, `
			SELECT * FROM api.ods_ingest(jsonb_build_array(
				jsonb_build_object('unitOfWorkId', $1::text, 'journeyType', nullif($2, ''), 'globalStatus', 'PENDING',
				                   'createdAt', now() - $5 * interval '1 day', 'ttl', nullif($4, 0))) ||
				CASE WHEN $3 THEN jsonb_build_array(jsonb_build_object('unitOfWorkId', $1::text, 'globalStatus', 'COMPLETED',
				                   'createdAt', now() - $5 * interval '1 day' + interval '1 hour')) ELSE '[]' END)`,
			id, journey, finished, ttl, ageDays)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT * FROM api.ods_append((SELECT jsonb_agg(jsonb_build_object('unitOfWorkId', $1::text,
			'kind', 'PDS', 'type', 't', 'createdAt', now() - $2 * interval '1 day' + i * interval '1 minute', 'payload', i))
			FROM generate_series(1, 5) i))`, id, ageDays)
		require.NoError(t, err)
	}
	for _, id := range []string{"old-1", "old-2", "old-3"} {
		seed(id, "RECALL", true, 0, 100)
	}
	seed("pending", "", false, 0, 50)
	seed("payment", "PAYMENT", true, 0, 60)
	seed("short", "", true, 86400, 10)
	seed("young", "", true, 0, 1)
	_, err := pool.Exec(ctx, `SELECT * FROM api.partition_maintain()`)
	require.NoError(t, err)
	objects := func(id string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ods.objects WHERE unit_of_work_id = $1`, id).Scan(&n))
		return n
	}
	require.Equal(t, 7, objects("old-1"), "five objects and its two events as Process objects")
	var base time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&base))

	// Two days on: only short (its own ttl of a day) has expired.
	r, err := q.PurgeTTLRun(ctx, base.Add(48*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int32(1), r.UnitOfWorksDeleted)
	require.Zero(t, r.DroppedPartitions)
	require.Equal(t, int64(7), r.ObjectsDeleted)
	require.Zero(t, r.Postponed)
	require.Zero(t, r.ExpiringNextDay)
	require.Zero(t, objects("short"))

	// Twenty-nine and a half days on: everything seeded expires within the next day.
	r, err = q.PurgeTTLRun(ctx, base.Add(29*24*time.Hour+12*time.Hour))
	require.NoError(t, err)
	require.Zero(t, r.UnitOfWorksDeleted)
	require.Equal(t, int64(4), r.ExpiringNextDay, "old-1..3 and young; pending and payment will be postponed")

	// Thirty-one days on: the old ones go with their partitions, young by a batched delete;
	// pending (unfinished) and payment (not archived) are postponed, and keep everything.
	r, err = q.PurgeTTLRun(ctx, base.Add(31*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int32(4), r.UnitOfWorksDeleted)
	require.Positive(t, r.DroppedPartitions, "the partitions of a hundred days ago hold only expired units of work")
	require.Equal(t, int64(3*7+7), r.ObjectsDeleted)
	require.Equal(t, int64(2), r.Postponed)
	for _, id := range []string{"old-1", "old-2", "old-3", "young"} {
		require.Zero(t, objects(id), id)
	}
	require.Equal(t, 6, objects("pending"))
	require.Equal(t, 7, objects("payment"))
	var units, summaries int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ods.unit_of_works), (SELECT count(*) FROM ods.summaries)`).Scan(&units, &summaries))
	require.Equal(t, [2]int{2, 2}, [2]int{units, summaries})

	// Archiving payment modifies it: its ttl starts again from then, and it is due in the next day
	// thirty days later.
	archived := base.Add(31 * 24 * time.Hour)
	_, err = pool.Exec(ctx, `SELECT api.ods_unit_of_work_archive('payment', $1)`, archived)
	require.NoError(t, err)
	r, err = q.PurgeTTLRun(ctx, archived.Add(29*24*time.Hour+12*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(1), r.ExpiringNextDay)
	require.Equal(t, int64(1), r.Postponed)
	r, err = q.PurgeTTLRun(ctx, archived.Add(30*24*time.Hour+time.Hour))
	require.NoError(t, err)
	require.Equal(t, int32(1), r.UnitOfWorksDeleted)
	require.Zero(t, objects("payment"))

	rep := getReport(t, q, archived.Add(30*24*time.Hour+time.Hour).UTC().Format(time.DateOnly))
	require.Equal(t, "TTL", rep.Mode)
	require.Equal(t, int64(1), rep.UnitOfWorksDeleted)
	require.Equal(t, int64(1), *rep.Postponed)

	// A STANDARD batch on a TTL day is refused.
	_, err = q.PurgeBatch(ctx, db.PurgeBatchParams{Now: archived.Add(30*24*time.Hour + 2*time.Hour), BatchLimit: 1})
	requireSQLState(t, err, "SPMOD")
}
