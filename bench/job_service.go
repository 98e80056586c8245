package main

// Workload 12: the job service and the API cache (SILO_BENCH_ONLY=jobs), each figure next to its
// baseline in the same run:
//   - intake: api.job_event_ingest calls of 1,000 events (route, enrich, hash, publish, superseding
//     check), jobClients connections; baseline River's InsertMany of as many plain jobs (one call
//     per 1,000) on as many connections. Targets: ≥ 10,000 events/s and ≥ 0.5× River.
//   - dispatch: jobDispatchN pending jobs worked by the job manager (a pool of jobWorkers workers,
//     steps of 100, a no-op SQL hook; expiry and deduplication checked, hashes claimed); baseline
//     River working as many no-op jobs with jobWorkers × 100 workers (the same jobs in flight) and
//     a 5 ms fetch cool-down. Targets: ≥ 5,000 jobs/s and ≥ 0.3× River. A third column: River
//     working as many jobs with as many workers where each job is what the job service's guarantee
//     would ask of a design on River queues (one transaction per job: the dedup claim, the no-op
//     SQL hook, river.JobCompleteTx), on the baseline's pool.
//   - cache: sequential GETs of one profile answered by the cache (front hits) next to the same GET
//     uncached. Targets: hit median < 1 ms and ≥ 5× faster.
//   - invalidation: two servers (two processes' caches) hold an entry; a profile update; the time
//     until the other server answers a miss. Target: < 100 ms.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/silo-db/silo/server"
	"github.com/silo-db/silo/worker"
)

const (
	jobClients        = 2
	jobBatch          = 1000
	jobCallsEach      = 10
	jobIntakeTarget   = 10000
	jobIntakeRatio    = 0.5
	jobDispatchN      = 20000
	jobWorkers        = 4
	jobDispatchTarget = 5000
	jobDispatchRatio  = 0.3
)

func init() {
	register(workload{order: 120, only: []string{"jobs"}, run: jobWorkload})
}

type benchNoopArgs struct {
	N int `json:"n"`
}

func (benchNoopArgs) Kind() string { return "bench_noop" }

type benchNoopWorker struct {
	river.WorkerDefaults[benchNoopArgs]
}

func (benchNoopWorker) Work(context.Context, *river.Job[benchNoopArgs]) error { return nil }

// benchTxArgs is a job of the third dispatch column: what a design with one River queue per topic
// would run to keep the job service's guarantee (the deduplication claim and the completion commit
// together): per job, one transaction that claims its hash, runs the SQL hook and completes the
// job with river.JobCompleteTx.
type benchTxArgs struct {
	N    int    `json:"n"`
	Hash string `json:"hash"`
}

func (benchTxArgs) Kind() string { return "bench_tx" }

type benchTxWorker struct {
	river.WorkerDefaults[benchTxArgs]
	pool *pgxpool.Pool
}

func (w benchTxWorker) Work(ctx context.Context, job *river.Job[benchTxArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		// The claim, as job.dedup holds it: a live claim of another job makes this one a duplicate.
		tag, err := tx.Exec(ctx, `INSERT INTO job.dedup AS d (unique_hash, job_id, expires_at) VALUES ($1, $2, now() + interval '60 s')
			ON CONFLICT (unique_hash) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at WHERE d.expires_at <= now()`,
			job.Args.Hash, job.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `SELECT public.bench_noop($1::jsonb)`, job.EncodedArgs); err != nil {
				return err
			}
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

func jobEvents(run, call int) json.RawMessage {
	var b strings.Builder
	b.WriteByte('[')
	for i := range jobBatch {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"resource_type": "PostsById", "action_type": "Update", "payload": {"id": %d, "run": %d, "call": %d}, "resource_url": "/posts/%d"}`,
			i, run, call, (call*jobBatch+i)%50000)
	}
	b.WriteByte(']')
	return json.RawMessage(b.String())
}

func jobWorkload(ctx context.Context, bn *bench, rp *report) error {
	if _, err := bn.raw.Exec(ctx, `CREATE FUNCTION public.bench_noop(p jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb';
		SELECT api.job_config_load('{
		  "job_scheduler": {"job_rules": [{"action_type": "^(Create|Update|Delete)$", "resource_type": "PostsById", "topic": "pp-cache"}]},
		  "topics": {"pp-cache": [{"match": {"action_type": "Update", "resource_type": "PostsById"},
		                          "key_fields": ["payload", "expires", "due", "priority", "job_type"],
		                          "job_properties": {"superceedable": true, "job_type": "invalidate", "priority": 1, "due": 0, "expires": 5}}]},
		  "deduper": {"unique_id_expiry": 60000},
		  "job_consumers": [{"name": "bench", "topics": ["pp-cache"], "hook": "sql:public.bench_noop",
		                     "priority_ranges": [{"range": [0, 15], "pool_size": 4}]}]}')`); err != nil {
		return err
	}
	riverInsert, err := river.NewClient(riverpgxv5.New(bn.raw), &river.Config{})
	if err != nil {
		return err
	}
	reset := func() error {
		_, err := bn.raw.Exec(ctx, `TRUNCATE job.jobs, job.dedup, job.counters; DELETE FROM river_job WHERE kind IN ('bench_noop', 'bench_tx')`)
		return err
	}

	// Intake.
	name := fmt.Sprintf("job intake, %d events/call, %d connections", jobBatch, jobClients)
	log.Printf("%s ...", name)
	var bad int64
	var mu sync.Mutex
	var run int
	res, err := takeTurns(runs, 1, func(r int) error { run = r; return reset() },
		func() (float64, error) {
			return parallelCalls(jobClients, jobCallsEach, func(c, k int) error {
				rows, err := bn.q.JobEventIngest(ctx, jobEvents(run, c*jobCallsEach+k))
				for _, r := range rows {
					if r.Status == nil || *r.Status != "scheduled" {
						mu.Lock()
						bad++
						mu.Unlock()
					}
				}
				return err
			})
		},
		func() (float64, error) {
			return parallelCalls(jobClients, jobCallsEach, func(c, k int) error {
				params := make([]river.InsertManyParams, jobBatch)
				for i := range params {
					params[i] = river.InsertManyParams{Args: benchNoopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "bench_idle"}}
				}
				_, err := riverInsert.InsertMany(ctx, params)
				return err
			})
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "ev/s", "jobs/s (River InsertMany)", res[0], res[1], jobIntakeTarget, bad)
	ratio := median(res[0]) / median(res[1])
	rp.notes = append(rp.notes, fmt.Sprintf("%s: ratio to River's InsertMany %.2f× (target ≥ %.1f×: %s)", name, ratio, jobIntakeRatio, verdict(ratio >= jobIntakeRatio)))

	// Dispatch.
	name = fmt.Sprintf("job dispatch, no-op SQL hook, %d workers", jobWorkers)
	log.Printf("%s ...", name)
	res, err = takeTurns(runs, 1, func(r int) error { run = r; return reset() },
		func() (float64, error) {
			for c := range jobDispatchN / jobBatch {
				if _, err := bn.q.JobEventIngest(ctx, jobEvents(1000+c, c)); err != nil {
					return 0, err
				}
			}
			j := worker.NewJobs(bn.silo, worker.JobConfig{Logger: slog.New(slog.DiscardHandler), MaxConns: jobWorkers + 2, Batch: 100, IdleMax: 5 * time.Millisecond})
			start := time.Now()
			j.Start(ctx)
			defer func() { _ = j.Stop(context.Background()) }()
			return drain(ctx, bn, start, `SELECT count(*) FROM job.jobs WHERE state IN ('pending', 'running')`, jobDispatchN)
		},
		func() (float64, error) {
			params := make([]river.InsertManyParams, jobDispatchN)
			for i := range params {
				params[i] = river.InsertManyParams{Args: benchNoopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "bench"}}
			}
			if _, err := riverInsert.InsertManyFast(ctx, params); err != nil {
				return 0, err
			}
			workers := river.NewWorkers()
			river.AddWorker(workers, benchNoopWorker{})
			return riverDrain(ctx, bn, workers, "bench", "bench_noop")
		},
		func() (float64, error) {
			params := make([]river.InsertManyParams, jobDispatchN)
			for i := range params {
				params[i] = river.InsertManyParams{Args: benchTxArgs{N: i, Hash: fmt.Sprintf("bench-tx-%d-%d", run, i)}, InsertOpts: &river.InsertOpts{Queue: "bench_tx"}}
			}
			if _, err := riverInsert.InsertManyFast(ctx, params); err != nil {
				return 0, err
			}
			workers := river.NewWorkers()
			river.AddWorker(workers, benchTxWorker{pool: bn.raw})
			return riverDrain(ctx, bn, workers, "bench_tx", "bench_tx")
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "jobs/s", "jobs/s (River, no-op)", res[0], res[1], jobDispatchTarget, 0)
	ratio = median(res[0]) / median(res[1])
	rp.notes = append(rp.notes, fmt.Sprintf("%s: ratio to River working the same jobs %.2f× (target ≥ %.1f×: %s)", name, ratio, jobDispatchRatio, verdict(ratio >= jobDispatchRatio)))
	rp.throughput(fmt.Sprintf("job dispatch against River with a transaction per job (hook, claim, JobCompleteTx), %d workers", jobWorkers*100),
		"jobs/s", "jobs/s (River, transaction per job)", res[0], res[2], 0, 0)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: River with a transaction per job works %.2f× what River works with no-op jobs",
		name, median(res[2])/median(res[1])))
	if err := reset(); err != nil {
		return err
	}
	return cacheWorkload(ctx, bn, rp)
}

// parallelCalls runs clients goroutines of each calls and returns the events (or jobs) per second.
func parallelCalls(clients, each int, call func(c, k int) error) (float64, error) {
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				if err := call(c, k); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(clients*each*jobBatch) / time.Since(start).Seconds(), <-errc
}

// riverDrain runs a River client with jobWorkers × 100 workers on queue until its jobs of kind are
// all worked, and returns jobDispatchN jobs per second since the client started.
func riverDrain(ctx context.Context, bn *bench, workers *river.Workers, queue, kind string) (float64, error) {
	client, err := river.NewClient(riverpgxv5.New(bn.raw), &river.Config{
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: jobWorkers * 100}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 5 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = client.Stop(context.Background()) }()
	return drain(ctx, bn, start, fmt.Sprintf(`SELECT count(*) FROM river_job WHERE kind = '%s' AND queue = '%s' AND state NOT IN ('completed', 'discarded', 'cancelled')`,
		kind, queue), jobDispatchN)
}

// drain waits until the query counts no job left and returns n jobs per second since start.
func drain(ctx context.Context, bn *bench, start time.Time, query string, n int) (float64, error) {
	for {
		var left int
		if err := bn.raw.QueryRow(ctx, query).Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 {
			return float64(n) / time.Since(start).Seconds(), nil
		}
		if time.Since(start) > 3*runDeadline {
			return 0, fmt.Errorf("%d jobs left after %s (%s)", left, 3*runDeadline, query)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cacheServer starts a Silo HTTP server with its own API cache (front cache and listener).
func cacheServer(ctx context.Context, bn *bench) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	srv := &http.Server{Handler: server.New(server.Config{Pool: bn.silo, Logger: slog.New(slog.DiscardHandler), Version: "bench", CacheContext: cctx}),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { cancel(); _ = srv.Close() }, nil
}

func (bn *bench) getAt(ctx context.Context, base, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+bn.token)
	resp, err := bn.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sink [4096]byte
	for {
		if _, err := resp.Body.Read(sink[:]); err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return resp.Header.Get("X-Silo-Cache"), nil
}

func cacheWorkload(ctx context.Context, bn *bench, rp *report) error {
	const cid = "cached-00001"
	var ups []string
	for i := range 20 {
		ups = append(ups, fmt.Sprintf(`{"_id": %q, "_path": ["profile", "g%02d"], "_value": {"_v": "a text value of grain %d", "_c": 0.7}}`, cid, i, i))
	}
	if _, err := bn.raw.Exec(ctx, `SELECT count(*) FROM api.profile_apply_batch($1::jsonb)`, "["+strings.Join(ups, ",")+"]"); err != nil {
		return err
	}
	s1, stop1, err := cacheServer(ctx, bn)
	if err != nil {
		return err
	}
	defer stop1()
	s2, stop2, err := cacheServer(ctx, bn)
	if err != nil {
		return err
	}
	defer stop2()
	path := "/profiles/_d/" + cid

	name := "GET /profiles/_d/{id}, 20 grains, cache hit"
	log.Printf("%s ...", name)
	var hits, uncached []float64
	measure := func(into *[]float64, want string) error {
		for i := range 1100 {
			t0 := time.Now()
			got, err := bn.getAt(ctx, s1, path)
			if err != nil {
				return err
			}
			if i >= 100 {
				if got != want {
					return fmt.Errorf("X-Silo-Cache %q, want %q", got, want)
				}
				*into = append(*into, float64(time.Since(t0).Microseconds())/1000)
			}
		}
		return nil
	}
	// Uncached first (no rules), then with the rule; twice each, alternating, to spread the noise.
	for round := range 2 {
		if _, err := bn.raw.Exec(ctx, `SELECT api.cache_config_load('{}')`); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		if err := measure(&uncached, ""); err != nil {
			return fmt.Errorf("uncached, round %d: %w", round, err)
		}
		if _, err := bn.raw.Exec(ctx, `SELECT api.cache_config_load('{"GET/profiles/{profileType}/{correlationId}": {"defaults": {"action": "cache", "expires": 600000}}}')`); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := bn.getAt(ctx, s1, path); err != nil { // the miss that stores it
			return err
		}
		if err := measure(&hits, "hit"); err != nil {
			return fmt.Errorf("cached, round %d: %w", round, err)
		}
	}
	rp.latency(name+", median (vs uncached GET)", median(hits), median(uncached), 1, 0)
	ratio := median(uncached) / median(hits)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: %d hits, p99 %.2f ms; uncached median %.2f ms, p99 %.2f ms; the hit is %.1f× faster (target ≥ 5×: %s)",
		name, len(hits), percentile(hits, 0.99), median(uncached), percentile(uncached, 0.99), ratio, verdict(ratio >= 5)))

	// Invalidation across processes.
	name = "cache invalidation seen by another process"
	log.Printf("%s ...", name)
	var waits []float64
	for i := range 30 {
		for _, s := range []string{s1, s2} {
			for range 2 {
				if _, err := bn.getAt(ctx, s, path); err != nil {
					return err
				}
			}
		}
		if got, err := bn.getAt(ctx, s2, path); err != nil || got != "hit" {
			return fmt.Errorf("round %d: before the update, %q %v", i, got, err)
		}
		t0 := time.Now()
		if _, err := bn.raw.Exec(ctx, `SELECT count(*) FROM api.profile_apply_batch($1::jsonb)`,
			fmt.Sprintf(`[{"_id": %q, "_path": ["profile", "g00"], "_value": {"_v": "changed %d"}}]`, cid, i)); err != nil {
			return err
		}
		for {
			got, err := bn.getAt(ctx, s2, path)
			if err != nil {
				return err
			}
			if got == "miss" {
				break
			}
			if time.Since(t0) > 5*time.Second {
				return fmt.Errorf("round %d: still a hit after 5 s", i)
			}
		}
		waits = append(waits, float64(time.Since(t0).Microseconds())/1000)
	}
	l := line{name: name + ", median", silo: fmt.Sprintf("%.2f ms", median(waits)), base: "—", ratio: "—",
		target: "< 100 ms", verdict: verdict(percentile(waits, 1) < 100)}
	rp.lines = append(rp.lines, l)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: %d updates; median %.2f ms, max %.2f ms (the update's commit included)",
		name, len(waits), median(waits), percentile(waits, 1)))
	_, err = bn.raw.Exec(ctx, `SELECT api.cache_config_load('{}')`)
	return err
}
