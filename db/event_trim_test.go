package db_test

// Event store retention (sql/event/04_trim.sql) on both partitioning backends: the events older
// than the retention go by whole partitions or chunks, with their ids and pending deliveries; an
// id dropped so is new when sent again; younger events stay.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

func TestEventTrimBackends(t *testing.T) {
	t.Parallel()
	onBothBackends(t, testEventTrim)
}

func testEventTrim(t *testing.T, pool *pgxpool.Pool, backend string) {
	ctx := context.Background()
	var got string
	require.NoError(t, pool.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'event.events'::regclass`).Scan(&got))
	require.Equal(t, backend, got)
	_, err := pool.Exec(ctx, `SELECT event_private.consumer_create('trim', '{t}')`)
	require.NoError(t, err)

	now := time.Now()
	old := now.Add(-200 * 24 * time.Hour).UnixMilli()
	middle := now.Add(-30 * 24 * time.Hour).UnixMilli()
	events := "["
	for i := range 10 {
		if i > 0 {
			events += ","
		}
		ts := old + int64(i)*3600_000
		id := fmt.Sprintf("old-%d", i)
		if i >= 5 {
			ts, id = middle+int64(i)*3600_000, fmt.Sprintf("mid-%d", i)
		}
		events += evMsg(id, "t", fmt.Sprintf("c%d", i%3), fmt.Sprintf(`"grnry-event-timestamp": %d`, ts), "1")
	}
	rows := evIngest(t, pool, events+"]")
	for _, r := range rows {
		require.Equal(t, "stored", r.Status)
	}
	// Natively, the old rows wait in the default partition until maintenance gives them partitions.
	_, err = db.New(pool).PartitionMaintain(ctx)
	require.NoError(t, err)

	count := func(sql string) int {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n))
		return n
	}
	require.Equal(t, 10, count(`SELECT count(*) FROM event.events`))
	require.Equal(t, 10, count(`SELECT count(*) FROM event.deliveries`))

	// The setting's retention (90 days): the old half goes.
	res, err := db.New(pool).EventTrim(ctx, pgtype.Interval{})
	require.NoError(t, err)
	require.Positive(t, res.DroppedPartitions)
	require.EqualValues(t, 5, res.DeletedIds)
	require.EqualValues(t, 5, res.DeletedDeliveries)
	require.Equal(t, 0, count(`SELECT count(*) FROM event.events WHERE event_id LIKE 'old-%'`))
	require.Equal(t, 5, count(`SELECT count(*) FROM event.events WHERE event_id LIKE 'mid-%'`))
	require.Equal(t, 5, count(`SELECT count(*) FROM event.event_ids`))
	require.Equal(t, 5, count(`SELECT count(*) FROM event.deliveries`))

	// An id dropped is new again.
	rows = evIngest(t, pool, evMsg("old-1", "t", "c1", fmt.Sprintf(`"grnry-event-timestamp": %d`, now.UnixMilli()), "2"))
	require.Equal(t, "stored", rows[0].Status)
	rows = evIngest(t, pool, evMsg("mid-6", "t", "c0", "", "2"))
	require.Equal(t, "duplicate", rows[0].Status)

	// A shorter retention from psql, as of noon: a partition straddling the cutoff stays whole,
	// with the ids of its events older than the cutoff.
	noon := time.Date(now.UTC().Year(), now.UTC().Month(), now.UTC().Day(), 12, 0, 0, 0, time.UTC)
	edge := noon.Add(-7*24*time.Hour - time.Hour)
	rows = evIngest(t, pool, evMsg("edge", "t", "c2", fmt.Sprintf(`"grnry-event-timestamp": %d`, edge.UnixMilli()), "3"))
	require.Equal(t, "stored", rows[0].Status)
	_, err = db.New(pool).PartitionMaintain(ctx)
	require.NoError(t, err)
	var dropped int
	var ids, deliveries int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT * FROM api.event_trim('7 days', $1)`, noon).Scan(&dropped, &ids, &deliveries))
	require.EqualValues(t, 5, ids)
	require.EqualValues(t, 5, deliveries)
	require.Equal(t, 2, count(`SELECT count(*) FROM event.events`))
	require.Equal(t, 1, count(`SELECT count(*) FROM event.events WHERE event_id = 'edge'`))
	require.Equal(t, 2, count(`SELECT count(*) FROM event.event_ids`))
	rows = evIngest(t, pool, evMsg("edge", "t", "c2", "", "3"))
	require.Equal(t, "duplicate", rows[0].Status)

	// Seven days as of now: nothing more to drop; a negative retention is refused.
	res, err = db.New(pool).EventTrim(ctx, pgtype.Interval{Days: 7, Valid: true})
	require.NoError(t, err)
	require.EqualValues(t, 0, res.DeletedIds)
	require.Equal(t, 2, count(`SELECT count(*) FROM event.events`))

	// An event past the partitions made ahead (natively it waits in the default partition, which
	// keeps its rows from the partition of the cutoff on) stays with its id when the cutoff is
	// just after it; the others go.
	far := time.Date(now.UTC().Year()+5, 1, 1, 10, 0, 0, 0, time.UTC)
	rows = evIngest(t, pool, evMsg("far", "t", "c1", fmt.Sprintf(`"grnry-event-timestamp": %d`, far.UnixMilli()), "4"))
	require.Equal(t, "stored", rows[0].Status)
	require.NoError(t, pool.QueryRow(ctx, `SELECT * FROM api.event_trim('30 minutes', $1)`, far.Add(time.Hour)).Scan(&dropped, &ids, &deliveries))
	require.EqualValues(t, 2, ids)
	require.EqualValues(t, 2, deliveries)
	require.Equal(t, 1, count(`SELECT count(*) FROM event.events WHERE event_id = 'far'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM event.events`))
	require.Equal(t, 1, count(`SELECT count(*) FROM event.event_ids WHERE event_id = 'far'`))
	require.Equal(t, 1, count(`SELECT count(*) FROM event.event_ids`))
	_, err = db.New(pool).EventTrim(ctx, pgtype.Interval{Days: -1, Valid: true})
	require.Equal(t, "SLINV", sqlState(err))
}
