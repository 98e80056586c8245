package main

// Workload 8: high-frequency series (SILO_BENCH_ONLY=series). The data is a realistic sensor feed:
// 1 Hz, 2-decimal readings that drift (a random walk of steps of at most 0.02).
//   - Ingest over HTTP: POST /{username}/events/{id}/series, flatJSON, 1,000 and 10,000 points per
//     request, seriesClients clients each on its own series; POST /{username}/series/batch with 100
//     series of 100 points per request, each client its own 100 series, 10 requests a client a run
//     (a run of 3 lasted a tenth of a second, too short for the CPU counters' 10 ms ticks). The
//     series start empty for each figure, not for each run (a TRUNCATE makes the server plan again).
//     Baseline: COPY of the same rows (series_id, at, n1, s1: the columns a point of
//     series:mass/kg fills) into a plain table without indexes, as many rows per COPY as per
//     request, on as many connections. Targets: ≥ 300,000 points/s and ≥ 0.5× COPY. Beside them,
//     the floor under Silo's write (storeRows): the same rows inserted into series.points1 as
//     arrays, as Silo stores them, with nothing read or checked. Each run writes its own hours
//     near now, into chunks made before it (as a live server writes into the day's chunk, made by
//     the day's first write).
//   - Read: GET of a 1,000,000-point range of one series (flatJSON, streamed), stored as ingestion
//     stores it (on TimescaleDB straight into compressed batches), against COPY (SELECT the same
//     columns) TO STDOUT. Target ≥ 1,000,000 points/s.
//   - Space: 100 series × 50,000 points written by SQL in the stored form (the scaled integers
//     api.series_append stores for such a feed), bytes per point with indexes: TimescaleDB's
//     hypertable before and after compression, and a plain table of the same columns and indexes
//     (a native partition holds the same with a primary key). Target ≤ 2 bytes/point compressed, lossless: every
//     value is read back and compared with the feed.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	seriesClients      = 3
	seriesIngestTarget = 300000 // points/s
	seriesRatioTo      = 0.5    // of COPY
	seriesReadPoints   = 1000000
	seriesReadTarget   = 1000000 // points/s
	seriesSpaceSeries  = 100
	seriesSpacePoints  = 50000
	seriesSpaceTarget  = 2.0 // bytes/point, compressed
)

func init() {
	register(workload{order: 100, only: []string{"series", "series-ingest"}, run: seriesWorkload})
	register(workload{order: 101, only: []string{"series", "series-store"}, run: seriesStoreWorkload})
}

// seriesReq is one request: its path, body, and the same points as rows for COPY.
type seriesReq struct {
	path string
	body []byte
	rows [][]any
}

// feed is a drifting 2-decimal reading, in hundredths.
type feed struct {
	rng *rand.Rand
	v   int64
}

func (f *feed) next() int64 {
	f.v += int64(f.rng.IntN(5)) - 2
	return f.v
}

// hundredths writes v/100 as a JavaScript client would (no trailing zeros).
func hundredths(b *strings.Builder, v int64) {
	s := strconv.FormatFloat(float64(v)/100, 'f', -1, 64)
	b.WriteString(s)
}

type seriesBench struct {
	bn      *bench
	user    string
	token   string
	holders []string // event ids
	series  []int64  // their series ids
	start   time.Time
}

func (sb *seriesBench) flatPoints(b *strings.Builder, rows *[][]any, series int64, f *feed, from, n int) {
	b.WriteString(`{"format":"flatJSON","fields":["deltaTime","value"],"points":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		v := f.next()
		t := from + i
		b.WriteByte('[')
		b.WriteString(strconv.Itoa(t))
		b.WriteByte(',')
		hundredths(b, v)
		b.WriteByte(']')
		*rows = append(*rows, []any{series, sb.start.Add(time.Duration(t) * time.Second), v, int16(2)})
	}
	b.WriteString(`]}`)
}

// runSpan is the time range of one run's requests, in seconds: run r writes from runFrom(r) after
// the holders' time, and storeRows the same rows a runSpan later, so that no run meets the points
// of another (they stay: a live server writes beside what it holds), and the runs' points sit in
// the chunks of the days near now.
const runSpan = 40000

func runFrom(run int) int { return 2 * run * runSpan }

// flatRequests makes seriesClients × each requests of n points; client c writes series c, run r
// its own time range.
func (sb *seriesBench) flatRequests(run, n, each int) [][]seriesReq {
	work := make([][]seriesReq, seriesClients)
	for c := range work {
		f := &feed{rng: rand.New(rand.NewPCG(uint64(run), uint64(c))), v: 2000}
		for r := range each {
			var b strings.Builder
			var rows [][]any
			from := runFrom(run) + r*n
			sb.flatPoints(&b, &rows, sb.series[c], f, from, n)
			work[c] = append(work[c], seriesReq{path: "/" + sb.user + "/events/" + sb.holders[c] + "/series", body: []byte(b.String()), rows: rows})
		}
	}
	return work
}

// batchRequests makes seriesClients × each seriesBatch requests of 100 series × 100 points:
// client c writes its own 100 series (a gateway's sensors), as each flatJSON client writes its
// own series. With SILO_BENCH_SERIES_SHARED=1 every client writes the same 100 series, each its
// own times: the writers of a series take turns, so the clients then wait for one another.
func (sb *seriesBench) batchRequests(run, each int) [][]seriesReq {
	work := make([][]seriesReq, seriesClients)
	feeds := make([]*feed, len(sb.holders))
	for i := range feeds {
		feeds[i] = &feed{rng: rand.New(rand.NewPCG(uint64(run), uint64(i))), v: 2000}
	}
	shared := os.Getenv("SILO_BENCH_SERIES_SHARED") == "1"
	for c := range work {
		for r := range each {
			var b strings.Builder
			var rows [][]any
			b.WriteString(`{"format":"seriesBatch","data":[`)
			for s := range 100 {
				if s > 0 {
					b.WriteByte(',')
				}
				h, from := c*100+s, runFrom(run)+r*100
				if shared {
					h, from = s, runFrom(run)+(c*each+r)*100
				}
				b.WriteString(`{"eventId":"` + sb.holders[h] + `","data":`)
				sb.flatPoints(&b, &rows, sb.series[h], feeds[h], from, 100)
				b.WriteByte('}')
			}
			b.WriteString(`]}`)
			work[c] = append(work[c], seriesReq{path: "/" + sb.user + "/series/batch", body: []byte(b.String()), rows: rows})
		}
	}
	return work
}

func (sb *seriesBench) post(ctx context.Context, r seriesReq) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sb.bn.base+r.path, bytes.NewReader(r.body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", sb.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := sb.bn.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %.500s", r.path, resp.StatusCode, bytes.TrimSpace(data))
	}
	return nil
}

// seriesRate runs one client per element of work until all is sent or runDeadline has passed, and
// returns the points per second of all.
func seriesRate(work [][]seriesReq, send func(seriesReq) error) (float64, error) {
	var wg sync.WaitGroup
	var done atomic.Int64
	errc := make(chan error, len(work))
	start := time.Now()
	for c := range work {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range work[c] {
				if time.Since(start) > runDeadline {
					return
				}
				if err := send(r); err != nil {
					errc <- err
					return
				}
				done.Add(int64(len(r.rows)))
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(done.Load()) / time.Since(start).Seconds(), <-errc
}

// storeRows inserts rows (series_id, at, n1, s1) into series.points1 the cheapest way Silo's own
// writes could: one statement of arrays, sent as Silo's server sends them (int8[] of microseconds,
// through a connection of db.Open, whose codecs write them in one pass), sorted as they come, on
// TimescaleDB straight into compressed batches; and no reading, checking, last write wins or
// bookkeeping. It is the floor under Silo's write of the same points. Its times are a runSpan
// later than the rows', so that it never meets the points Silo wrote (native partitions keep a
// primary key).
func storeRows(ctx context.Context, bn *bench, rows [][]any) error {
	series, at, n := make([]int64, len(rows)), make([]int64, len(rows)), make([]int64, len(rows))
	for i, r := range rows {
		series[i], at[i], n[i] = r[0].(int64), r[1].(time.Time).Add(runSpan*time.Second).UnixMicro(), r[2].(int64)
	}
	return insertCompressed(ctx, bn.silo, true, `INSERT INTO series.points1 (series_id, at, n1, s1)
		SELECT s, series_private.us_at(t), v, 2 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) x(s, t, v)`, series, at, n)
}

// theSeriesBench is the user and holders both series workloads write to, made by the first.
var theSeriesBench *seriesBench

func seriesSetup(ctx context.Context, bn *bench) (*seriesBench, error) {
	if theSeriesBench != nil {
		return theSeriesBench, nil
	}
	sb := &seriesBench{bn: bn, user: "benchseries", start: time.Now().Add(-24 * time.Hour).Truncate(time.Second)}
	var personal string
	if err := bn.raw.QueryRow(ctx, `SELECT access_id, token FROM api.account_user_create($1)`, sb.user).Scan(&personal, &sb.token); err != nil {
		return nil, err
	}
	if _, err := bn.raw.Exec(ctx, `SELECT api.account_stream_create($1, '{"id": "sensors", "name": "Sensors"}')`, personal); err != nil {
		return nil, err
	}
	for range seriesClients * 100 {
		var id string
		var series int64
		if err := bn.raw.QueryRow(ctx, `SELECT api.account_event_create($1, jsonb_build_object('streamId', 'sensors', 'type', 'series:temperature/c', 'time', $2::float8)) #>> '{event,id}'`,
			personal, float64(sb.start.Unix())).Scan(&id); err != nil {
			return nil, err
		}
		if err := bn.raw.QueryRow(ctx, `SELECT series_id FROM account.events WHERE id = $1`, id).Scan(&series); err != nil {
			return nil, err
		}
		sb.holders = append(sb.holders, id)
		sb.series = append(sb.series, series)
	}
	theSeriesBench = sb
	return sb, nil
}

func seriesWorkload(ctx context.Context, bn *bench, rp *report) error {
	sb, err := seriesSetup(ctx, bn)
	if err != nil {
		return err
	}
	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_series_raw (series_id bigint NOT NULL, at timestamptz NOT NULL, n1 bigint, s1 smallint)`); err != nil {
		return err
	}
	cols := []string{"series_id", "at", "n1", "s1"}

	figures := []struct {
		name string
		make func(run int) [][]seriesReq
	}{
		{fmt.Sprintf("POST series flatJSON, 1,000/request, %d clients", seriesClients), func(run int) [][]seriesReq { return sb.flatRequests(run, 1000, 20) }},
		{fmt.Sprintf("POST series flatJSON, 10,000/request, %d clients", seriesClients), func(run int) [][]seriesReq { return sb.flatRequests(run, 10000, 3) }},
		{fmt.Sprintf("POST series/batch, 100 series × 100, %d clients", seriesClients), func(run int) [][]seriesReq { return sb.batchRequests(run, 10) }},
	}
	for _, fig := range figures {
		log.Printf("%s ...", fig.name)
		var work [][]seriesReq
		var siloCPU, rawCPU, storeCPU cpuCost
		res, err := takeTurns(runs, 1,
			func(run int) error {
				work = fig.make(run)
				// The series start empty for each figure (its runs write the same ranges as the
				// figure before), not for each run: a TRUNCATE makes every connection of the server
				// plan its statements again, which a live server does not do every second (in
				// 100-series batches that cost 0.3 µs a point of PostgreSQL's 1.9).
				truncate := `TRUNCATE bench_series_raw`
				if run == 0 {
					truncate = `TRUNCATE series.points, series.points1, series.pending_updates, bench_series_raw`
				}
				if _, err := bn.raw.Exec(ctx, truncate); err != nil {
					return err
				}
				// The chunks of the run's range (and of the range after it, storeRows') exist, as the
				// day's chunk does on a live server (made once a day there, by the day's first
				// write): a point an hour of a series no holder has, compressed as ingestion
				// compresses.
				return insertCompressed(ctx, bn.raw, false, `INSERT INTO series.points1 (series_id, at, n1, s1)
					SELECT -1, $1::timestamptz + g * interval '1 hour', 0, 0 FROM generate_series(0, $2::int) g`,
					sb.start.Add(time.Duration(runFrom(run))*time.Second), 2*runSpan/3600+1)
			},
			siloCPU.around(ctx, bn, func() (float64, error) {
				return seriesRate(work, func(r seriesReq) error { return sb.post(ctx, r) })
			}),
			rawCPU.around(ctx, bn, func() (float64, error) {
				return seriesRate(work, func(r seriesReq) error {
					_, err := bn.raw.CopyFrom(ctx, pgx.Identifier{"bench_series_raw"}, cols, pgx.CopyFromRows(r.rows))
					return err
				})
			}),
			storeCPU.around(ctx, bn, func() (float64, error) {
				return seriesRate(work, func(r seriesReq) error { return storeRows(ctx, bn, r.rows) })
			}))
		if err != nil {
			return fmt.Errorf("%s: %w", fig.name, err)
		}
		rp.throughput(fig.name, "pt/s", "rows/s (COPY)", res[0], res[1], seriesIngestTarget, 0)
		ratio := median(res[0]) / median(res[1])
		store := median(res[2]) / median(res[1])
		rp.notes = append(rp.notes,
			fmt.Sprintf("%s: ratio to COPY %.2f× (target ≥ %.1f×: %s)", fig.name, ratio, seriesRatioTo, verdict(ratio >= seriesRatioTo)),
			fmt.Sprintf("%s: CPU per point, medians of the runs: Silo %s; COPY %s", fig.name, siloCPU.String(), rawCPU.String()),
			fmt.Sprintf("%s: the same rows inserted as arrays straight into series.points1, as Silo stores them, without reading or checking: %.0f rows/s, %.2f× COPY (runs [%s]); CPU per point %s",
				fig.name, median(res[2]), store, list(res[2], "%.0f"), storeCPU.String()))
	}
	_, err = bn.raw.Exec(ctx, `TRUNCATE series.points, series.points1, series.pending_updates; DROP TABLE bench_series_raw`)
	return err
}

func seriesStoreWorkload(ctx context.Context, bn *bench, rp *report) error {
	sb, err := seriesSetup(ctx, bn)
	if err != nil {
		return err
	}
	if err := sb.read(ctx, rp); err != nil {
		return err
	}
	return sb.space(ctx, rp)
}

// insertCompressed runs insert on pool as ingestion stores a feed on TimescaleDB: straight into
// compressed batches (a setting without effect elsewhere); sorted: the rows come sorted by series
// and time, so the compressor need not sort them (as Silo's writers tell it).
func insertCompressed(ctx context.Context, pool *pgxpool.Pool, sorted bool, insert string, args ...any) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('timescaledb.enable_direct_compress_insert', 'on', true),
			set_config('timescaledb.enable_direct_compress_insert_sort_batches', CASE WHEN $1 THEN 'off' ELSE 'on' END, true)`, sorted); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, insert, args...)
		return err
	})
}

// feedSQL is the feed in SQL: series s, point i, a random walk of hundredths from 20.00 (steps
// from a hash of s and i, so every run writes the same feed).
const feedSQL = `
	SELECT s.n AS sn, i, 2000 + sum(abs(hashint8(i::bigint * 1000003 + s.n)::bigint) % 5 - 2) OVER (PARTITION BY s.n ORDER BY i) AS v
	FROM generate_series(1, $1::int) s(n), generate_series(0, $2::int - 1) i`

func (sb *seriesBench) read(ctx context.Context, rp *report) error {
	bn := sb.bn
	log.Printf("GET series, %d points ...", seriesReadPoints)
	if err := insertCompressed(ctx, bn.raw, false, `INSERT INTO series.points1 (series_id, at, n1, s1)
		SELECT $3, $4::timestamptz + f.i * interval '1 second', f.v, 2 FROM (`+feedSQL+`) f`,
		1, seriesReadPoints, sb.series[0], sb.start); err != nil {
		return err
	}
	path := bn.base + "/" + sb.user + "/events/" + sb.holders[0] + "/series"
	res, err := takeTurns(runs, 1, nil,
		func() (float64, error) {
			start := time.Now()
			// A long read on a busy machine may take longer than the bench client's timeout for
			// single requests: this one has a minute.
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, path, nil)
			if err != nil {
				return 0, err
			}
			req.Header.Set("Authorization", sb.token)
			resp, err := (&http.Client{Transport: bn.client.Transport}).Do(req)
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil {
				return 0, err
			}
			if resp.StatusCode != http.StatusOK || n < seriesReadPoints*8 {
				return 0, fmt.Errorf("GET series: %d, %d bytes", resp.StatusCode, n)
			}
			return seriesReadPoints / time.Since(start).Seconds(), nil
		},
		func() (float64, error) {
			start := time.Now()
			conn, err := bn.raw.Acquire(ctx)
			if err != nil {
				return 0, err
			}
			defer conn.Release()
			_, err = conn.Conn().PgConn().CopyTo(ctx, io.Discard,
				fmt.Sprintf(`COPY (SELECT at, n1, s1 FROM series.points1 WHERE series_id = %d ORDER BY at) TO STDOUT`, sb.series[0]))
			if err != nil {
				return 0, err
			}
			return seriesReadPoints / time.Since(start).Seconds(), nil
		})
	if err != nil {
		return err
	}
	name := fmt.Sprintf("GET series, %s-point range (flatJSON, streamed)", thousands(seriesReadPoints))
	rp.throughput(name, "pt/s", "rows/s (COPY TO)", res[0], res[1], seriesReadTarget, 0)
	_, err = bn.raw.Exec(ctx, `TRUNCATE series.points, series.points1`)
	return err
}

func (sb *seriesBench) space(ctx context.Context, rp *report) error {
	bn := sb.bn
	total := seriesSpaceSeries * seriesSpacePoints
	log.Printf("space: %d series × %d points ...", seriesSpaceSeries, seriesSpacePoints)
	var backend string
	if err := bn.raw.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'series.points1'::regclass`).Scan(&backend); err != nil {
		return err
	}
	// The feed, kept to compare with what reads back.
	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_feed AS `+feedSQL, seriesSpaceSeries, seriesSpacePoints); err != nil {
		return err
	}
	if _, err := bn.raw.Exec(ctx, `INSERT INTO series.points1 (series_id, at, n1, s1)
		SELECT ($1::bigint[])[f.sn], $2::timestamptz + f.i * interval '1 second', f.v, 2 FROM bench_feed f ORDER BY f.sn, f.i`,
		sb.series, sb.start.Add(-30*24*time.Hour)); err != nil {
		return err
	}
	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_series_plain (LIKE series.points1 INCLUDING ALL);
		INSERT INTO bench_series_plain SELECT * FROM series.points1`); err != nil {
		return err
	}
	if _, err := bn.raw.Exec(ctx, `VACUUM ANALYZE bench_series_plain`); err != nil {
		return err
	}
	var plain int64
	if err := bn.raw.QueryRow(ctx, `SELECT pg_total_relation_size('bench_series_plain')`).Scan(&plain); err != nil {
		return err
	}
	rp.notes = append(rp.notes, fmt.Sprintf("space, %d series × %d points of a 1 Hz 2-decimal drifting feed: a plain table of series.points1's columns and indexes (native partitions hold the same with a primary key): %.1f bytes/point",
		seriesSpaceSeries, seriesSpacePoints, float64(plain)/float64(total)))
	if backend != "timescaledb" {
		rp.notes = append(rp.notes, "space: this server has no TimescaleDB: compression not measured")
		_, err := bn.raw.Exec(ctx, `DROP TABLE bench_series_plain, bench_feed; TRUNCATE series.points, series.points1`)
		return err
	}
	var before, after int64
	if err := bn.raw.QueryRow(ctx, `SELECT hypertable_size('series.points1')`).Scan(&before); err != nil {
		return err
	}
	if _, err := bn.raw.Exec(ctx, `SELECT count(compress_chunk(c)) FROM show_chunks('series.points1') c`); err != nil {
		return err
	}
	if err := bn.raw.QueryRow(ctx, `SELECT hypertable_size('series.points1')`).Scan(&after); err != nil {
		return err
	}
	// Lossless: every value read back through the API's decoding equals the feed's.
	var wrong int64
	if err := bn.raw.QueryRow(ctx, `
		SELECT count(*) FROM bench_feed f
		LEFT JOIN series.points1 p ON p.series_id = ($1::bigint[])[f.sn] AND p.at = $2::timestamptz + f.i * interval '1 second'
		WHERE series_private.value_json(p.n1, p.s1, p.t1, 'number')::numeric IS DISTINCT FROM f.v / 100.0`,
		sb.series, sb.start.Add(-30*24*time.Hour)).Scan(&wrong); err != nil {
		return err
	}
	per := float64(after) / float64(total)
	rp.lines = append(rp.lines, line{name: "series space, TimescaleDB compressed", silo: fmt.Sprintf("%.2f B/pt", per),
		base: fmt.Sprintf("%.1f B/pt uncompressed", float64(before)/float64(total)), ratio: fmt.Sprintf("%.3f×", float64(after)/float64(before)),
		target: fmt.Sprintf("≤ %.0f B/pt", seriesSpaceTarget), verdict: verdict(per <= seriesSpaceTarget && wrong == 0)})
	rp.notes = append(rp.notes, fmt.Sprintf("space: hypertable %d bytes before compression, %d after, for %d points; values that do not read back exactly: %d",
		before, after, total, wrong))
	log.Printf("space: %.2f bytes/point compressed, %.1f uncompressed, %.1f plain; %d wrong", per, float64(before)/float64(total), float64(plain)/float64(total), wrong)
	_, err := bn.raw.Exec(ctx, `DROP TABLE bench_series_plain, bench_feed; TRUNCATE series.points, series.points1`)
	return err
}
