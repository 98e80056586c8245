package main

// Workload 5, the asynchronous updater: 100,000 updates of the mix accepted into the inbox with
// api.profile_enqueue, then applied by two `silo work` processes; the drain rate next to the raw
// upsert of the same rows (target: 20,000 updates/s), and the order per correlation id checked on
// the result. api.profile_enqueue alone is shown next to a plain INSERT of the same messages.

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const asyncBatches = 200 // batches of batchSize per run: 100,000 updates

var (
	asyncProcesses = envInt("SILO_BENCH_ASYNC_PROCESSES", 2) // `silo work` processes
	asyncWorkers   = envInt("SILO_BENCH_ASYNC_WORKERS", 2)   // updater workers per priority and process
)

func init() {
	register(workload{order: 60, only: []string{"async"}, run: asyncWorkload})
}

func envInt(key string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(key)); err == nil && n > 0 {
		return n
	}
	return def
}

// asyncWorkload enqueues asyncBatches batches of the mix (the array grain of each correlation id
// takes an _array_append of an increasing sequence number, so the result shows the order in which
// its updates were applied), then starts asyncProcesses `silo work` processes and measures how
// fast they empty the inbox. The baseline upserts the same rows.
func asyncWorkload(ctx context.Context, bn *bench, rp *report) error {
	name := fmt.Sprintf("async updater, %d `silo work` processes, mix", asyncProcesses)
	log.Printf("%s ...", name)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	siloBin := filepath.Join(filepath.Dir(exe), "silo")
	if _, err := os.Stat(siloBin); err != nil {
		return fmt.Errorf("the async workload runs %s: %w", siloBin, err)
	}
	g := &gen{r: rand.New(rand.NewPCG(5, 5)), ns: "async", mix: true, ordered: true}
	// The enqueue's baseline: the same messages inserted as they are into a plain table.
	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_inbox_raw (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, message jsonb NOT NULL)`); err != nil {
		return err
	}
	truncate := func() error {
		_, err := bn.raw.Exec(ctx, `TRUNCATE bench_inbox_raw`)
		return err
	}
	var batches []batch
	var enq, rawEnq []float64
	var errs int64
	// Three runs, none to warm up; the baseline's inbox table is emptied after each.
	res, err := takeTurns(3, 0,
		func(run int) error {
			if run > 0 {
				if err := truncate(); err != nil {
					return err
				}
			}
			batches = g.batches(asyncBatches)
			return nil
		},
		func() (float64, error) {
			start := time.Now()
			for _, b := range batches {
				if _, err := bn.silo.Exec(ctx, `SELECT api.profile_enqueue($1::jsonb)`, b.body); err != nil {
					return 0, err
				}
			}
			enq = append(enq, float64(asyncBatches*batchSize)/time.Since(start).Seconds())
			return bn.drain(ctx, siloBin)
		},
		func() (float64, error) {
			start := time.Now()
			for _, b := range batches {
				if _, err := bn.raw.Exec(ctx, `INSERT INTO bench_inbox_raw (message) SELECT m FROM jsonb_array_elements($1::jsonb) AS m`, b.body); err != nil {
					return 0, err
				}
			}
			rawEnq = append(rawEnq, float64(asyncBatches*batchSize)/time.Since(start).Seconds())
			start = time.Now()
			for _, b := range batches {
				if err := bn.rawBatch(ctx, b, false); err != nil {
					return 0, err
				}
			}
			return float64(asyncBatches*batchSize) / time.Since(start).Seconds(), nil
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := truncate(); err != nil {
		return err
	}
	silo, raw := res[0], res[1]
	rp.throughput("api.profile_enqueue, 500/call, mix", "upd/s", "rows/s", enq, rawEnq, 0, 0)
	rp.notes = append(rp.notes, "api.profile_enqueue: baseline INSERT INTO a plain (id identity, message jsonb) table SELECT FROM jsonb_array_elements of the same body, one connection")
	var dead int64
	if err := bn.raw.QueryRow(ctx, `SELECT count(*) FROM profile.dead_letters WHERE message -> '_path' ->> 0 = 'async'`).Scan(&dead); err != nil {
		return err
	}
	errs += dead
	bad, ids, err := bn.checkOrder(ctx, g)
	if err != nil {
		return err
	}
	errs += bad
	rp.throughput(name, "upd/s", "upd/s", silo, raw, 20000, errs)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: order of the appends checked on %d correlation ids: %d out of order or missing; the drain is timed from the first applied update to an empty inbox, %d workers per process",
		name, ids, bad, asyncWorkers))
	return nil
}

// drain starts the worker processes, waits until the inbox is empty and stops them; the rate is
// counted from the first applied step, so process start-up is left out.
func (bn *bench) drain(ctx context.Context, siloBin string) (float64, error) {
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	for range asyncProcesses {
		cmd := exec.Command(siloBin, "work")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+bn.dbURL, "SILO_UPDATER_WORKERS="+strconv.Itoa(asyncWorkers),
			"SILO_REAPER_INTERVAL=0", "SILO_DEAD_LETTER_RETENTION=0", "SILO_LOG_LEVEL=warn")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		procs = append(procs, cmd)
	}
	// The oldest message goes with the first step (the oldest lane first) and the inbox is empty
	// when there is none: min(id) on the primary key is cheap to poll, where count(*) of a large
	// inbox would take a good part of a core away from the workers.
	var first int64
	if err := bn.raw.QueryRow(ctx, `SELECT min(id) FROM profile.inbox`).Scan(&first); err != nil {
		return 0, err
	}
	var start time.Time
	var left0 int
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var oldest *int64
		if err := bn.raw.QueryRow(ctx, `SELECT min(id) FROM profile.inbox`).Scan(&oldest); err != nil {
			return 0, err
		}
		if start.IsZero() && (oldest == nil || *oldest != first) {
			start = time.Now()
			if err := bn.raw.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&left0); err != nil {
				return 0, err
			}
		}
		if oldest == nil {
			return float64(left0) / time.Since(start).Seconds(), nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("the inbox did not drain within 5 minutes")
}

// checkOrder reads the array grain of every correlation id of the async namespace: its sequence
// numbers must be increasing, and there must be as many as were sent.
func (bn *bench) checkOrder(ctx context.Context, g *gen) (bad int64, ids int, err error) {
	rows, err := bn.raw.Query(ctx, `SELECT correlation_id, value FROM profile.profilestore
		WHERE path = '/async/g9' AND pit = '_latest' AND profile_type = '_d'`)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var cid string
		var raw []byte
		if err := rows.Scan(&cid, &raw); err != nil {
			return 0, 0, err
		}
		ids++
		var seq []string
		if err := json.Unmarshal(raw, &seq); err != nil {
			return 0, 0, err
		}
		prev := -1
		for _, s := range seq {
			n, err := strconv.Atoi(s)
			if err != nil || n <= prev {
				bad++
			}
			prev = n
		}
		if len(seq) != g.sent[cid] {
			bad++
		}
	}
	return bad, ids, rows.Err()
}
