package main

// Workloads 2 and 3: POST /profile-updates through the in-process HTTP API, with the token.
//
//   - 500 updates per request (mix), 2 concurrent clients, each owning half of the correlation ids
//     as a partitioned feed would. Baseline: the raw batch upsert on 2 connections, with the same
//     split. Target: 20,000 updates/s.
//   - One update per request (mix), 16 concurrent clients for a fixed time, each owning 1/16 of the
//     correlation ids. Baseline: single-row upserts on 16 connections, each its own transaction.
//     Target: 3,000 requests/s.
//   - The same requests sent with ?mode=async (accepted into the asynchronous updater's inbox by
//     api.profile_enqueue_requests, concurrent requests joined) next to the synchronous ones, at
//     16 and at 300 concurrent clients: requests/s and the median and 99th percentile of their
//     round trips. Target: async ≥ sync. The updates enqueued are removed from the inbox
//     afterwards (no updater runs meanwhile).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

const (
	httpClients     = 2               // the batch workload's concurrent clients
	httpBatchesEach = 12              // the batch workload's batches per client and run
	singleClients   = 16              // the single-update workload's concurrent clients
	singleDuration  = 3 * time.Second // the single-update workload's length of one run
	modeRuns        = 3               // measured runs of each sync/async figure (one more warms up)
)

// modeClients are the numbers of concurrent clients of the sync/async figures.
var modeClients = []int{singleClients, 300}

const rawUpsertOne = `
INSERT INTO bench_raw (correlation_id, profile_type, path, pit, value, certainty, grain_type, inserted)
VALUES ($1, '_d', $2, '_latest', $3::jsonb, 0.9, $4, $5)
ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
SET value = excluded.value, certainty = excluded.certainty, inserted = excluded.inserted,
    ttl = excluded.ttl, ttn = excluded.ttn, reader = excluded.reader, origin = excluded.origin,
    expires_at = excluded.expires_at, notify_at = excluded.notify_at`

func init() {
	register(workload{order: 30, run: httpBatchWorkload})
	register(workload{order: 40, only: []string{"single"}, run: singleWorkload})
	register(workload{order: 45, only: []string{"modes"}, run: modesWorkload})
}

// post sends a body to POST /profile-updates and returns the number of updates not applied.
func (bn *bench) post(ctx context.Context, body []byte, n int) (int64, error) {
	return bn.postMode(ctx, "", body, n)
}

// postMode sends a body to POST /profile-updates, with ?mode=async when mode is "async", and
// returns the number of updates not applied (sync) or not accepted (async).
func (bn *bench) postMode(ctx context.Context, mode string, body []byte, n int) (int64, error) {
	url := bn.base + "/profile-updates"
	if mode != "" {
		url += "?mode=" + mode
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
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
	if mode == "async" {
		if resp.StatusCode != http.StatusAccepted {
			return 0, fmt.Errorf("POST /profile-updates?mode=async: %d %s", resp.StatusCode, bytes.TrimSpace(data))
		}
		var out struct {
			Accepted int `json:"accepted"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return 0, fmt.Errorf("POST /profile-updates?mode=async: %w", err)
		}
		return int64(n - out.Accepted), nil
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

// httpBatchWorkload: httpClients clients posting batches of 500.
func httpBatchWorkload(ctx context.Context, bn *bench, rp *report) error {
	name := "POST /profile-updates, 500/request, mix, 2 clients"
	log.Printf("%s ...", name)
	g := &gen{r: rand.New(rand.NewPCG(2, 2)), ns: "mix", mix: true}
	var work [][]batch
	var errs atomic.Int64
	res, err := takeTurns(runs, 1,
		func(int) error {
			work = make([][]batch, httpClients)
			for c := range work {
				for range httpBatchesEach {
					work[c] = append(work[c], g.batch(httpClients, c))
				}
			}
			return nil
		},
		func() (float64, error) {
			return parallelBatchRate(work, func(b batch) error {
				bad, err := bn.post(ctx, b.body, len(b.rows))
				errs.Add(bad)
				return err
			})
		},
		func() (float64, error) {
			return parallelBatchRate(work, func(b batch) error { return bn.rawBatch(ctx, b, false) })
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "upd/s", "upd/s", res[0], res[1], 20000, errs.Load())
	return nil
}

// singleWorkload: singleClients clients each posting one update per request for singleDuration.
// Each client owns the correlation ids with cid % singleClients == its number.
func singleWorkload(ctx context.Context, bn *bench, rp *report) error {
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
	var errs atomic.Int64
	var joined joinStats
	var siloCPU, rawCPU cpuCost
	res, err := takeTurns(runs, 1, nil,
		siloCPU.around(ctx, bn, func() (float64, error) {
			defer joined.measure(bn)()
			return closedLoop(singleClients, singleDuration, func(c int) error {
				body, _ := next(c)
				bad, err := bn.post(ctx, body, 1)
				errs.Add(bad)
				return err
			})
		}),
		rawCPU.around(ctx, bn, func() (float64, error) {
			return closedLoop(singleClients, singleDuration, func(c int) error {
				_, row := next(c)
				_, err := bn.raw.Exec(ctx, rawUpsertOne, row.cid, row.path, row.value, row.grainType, time.Now().UnixMilli())
				return err
			})
		}),
		// The baseline's own rows joined perfectly: one connection upserting one row of each of
		// the 16 clients per transaction, what a zero-cost joiner would send. PostgreSQL's WAL
		// group commit already gives the single-row commits one flush for all who wait on it,
		// so this shows how much a joiner can gain over the baseline at all.
		func() (float64, error) {
			rate, err := closedLoop(1, singleDuration, func(int) error {
				b := batch{rows: make([]rawRow, singleClients)}
				for c := range singleClients {
					_, b.rows[c] = next(c)
				}
				return bn.rawBatch(ctx, b, true)
			})
			return rate * singleClients, err
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "req/s", "rows/s", res[0], res[1], 3000, errs.Load())
	rp.notes = append(rp.notes, name+": "+joined.String(),
		fmt.Sprintf("%s: CPU per request, medians of the runs: Silo %s; raw %s", name, siloCPU.String(), rawCPU.String()),
		fmt.Sprintf("%s: the raw rows joined %d per transaction on one connection: %.0f rows/s (runs [%s]), %.2f× the single-row commits",
			name, singleClients, median(res[2]), list(res[2], "%.0f"), median(res[2])/median(res[1])))
	return nil
}

// joinStats counts the calls of api.profile_apply_requests that the server made for the synchronous
// requests of a figure's runs (the warm-up run included), and the updates they held.
type joinStats struct {
	calls, updates float64
	took           time.Duration
}

// measure starts counting; the function it returns stops.
func (j *joinStats) measure(bn *bench) func() {
	c0, u0, err0 := bn.applyCalls()
	start := time.Now()
	return func() {
		c1, u1, err1 := bn.applyCalls()
		if err0 == nil && err1 == nil {
			j.calls, j.updates, j.took = j.calls+c1-c0, j.updates+u1-u0, j.took+time.Since(start)
		}
	}
}

func (j *joinStats) String() string {
	if j.calls == 0 {
		return "no calls of api.profile_apply_requests"
	}
	return fmt.Sprintf("%.0f calls of api.profile_apply_requests per second, %.2f updates per call on average",
		j.calls/j.took.Seconds(), j.updates/j.calls)
}

// modesWorkload: the single-update requests of workload 3 sent synchronously and with ?mode=async,
// taking turns, at each number of modeClients; each client owns the correlation ids with
// cid % clients == its number.
func modesWorkload(ctx context.Context, bn *bench, rp *report) error {
	for _, clients := range modeClients {
		name := fmt.Sprintf("POST /profile-updates?mode=async vs sync, 1/request, mix, %d clients", clients)
		log.Printf("%s ...", name)
		gens := make([]*gen, clients)
		for c := range gens {
			gens[c] = &gen{r: rand.New(rand.NewPCG(4, uint64(c))), ns: "mix", mix: true}
		}
		var errs atomic.Int64
		var joined joinStats
		var p50, p99 [2][]float64 // [0] async, [1] sync
		var cpu [2]cpuCost
		measure := func(i int, mode string) func() (float64, error) {
			return cpu[i].around(ctx, bn, func() (float64, error) {
				if mode == "" {
					defer joined.measure(bn)()
				}
				rate, q50, q99, err := closedLoopTimed(clients, singleDuration, func(c int) error {
					g := gens[c]
					u, _ := g.make(g.r.IntN(numCIDs/clients)*clients+c, g.r.IntN(numPaths))
					body, _ := json.Marshal(u)
					bad, err := bn.postMode(ctx, mode, body, 1)
					errs.Add(bad)
					return err
				})
				p50[i], p99[i] = append(p50[i], q50), append(p99[i], q99)
				return rate, err
			})
		}
		res, err := takeTurns(modeRuns, 1, nil, measure(0, "async"), measure(1, ""))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// The warm-up run's latencies are not kept either.
		for i := range p50 {
			p50[i], p99[i] = p50[i][1:], p99[i][1:]
		}
		if _, err := bn.raw.Exec(ctx, `TRUNCATE profile.inbox`); err != nil {
			return err
		}
		rp.throughput(name, "req/s", "req/s", res[0], res[1], 0, errs.Load())
		// Accepting work for later must be at least as fast as doing it now.
		last := &rp.lines[len(rp.lines)-1]
		last.target = "≥ 1.00× sync"
		last.verdict = verdict(median(res[0]) >= median(res[1]) && errs.Load() == 0)
		rp.latency(name+", median", median(p50[0]), median(p50[1]), 0, 0)
		rp.latency(name+", p99", median(p99[0]), median(p99[1]), 0, 0)
		rp.notes = append(rp.notes, fmt.Sprintf("%s: latency medians of the runs, async [%s] ms, sync [%s] ms; p99 async [%s] ms, sync [%s] ms; sync: %s; CPU per request: async %s, sync %s",
			name, list(p50[0], "%.2f"), list(p50[1], "%.2f"), list(p99[0], "%.2f"), list(p99[1], "%.2f"), joined.String(), cpu[0].String(), cpu[1].String()))
	}
	rp.notes = append(rp.notes, `sync vs async: "Silo" is POST /profile-updates?mode=async (joined into api.profile_enqueue_requests calls), "raw PostgreSQL" the synchronous POST /profile-updates (joined into api.profile_apply_requests calls); the server's pool as `+"`silo serve`"+` sizes it by default`)
	return nil
}
