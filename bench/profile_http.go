package main

// Workloads 2 and 3: POST /profile-updates through the in-process HTTP API, with the token.
//
//   - 500 updates per request (mix), 2 concurrent clients, each owning half of the correlation ids
//     as a partitioned feed would. Baseline: the raw batch upsert on 2 connections, with the same
//     split. Target: 20,000 updates/s.
//   - One update per request (mix), 16 concurrent clients for a fixed time, each owning 1/16 of the
//     correlation ids. Baseline: single-row upserts on 16 connections, each its own transaction.
//     Target: 3,000 requests/s.

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
)

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
	res, err := takeTurns(runs, 1, nil,
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
	rp.throughput(name, "req/s", "rows/s", res[0], res[1], 3000, errs.Load())
	return nil
}
