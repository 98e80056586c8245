package main

// Workload 9: the ODS purge (SILO_BENCH_ONLY=purge). Each unit of work has a Summary and 10
// objects (2 MDS, 2 PDS, 4 Process, 2 Custom), finished three years ago.
//
//  1. Purge alone: STANDARD batches as silo work runs them back to back (purgeParallel concurrent
//     api.purge_batch calls of purgeBatch units of work, each its own transaction, until the day's
//     report closes), units of work per second. Baseline: the same deletes in plain SQL (select
//     the ids, delete objects, then units of work with their Summary, in one transaction per
//     batch), as many connections. Target ≥ 10,000 units of work/s.
//  2. Purge, paced as silo work paces it (a run of 600 units of work in 2 batches every 100 ms),
//     while ingestion runs at a fixed 1,000 units of work/s over HTTP (one due every millisecond;
//     every 10 ms, those that fell due in one POST /ods/process-flow-events with their two events
//     each, then one POST /ods/objects with their eight other objects each; latency from each
//     unit's scheduled time): the purge's rate, and ingestion's p99 over the units of work due
//     while the purge ran next to its p99 over the same window of a phase without the purge, both
//     in the same run. Targets: purge ≥ 5,000/s, p99 at most 1.5× its value alone.
//  3. TTL mode by partition drop: api.purge_ttl_run over units of work whose objects sit in
//     partitions of their own, expired rows (objects, summaries, units of work) per second.
//     Baseline: DELETE of the same data (objects, then units of work with their Summary). Target
//     ≥ 1,000,000 expired rows/s.
//
// The ODS tables are emptied before every run, so every run sees the same tables.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/silo-db/silo/db"
)

const (
	purgeUnits       = 20000 // units of work per run of figure 1
	purgeBatch       = 500   // units of work per batch
	purgeParallel    = 4     // concurrent batches
	purgeTarget      = 10000 // units of work/s
	purgeMixedUnits  = 40000 // old units of work seeded for figure 2
	purgeMixedTarget = 5000
	purgeIngestRate  = 1000 // units of work/s
	purgeIngestFor   = 10 * time.Second
	purgeIngestConns = 32                    // client connections: enough for latencies up to 320 ms
	purgeIngestEvery = 10 * time.Millisecond // the client sends what fell due in this window in one pair of requests
	purgeP99Ratio    = 1.5
	purgeTTLUnits    = 100000 // 1.2 million rows
	purgeTTLTarget   = 1000000
	purgeMixedRuns   = 5
	// While ingestion runs, the purge is paced as silo work paces it: a run every frequency of
	// fetch-size units of work in parallelism batches (6,000 units of work/s at most).
	purgePacedFetch     = 600
	purgePacedParallel  = 2
	purgePacedFrequency = 100 * time.Millisecond
	purgeObjectsPerUW   = 10
)

func init() {
	register(workload{order: 90, only: []string{"purge", "purge-alone"}, run: purgeAloneWorkload})
	register(workload{order: 91, only: []string{"purge", "purge-ingest"}, run: purgeIngestWorkload})
	register(workload{order: 92, only: []string{"purge", "purge-ttl"}, run: purgeTTLWorkload})
}

// odsBackend is the partitioning backend of ods.objects, for the notes.
func (bn *bench) odsBackend(ctx context.Context) (string, error) {
	var backend string
	err := bn.raw.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'ods.objects'::regclass`).Scan(&backend)
	return backend, err
}

// seedODS empties the ODS and the purge reports and inserts n units of work of prefix, finished
// three years ago, with their summaries and objects; the objects are spread over spreadDays days
// from ageDays ago (TTL's figure puts them in partitions of their own). lastUpdated is their time.
func (bn *bench) seedODS(ctx context.Context, prefix string, n, ageDays, spreadDays int) error {
	_, err := bn.raw.Exec(ctx, `TRUNCATE ods.unit_of_works, ods.objects, purge.reports;
		UPDATE purge.config SET enabled = false, mode = 'STANDARD', fetch_size = 16, parallelism = 8`)
	if err != nil {
		return err
	}
	return bn.seedOld(ctx, prefix, n, ageDays, spreadDays)
}

func (bn *bench) seedOld(ctx context.Context, prefix string, n, ageDays, spreadDays int) error {
	_, err := bn.raw.Exec(ctx, `
		WITH u AS (
			SELECT $1 || i AS id, now() - $3 * interval '1 day' + (i % $4) * interval '1 day' + (i % 3600) * interval '1 second' AS t
			FROM generate_series(1, $2::integer) i
		), uw AS (
			INSERT INTO ods.unit_of_works (id, journey_type, global_status, started_at, finished_at, first_seen, last_updated,
			                               summary_events, summary_last_event, summary_updated, object_count)
			SELECT u.id, 'PAYMENT', 'COMPLETED', u.t, u.t + interval '1 minute', u.t, u.t + interval '2 minutes',
			       4, 'Completed', u.t + interval '1 minute', 10 FROM u
		)
		INSERT INTO ods.objects (unit_of_work_id, created_at, object_id, kind, type, payload)
		SELECT u.id, u.t + k * interval '1 second', 'o' || k,
		       (ARRAY['MDS','MDS','PDS','PDS','PROCESS','PROCESS','PROCESS','PROCESS','CUSTOM','CUSTOM'])[k],
		       (ARRAY['pacs.008','pacs.002','Party','Account','Initiated','Validated','Cleared','Completed','note','tag'])[k],
		       jsonb_build_object('n', k, 'amount', '10.00', 'currency', 'EUR')
		FROM u, generate_series(1, 10) k`, prefix, n, ageDays, spreadDays)
	if err != nil {
		return err
	}
	_, err = bn.raw.Exec(ctx, `ANALYZE ods.unit_of_works, ods.objects`)
	return err
}

// requireODSEmpty fails unless every row of the ODS is gone.
func (bn *bench) requireODSEmpty(ctx context.Context) error {
	var n int64
	if err := bn.raw.QueryRow(ctx, `SELECT (SELECT count(*) FROM ods.unit_of_works) + (SELECT count(*) FROM ods.summaries)
		+ (SELECT count(*) FROM ods.objects)`).Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("%d rows of the ODS are left", n)
	}
	return nil
}

// siloPurge runs STANDARD batches as silo work does, back to back, until the day's report closes
// or stop is closed; it returns the units of work deleted and the time it took.
func (bn *bench) siloPurge(ctx context.Context, now time.Time, stop <-chan struct{}) (int64, time.Duration, error) {
	var deleted atomic.Int64
	var finished atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, purgeParallel)
	start := time.Now()
	for range purgeParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !finished.Load() && time.Since(start) < runDeadline {
				select {
				case <-stop:
					return
				default:
				}
				b, err := bn.q.PurgeBatch(ctx, db.PurgeBatchParams{Now: now, BatchLimit: purgeBatch})
				if err != nil {
					errc <- err
					return
				}
				deleted.Add(int64(b.UnitOfWorksDeleted))
				if b.Finished {
					finished.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return deleted.Load(), time.Since(start), <-errc
}

// pacedPurge runs the purge as silo work does with fetch-size purgePacedFetch, parallelism
// purgePacedParallel and frequency purgePacedFrequency, until the day's report closes or stop is
// closed; it returns the units of work deleted and the time it took.
func (bn *bench) pacedPurge(ctx context.Context, now time.Time, stop <-chan struct{}) (int64, time.Duration, error) {
	var deleted atomic.Int64
	start := time.Now()
	for {
		runStart := time.Now()
		var finished atomic.Bool
		var wg sync.WaitGroup
		errc := make(chan error, purgePacedParallel)
		for range purgePacedParallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := bn.q.PurgeBatch(ctx, db.PurgeBatchParams{Now: now, BatchLimit: purgePacedFetch / purgePacedParallel})
				if err != nil {
					errc <- err
					return
				}
				deleted.Add(int64(b.UnitOfWorksDeleted))
				if b.Finished {
					finished.Store(true)
				}
			}()
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return deleted.Load(), time.Since(start), err
		}
		if finished.Load() || time.Since(start) > runDeadline {
			return deleted.Load(), time.Since(start), nil
		}
		select {
		case <-stop:
			return deleted.Load(), time.Since(start), nil
		case <-time.After(time.Until(runStart.Add(purgePacedFrequency))):
		}
	}
}

// rawPurge deletes the same rows in plain SQL: each client takes its share of the ids in batches
// (the objects, then the units of work, which hold their Summary).
func (bn *bench) rawPurge(ctx context.Context, prefix string, n int) (float64, error) {
	var wg sync.WaitGroup
	errc := make(chan error, purgeParallel)
	start := time.Now()
	for c := range purgeParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := c * purgeBatch; from < n; from += purgeParallel * purgeBatch {
				ids := make([]string, 0, purgeBatch)
				for i := from + 1; i <= min(from+purgeBatch, n); i++ {
					ids = append(ids, fmt.Sprintf("%s%d", prefix, i))
				}
				tx, err := bn.raw.Begin(ctx)
				if err != nil {
					errc <- err
					return
				}
				_, err = tx.Exec(ctx, `SELECT id FROM ods.unit_of_works WHERE id = ANY ($1) ORDER BY finished_at FOR UPDATE`, ids)
				if err == nil {
					_, err = tx.Exec(ctx, `DELETE FROM ods.objects WHERE unit_of_work_id = ANY ($1)`, ids)
				}
				if err == nil {
					_, err = tx.Exec(ctx, `DELETE FROM ods.unit_of_works WHERE id = ANY ($1)`, ids)
				}
				if err == nil {
					err = tx.Commit(ctx)
				} else {
					_ = tx.Rollback(ctx)
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(n) / time.Since(start).Seconds(), <-errc
}

// postODS sends one body and fails on any status but 200.
func (bn *bench) postODS(ctx context.Context, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bn.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+bn.token)
	resp, err := bn.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %.300s", path, resp.StatusCode, data)
	}
	return nil
}

// ingestUnits ingests units of work over HTTP as a client that batches does: one request with
// the two events of each, then one with the eight other objects of each.
func (bn *bench) ingestUnits(ctx context.Context, ids []string) error {
	at := time.Now().UTC().Format(time.RFC3339Nano)
	var events, objects bytes.Buffer
	events.WriteString("[")
	objects.WriteString("[")
	for i, id := range ids {
		if i > 0 {
			events.WriteString(",")
			objects.WriteString(",")
		}
		fmt.Fprintf(&events, `{"unitOfWorkId": %q, "id": "e1", "journeyType": "PAYMENT", "globalStatus": "PENDING", "name": "Initiated", "createdAt": %q},
			{"unitOfWorkId": %q, "id": "e2", "globalStatus": "COMPLETED", "name": "Completed", "createdAt": %q}`, id, at, id, at)
		for k, kind := range []string{"MDS", "MDS", "PDS", "PDS", "PROCESS", "PROCESS", "CUSTOM", "CUSTOM"} {
			if k > 0 {
				objects.WriteString(",")
			}
			fmt.Fprintf(&objects, `{"unitOfWorkId": %q, "id": "o%d", "kind": %q, "type": "t%d", "createdAt": %q, "payload": {"amount": "10.00", "n": %d}}`,
				id, k, kind, k, at, k)
		}
	}
	events.WriteString("]")
	objects.WriteString("]")
	if err := bn.postODS(ctx, "/ods/process-flow-events", events.Bytes()); err != nil {
		return err
	}
	return bn.postODS(ctx, "/ods/objects", objects.Bytes())
}

// ingested is one unit of work ingested: when it was due, from the start of the phase, and its
// latency from then, in ms.
type ingested struct {
	offset time.Duration
	ms     float64
}

// between returns the latencies of the units of work due from from to to.
func between(all []ingested, from, to time.Duration) []float64 {
	var out []float64
	for _, x := range all {
		if x.offset >= from && x.offset < to {
			out = append(out, x.ms)
		}
	}
	return out
}

// pace is the rate at which ingestion finished the units of a phase: all of them over the time
// from the phase's start to the last one finished, in units of work per second. At
// purgeIngestRate, ingestion kept up with the schedule.
func pace(all []ingested) float64 {
	var end time.Duration
	for _, x := range all {
		end = max(end, x.offset+time.Duration(x.ms*float64(time.Millisecond)))
	}
	return float64(len(all)) / end.Seconds()
}

// ingestAtRate ingests units of work at purgeIngestRate per second for d (open loop: unit i is due
// at start + i/rate, latency counts from then) and returns every unit's offset and latency. The
// client sends what fell due every purgeIngestEvery in one pair of requests (ingestUnits), as a
// client that batches does, on up to purgeIngestConns connections at once.
func (bn *bench) ingestAtRate(ctx context.Context, prefix string, d time.Duration) ([]ingested, error) {
	type item struct {
		id     string
		due    time.Time
		offset time.Duration
	}
	ch := make(chan []item, purgeIngestRate)
	var mu sync.Mutex
	var lat []ingested
	var wg sync.WaitGroup
	errc := make(chan error, purgeIngestConns)
	for range purgeIngestConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range ch {
				ids := make([]string, len(batch))
				for i, it := range batch {
					ids[i] = it.id
				}
				if err := bn.ingestUnits(ctx, ids); err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				done := time.Now()
				mu.Lock()
				for _, it := range batch {
					lat = append(lat, ingested{offset: it.offset, ms: float64(done.Sub(it.due).Microseconds()) / 1000})
				}
				mu.Unlock()
			}
		}()
	}
	start := time.Now()
	interval := time.Second / purgeIngestRate
	var batch []item
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if due.Sub(start) >= d {
			break
		}
		// Sent once the batch's window has passed: its first unit waited purgeIngestEvery.
		if len(batch) > 0 && due.Sub(batch[0].due) >= purgeIngestEvery {
			time.Sleep(time.Until(batch[0].due.Add(purgeIngestEvery)))
			ch <- batch
			batch = nil
		}
		batch = append(batch, item{id: fmt.Sprintf("%s%d", prefix, i), due: due, offset: due.Sub(start)})
	}
	if len(batch) > 0 {
		ch <- batch
	}
	close(ch)
	wg.Wait()
	close(errc)
	return lat, <-errc
}

// purgeAloneWorkload is figure 1: the purge alone.
func purgeAloneWorkload(ctx context.Context, bn *bench, rp *report) error {
	backend, err := bn.odsBackend(ctx)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("ODS purge, %d × %d units of work per batch", purgeParallel, purgeBatch)
	log.Printf("%s ...", name)
	res, err := takeTurns(runs, 1, nil,
		func() (float64, error) {
			if err := bn.seedODS(ctx, "s", purgeUnits, 3*365, 1); err != nil {
				return 0, err
			}
			n, took, err := bn.siloPurge(ctx, time.Now(), nil)
			if err == nil && n != purgeUnits {
				err = fmt.Errorf("the purge deleted %d units of work of %d", n, purgeUnits)
			}
			if err == nil {
				err = bn.requireODSEmpty(ctx)
			}
			return float64(n) / took.Seconds(), err
		},
		func() (float64, error) {
			if err := bn.seedODS(ctx, "r", purgeUnits, 3*365, 1); err != nil {
				return 0, err
			}
			rate, err := bn.rawPurge(ctx, "r", purgeUnits)
			if err == nil {
				err = bn.requireODSEmpty(ctx)
			}
			return rate, err
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "uow/s", "uow/s (plain DELETEs)", res[0], res[1], purgeTarget, 0)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: each unit of work a Summary and %d objects (%d rows); ods.objects on %s",
		name, purgeObjectsPerUW, purgeObjectsPerUW+2, backend))

	return bn.odsEmpty(ctx)
}

// purgeIngestWorkload is figure 2: the purge while ingestion runs at a fixed rate, and ingestion
// alone in the same run.
func purgeIngestWorkload(ctx context.Context, bn *bench, rp *report) error {
	name := fmt.Sprintf("ODS purge (%d per %s in %d batches) while ingesting %d uow/s over HTTP", purgePacedFetch,
		purgePacedFrequency, purgePacedParallel, purgeIngestRate)
	log.Printf("%s ...", name)
	var purgeRates, p99Alone, p99With, p50Alone, p50With, paceAlone, paceWith, runRatios []float64
	for run := range purgeMixedRuns + 1 {
		if err := bn.seedODS(ctx, "m", purgeMixedUnits, 3*365, 1); err != nil {
			return err
		}
		allAlone, err := bn.ingestAtRate(ctx, fmt.Sprintf("a%d-", run), purgeIngestFor)
		if err != nil {
			return fmt.Errorf("%s: ingestion alone: %w", name, err)
		}
		stop := make(chan struct{})
		var deleted int64
		var took time.Duration
		var perr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Second) // ingestion first reaches its pace
			deleted, took, perr = bn.pacedPurge(ctx, time.Now(), stop)
		}()
		allWith, err := bn.ingestAtRate(ctx, fmt.Sprintf("w%d-", run), purgeIngestFor)
		close(stop)
		<-done
		if err != nil {
			return fmt.Errorf("%s: ingestion with the purge: %w", name, err)
		}
		if perr != nil {
			return fmt.Errorf("%s: purge: %w", name, perr)
		}
		// The same window of both phases: the units of work due while the purge ran.
		alone, with := between(allAlone, time.Second, time.Second+took), between(allWith, time.Second, time.Second+took)
		if run == 0 {
			continue // warm-up
		}
		purgeRates = append(purgeRates, float64(deleted)/took.Seconds())
		p99Alone = append(p99Alone, percentile(alone, 0.99))
		p99With = append(p99With, percentile(with, 0.99))
		p50Alone = append(p50Alone, percentile(alone, 0.5))
		p50With = append(p50With, percentile(with, 0.5))
		runRatios = append(runRatios, percentile(with, 0.99)/percentile(alone, 0.99))
		paceAlone = append(paceAlone, pace(allAlone))
		paceWith = append(paceWith, pace(allWith))
		log.Printf("run %d: purge %.0f uow/s over %s; ingestion p99 %.1f ms alone, %.1f ms with the purge (%d and %d units); whole phases: p99 %.1f ms alone, %.1f ms with; ingested at %.0f and %.0f uow/s",
			run, float64(deleted)/took.Seconds(), took.Round(time.Millisecond), percentile(alone, 0.99), percentile(with, 0.99), len(alone), len(with),
			percentile(between(allAlone, 0, purgeIngestFor), 0.99), percentile(between(allWith, 0, purgeIngestFor), 0.99),
			pace(allAlone), pace(allWith))
	}
	pr := median(purgeRates)
	rp.lines = append(rp.lines, line{name: name + ": purge", silo: thousands(pr) + " uow/s", base: "—", ratio: "—",
		target: "≥ " + thousands(purgeMixedTarget) + " uow/s", verdict: verdict(pr >= purgeMixedTarget)})
	ratio := median(p99With) / median(p99Alone)
	rp.lines = append(rp.lines, line{name: name + ": ingestion p99", silo: fmt.Sprintf("%.1f ms", median(p99With)),
		base: fmt.Sprintf("%.1f ms (no purge)", median(p99Alone)), ratio: fmt.Sprintf("%.2f×", ratio),
		target: fmt.Sprintf("≤ %.1f×", purgeP99Ratio), verdict: verdict(ratio <= purgeP99Ratio)})
	rp.notes = append(rp.notes,
		fmt.Sprintf("%s: purge runs [%s] uow/s; ingestion p99 alone [%s] ms, with the purge [%s] ms; p50 alone %.1f ms, with %.1f ms; ingestion kept pace at [%s] uow/s alone, [%s] with the purge; p99 ratio of each run [%s] (median %.2f×) (medians of %d runs after a warm-up)",
			name, list(purgeRates, "%.0f"), list(p99Alone, "%.1f"), list(p99With, "%.1f"), median(p50Alone), median(p50With),
			list(paceAlone, "%.0f"), list(paceWith, "%.0f"), list(runRatios, "%.2f"), median(runRatios), purgeMixedRuns))

	return bn.odsEmpty(ctx)
}

// purgeTTLWorkload is figure 3: TTL mode by partition drop.
func purgeTTLWorkload(ctx context.Context, bn *bench, rp *report) error {
	backend, err := bn.odsBackend(ctx)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("ODS TTL expiry, %d units of work × %d rows in their own partitions", purgeTTLUnits, purgeObjectsPerUW+2)
	log.Printf("%s ...", name)
	var dropped []float64
	res, err := takeTurns(runs, 1, nil,
		func() (float64, error) {
			if err := bn.seedODS(ctx, "t", purgeTTLUnits, 400, 5); err != nil {
				return 0, err
			}
			if _, err := bn.raw.Exec(ctx, `SELECT * FROM api.partition_maintain();
				UPDATE purge.config SET mode = 'TTL', ttl_expire_after_seconds = 30 * 86400, fetch_size = 1000, parallelism = 1`); err != nil {
				return 0, err
			}
			start := time.Now()
			r, err := bn.q.PurgeTTLRun(ctx, time.Now())
			took := time.Since(start)
			if err != nil {
				return 0, err
			}
			rows := r.ObjectsDeleted + 2*int64(r.UnitOfWorksDeleted)
			if want := int64(purgeTTLUnits * (purgeObjectsPerUW + 2)); rows != want {
				return 0, fmt.Errorf("TTL expired %d rows of %d", rows, want)
			}
			dropped = append(dropped, float64(r.DroppedPartitions))
			return float64(rows) / took.Seconds(), nil
		},
		func() (float64, error) {
			if err := bn.seedODS(ctx, "t", purgeTTLUnits, 400, 5); err != nil {
				return 0, err
			}
			// The same rows as the TTL run counts: a unit of work with its Summary (one row of
			// ods.unit_of_works) and its objects.
			start := time.Now()
			var n int64
			for _, q := range []string{`DELETE FROM ods.objects WHERE created_at < now() - interval '30 days'`,
				`DELETE FROM ods.unit_of_works WHERE last_updated < now() - interval '30 days'`} {
				tag, err := bn.raw.Exec(ctx, q)
				if err != nil {
					return 0, err
				}
				n += tag.RowsAffected()
			}
			if want := int64(purgeTTLUnits * (purgeObjectsPerUW + 1)); n != want {
				return 0, fmt.Errorf("DELETE removed %d rows of %d", n, want)
			}
			return float64(purgeTTLUnits*(purgeObjectsPerUW+2)) / time.Since(start).Seconds(), nil
		})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput(name, "rows/s", "rows/s (DELETE)", res[0], res[1], purgeTTLTarget, 0)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: partitions or chunks dropped per run [%s] (%s); the units of work, with their Summary in their row, are deleted by rows in the same transaction",
		name, list(slices.Clone(dropped), "%.0f"), backend))
	return bn.odsEmpty(ctx)
}

// odsEmpty leaves the ODS empty and the purge in its default mode.
func (bn *bench) odsEmpty(ctx context.Context) error {
	_, err := bn.raw.Exec(ctx, `TRUNCATE ods.unit_of_works, ods.objects, purge.reports;
		UPDATE purge.config SET mode = 'STANDARD', enabled = false`)
	return err
}
