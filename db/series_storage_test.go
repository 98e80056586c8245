package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// storeUser makes user name with a stream s, and a maker of its series:mass/kg holders at a time.
func storeUser(t *testing.T, q *db.Queries, name string) (db.AccountUserCreateRow, func(at time.Time) string) {
	ctx := context.Background()
	user, err := q.AccountUserCreate(ctx, db.AccountUserCreateParams{Username: name, AccessName: "silo"})
	require.NoError(t, err)
	_, err = q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: user.AccessID, Stream: json.RawMessage(`{"id": "s", "name": "S"}`)})
	require.NoError(t, err)
	return user, func(at time.Time) string { return storeHolder(t, q, user.AccessID, "series:mass/kg", at) }
}

// storeHolder makes a holder of type typ at a time in stream s, on behalf of access; returns its id.
func storeHolder(t *testing.T, q *db.Queries, access, typ string, at time.Time) string {
	out, err := q.AccountEventCreate(context.Background(), db.AccountEventCreateParams{AccessID: access,
		Event: json.RawMessage(fmt.Sprintf(`{"streamId": "s", "type": %q, "time": %d}`, typ, at.Unix()))})
	require.NoError(t, err)
	var e struct{ Event struct{ ID string } }
	require.NoError(t, json.Unmarshal(out, &e))
	return e.Event.ID
}

// storedPoints reads the points of holder id as access, deltaTime first, as api.series_get gives
// them (flatJSON's points), into a T.
func storedPoints[T any](t *testing.T, q *db.Queries, access, id string) T {
	t.Helper()
	out, err := q.SeriesGet(context.Background(), db.SeriesGetParams{AccessID: access, EventID: id, Relative: true, TimeField: "deltaTime"})
	require.NoError(t, err)
	var v struct{ Points T }
	require.NoError(t, json.Unmarshal(out, &v))
	return v.Points
}

// valueColumns is a typed body of holder id (a single-value type such as mass/kg) written by access:
// points at deltaTime from .. to-1 seconds, the value at point i base + i at the given scale.
func valueColumns(access, id string, from, to, base int64, scale int16) db.SeriesAppendColumnsParams {
	p := db.SeriesAppendColumnsParams{AccessID: access, EventIds: []string{id}, Fields: []string{"deltaTime", "value"},
		FieldCounts: []int32{2}, Scales: []int16{0, scale}}
	for i := from; i < to; i++ {
		p.Time = append(p.Time, i*1000000)
		p.V1 = append(p.V1, base+i)
	}
	return p
}

// valueBatch puts bodies of valueColumns, for holders ids in order, into one seriesBatch.
func valueBatch(access string, ids []string, parts ...db.SeriesAppendColumnsParams) db.SeriesAppendColumnsParams {
	p := db.SeriesAppendColumnsParams{AccessID: access, Batch: true, EventIds: ids}
	for _, part := range parts {
		p.Fields = append(p.Fields, part.Fields...)
		p.FieldCounts = append(p.FieldCounts, part.FieldCounts...)
		p.Scales = append(p.Scales, part.Scales...)
		p.Points = append(p.Points, int32(len(part.Time)))
		p.Time, p.V1 = append(p.Time, part.Time...), append(p.V1, part.V1...)
	}
	return p
}

// The series storage on both backends: a compressed hypertable (TimescaleDB) and native
// partitions (pg_partman), run as db/partition_test.go runs the partition domain.
func TestSeriesStorageBackends(t *testing.T) {
	t.Parallel()
	onBothBackends(t, testSeriesStorage)
}

func testSeriesStorage(t *testing.T, pool *pgxpool.Pool, want string) {
	ctx := context.Background()
	q := db.New(pool)
	var backend string
	require.NoError(t, pool.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'series.points'::regclass`).Scan(&backend))
	require.Equal(t, want, backend)

	user, holder := storeUser(t, q, "store")
	start := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Hour)
	a, b := holder(start), holder(start)
	// One point an hour for ten days in each series: a drifting 2-decimal reading.
	var pts strings.Builder
	for i := 0; i < 240; i++ {
		if i > 0 {
			pts.WriteByte(',')
		}
		fmt.Fprintf(&pts, "[%d, %d.%02d]", i*3600, 60+i/10, i%100)
	}
	body := json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [` + pts.String() + `]}`)
	var err error
	for _, id := range []string{a, b} {
		_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: id, Data: body})
		require.NoError(t, err)
	}
	read := func(id string) [][]float64 { return storedPoints[[][]float64](t, q, user.AccessID, id) }
	var wantPoints [][]float64
	require.NoError(t, json.Unmarshal([]byte("["+pts.String()+"]"), &wantPoints))
	require.Equal(t, wantPoints, read(a))

	if want == "timescaledb" {
		// Compressed, every value reads back as written; writes and deletes still work.
		var chunks int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(compress_chunk(c)) FROM show_chunks('series.points1') c`).Scan(&chunks))
		require.GreaterOrEqual(t, chunks, 10)
		var compressed int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM timescaledb_information.chunks
			WHERE hypertable_schema = 'series' AND hypertable_name = 'points1' AND is_compressed`).Scan(&compressed))
		require.Equal(t, chunks, compressed)
		require.Equal(t, wantPoints, read(a))
		var policies int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM timescaledb_information.jobs
			WHERE hypertable_schema = 'series' AND hypertable_name IN ('points', 'points1') AND proc_name = 'policy_compression'`).Scan(&policies))
		require.Equal(t, 2, policies, "one for each points table")
	}
	// Last write wins in an old (compressed) chunk; a range delete there.
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: a,
		Data: json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[3600, -1.5]]}`)})
	require.NoError(t, err)
	from, to := 7200.0, 3*3600.0
	_, err = q.SeriesDelete(ctx, db.SeriesDeleteParams{AccessID: user.AccessID, EventID: a, FromTime: &from, ToTime: &to, Relative: true})
	require.NoError(t, err)
	require.Equal(t, [][]float64{{0, 60}, {3600, -1.5}, {10800, 60.03}}, read(a)[:3])

	// Retention, through the retention job's target series: the user's series kept 5 days, b's 8
	// days. With the default setting set, whole chunks older than the longest retention are
	// dropped, and the rows of a are deleted.
	_, err = pool.Exec(ctx, `SELECT api.series_retention_set('store', interval '5 days')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT api.series_retention_set('store', interval '8 days', $1)`, b)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = '1 day' WHERE key = 'series.retention'`)
	require.NoError(t, err)
	if want == "native" {
		// Points older than the premade partitions wait in the default partition until
		// maintenance (silo work) makes partitions for them.
		_, err = pool.Exec(ctx, `SELECT * FROM api.partition_maintain()`)
		require.NoError(t, err)
	}
	type trimmed struct {
		DroppedChunks int   `json:"dropped_chunks"`
		DeletedPoints int64 `json:"deleted_points"`
	}
	trim := func() (pgtype.Interval, trimmed) {
		target := "series"
		rows, err := q.RetentionRun(ctx, db.RetentionRunParams{Now: time.Now(), Target: &target})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Nil(t, rows[0].SQLState, "%v", rows[0].Message)
		var r trimmed
		require.NoError(t, json.Unmarshal(rows[0].Result, &r))
		return rows[0].Retention, r
	}
	ret, r := trim()
	require.Equal(t, pgtype.Interval{Days: 1, Valid: true}, ret)
	require.Positive(t, r.DroppedChunks)
	require.Positive(t, r.DeletedPoints)
	oldest := func(id string) float64 {
		var s float64
		require.NoError(t, pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - min(p.at)) / 86400 FROM series.points_all p
			JOIN account.events e ON e.series_id = p.series_id WHERE e.id = $1`, id).Scan(&s))
		return s
	}
	require.LessOrEqual(t, oldest(a), 5.0)
	require.Greater(t, oldest(a), 4.9)
	require.LessOrEqual(t, oldest(b), 9.0) // whole days of chunks go: between 8 and 9 days are left
	require.Greater(t, oldest(b), 7.9)

	// Without a default (the setting empty), a series' own retention still applies, by rows: a
	// kept 2 days now; no chunk can go, since series without a row of their own are kept forever.
	_, err = pool.Exec(ctx, `SELECT api.series_retention_set('store', interval '2 days', $1)`, a)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = '' WHERE key = 'series.retention'`)
	require.NoError(t, err)
	ret, r = trim()
	require.False(t, ret.Valid, "an empty setting: no default retention")
	require.Zero(t, r.DroppedChunks)
	require.Positive(t, r.DeletedPoints)
	require.LessOrEqual(t, oldest(a), 2.0)
	require.Greater(t, oldest(b), 7.9)
}

// Last write wins however the points are stored: straight into compressed batches on TimescaleDB
// (calls of series.compress_on_write points or more), as rows otherwise, rewritten by
// the typed and the flatJSON paths, and by two writers of one series at once.
func TestSeriesStorageLastWriteWins(t *testing.T) {
	t.Parallel()
	onBothBackends(t, testSeriesLastWriteWins)
}

func testSeriesLastWriteWins(t *testing.T, pool *pgxpool.Pool, backend string) {
	ctx := context.Background()
	q := db.New(pool)
	user, holder := storeUser(t, q, "lastwrite")
	id := holder(time.Now().Add(-3 * 24 * time.Hour).Truncate(24 * time.Hour))

	// Points at deltaTime from .. to-1 seconds, value = base + i hundredths, as typed columns.
	columns := func(from, to, base int64) db.SeriesAppendColumnsParams {
		return valueColumns(user.AccessID, id, from, to, base, 2)
	}
	want := map[int64]float64{}
	expect := func(from, to, base int64) {
		for i := from; i < to; i++ {
			want[i] = float64(base+i) / 100
		}
	}
	check := func() {
		t.Helper()
		points := storedPoints[[][]float64](t, q, user.AccessID, id)
		require.Len(t, points, len(want))
		for i, p := range points {
			if i > 0 {
				require.Less(t, points[i-1][0], p[0], "points in time order, each once")
			}
			require.Equal(t, want[int64(p[0])], p[1], "the point at %v", p[0])
		}
		// The paged read the HTTP routes stream, in pages of 500.
		var paged []int64
		limit := int32(500)
		rp := db.SeriesReadColumnsParams{AccessID: user.AccessID, EventID: id, Relative: true, TimeField: "deltaTime", MaxPoints: &limit}
		for {
			page, err := q.SeriesReadColumns(ctx, rp)
			require.NoError(t, err)
			for i, us := range page.TimeUs {
				require.Equal(t, want[us/1000000], float64(page.N1[i])/math.Pow10(int(page.S1[i])), "the point at %d µs", us)
			}
			paged = append(paged, page.TimeUs...)
			if page.Points < limit {
				break
			}
			rp.After = &page.LastAt
		}
		require.Len(t, paged, len(want))
		require.IsIncreasing(t, paged, "pages in time order, each point once")
		var rows, times int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT p.at) FROM series.points_all p
			JOIN account.events e ON e.series_id = p.series_id WHERE e.id = $1`, id).Scan(&rows, &times))
		require.Equal(t, times, rows, "one row per series and time")
	}

	_, err := q.SeriesAppendColumns(ctx, columns(0, 500, 1000))
	require.NoError(t, err)
	expect(0, 500, 1000)
	if backend == "timescaledb" {
		var compressed bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT bool_or(is_compressed) FROM timescaledb_information.chunks
			WHERE hypertable_schema = 'series' AND hypertable_name = 'points1'`).Scan(&compressed))
		require.True(t, compressed, "500 points of one series are written straight into compressed batches")
	}
	check()
	// Rewrites that overlap what is stored, in batches of their own on TimescaleDB.
	_, err = q.SeriesAppendColumns(ctx, columns(300, 900, 5000))
	require.NoError(t, err)
	expect(300, 900, 5000)
	check()
	_, err = q.SeriesAppendColumns(ctx, columns(350, 360, 9000))
	require.NoError(t, err)
	expect(350, 360, 9000)
	check()
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: id,
		Data: json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10, -1], [650, -2.5], [10, -3], [950, 4]]}`)})
	require.NoError(t, err)
	want[10], want[650], want[950] = -3, -2.5, 4
	check()

	// Batches whose time ranges overlap without sharing a time (every other second, then the
	// seconds between): read back merged in time order.
	even, odd := columns(0, 0, 0), columns(0, 0, 0)
	for i := int64(2000); i < 3200; i += 2 {
		even.Time, even.V1 = append(even.Time, i*1000000), append(even.V1, i)
		odd.Time, odd.V1 = append(odd.Time, (i+1)*1000000), append(odd.V1, -i)
		want[i], want[i+1] = float64(i)/100, float64(-i)/100
	}
	_, err = q.SeriesAppendColumns(ctx, even)
	require.NoError(t, err)
	_, err = q.SeriesAppendColumns(ctx, odd)
	require.NoError(t, err)
	check()

	// A flatJSON body of 600 points given latest first (written straight into compressed batches
	// on TimescaleDB): stored and read back in time order.
	var rev strings.Builder
	for i := int64(3799); i >= 3200; i-- {
		if i < 3799 {
			rev.WriteByte(',')
		}
		fmt.Fprintf(&rev, "[%d, %d.%02d]", i, i/100, i%100)
		want[i] = float64(i) / 100
	}
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: id,
		Data: json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [` + rev.String() + `]}`)})
	require.NoError(t, err)
	check()

	// Typed batches: two series, the one made later first (rows reach the compressor series by
	// series, not in series order), one body rewriting stored points; then two bodies of one
	// series sharing times, whose second body's points win.
	batchOf := func(ids []string, parts ...db.SeriesAppendColumnsParams) db.SeriesAppendColumnsParams {
		return valueBatch(user.AccessID, ids, parts...)
	}
	id2 := holder(time.Now().Add(-3 * 24 * time.Hour).Truncate(24 * time.Hour))
	_, err = q.SeriesAppendColumns(ctx, batchOf([]string{id2, id}, columns(4000, 4300, 7000), columns(3500, 3800, 8000)))
	require.NoError(t, err)
	expect(3500, 3800, 8000)
	check()
	other := storedPoints[[][]float64](t, q, user.AccessID, id2)
	require.Len(t, other, 300)
	for i, p := range other {
		require.Equal(t, []float64{float64(4000 + i), float64(7000+4000+i) / 100}, p)
	}
	_, err = q.SeriesAppendColumns(ctx, batchOf([]string{id, id}, columns(5000, 5400, 100), columns(5200, 5600, 300)))
	require.NoError(t, err)
	expect(5000, 5200, 100)
	expect(5200, 5600, 300)
	check()

	if backend == "timescaledb" {
		// A rewrite decompresses only the batches of its series and range: the other series'
		// points stay in their compressed batches (none in the chunks' rows).
		_, err = q.SeriesAppendColumns(ctx, batchOf([]string{id2}, columns(7000, 7600, 300)))
		require.NoError(t, err)
		for _, rewrite := range [][2]int64{{7000, 7600}, {7000, 7600}, {7100, 7200}} {
			_, err = q.SeriesAppendColumns(ctx, columns(rewrite[0], rewrite[1], 400))
			require.NoError(t, err)
			expect(rewrite[0], rewrite[1], 400)
			check()
		}
		var inRows int
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum((xpath('/row/n/text()', query_to_xml(
				format('SELECT count(*) AS n FROM ONLY %s WHERE series_id = %s', c, e.series_id), false, true, '')))[1]::text::int), 0)
			FROM show_chunks('series.points1') c, account.events e WHERE e.id = $1`, id2).Scan(&inRows))
		require.Zero(t, inRows, "the other series' points are not decompressed")
	}

	// Rewrites and range deletes decompress what they must, beyond TimescaleDB's limit of points
	// decompressed a transaction (lowered here for the test).
	small, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer small.Release()
	_, err = small.Exec(ctx, `SET timescaledb.max_tuples_decompressed_per_dml_transaction = 10`)
	require.NoError(t, err)
	_, err = db.New(small).SeriesAppendColumns(ctx, columns(6000, 6600, 100))
	require.NoError(t, err)
	_, err = db.New(small).SeriesAppendColumns(ctx, columns(6000, 6600, 200))
	require.NoError(t, err)
	expect(6000, 6600, 200)
	check()
	_, err = db.New(small).SeriesDelete(ctx, db.SeriesDeleteParams{AccessID: user.AccessID, EventID: id, FromTime: ptr(6100.0), ToTime: ptr(6500.0), Relative: true})
	require.NoError(t, err)
	for i := int64(6100); i < 6500; i++ {
		delete(want, i)
	}
	check()
	_, err = small.Exec(ctx, `RESET timescaledb.max_tuples_decompressed_per_dml_transaction`)
	require.NoError(t, err)

	// Two writers of the same times: the second waits for the first and replaces its points.
	tx1, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx1.Rollback(ctx)
	_, err = db.New(tx1).SeriesAppendColumns(ctx, columns(1000, 1200, 100))
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() {
		_, err := q.SeriesAppendColumns(ctx, columns(1100, 1300, 200))
		second <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::integer = series_private.lock_class())`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the second writer waits for its turn")
	require.NoError(t, tx1.Commit(ctx))
	require.NoError(t, <-second)
	expect(1000, 1100, 100)
	expect(1100, 1300, 200)
	check()
}

// A typed seriesBatch whose bodies are of different types: each body is checked against its own
// type's fields (read once per run of bodies of one type).
func TestSeriesColumnsBatchOfTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.Pool(t))
	user, holder := storeUser(t, q, "typedbatch")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	mass1, mass2 := holder(at), holder(at)
	pos := storeHolder(t, q, user.AccessID, "series:position/wgs84", at)
	_, err := q.SeriesAppendColumns(ctx, db.SeriesAppendColumnsParams{AccessID: user.AccessID, Batch: true,
		EventIds:    []string{mass1, pos, mass2},
		Fields:      []string{"deltaTime", "value", "deltaTime", "latitude", "longitude", "deltaTime", "value"},
		FieldCounts: []int32{2, 3, 2}, Scales: []int16{0, 1, 0, 2, 2, 0, 0},
		Points: []int32{1, 1, 1}, Time: []int64{0, 0, 0},
		V1: []int64{705, 4650, 71}, V2: []int64{math.MinInt64, 660, math.MinInt64}})
	require.NoError(t, err)
	get := func(id string) string { return string(storedPoints[json.RawMessage](t, q, user.AccessID, id)) }
	require.JSONEq(t, `[[0, 70.5]]`, get(mass1))
	require.JSONEq(t, `[[0, 46.5, 6.6, null, null, null, null, null]]`, get(pos), "latitude, longitude, and the optional fields")
	require.JSONEq(t, `[[0, 71]]`, get(mass2))
}

// Writes after the metadata updater has flushed a series' pending update: its extent
// (series.extents) still tells where its stored points end, so a rewrite of stored points
// replaces them (an append after them probes nothing).
func TestSeriesRewriteAfterFlush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	q := db.New(pool)
	user, holder := storeUser(t, q, "afterflush")
	at := time.Now().Add(-2 * time.Hour).Truncate(time.Second)
	id := holder(at)
	want := map[int64]int64{}
	write := func(from, to, base int64) {
		t.Helper()
		for i := from; i < to; i++ {
			want[i] = base + i
		}
		_, err := q.SeriesAppendColumns(ctx, valueColumns(user.AccessID, id, from, to, base, 0))
		require.NoError(t, err)
	}
	flush := func() {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE series.pending_updates SET deadline = now() - interval '1 second'`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `SELECT api.series_metadata_flush(1000)`)
		require.NoError(t, err)
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM series.pending_updates u JOIN account.events e ON e.series_id = u.series_id
			WHERE e.id = $1`, id).Scan(&pending))
		require.Zero(t, pending)
	}
	check := func() {
		t.Helper()
		points := storedPoints[[][]int64](t, q, user.AccessID, id)
		require.Len(t, points, len(want), "one point per time")
		for _, p := range points {
			require.Equal(t, want[p[0]], p[1], "the point at %d", p[0])
		}
	}
	write(0, 600, 100000)
	flush()
	var last time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT x.last_at FROM series.extents x JOIN account.events e ON e.series_id = x.series_id
		WHERE e.id = $1`, id).Scan(&last))
	require.True(t, last.Equal(at.Add(599*time.Second)), "the extent is the latest point's time: %s", last)
	write(100, 200, 200000)
	check()
	write(600, 700, 300000)
	flush()
	write(650, 660, 400000)
	write(0, 10, 500000)
	check()
}

// The two points tables: a series of a type of one field is written to series.points1, one of
// more fields to series.points, also within one call (typed columns and flatJSON); readers read
// both, so points a series holds in the other table (written before series.points1 existed) are
// read, replaced by a write at their time, and go with range deletes, retention and the holder.
func TestSeriesPointsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	q := db.New(pool)
	user, holder := storeUser(t, q, "pointstables")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	mass, older := holder(at), holder(at)
	pos := storeHolder(t, q, user.AccessID, "series:position/wgs84", at)
	rows := func(table, id string) (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` p JOIN account.events e ON e.series_id = p.series_id
			WHERE e.id = $1`, id).Scan(&n))
		return n
	}
	get := func(id string) string { return string(storedPoints[json.RawMessage](t, q, user.AccessID, id)) }

	var err error
	// One typed call of both kinds, in order and out of order; then flatJSON.
	for _, times := range [][]int64{{0, 1}, {3, 2}} {
		_, err = q.SeriesAppendColumns(ctx, db.SeriesAppendColumnsParams{AccessID: user.AccessID, Batch: true,
			EventIds: []string{mass, pos}, Fields: []string{"deltaTime", "value", "deltaTime", "latitude", "longitude"},
			FieldCounts: []int32{2, 3}, Scales: []int16{0, 1, 0, 2, 2}, Points: []int32{2, 2},
			Time: []int64{times[0] * 1000000, times[1] * 1000000, times[0] * 1000000, times[1] * 1000000},
			V1:   []int64{700 + times[0], 700 + times[1], 4600 + times[0], 4600 + times[1]}, V2: []int64{math.MinInt64, math.MinInt64, 600, 600}})
		require.NoError(t, err)
	}
	_, err = q.SeriesAppendBatch(ctx, db.SeriesAppendBatchParams{AccessID: user.AccessID, Batch: json.RawMessage(`{"format": "seriesBatch", "data": [
		{"eventId": "` + mass + `", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[4, 70.4]]}},
		{"eventId": "` + pos + `", "data": {"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[4, 46.04, 6]]}}]}`)})
	require.NoError(t, err)
	require.JSONEq(t, `[[0, 70], [1, 70.1], [2, 70.2], [3, 70.3], [4, 70.4]]`, get(mass))
	require.JSONEq(t, `[[0, 46, 6, null, null, null, null, null], [1, 46.01, 6, null, null, null, null, null],
		[2, 46.02, 6, null, null, null, null, null], [3, 46.03, 6, null, null, null, null, null], [4, 46.04, 6, null, null, null, null, null]]`, get(pos))
	require.Equal(t, [4]int{5, 0, 0, 5}, [4]int{rows("series.points1", mass), rows("series.points", mass), rows("series.points1", pos), rows("series.points", pos)})

	// Points of a series of one field in series.points, as written before series.points1 (with
	// the extent the metadata updater keeps).
	_, err = pool.Exec(ctx, `INSERT INTO series.points (series_id, at, n1, s1)
		SELECT e.series_id, to_timestamp(e.time) + g * interval '1 second', 10 * g, 0 FROM account.events e, generate_series(0, 3) g
		WHERE e.id = $1`, older)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO series.extents (series_id, last_at)
		SELECT e.series_id, to_timestamp(e.time) + interval '3 seconds' FROM account.events e WHERE e.id = $1`, older)
	require.NoError(t, err)
	require.JSONEq(t, `[[0, 0], [1, 10], [2, 20], [3, 30]]`, get(older))
	_, err = q.SeriesAppendColumns(ctx, valueColumns(user.AccessID, older, 1, 3, 100, 0))
	require.NoError(t, err)
	require.JSONEq(t, `[[0, 0], [1, 101], [2, 102], [3, 30]]`, get(older), "the later write wins, whichever table holds the point")
	require.Equal(t, [2]int{2, 2}, [2]int{rows("series.points1", older), rows("series.points", older)})
	from, to := 0.0, 2.0
	deleted, err := q.SeriesDelete(ctx, db.SeriesDeleteParams{AccessID: user.AccessID, EventID: older, FromTime: &from, ToTime: &to, Relative: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"status": "ok", "deleted": 2}`, string(deleted))
	require.JSONEq(t, `[[2, 102], [3, 30]]`, get(older))

	// Retention deletes from both; so does the removal of deleted holders' series.
	_, err = pool.Exec(ctx, `SELECT api.series_retention_set('pointstables', interval '1 hour' - interval '3500 milliseconds', $1)`, older)
	require.NoError(t, err)
	var trimmed int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT deleted_points FROM api.series_trim(NULL, $1)`, at.Add(time.Hour)).Scan(&trimmed))
	require.EqualValues(t, 2, trimmed)
	require.JSONEq(t, `[]`, get(older))
	for _, id := range []string{mass, pos} {
		for range 2 {
			_, err = q.AccountEventDelete(ctx, db.AccountEventDeleteParams{AccessID: user.AccessID, ID: id})
			require.NoError(t, err)
		}
	}
	_, err = pool.Exec(ctx, `SELECT api.series_cleanup(1000)`)
	require.NoError(t, err)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM series.points_all p
		WHERE p.series_id NOT IN (SELECT e.series_id FROM account.events e WHERE e.series_id IS NOT NULL)`).Scan(&left))
	require.Zero(t, left, "the deleted holders' points are gone from both tables")
}
