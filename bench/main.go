// Command silo-bench measures Silo's write and read paths next to raw PostgreSQL baselines taken in
// the same run, on the same database, and prints the medians and their ratio.
//
// `make bench` runs it under `silo tempdb` on a throw-away durable cluster (synchronous commit on):
// SILO_TEST_DATABASE_URL names the server, SILO_TEST_TEMPLATE a migrated template database, from
// which a fresh database is cloned. The HTTP API runs in process on 127.0.0.1; every loop is bounded
// in count and in time.
//
// Workloads (each figure is the median of several runs; Silo and the baseline alternate within a
// run, so both see the same machine state):
//
//  1. api.profile_apply_batch, 500 updates per call, one connection, a realistic mix and 100% _set;
//     baseline: the same rows as one INSERT ... SELECT FROM unnest(...) ON CONFLICT DO UPDATE.
//
//  2. POST /profile-updates with 500 updates per request (mix), 2 concurrent clients; baseline: the
//     raw batch upsert on 2 connections.
//
//  3. POST /profile-updates with one update per request, 16 concurrent clients; baseline: single-row
//     upserts on 16 connections, each its own transaction.
//
//  4. GET /profiles/_d/{id} of a 20-grain profile with history, sequential; baseline: SELECT * of
//     the profile's rows.
//
//  5. The asynchronous updater: 100,000 updates of the mix accepted with api.profile_enqueue, then
//     applied by two `silo work` processes; baseline: the raw batch upsert of the same rows. The
//     order of each correlation id's appends is checked on the result.
//
//  6. Change notifications (bench/notify.go): what recording changes costs, commit-to-websocket latency
//     with 1,000 clients, memory of 10,000 idle websocket clients.
//
// SILO_BENCH_ONLY=apply runs workload 1 alone; SILO_BENCH_ONLY=async workloads 1 (mix) and 5;
// SILO_BENCH_ONLY=notify workload 6 alone.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/server"
)

const (
	runs      = 5    // measured runs per figure (one more warms up)
	batchSize = 500  // updates per batch
	numCIDs   = 2000 // correlation ids per namespace
	numPaths  = 10   // grains per correlation id and namespace

	batchesPerRun   = 30              // workload 1: batches per run
	httpBatchesEach = 12              // workload 2: batches per client and run
	singleClients   = 16              // workload 3: concurrent clients
	singleDuration  = 3 * time.Second // workload 3: length of one run
	reads           = 2000            // workload 4: sequential requests
	runDeadline     = 20 * time.Second
	requestTimeout  = 30 * time.Second
)

// ---------------------------------------------------------------------------------------------
// Workload data

// update is a profile update message (the UPDATE format).
type update struct {
	ID          string     `json:"_id"`
	ProfileType string     `json:"_profile_type"`
	Path        []string   `json:"_path"`
	Operation   string     `json:"_operation"`
	Value       grainValue `json:"_value"`
}

type grainValue struct {
	V any     `json:"_v"`
	C float64 `json:"_c"`
}

// rawRow is a row the baseline writes for an update: the _latest row, as a plain upsert would,
// and for a _set_with_history also the history row Silo archives (pit set).
type rawRow struct {
	cid, path, value, grainType string
	pit                         string // empty: _latest
}

// gen makes updates over numCIDs × numPaths grains of one namespace (the first path segment). In
// the mix namespace a grain's operation follows from its index, so grain types never clash:
// 0–6 _set (70%), 7 _set_with_history (10%), 8 _inc (10%), 9 _array_put/_array_append (10%).
// The set namespace takes _set only.
type gen struct {
	r   *rand.Rand
	ns  string
	mix bool
	seq int
	// last is the value the generator last gave each grain (JSON), the value a history row of the
	// baseline archives.
	last map[[2]int]string
	// ordered: the array grain (index 9) always takes an _array_append of the sequence number, so
	// the result shows the order its updates were applied in; sent counts them per correlation id.
	ordered bool
	sent    map[string]int
}

func cidName(cid int) string { return fmt.Sprintf("cust-%05d", cid) }

func (g *gen) make(cid, p int) (update, rawRow) {
	u, row := g.makeOne(cid, p)
	if g.last == nil {
		g.last = map[[2]int]string{}
	}
	g.last[[2]int{cid, p}] = row.value
	return u, row
}

// historyRow is the history row the baseline writes for a _set_with_history whose _latest row is
// row: the grain's previous value (when the generator knows it, else one of the same size) at a
// history pit of Silo's shape that no other row of the baseline has.
func historyRow(row rawRow, prev string, known bool) rawRow {
	h := row
	if known {
		h.value = prev
	}
	h.pit = "_" + time.UnixMilli(histSeq.Add(1)).UTC().Format("20060102T150405.000Z")
	return h
}

// histSeq numbers the baseline's history rows across generators, so that their pits never meet.
var histSeq atomic.Int64

func (g *gen) makeOne(cid, p int) (update, rawRow) {
	g.seq++
	u := update{ID: cidName(cid), ProfileType: "_d", Path: []string{g.ns, fmt.Sprintf("g%d", p)},
		Operation: "_set", Value: grainValue{C: 0.9}}
	v := fmt.Sprintf("value-%d-%d", g.seq, g.r.IntN(1_000_000))
	u.Value.V = v
	row := rawRow{cid: u.ID, path: "/" + g.ns + "/" + u.Path[1], grainType: "t"}
	row.value, _ = jsonString(v)
	if g.mix {
		switch p {
		case 7:
			u.Operation = "_set_with_history"
		case 8:
			u.Operation, u.Value.V = "_inc", "0|1|1"
			row.grainType = "c"
			row.value = fmt.Sprintf(`{"_initial": 0, "_step": 1, "_current": %d}`, g.seq)
		case 9:
			u.Operation = "_array_put"
			if g.r.IntN(2) == 0 {
				u.Operation = "_array_append"
			}
			tag := fmt.Sprintf("tag-%d", g.r.IntN(8))
			if g.ordered {
				u.Operation, tag = "_array_append", strconv.Itoa(g.seq)
				if g.sent == nil {
					g.sent = map[string]int{}
				}
				g.sent[u.ID]++
			}
			u.Value.V = []string{tag}
			row.grainType = "a"
			row.value = `["` + tag + `"]`
		}
	}
	return u, row
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// batch is one batch of updates as a JSON body, with the rows the baseline writes for it: one
// _latest row per update (rows) and the history rows Silo writes besides (hist).
type batch struct {
	body []byte
	rows []rawRow
	hist []rawRow
}

// batch picks batchSize distinct grains (no grain twice: one upsert statement cannot touch a row
// twice) among the correlation ids with cid % mod == part.
func (g *gen) batch(mod, part int) batch {
	seen := make(map[[2]int]bool, batchSize)
	ups := make([]update, 0, batchSize)
	var b batch
	for len(ups) < batchSize {
		cid := g.r.IntN(numCIDs/mod)*mod + part
		p := g.r.IntN(numPaths)
		if seen[[2]int{cid, p}] {
			continue
		}
		seen[[2]int{cid, p}] = true
		prev, known := g.last[[2]int{cid, p}]
		u, row := g.make(cid, p)
		ups = append(ups, u)
		b.rows = append(b.rows, row)
		if u.Operation == "_set_with_history" {
			b.hist = append(b.hist, historyRow(row, prev, known))
		}
	}
	b.body, _ = json.Marshal(ups)
	return b
}

// ---------------------------------------------------------------------------------------------
// Statistics and the report

func median(xs []float64) float64 { return percentile(xs, 0.5) }

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p+0.5)]
}

func list(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

type line struct {
	name, silo, base, ratio, target, verdict string
}

type report struct {
	lines []line
	notes []string
}

// throughput adds a throughput line (higher is better); target 0 means none.
func (rp *report) throughput(name, unit, baseUnit string, silo, base []float64, target float64, errs int64) {
	s, b := median(silo), median(base)
	l := line{name: name, silo: thousands(s) + " " + unit, base: thousands(b) + " " + baseUnit,
		ratio: fmt.Sprintf("%.2f×", s/b), target: "—", verdict: "—"}
	if target > 0 {
		l.target = "≥ " + thousands(target) + " " + unit
		l.verdict = verdict(s >= target && errs == 0)
	}
	rp.lines = append(rp.lines, l)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: silo runs [%s], raw runs [%s]", name, list(silo, "%.0f"), list(base, "%.0f")))
	if errs > 0 {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: %d failed updates or requests", name, errs))
	}
	log.Printf("%s: silo %.0f %s, raw %.0f %s (%.2f×)", name, s, unit, b, baseUnit, s/b)
}

// latency adds a latency line (lower is better); the ratio is Silo's latency over the baseline's.
func (rp *report) latency(name string, silo, base float64, target float64, errs int64) {
	l := line{name: name, silo: fmt.Sprintf("%.2f ms", silo), base: fmt.Sprintf("%.2f ms", base),
		ratio: fmt.Sprintf("%.2f×", silo/base), target: "—", verdict: "—"}
	if target > 0 {
		l.target = fmt.Sprintf("< %.0f ms", target)
		l.verdict = verdict(silo < target && errs == 0)
	}
	rp.lines = append(rp.lines, l)
	if errs > 0 {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: %d failed requests", name, errs))
	}
	log.Printf("%s: silo %.2f ms, raw %.2f ms (%.2f×)", name, silo, base, silo/base)
}

// thousands formats a rounded number with thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "MISS"
}

func (rp *report) print(w io.Writer) {
	head := line{"workload", "Silo", "raw PostgreSQL", "ratio", "target", "result"}
	rows := append([]line{head}, rp.lines...)
	width := make([]int, 6)
	cells := func(l line) []string { return []string{l.name, l.silo, l.base, l.ratio, l.target, l.verdict} }
	for _, l := range rows {
		for i, c := range cells(l) {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	pad := func(s string, n int) string { return s + strings.Repeat(" ", n-len([]rune(s))) }
	for i, l := range rows {
		var b strings.Builder
		b.WriteString("|")
		for j, c := range cells(l) {
			b.WriteString(" " + pad(c, width[j]) + " |")
		}
		fmt.Fprintln(w, b.String())
		if i == 0 {
			b.Reset()
			b.WriteString("|")
			for j := range width {
				b.WriteString(strings.Repeat("-", width[j]+2) + "|")
			}
			fmt.Fprintln(w, b.String())
		}
	}
	fmt.Fprintln(w)
	for _, n := range rp.notes {
		fmt.Fprintln(w, "  "+n)
	}
}

// ---------------------------------------------------------------------------------------------
// The bench

type bench struct {
	silo   *pgxpool.Pool // Silo's pool, configured as `silo serve` configures it
	raw    *pgxpool.Pool // the baselines' connections
	q      *db.Queries
	base   string // http://127.0.0.1:port
	token  string
	client *http.Client
}

const rawUpsertBatch = `
INSERT INTO bench_raw (correlation_id, profile_type, path, pit, value, certainty, grain_type, inserted)
SELECT c, '_d', p, t, v::jsonb, 0.9, g, $6
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(c, p, v, g, t)
ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
SET value = excluded.value, certainty = excluded.certainty, inserted = excluded.inserted,
    ttl = excluded.ttl, ttn = excluded.ttn, reader = excluded.reader, origin = excluded.origin,
    expires_at = excluded.expires_at, notify_at = excluded.notify_at`

const rawUpsertOne = `
INSERT INTO bench_raw (correlation_id, profile_type, path, pit, value, certainty, grain_type, inserted)
VALUES ($1, '_d', $2, '_latest', $3::jsonb, 0.9, $4, $5)
ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
SET value = excluded.value, certainty = excluded.certainty, inserted = excluded.inserted,
    ttl = excluded.ttl, ttn = excluded.ttn, reader = excluded.reader, origin = excluded.origin,
    expires_at = excluded.expires_at, notify_at = excluded.notify_at`

// rawBatch writes the rows of a batch with one raw upsert: the same rows Silo writes (the _latest
// rows and the history rows), or with latestOnly just the _latest rows.
func (bn *bench) rawBatch(ctx context.Context, b batch, latestOnly bool) error {
	rows := b.rows
	if !latestOnly {
		rows = append(slices.Clip(b.rows), b.hist...)
	}
	n := len(rows)
	c, p, v, g, t := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		c[i], p[i], v[i], g[i], t[i] = r.cid, r.path, r.value, r.grainType, cmp.Or(r.pit, "_latest")
	}
	_, err := bn.raw.Exec(ctx, rawUpsertBatch, c, p, v, g, t, time.Now().UnixMilli())
	return err
}

// applyBatch calls api.profile_apply_batch and returns the number of updates not applied.
func (bn *bench) applyBatch(ctx context.Context, b batch) (int64, error) {
	rows, err := bn.q.ProfileApplyBatch(ctx, b.body)
	if err != nil {
		return 0, err
	}
	var bad int64
	for _, r := range rows {
		if r.Status == "dead_letter" {
			bad++
			if bad == 1 && r.Reason != nil {
				log.Printf("  dead letter: %s", *r.Reason)
			}
		}
	}
	if len(rows) != len(b.rows) {
		bad += int64(len(b.rows) - len(rows))
	}
	return bad, nil
}

// post sends a body to POST /profile-updates and returns the number of updates not applied.
func (bn *bench) post(ctx context.Context, body []byte, n int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bn.base+"/profile-updates", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+bn.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := bn.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /profile-updates: %d %s", resp.StatusCode, bytes.TrimSpace(data))
	}
	var out struct {
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("POST /profile-updates: %w", err)
	}
	var bad int64
	for _, r := range out.Results {
		if r.Status == "dead_letter" {
			bad++
		}
	}
	if len(out.Results) != n {
		bad += int64(n - len(out.Results))
	}
	return bad, nil
}

func (bn *bench) get(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, bn.base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bn.token)
	resp, err := bn.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return nil
}

// prefill writes every grain of both namespaces through Silo, then copies the store into the
// baseline's table, so Silo and the baseline start from the same rows.
func (bn *bench) prefill(ctx context.Context) error {
	for _, ns := range []string{"set", "mix"} {
		g := &gen{r: rand.New(rand.NewPCG(7, 7)), ns: ns, mix: ns == "mix"}
		var ups []update
		flush := func() error {
			body, _ := json.Marshal(ups)
			bad, err := bn.applyBatch(ctx, batch{body: body, rows: make([]rawRow, len(ups))})
			if err == nil && bad > 0 {
				err = fmt.Errorf("prefill: %d updates not applied", bad)
			}
			ups = ups[:0]
			return err
		}
		for cid := range numCIDs {
			for p := range numPaths {
				u, _ := g.make(cid, p)
				if g.mix && p == 9 {
					u.Operation = "_array_put"
				}
				ups = append(ups, u)
				if len(ups) == batchSize {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, stmt := range []string{
		`INSERT INTO bench_raw SELECT * FROM profile.profilestore`,
		`VACUUM (ANALYZE) profile.profilestore`,
		`VACUUM (ANALYZE) bench_raw`,
		`CHECKPOINT`,
	} {
		if _, err := bn.raw.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// applyWorkload: workload 1, one connection, batches of 500.
func (bn *bench) applyWorkload(ctx context.Context, rp *report, mix bool) error {
	name, ns := "profile_apply_batch, 500/call, 100% _set", "set"
	if mix {
		name, ns = "profile_apply_batch, 500/call, mix", "mix"
	}
	log.Printf("%s ...", name)
	g := &gen{r: rand.New(rand.NewPCG(1, uint64(len(ns)))), ns: ns, mix: mix}
	var silo, raw, rawLatest []float64
	var errs, rows, hist int
	for run := range runs + 1 {
		batches := make([]batch, batchesPerRun)
		for i := range batches {
			batches[i] = g.batch(1, 0)
		}
		// Each measure applies the run's batches and returns updates/s: for the baselines, the
		// updates whose rows they wrote.
		measure := func(apply func(batch) error) func() (float64, error) {
			return func() (float64, error) {
				start, n := time.Now(), 0
				for _, b := range batches {
					if time.Since(start) > runDeadline {
						break
					}
					if err := apply(b); err != nil {
						return 0, err
					}
					n += len(b.rows)
				}
				return float64(n) / time.Since(start).Seconds(), nil
			}
		}
		fns := []func() (float64, error){
			measure(func(b batch) error {
				bad, err := bn.applyBatch(ctx, b)
				errs += int(bad)
				return err
			}),
			measure(func(b batch) error { return bn.rawBatch(ctx, b, false) }),
		}
		if mix {
			fns = append(fns, measure(func(b batch) error { return bn.rawBatch(ctx, b, true) }))
		}
		xs, err := rotate(run, fns...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if run > 0 {
			silo, raw = append(silo, xs[0]), append(raw, xs[1])
			if mix {
				rawLatest = append(rawLatest, xs[2])
			}
			for _, b := range batches {
				rows, hist = rows+len(b.rows), hist+len(b.hist)
			}
		}
	}
	rp.throughput(name, "upd/s", "upd/s", silo, raw, 0, int64(errs))
	// The target here is relative: at least half the throughput of a raw upsert of the same rows.
	last := &rp.lines[len(rp.lines)-1]
	last.target = "≥ 0.50× raw"
	last.verdict = verdict(median(silo) >= median(raw)/2 && errs == 0)
	if mix {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: the baseline writes the rows Silo writes, %d _latest rows and %d history rows (%.1f%%) in %d runs",
			name, rows, hist, 100*float64(hist)/float64(rows), runs))
		rp.throughput(name+", raw writing the _latest rows only", "upd/s", "upd/s", silo, rawLatest, 0, int64(errs))
	}
	return nil
}

// rotate runs the measures in an order that rotates from run to run, so that each sees the
// machine in every position, and returns their results in the order given.
func rotate(run int, fns ...func() (float64, error)) ([]float64, error) {
	xs := make([]float64, len(fns))
	var errs []error
	for k := range fns {
		i := (run + k) % len(fns)
		x, err := fns[i]()
		xs[i] = x
		errs = append(errs, err)
	}
	return xs, errors.Join(errs...)
}

// alternate measures Silo and the baseline in an order that alternates from run to run.
func alternate(run int, silo, raw func() (float64, error)) (float64, float64, error) {
	xs, err := rotate(run, silo, raw)
	return xs[0], xs[1], err
}

// httpBatchWorkload: workload 2, 2 clients posting batches of 500. Each client owns half of the
// correlation ids, as a partitioned feed would.
func (bn *bench) httpBatchWorkload(ctx context.Context, rp *report) error {
	const clients = 2
	name := "POST /profile-updates, 500/request, mix, 2 clients"
	log.Printf("%s ...", name)
	g := &gen{r: rand.New(rand.NewPCG(2, 2)), ns: "mix", mix: true}
	var silo, raw []float64
	var errs atomic.Int64
	for run := range runs + 1 {
		work := make([][]batch, clients)
		for c := range work {
			for range httpBatchesEach {
				work[c] = append(work[c], g.batch(clients, c))
			}
		}
		parallel := func(do func(batch) error) (float64, error) {
			var wg sync.WaitGroup
			var done atomic.Int64
			errc := make(chan error, clients)
			start := time.Now()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, b := range work[c] {
						if time.Since(start) > runDeadline {
							return
						}
						if err := do(b); err != nil {
							errc <- err
							return
						}
						done.Add(int64(len(b.rows)))
					}
				}()
			}
			wg.Wait()
			close(errc)
			return float64(done.Load()) / time.Since(start).Seconds(), <-errc
		}
		s, r, err := alternate(run,
			func() (float64, error) {
				return parallel(func(b batch) error {
					bad, err := bn.post(ctx, b.body, len(b.rows))
					errs.Add(bad)
					return err
				})
			},
			func() (float64, error) {
				return parallel(func(b batch) error { return bn.rawBatch(ctx, b, false) })
			})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if run > 0 {
			silo, raw = append(silo, s), append(raw, r)
		}
	}
	rp.throughput(name, "upd/s", "upd/s", silo, raw, 20000, errs.Load())
	return nil
}

// singleWorkload: workload 3, 16 clients each posting one update per request for a fixed time.
// Each client owns the correlation ids with cid % 16 == its number.
func (bn *bench) singleWorkload(ctx context.Context, rp *report) error {
	name := "POST /profile-updates, 1/request, mix, 16 clients"
	log.Printf("%s ...", name)
	gens := make([]*gen, singleClients)
	for c := range gens {
		gens[c] = &gen{r: rand.New(rand.NewPCG(3, uint64(c))), ns: "mix", mix: true}
	}
	next := func(c int) ([]byte, rawRow) {
		g := gens[c]
		u, row := g.make(g.r.IntN(numCIDs/singleClients)*singleClients+c, g.r.IntN(numPaths))
		body, _ := json.Marshal(u)
		return body, row
	}
	var silo, raw []float64
	var errs atomic.Int64
	for run := range runs + 1 {
		s, r, err := alternate(run,
			func() (float64, error) {
				return closedLoop(singleClients, singleDuration, func(c int) error {
					body, _ := next(c)
					bad, err := bn.post(ctx, body, 1)
					errs.Add(bad)
					return err
				})
			},
			func() (float64, error) {
				return closedLoop(singleClients, singleDuration, func(c int) error {
					_, row := next(c)
					_, err := bn.raw.Exec(ctx, rawUpsertOne, row.cid, row.path, row.value, row.grainType, time.Now().UnixMilli())
					return err
				})
			})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if run > 0 {
			silo, raw = append(silo, s), append(raw, r)
		}
	}
	rp.throughput(name, "req/s", "rows/s", silo, raw, 3000, errs.Load())
	return nil
}

// closedLoop calls fn from n goroutines until d has passed and returns the calls per second.
func closedLoop(n int, d time.Duration, fn func(client int) error) (float64, error) {
	var count atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, n)
	start := time.Now()
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d {
				if err := fn(c); err != nil {
					errc <- err
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(count.Load()) / time.Since(start).Seconds(), <-errc
}

// readWorkload: workload 4, sequential reads of one 20-grain profile: 5 grains with 3 history
// pits each, 2 arrays, a counter and 12 text grains (35 rows).
func (bn *bench) readWorkload(ctx context.Context, rp *report) error {
	name := "GET /profiles/_d/{id}, 20 grains/35 pits"
	log.Printf("%s ...", name)
	const cid = "reader-00001"
	var ups []update
	for i := range 20 {
		path := []string{"profile", fmt.Sprintf("g%02d", i)}
		switch {
		case i < 5:
			for k := range 4 {
				ups = append(ups, update{ID: cid, ProfileType: "_d", Path: path, Operation: "_set_with_history",
					Value: grainValue{V: fmt.Sprintf("value %d of grain %d", k, i), C: 0.9}})
			}
		case i < 7:
			ups = append(ups, update{ID: cid, ProfileType: "_d", Path: path, Operation: "_array_put",
				Value: grainValue{V: []string{"alpha", "beta", "gamma"}, C: 0.8}})
		case i == 7:
			ups = append(ups, update{ID: cid, ProfileType: "_d", Path: path, Operation: "_inc",
				Value: grainValue{V: "0|1|3", C: 1}})
		default:
			ups = append(ups, update{ID: cid, ProfileType: "_d", Path: path, Operation: "_set",
				Value: grainValue{V: fmt.Sprintf("a text value of grain %d", i), C: 0.7}})
		}
	}
	// One update per call: history pits are named after the archived value's insertion time.
	for _, u := range ups {
		b, _ := json.Marshal(u)
		if bad, err := bn.applyBatch(ctx, batch{body: b, rows: make([]rawRow, 1)}); err != nil || bad > 0 {
			return fmt.Errorf("%s: setup: %d not applied, %v", name, bad, err)
		}
	}
	var pits int
	if err := bn.raw.QueryRow(ctx, `SELECT count(*) FROM profile.profilestore WHERE correlation_id = $1`, cid).Scan(&pits); err != nil {
		return err
	}
	log.Printf("  the profile has %d rows", pits)

	var silo, raw []float64
	var errs int64
	readRaw := func() error {
		rows, err := bn.raw.Query(ctx, `SELECT * FROM profile.profilestore WHERE correlation_id = $1 AND profile_type = '_d'`, cid)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				return err
			}
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != pits {
			return fmt.Errorf("read %d rows, not %d", n, pits)
		}
		return nil
	}
	for range 100 { // warm up both
		if err := bn.get(ctx, "/profiles/_d/"+cid); err != nil {
			return err
		}
		if err := readRaw(); err != nil {
			return err
		}
	}
	start := time.Now()
	for i := 0; i < reads && time.Since(start) < 2*runDeadline; i++ {
		t0 := time.Now()
		if err := bn.get(ctx, "/profiles/_d/"+cid); err != nil {
			errs++
			continue
		}
		silo = append(silo, float64(time.Since(t0).Microseconds())/1000)
		t0 = time.Now()
		if err := readRaw(); err != nil {
			return err
		}
		raw = append(raw, float64(time.Since(t0).Microseconds())/1000)
	}
	rp.latency(name+", median", median(silo), median(raw), 2, errs)
	rp.latency(name+", p99", percentile(silo, 0.99), percentile(raw, 0.99), 0, 0)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: %d requests; silo mean %.2f ms, raw mean %.2f ms",
		name, len(silo), mean(silo), mean(raw)))
	return nil
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("silo-bench: ")
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	serverURL, tpl := os.Getenv("SILO_TEST_DATABASE_URL"), os.Getenv("SILO_TEST_TEMPLATE")
	if serverURL == "" || tpl == "" {
		return errors.New("run through `make bench`: `silo tempdb` sets SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE")
	}
	dbName := fmt.Sprintf("silo_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("error connecting to %s: %w", serverURL, err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{dbName}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		return fmt.Errorf("error creating the bench database: %w", err)
	}
	var pgVersion, syncCommit, fsync string
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')`).
		Scan(&pgVersion, &syncCommit, &fsync); err != nil {
		return err
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return err
	}
	u.Path = "/" + dbName
	dbURL := u.String()

	siloPool, err := db.Open(ctx, dbURL) // as `silo serve` opens it
	if err != nil {
		return err
	}
	defer siloPool.Close()
	rawCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	rawCfg.MaxConns = singleClients + 2
	rawPool, err := pgxpool.NewWithConfig(ctx, rawCfg)
	if err != nil {
		return err
	}
	defer rawPool.Close()

	if _, err := rawPool.Exec(ctx, `CREATE TABLE bench_raw (LIKE profile.profilestore INCLUDING ALL)`); err != nil {
		return err
	}
	var token string
	if err := rawPool.QueryRow(ctx, `SELECT token FROM api.token_create('bench', '{}', true, true)`).Scan(&token); err != nil {
		return fmt.Errorf("error creating a token: %w", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           server.New(server.Config{Pool: siloPool, Logger: slog.New(slog.DiscardHandler), Version: "bench"}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	bn := &bench{
		silo: siloPool, raw: rawPool, q: db.New(siloPool), base: "http://" + ln.Addr().String(), token: token,
		client: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
			MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}},
	}
	defer bn.client.CloseIdleConnections()

	fmt.Printf("Silo benchmark: PostgreSQL %s (synchronous_commit=%s, fsync=%s), %d CPUs, %s, %s\n",
		pgVersion, syncCommit, fsync, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("Throughputs are medians of %d runs (after one warm-up run); Silo and raw PostgreSQL take turns within each run, in an order that changes from run to run.\n\n", runs)

	began := time.Now()
	log.Printf("prefilling %d grains in 2 namespaces ...", numCIDs*numPaths)
	if err := bn.prefill(ctx); err != nil {
		return err
	}
	rp := &report{}
	steps := []func() error{
		func() error { return bn.applyWorkload(ctx, rp, true) },
		func() error { return bn.applyWorkload(ctx, rp, false) },
		func() error { return bn.httpBatchWorkload(ctx, rp) },
		func() error { return bn.singleWorkload(ctx, rp) },
		func() error { return bn.readWorkload(ctx, rp) },
		func() error { return bn.asyncWorkload(ctx, rp, dbURL) },
		func() error { return bn.notifyWorkload(ctx, rp) }, // bench/notify.go
	}
	switch os.Getenv("SILO_BENCH_ONLY") {
	case "apply": // the api.profile_apply_batch workloads alone
		steps = steps[:2]
	case "async": // the updater's drain next to the synchronous batch apply (mix) of the same run
		steps = []func() error{steps[0], steps[5]}
	case "notify":
		steps = steps[6:]
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	var rows, deadLetters int64
	_ = rawPool.QueryRow(ctx, `SELECT (SELECT count(*) FROM profile.profilestore), (SELECT count(*) FROM profile.dead_letters)`).Scan(&rows, &deadLetters)
	rp.notes = append(rp.notes, fmt.Sprintf("profile.profilestore ends with %d rows (history included), profile.dead_letters with %d; total time %s",
		rows, deadLetters, time.Since(began).Round(time.Second)))
	fmt.Println()
	rp.print(os.Stdout)
	return nil
}
