// Command silo-bench measures Silo's write and read paths next to raw PostgreSQL baselines taken in
// the same run, on the same database, and prints the medians and their ratio.
//
// `make bench` runs it under `silo tempdb` on a throw-away durable cluster (synchronous commit on):
// SILO_TEST_DATABASE_URL names the server, SILO_TEST_TEMPLATE a migrated template database, from
// which a fresh database is cloned. The HTTP API runs in process on 127.0.0.1; every loop is bounded
// in count and in time. Each figure is the median of several runs; Silo and the baseline take turns
// within a run, so both see the same machine state.
//
// Files:
//
//	main.go             the environment, the setup, the registered workloads in order, the report
//	runner.go           the registry of workloads, the runs of a figure (warm-up, turns, medians),
//	                    the bounded loops, the statistics and the report table
//	setup.go            the cloned database, the pools, the token, the in-process HTTP API
//	data.go             the update generators, the batches, Silo's and the raw writes of a batch,
//	                    the prefill
//	profile_apply.go    1. api.profile_apply_batch, 500 updates per call, the mix and 100% _set
//	profile_http.go     2. and 3. POST /profile-updates, 500 updates per request and 1 per request;
//	                    1 per request synchronously and with ?mode=async, at 16 and 300 clients
//	profile_read.go     4. GET /profiles/_d/{id} of a 20-grain profile with history
//	profile_updater.go  5. the asynchronous updater: api.profile_enqueue and two `silo work` processes
//	change_notify.go    6. change notifications: recording cost, commit-to-websocket latency, idle
//	                    websocket clients
//	event_ingest.go     7. POST /events, NDJSON, 1,000 events per request, without and with a
//	                    consumer, next to COPY of the same rows (SILO_BENCH_ONLY=events)
//	belt_process.go     8. belts end to end: POST /events through a SQL and a Python belt writing 3
//	                    grains per event, next to api.profile_apply_batch (SILO_BENCH_ONLY=belts)
//	purge_ods.go        9. the ODS purge: STANDARD batches alone and while ingestion runs at 1,000
//	                    units of work/s, and TTL expiry by partition drop, next to plain DELETEs
//	                    (SILO_BENCH_ONLY=purge; purge-alone, purge-ingest, purge-ttl one figure each)
//	series_ingest.go    10. high-frequency series: flatJSON and seriesBatch ingest next to COPY, a
//	                     1,000,000-point read next to COPY TO, bytes per point compressed and not
//	                     (SILO_BENCH_ONLY=series; series-ingest or series-store for a part)
//	transport_ingest.go 11. series over MQTT (TLS, QoS 1) and websocket appends next to HTTP,
//	                     1,000-point bodies from 4 clients (SILO_BENCH_ONLY=transport)
//	job_service.go      12. the job service: intake next to River's InsertMany, dispatch to a no-op
//	                     SQL hook next to River working no-op jobs, the API cache's hits and
//	                     invalidations (SILO_BENCH_ONLY=jobs)
//
// A workload file registers its workload in an init function with register: its position in the
// run and the SILO_BENCH_ONLY values that select it. SILO_BENCH_ONLY=apply runs workload 1 alone;
// SILO_BENCH_ONLY=single workload 3 alone; SILO_BENCH_ONLY=modes the sync/async figures of
// profile_http.go alone; SILO_BENCH_ONLY=async workloads 1 (mix) and 5; SILO_BENCH_ONLY=notify
// workload 6 alone; several, comma-separated, run together (SILO_BENCH_ONLY=single,modes).
// SILO_BENCH_CPUPROFILE=FILE writes a CPU profile of the bench process (clients and in-process
// server) to FILE, for go tool pprof.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

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
	steps := selected(os.Getenv("SILO_BENCH_ONLY"))
	if path := os.Getenv("SILO_BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	bn, closeBench, err := openBench(ctx, serverURL, tpl)
	if err != nil {
		return err
	}
	defer closeBench()

	fmt.Printf("Silo benchmark: PostgreSQL %s (synchronous_commit=%s, fsync=%s), %d CPUs, %s, %s\n",
		bn.pgVersion, bn.syncCommit, bn.fsync, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("Throughputs are medians of %d runs (after one warm-up run); Silo and raw PostgreSQL take turns within each run, in an order that changes from run to run.\n\n", runs)

	began := time.Now()
	log.Printf("prefilling %d grains in 2 namespaces ...", numCIDs*numPaths)
	if err := bn.prefill(ctx); err != nil {
		return err
	}
	rp := &report{}
	for _, w := range steps {
		if err := w.run(ctx, bn, rp); err != nil {
			return err
		}
	}
	var rows, deadLetters int64
	_ = bn.raw.QueryRow(ctx, `SELECT (SELECT count(*) FROM profile.profilestore), (SELECT count(*) FROM profile.dead_letters)`).Scan(&rows, &deadLetters)
	rp.notes = append(rp.notes, fmt.Sprintf("profile.profilestore ends with %d rows (history included), profile.dead_letters with %d; total time %s",
		rows, deadLetters, time.Since(began).Round(time.Second)))
	fmt.Println()
	rp.print(os.Stdout)
	return nil
}
