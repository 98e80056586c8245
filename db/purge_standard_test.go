package db_test

// STANDARD purge (sql/purge/03_standard.sql): every row of the seed's Table 1, the edges of the
// criteria, the report's lifecycle across days, parallel batches that never double-count or
// half-delete, and a batch killed before commit.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// seedUnitOfWork ingests a unit of work as the ODS would see it: a first event at started (none
// when empty), a terminal one at finished (none when empty), archived at archived (when set), and
// two objects.
func seedUnitOfWork(t *testing.T, tx db.DBTX, id, journey, started, finished, archived string) {
	t.Helper()
	ctx := context.Background()
	events := []map[string]any{}
	if started != "" {
		e := map[string]any{"unitOfWorkId": id, "globalStatus": "PENDING", "name": "Initiated", "createdAt": started}
		if journey != "" {
			e["journeyType"] = journey
		}
		events = append(events, e)
	}
	if finished != "" {
		events = append(events, map[string]any{"unitOfWorkId": id, "globalStatus": "COMPLETED", "name": "Completed", "createdAt": finished})
	}
	if len(events) > 0 {
		b, _ := json.Marshal(events)
		_, err := tx.Exec(ctx, `SELECT * FROM api.ods_ingest($1::jsonb)`, string(b))
		require.NoError(t, err)
	}
	at := started
	if at == "" {
		at = "2021-01-01T00:00:00Z"
	}
	_, err := tx.Exec(ctx, `SELECT * FROM api.ods_append(jsonb_build_array(
		jsonb_build_object('unitOfWorkId', $1::text, 'kind', 'MDS', 'type', 'pacs.008', 'createdAt', $2::text, 'payload', '{}'::jsonb),
		jsonb_build_object('unitOfWorkId', $1::text, 'kind', 'CUSTOM', 'type', 'note', 'createdAt', $2::text, 'payload', '1'::jsonb)))`, id, at)
	require.NoError(t, err)
	if archived != "" {
		_, err := tx.Exec(ctx, `SELECT api.ods_unit_of_work_archive($1, $2::timestamptz)`, id, archived)
		require.NoError(t, err)
	}
}

// unitOfWorkRows counts what is left of a unit of work: its row, summary and objects.
func unitOfWorkRows(t *testing.T, tx db.DBTX, id string) (units, summaries, objects int) {
	t.Helper()
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM ods.unit_of_works WHERE id = $1), (SELECT count(*) FROM ods.summaries WHERE unit_of_work_id = $1),
		(SELECT count(*) FROM ods.objects WHERE unit_of_work_id = $1)`, id).Scan(&units, &summaries, &objects))
	return
}

func setPurgeConfig(t *testing.T, tx db.DBTX, cfg string) {
	t.Helper()
	_, err := db.New(tx).PurgeConfigSet(context.Background(), []byte(cfg))
	require.NoError(t, err)
}

var seedDay = time.Date(2023, 5, 17, 0, 0, 2, 170_000_000, time.UTC)

// Table 1 of the seed: execution date 2023-05-17, retention two years, lower bound 2021-05-17.
func TestPurgeTable1(t *testing.T) {
	t.Parallel()
	cases := []struct {
		started, finished, archived, journey string
		terminalOnly                         bool
		archivedTypes                        string
		purged                               bool
	}{
		{"2021-05-16", "2021-05-16", "", "", false, `[]`, true},
		{"2021-05-17", "2021-05-17", "", "", false, `[]`, false},
		{"2021-05-16", "", "", "", false, `[]`, true},
		{"2021-05-16", "2021-05-16", "", "", true, `[]`, true},
		{"2021-05-17", "2021-05-17", "", "", true, `[]`, false},
		{"2021-05-16", "", "", "", true, `[]`, false},
		{"2021-05-16", "2021-05-16", "2021-05-16", "PAYMENT", true, `["PAYMENT"]`, true},
		{"2021-05-16", "2021-05-16", "", "PAYMENT", true, `["PAYMENT"]`, false},
		{"2021-05-16", "2021-05-16", "", "RECALL", true, `["PAYMENT"]`, true},
	}
	day := func(d string) string {
		if d == "" {
			return ""
		}
		return d + "T00:00:00Z"
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("row%d", i+1), func(t *testing.T) {
			t.Parallel()
			tx := dbtest.Tx(t)
			setPurgeConfig(t, tx, fmt.Sprintf(`{"terminal-unit-of-works-only": %t, "archived-dependent-journey-types": %s}`, c.terminalOnly, c.archivedTypes))
			seedUnitOfWork(t, tx, "uow", c.journey, day(c.started), day(c.finished), day(c.archived))
			b, err := db.New(tx).PurgeBatch(context.Background(), db.PurgeBatchParams{Now: seedDay, BatchLimit: 100})
			require.NoError(t, err)
			units, summaries, objects := unitOfWorkRows(t, tx, "uow")
			if c.purged {
				require.Equal(t, int32(1), b.UnitOfWorksDeleted)
				require.Equal(t, [3]int{0, 0, 0}, [3]int{units, summaries, objects})
			} else {
				require.Zero(t, b.UnitOfWorksDeleted)
				events := 0
				for _, at := range []string{c.started, c.finished} {
					if at != "" {
						events++
					}
				}
				require.Equal(t, [3]int{1, 1, 2 + events}, [3]int{units, summaries, objects}, "two objects and a Process object per event")
			}
		})
	}
}

// The edges: exactly at the bound, a millisecond before it, time zones of the data and of the
// session, and the archive requirement for each journey type.
func TestPurgeCriteriaEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	_, err := tx.Exec(ctx, `SET LOCAL TimeZone = 'Pacific/Auckland'`)
	require.NoError(t, err)
	setPurgeConfig(t, tx, `{"archived-dependent-journey-types": ["BULK", "BATCH"]}`)
	seedUnitOfWork(t, tx, "at-bound", "", "2021-05-16T00:00:00Z", "2021-05-17T00:00:00Z", "")
	seedUnitOfWork(t, tx, "just-before", "", "2021-05-16T00:00:00Z", "2021-05-16T23:59:59.999Z", "")
	// 2021-05-17T01:00+02:00 is 2021-05-16T23:00Z: before the bound.
	seedUnitOfWork(t, tx, "offset-before", "", "2021-05-16T00:00:00Z", "2021-05-17T01:00:00+02:00", "")
	// 2021-05-16T21:00-05:00 is 2021-05-17T02:00Z: not before it.
	seedUnitOfWork(t, tx, "offset-after", "", "2021-05-16T00:00:00Z", "2021-05-16T21:00:00-05:00", "")
	seedUnitOfWork(t, tx, "unfinished-at-bound", "", "2021-05-17T00:00:00Z", "", "")
	seedUnitOfWork(t, tx, "objects-only", "", "", "", "")
	seedUnitOfWork(t, tx, "bulk-archived", "BULK", "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z", "2020-02-01T00:00:00Z")
	seedUnitOfWork(t, tx, "bulk-not-archived", "BULK", "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z", "")
	seedUnitOfWork(t, tx, "batch-unfinished-not-archived", "BATCH", "2020-01-01T00:00:00Z", "", "")
	seedUnitOfWork(t, tx, "payment-not-archived", "PAYMENT", "2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z", "")
	seedUnitOfWork(t, tx, "recent", "PAYMENT", "2023-05-16T00:00:00Z", "2023-05-16T01:00:00Z", "")

	// 2023-05-17T11:00+12:00 is 2023-05-16T23:00Z: execution date 2023-05-16, bound 2021-05-16.
	b, err := db.New(tx).PurgeBatch(ctx, db.PurgeBatchParams{Now: time.Date(2023, 5, 16, 23, 0, 0, 0, time.UTC), BatchLimit: 100})
	require.NoError(t, err)
	require.Equal(t, "2023-05-16", b.ExecutionDate.Time.Format(time.DateOnly))
	require.Equal(t, int32(2), b.UnitOfWorksDeleted, "bulk-archived and payment-not-archived (PAYMENT is not archive-dependent here)")

	b, err = db.New(tx).PurgeBatch(ctx, db.PurgeBatchParams{Now: time.Date(2023, 5, 17, 12, 0, 0, 0, time.UTC), BatchLimit: 100})
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT id FROM ods.unit_of_works ORDER BY id`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"at-bound", "batch-unfinished-not-archived", "bulk-not-archived", "objects-only", "offset-after",
		"recent", "unfinished-at-bound"}, left)
	var orphans int
	require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM ods.objects o WHERE NOT EXISTS (SELECT FROM ods.unit_of_works u WHERE u.id = o.unit_of_work_id))
		+ (SELECT count(*) FROM ods.summaries s WHERE NOT EXISTS (SELECT FROM ods.unit_of_works u WHERE u.id = s.unit_of_work_id))`).Scan(&orphans))
	require.Zero(t, orphans)
}

type purgeReport struct {
	ExecutionDate                 string   `json:"executionDate"`
	Mode                          string   `json:"mode"`
	RetentionPeriod               string   `json:"retentionPeriod"`
	RetentionPeriodLowerBound     string   `json:"retentionPeriodLowerBound"`
	TerminalUnitOfWorksOnly       bool     `json:"terminalUnitOfWorksOnly"`
	ArchivedDependentJourneyTypes []string `json:"archivedDependentJourneyTypes"`
	UnitOfWorksToDelete           int64    `json:"unitOfWorksToDelete"`
	UnitOfWorksDeleted            int64    `json:"unitOfWorksDeleted"`
	SummariesDeleted              int64    `json:"summariesDeleted"`
	ObjectsDeleted                int64    `json:"objectsDeleted"`
	DroppedPartitions             int64    `json:"droppedPartitions"`
	Postponed                     *int64   `json:"postponed"`
	ExpiringNextDay               *int64   `json:"expiringNextDay"`
	StartedAt                     string   `json:"startedAt"`
	FinishedAt                    *string  `json:"finishedAt"`
	Duration                      *string  `json:"duration"`
	Status                        string   `json:"status"`
}

func getReport(t *testing.T, q *db.Queries, date string) purgeReport {
	t.Helper()
	raw, err := q.PurgeReport(context.Background(), date)
	require.NoError(t, err)
	var r purgeReport
	require.NoError(t, json.Unmarshal(raw, &r))
	return r
}

func TestPurgeReportLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	setPurgeConfig(t, tx, `{"fetch-size": 2, "parallelism": 1, "archived-dependent-journey-types": ["PAYMENT", "RECALL"]}`)
	for i := range 5 {
		seedUnitOfWork(t, tx, fmt.Sprintf("old-%d", i), "", "2021-01-01T00:00:00Z", "2021-01-02T00:00:00Z", "")
	}
	seedUnitOfWork(t, tx, "young", "", "2021-05-17T00:00:00Z", "2021-05-17T10:00:00Z", "")

	batch := func(now time.Time) db.PurgeBatchRow {
		b, err := q.PurgeBatch(ctx, db.PurgeBatchParams{Now: now, BatchLimit: 2})
		require.NoError(t, err)
		return b
	}
	require.Equal(t, int32(2), batch(seedDay).UnitOfWorksDeleted)
	r := getReport(t, q, "2023-05-17")
	require.Equal(t, purgeReport{
		ExecutionDate: "2023-05-17T00:00:00.000Z", Mode: "STANDARD", RetentionPeriod: "P2Y",
		RetentionPeriodLowerBound: "2021-05-17T00:00:00.000Z", ArchivedDependentJourneyTypes: []string{"PAYMENT", "RECALL"},
		UnitOfWorksToDelete: 5, UnitOfWorksDeleted: 2, SummariesDeleted: 2, ObjectsDeleted: 2 * 4,
		StartedAt: "2023-05-17T00:00:02.170Z", Status: "running",
	}, r)
	// A configuration changed during the day does not change the day's purge.
	setPurgeConfig(t, tx, `{"retention-period": "1W"}`)
	require.Equal(t, int32(2), batch(seedDay.Add(time.Second)).UnitOfWorksDeleted)
	require.Equal(t, int32(1), batch(seedDay.Add(2*time.Second)).UnitOfWorksDeleted)
	last := batch(seedDay.Add(32*time.Minute + 1010*time.Millisecond))
	require.Zero(t, last.UnitOfWorksDeleted)
	require.True(t, last.Finished)
	r = getReport(t, q, "2023-05-17T00:00:00.000Z")
	require.Equal(t, int64(5), r.UnitOfWorksDeleted)
	require.Equal(t, "2023-05-17T00:32:03.180Z", *r.FinishedAt)
	require.Equal(t, "PT32M1.01S", *r.Duration)
	require.Equal(t, "finished", r.Status)
	// Later runs that day do nothing.
	again := batch(seedDay.Add(time.Hour))
	require.True(t, again.Finished)
	require.Zero(t, again.UnitOfWorksDeleted)

	// The next day runs with the new configuration (one week): young goes.
	next := batch(time.Date(2023, 5, 18, 0, 0, 1, 0, time.UTC))
	require.Equal(t, int32(1), next.UnitOfWorksDeleted)
	r2 := getReport(t, q, "2023-05-18")
	require.Equal(t, "P7D", r2.RetentionPeriod)
	require.Equal(t, "2023-05-11T00:00:00.000Z", r2.RetentionPeriodLowerBound)
	require.Equal(t, int64(1), r2.UnitOfWorksToDelete)

	// A day that never finished is superseded by the next one.
	_, err := tx.Exec(ctx, `INSERT INTO purge.reports (execution_date, mode, retention_period, retention_period_lower_bound,
		terminal_unit_of_works_only, archived_dependent_journey_types, unit_of_works_to_delete, started_at)
		VALUES ('2023-05-10', 'STANDARD', 'P2Y', '2021-05-10Z', false, '{}', 3, '2023-05-10Z')`)
	require.NoError(t, err)
	require.Equal(t, "superseded", getReport(t, q, "2023-05-10").Status)

	raw, err := q.PurgeReports(ctx, db.PurgeReportsParams{PageLimit: 2})
	require.NoError(t, err)
	var list []purgeReport
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list, 2)
	require.Equal(t, "2023-05-18T00:00:00.000Z", list[0].ExecutionDate)
	require.Equal(t, "2023-05-17T00:00:00.000Z", list[1].ExecutionDate)
	before := "2023-05-17"
	raw, err = q.PurgeReports(ctx, db.PurgeReportsParams{PageLimit: 10, Before: &before})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list, 1)

	var kinds []string
	rows, err := tx.Query(ctx, `SELECT kind FROM change_private.outbox WHERE channel = 'purge' AND kind <> 'config' ORDER BY 1`)
	require.NoError(t, err)
	kinds, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	// Progress at most once a second: the batches at +0 s, +1 s, +2 s publish; started twice, finished once.
	require.Equal(t, []string{"finished", "progress", "progress", "progress", "progress", "started", "started"}, kinds)

	for date, code := range map[string]string{"2023-05-19": "SLNFD", "yesterday": "SLINV", "2023-02-30": "SLINV"} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).PurgeReport(ctx, date)
			return err
		})
		requireSQLState(t, err, code)
	}
}

// Concurrent batches, each its own transaction, never take the same unit of work: the report
// counts each deleted unit of work once, and nothing is left half-deleted.
func TestPurgeParallelBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	setPurgeConfig(t, pool, `{"fetch-size": 56, "parallelism": 8}`)
	_, err := pool.Exec(ctx, `SELECT * FROM api.ods_ingest((SELECT jsonb_agg(e) FROM (
		SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'PENDING', 'createdAt', '2021-01-01T00:00:00Z') e FROM generate_series(1, 300) i
		UNION ALL
		SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'COMPLETED', 'createdAt', '2021-01-02T00:00:00Z') FROM generate_series(1, 300) i) x))`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT * FROM api.ods_append((SELECT jsonb_agg(jsonb_build_object('unitOfWorkId', 'u' || (i % 300 + 1),
		'kind', 'PDS', 'type', 't', 'createdAt', '2021-01-01T00:00:00Z', 'payload', i)) FROM generate_series(1, 3000) i))`)
	require.NoError(t, err)

	q := db.New(pool)
	now := seedDay
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := q.PurgeBatch(ctx, db.PurgeBatchParams{Now: now, BatchLimit: 7})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += int(b.UnitOfWorksDeleted)
				mu.Unlock()
				if b.Finished {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 300, total)
	r := getReport(t, q, "2023-05-17")
	require.Equal(t, int64(300), r.UnitOfWorksToDelete)
	require.Equal(t, int64(300), r.UnitOfWorksDeleted)
	require.Equal(t, int64(300), r.SummariesDeleted)
	require.Equal(t, int64(3000+600), r.ObjectsDeleted)
	require.NotNil(t, r.FinishedAt)
	requireODSEmpty(t, pool)
}

func requireODSEmpty(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM ods.unit_of_works)
		+ (SELECT count(*) FROM ods.summaries) + (SELECT count(*) FROM ods.objects)`).Scan(&n))
	require.Zero(t, n)
}

// A batch whose connection dies before it commits leaves nothing deleted and nothing counted; the
// next batch does the work and the report is right.
func TestPurgeBatchKilledMidway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	q := db.New(pool)
	for i := range 4 {
		seedUnitOfWork(t, pool, fmt.Sprintf("k%d", i), "RECALL", "2021-01-01T00:00:00Z", "2021-01-02T00:00:00Z", "")
	}
	_, err := q.PurgeTick(ctx, seedDay) // purging is disabled: no report yet
	require.NoError(t, err)
	setPurgeConfig(t, pool, `{"enabled": true}`)
	tick, err := q.PurgeTick(ctx, seedDay)
	require.NoError(t, err)
	require.True(t, tick.Enabled)
	require.Equal(t, []int32{2, 2, 2, 2, 2, 2, 2, 2}, tick.BatchSizes)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	b, err := db.New(tx).PurgeBatch(ctx, db.PurgeBatchParams{Now: seedDay, BatchLimit: 3})
	require.NoError(t, err)
	require.Equal(t, int32(3), b.UnitOfWorksDeleted)
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Error(t, tx.Commit(ctx))
	conn.Release()

	r := getReport(t, q, "2023-05-17")
	require.Equal(t, int64(4), r.UnitOfWorksToDelete)
	require.Zero(t, r.UnitOfWorksDeleted)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ods.unit_of_works`).Scan(&n))
	require.Equal(t, 4, n)

	raw, err := q.PurgeRun(ctx, seedDay.Add(time.Second))
	require.NoError(t, err)
	var run purgeReport
	require.NoError(t, json.Unmarshal(raw, &run))
	require.Equal(t, int64(4), run.UnitOfWorksDeleted)
	raw, err = q.PurgeRun(ctx, seedDay.Add(2*time.Second))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &run))
	require.Equal(t, "finished", run.Status)
	requireODSEmpty(t, pool)
}
