package main

// Workload 8: belts, end to end. beltEvents page views (a URL, a referrer, 2,000 correlation ids)
// are sent to POST /events as NDJSON, 1,000 per request from beltClients clients, while the belt
// workers of this process (beltWorkers, as `silo work` runs them) process them through a belt
// whose callback writes 3 grains per event (the last URL, the referrer, a visit counter): timed
// from the first request to the last event processed. Twice: a SQL callback (set-based) and the
// same callback in Python, in the seed's shape (Update objects). Baseline: the same updates (3 per
// event) applied directly with api.profile_apply_batch, in calls of 1,500 (500 events' worth), on
// beltWorkers connections, each owning a share of the correlation ids; without the belt's _origin,
// so that they take the store's fastest path (plain updates). Targets: SQL ≥ 10,000
// events/s and ≥ 0.6× the baseline; Python ≥ 3,000 events/s.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/worker"
)

const (
	beltEvents       = 20000
	beltClients      = 2
	beltWorkers      = 2
	beltCorrelations = 2000
	beltSQLTarget    = 10000 // events/s
	beltSQLRatio     = 0.6   // of api.profile_apply_batch
	beltPyTarget     = 3000  // events/s
)

func init() {
	register(workload{order: 80, only: []string{"belts"}, run: beltWorkload})
}

const beltSQLCallback = `CREATE FUNCTION public.bench_visit(event_headers jsonb, event_payload jsonb)
RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_array(
        api.set_value(api.update(event_headers ->> 'grnry-correlation-id', '{web,last_url}'), event_payload ->> 'url'),
        api.set_value(api.update(event_headers ->> 'grnry-correlation-id', '{web,referrer}'), event_payload ->> 'referrer'),
        api.set_value(api.update(event_headers ->> 'grnry-correlation-id', '{web,visits}', '_inc'), '0|1|1'))
$$`

const beltPySource = `def execute(event_headers, event_payload):
    cid = event_headers['grnry-correlation-id']
    last = Update(cid, ['web', 'last_url'])
    last.set_value(event_payload['url'])
    ref = Update(cid, ['web', 'referrer'])
    ref.set_value(event_payload['referrer'])
    visits = Update(cid, ['web', 'visits'])
    visits.set_value('0|1|1')
    visits.set_operation('_inc')
    return [last, ref, visits]
`

// beltRun is one run's input: NDJSON bodies per client, and the same updates per baseline
// connection in calls of 1,500.
type beltRun struct {
	bodies  [][][]byte
	updates [][][]byte
}

func beltInput(run int, typ string) beltRun {
	var r beltRun
	r.bodies = make([][][]byte, beltClients)
	r.updates = make([][][]byte, beltWorkers)
	var body bytes.Buffer
	calls := make([][]string, beltWorkers)
	for n := range beltEvents {
		cid := cidName(n * 7919 % beltCorrelations)
		url := "https://shop.example/products/" + strconv.Itoa(n%500)
		ref := "https://search.example/?q=" + strconv.Itoa(n%37)
		fmt.Fprintf(&body, `{"event_headers": {"grnry-event-id": "%s-r%d-%d", "grnry-event-type": %q, "grnry-correlation-id": %q}, "event_payload": {"url": %q, "referrer": %q}}`+"\n",
			typ, run, n, typ, cid, url, ref)
		if (n+1)%eventsPerRequest == 0 {
			c := (n / eventsPerRequest) % beltClients
			r.bodies[c] = append(r.bodies[c], bytes.Clone(body.Bytes()))
			body.Reset()
		}
		w := (n * 7919 % beltCorrelations) % beltWorkers
		calls[w] = append(calls[w],
			fmt.Sprintf(`{"_id": %q, "_path": ["web", "last_url"], "_value": {"_v": %q}}`, cid, url),
			fmt.Sprintf(`{"_id": %q, "_path": ["web", "referrer"], "_value": {"_v": %q}}`, cid, ref),
			fmt.Sprintf(`{"_id": %q, "_path": ["web", "visits"], "_operation": "_inc", "_value": {"_v": "0|1|1"}}`, cid))
		if len(calls[w]) == 1500 {
			r.updates[w] = append(r.updates[w], []byte("["+strings.Join(calls[w], ",")+"]"))
			calls[w] = nil
		}
	}
	for w := range calls {
		if len(calls[w]) > 0 {
			r.updates[w] = append(r.updates[w], []byte("["+strings.Join(calls[w], ",")+"]"))
		}
	}
	return r
}

// beltStepCount is what the belt workers' metrics say so far: steps that took events, the events
// they processed, and looks for work that found none.
type beltStepCount struct{ steps, events, idle float64 }

func beltSteps(reg *prometheus.Registry) (beltStepCount, error) {
	var c beltStepCount
	families, err := reg.Gather()
	if err != nil {
		return c, err
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			label := map[string]string{}
			for _, l := range m.GetLabel() {
				label[l.GetName()] = l.GetValue()
			}
			switch {
			case f.GetName() == "silo_belt_steps_total" && label["outcome"] == "processed":
				c.steps += m.GetCounter().GetValue()
			case f.GetName() == "silo_belt_steps_total" && label["outcome"] == "idle":
				c.idle += m.GetCounter().GetValue()
			case f.GetName() == "silo_belt_events_total" && label["outcome"] == "processed":
				c.events += m.GetCounter().GetValue()
			}
		}
	}
	return c, nil
}

// beltDone is how many events belt has finished with (processed or dead-lettered), from its
// lanes' counters, which each step updates in its own transaction: a read of the belt's lanes,
// cheap enough to poll every few milliseconds. (Asking whether a delivery is left read the whole
// deliveries index of the belt's consumer, about a millisecond with 20,000 events queued: the
// poll alone took a sizeable share of a core from the workers it was timing.)
func (bn *bench) beltDone(ctx context.Context, belt int64) (int64, error) {
	var n int64
	err := bn.raw.QueryRow(ctx, `SELECT coalesce(sum(l.processed + l.dead_lettered), 0)::bigint
FROM event.consumer_lanes l JOIN belt.belts b ON b.consumer_id = l.consumer_id WHERE b.id = $1`, belt).Scan(&n)
	return n, err
}

// beltPollWait is how long to wait before asking again how far the belt is, with done events
// finished and left to go, elapsed since the first request was sent: half the time the rest should
// take at the rate so far, between 2 and 100 ms. Each question is a statement on one of the
// database's backends, whose CPU counts as Silo's: asked every 2 ms throughout, the questions
// cost several microseconds an event; this way a run asks a few dozen times, and the last ones
// are still 2 ms apart, so the end is seen as precisely as before.
func beltPollWait(done, left int64, elapsed time.Duration) time.Duration {
	const least, most = 2 * time.Millisecond, 100 * time.Millisecond
	if done <= 0 {
		return least
	}
	rest := time.Duration(float64(elapsed) / float64(done) * float64(left) / 2)
	return min(max(rest, least), most)
}

// beltEndToEnd sends the run's events from beltClients clients and waits until the belt has
// finished with all of them; events per second from the first request to then.
func (bn *bench) beltEndToEnd(ctx context.Context, belt int64, r beltRun, errs *atomic.Int64) (float64, error) {
	before, err := bn.beltDone(ctx, belt)
	if err != nil {
		return 0, err
	}
	bad := errs.Load()
	start := time.Now()
	errc := make(chan error, len(r.bodies))
	for c := range r.bodies {
		go func() {
			for _, b := range r.bodies[c] {
				bad, err := bn.postEvents(ctx, b, eventsPerRequest)
				errs.Add(bad)
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range r.bodies {
		if err := <-errc; err != nil {
			return 0, err
		}
	}
	for {
		done, err := bn.beltDone(ctx, belt)
		if err != nil {
			return 0, err
		}
		left := beltEvents - (errs.Load() - bad) - (done - before)
		if left <= 0 {
			break
		}
		if time.Since(start) > 10*runDeadline {
			return 0, fmt.Errorf("belt %d: events left after %s", belt, time.Since(start))
		}
		time.Sleep(beltPollWait(done-before, left, time.Since(start)))
	}
	return beltEvents / time.Since(start).Seconds(), nil
}

// beltDirect applies the run's updates with api.profile_apply_batch on beltWorkers connections.
func (bn *bench) beltDirect(ctx context.Context, r beltRun) (float64, error) {
	start := time.Now()
	errc := make(chan error, len(r.updates))
	for w := range r.updates {
		go func() {
			q := db.New(bn.raw)
			for _, u := range r.updates[w] {
				if _, err := q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: u}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range r.updates {
		if err := <-errc; err != nil {
			return 0, err
		}
	}
	return beltEvents / time.Since(start).Seconds(), nil
}

func beltWorkload(ctx context.Context, bn *bench, rp *report) error {
	if _, err := bn.raw.Exec(ctx, beltSQLCallback); err != nil {
		return err
	}
	var python bool
	if err := bn.raw.QueryRow(ctx, `SELECT to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)') IS NOT NULL`).Scan(&python); err != nil {
		return err
	}
	// Knobs for trying other step shapes: SILO_BENCH_BELT_LANES_PER_STEP, SILO_BENCH_BELT_BATCH_SIZE.
	for env, key := range map[string]string{"SILO_BENCH_BELT_LANES_PER_STEP": "belt.lanes_per_step", "SILO_BENCH_BELT_BATCH_SIZE": "belt.batch_size"} {
		if v := os.Getenv(env); v != "" {
			if _, err := bn.raw.Exec(ctx, `UPDATE silo.settings SET value = $1 WHERE key = $2`, v, key); err != nil {
				return err
			}
		}
	}
	steps := prometheus.NewRegistry()
	belts := worker.NewBelts(bn.silo, worker.BeltConfig{Workers: beltWorkers, Logger: slog.New(slog.DiscardHandler), Registerer: steps})
	belts.Start(ctx)
	defer func() { _ = belts.Stop(ctx) }()

	for _, lang := range []string{"sql", "python"} {
		if lang == "python" && !python {
			rp.notes = append(rp.notes, "belts, Python: not measured, the database has no PL/Python")
			continue
		}
		typ := "bench-" + lang
		doc := map[string]any{"name": typ, "eventTypes": []string{typ}}
		if lang == "sql" {
			doc["sqlCallback"] = "bench_visit"
		} else {
			doc["extractorFn"] = beltPySource
		}
		raw, _ := json.Marshal(doc)
		created, err := bn.q.BeltCreate(ctx, raw)
		if err != nil {
			return err
		}
		var d struct{ ID, Status string }
		if err := json.Unmarshal(created, &d); err != nil || d.Status != "RUNNING" {
			return fmt.Errorf("belt %s: %s", typ, created)
		}
		belt, _ := strconv.ParseInt(d.ID, 10, 64)
		name := fmt.Sprintf("belt end to end, %s callback, 3 grains/event, POST /events %d/request, %d workers", lang, eventsPerRequest, beltWorkers)
		log.Printf("%s ...", name)
		steps0, err := beltSteps(steps)
		if err != nil {
			return err
		}
		var r beltRun
		var errs atomic.Int64
		var siloCPU, rawCPU cpuCost
		res, err := takeTurns(runs, 1,
			func(run int) error {
				r = beltInput(run, typ)
				_, err := bn.raw.Exec(ctx, `TRUNCATE event.events, event.event_ids`)
				return err
			},
			siloCPU.around(ctx, bn, func() (float64, error) { return bn.beltEndToEnd(ctx, belt, r, &errs) }),
			rawCPU.around(ctx, bn, func() (float64, error) { return bn.beltDirect(ctx, r) }))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		target := float64(beltSQLTarget)
		if lang == "python" {
			target = beltPyTarget
		}
		rp.throughput(name, "ev/s", "ev/s (apply_batch)", res[0], res[1], target, errs.Load())
		ratio := median(res[0]) / median(res[1])
		if lang == "sql" {
			rp.notes = append(rp.notes, fmt.Sprintf("%s: ratio to api.profile_apply_batch %.2f× (target ≥ %.1f×: %s)",
				name, ratio, beltSQLRatio, verdict(ratio >= beltSQLRatio)))
		}
		rp.notes = append(rp.notes, fmt.Sprintf("%s: CPU per event, medians of the runs: Silo %s; apply_batch %s", name, siloCPU.String(), rawCPU.String()))
		steps1, err := beltSteps(steps)
		if err != nil {
			return err
		}
		if n := steps1.steps - steps0.steps; n > 0 {
			rp.notes = append(rp.notes, fmt.Sprintf("%s: %.0f steps took events, %.0f events a step on average; %.0f looks for work found none",
				name, n, (steps1.events-steps0.events)/n, steps1.idle-steps0.idle))
		}
		var failed int64
		if err := bn.raw.QueryRow(ctx, `SELECT (api.belt_get($1) ->> 'failed')::bigint`, belt).Scan(&failed); err != nil {
			return err
		}
		if failed > 0 {
			return fmt.Errorf("%s: %d events failed", name, failed)
		}
		if _, err := bn.q.BeltDelete(ctx, belt); err != nil {
			return err
		}
	}
	return nil
}
