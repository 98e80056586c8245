package main

// Workload 7: event ingest. POST /events with NDJSON bodies of 1,000 events each (Granary's headers,
// a small payload, 10,000 correlation ids), eventClients concurrent clients, events stored per
// second; once with no consumer, once with one belt-like consumer of the events' type (a delivery
// per event). Baseline: COPY of the same rows (the columns of event.events) into a plain table
// without indexes, 1,000 rows per COPY, on as many connections. Targets: ≥ 100,000 events/s and
// ≥ 0.5× COPY. The store is emptied before every run, so every run sees the same tables.
//
// Without a consumer a third measure takes its turn: COPY of the same rows into the store's own
// tables (event.events with its indexes, and the ids into event.event_ids, one transaction per
// 1,000 rows), the cheapest way PostgreSQL has to write what the store's reads and deduplication
// need. Its ratio to the plain COPY is the best ratio any ingest with these tables can reach.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	eventClients       = 3    // concurrent clients
	eventsPerRequest   = 1000 // events per request and per COPY
	eventRequestsEach  = 10   // requests per client and run
	eventCorrelations  = 10000
	eventIngestTarget  = 100000 // events/s
	eventIngestRatioTo = 0.5    // of COPY
)

func init() {
	register(workload{order: 70, only: []string{"events"}, run: eventIngestWorkload})
}

// eventReq is one request's events: the NDJSON body and the same rows for COPY.
type eventReq struct {
	body []byte
	rows [][]any
	ids  [][]any // event_id, at, correlation_id of rows, for event.event_ids
}

// eventRequests makes the requests of one run: eventClients × eventRequestsEach requests of
// eventsPerRequest events, ids unique to the run.
func eventRequests(run int) [][]eventReq {
	now := time.Now()
	work := make([][]eventReq, eventClients)
	n := 0
	for c := range work {
		for r := range eventRequestsEach {
			var body bytes.Buffer
			rows := make([][]any, 0, eventsPerRequest)
			ids := make([][]any, 0, eventsPerRequest)
			for i := range eventsPerRequest {
				n++
				id := fmt.Sprintf("run%d-c%d-r%d-e%d", run, c, r, i)
				cid := cidName(n * 7919 % eventCorrelations)
				at := now.Add(time.Duration(n) * time.Millisecond)
				ms := strconv.FormatInt(at.UnixMilli(), 10)
				headers := `{"grnry-event-id": "` + id + `", "grnry-event-type": "page-view", "grnry-correlation-id": "` + cid +
					`", "grnry-event-timestamp": "` + ms + `", "grnry-harvester-name": "web"}`
				payload := `{"url": "https://shop.example/products/` + strconv.Itoa(n%500) + `", "referrer": "https://search.example/", "duration": ` + strconv.Itoa(n%97) + `}`
				body.WriteString(`{"event_headers": ` + headers + `, "event_payload": ` + payload + "}\n")
				rows = append(rows, []any{time.UnixMilli(at.UnixMilli()), id, "page-view", cid, "web", nil, []byte(headers), []byte(payload), now})
				ids = append(ids, []any{id, time.UnixMilli(at.UnixMilli()), cid})
			}
			work[c] = append(work[c], eventReq{body: body.Bytes(), rows: rows, ids: ids})
		}
	}
	return work
}

// postEvents sends one NDJSON body to POST /events and returns how many events were not stored.
func (bn *bench) postEvents(ctx context.Context, body []byte, n int) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bn.base+"/events", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+bn.token)
	req.Header.Set("Content-Type", "application/x-ndjson")
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
		return 0, fmt.Errorf("POST /events: %d %.500s", resp.StatusCode, bytes.TrimSpace(data))
	}
	return int64(n - bytes.Count(data, []byte(`"status":"stored"`))), nil
}

// eventRate runs one client per element of work, each sending its requests in order until all are
// sent or runDeadline has passed, and returns the events per second of all.
func eventRate(work [][]eventReq, send func(eventReq) error) (float64, error) {
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

var eventColumns = []string{"at", "event_id", "event_type", "correlation_id", "harvester_name", "type_version", "headers", "payload", "received"}

// copyIntoStore writes r's rows with COPY into event.events and their ids into event.event_ids,
// in one transaction.
func copyIntoStore(ctx context.Context, bn *bench, r eventReq) error {
	return pgx.BeginFunc(ctx, bn.raw, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"event", "events"}, eventColumns, pgx.CopyFromRows(r.rows)); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"event", "event_ids"}, []string{"event_id", "at", "correlation_id"}, pgx.CopyFromRows(r.ids))
		return err
	})
}

// emptyStore runs measure on an empty store: Silo's ingest and COPY into the store write the same
// ids, so each starts from empty tables (the emptying is not measured).
func emptyStore(ctx context.Context, bn *bench, measure func() (float64, error)) func() (float64, error) {
	return func() (float64, error) {
		if _, err := bn.raw.Exec(ctx, `TRUNCATE event.events, event.event_ids, event.deliveries`); err != nil {
			return 0, err
		}
		return measure()
	}
}

func eventIngestWorkload(ctx context.Context, bn *bench, rp *report) error {
	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_events_raw (
		at timestamptz NOT NULL, event_id text NOT NULL, event_type text NOT NULL, correlation_id text NOT NULL,
		harvester_name text, type_version text, headers jsonb NOT NULL, payload jsonb NOT NULL, received timestamptz NOT NULL)`); err != nil {
		return err
	}
	for _, consumer := range []bool{false, true} {
		name := fmt.Sprintf("POST /events NDJSON, %d/request, %d clients", eventsPerRequest, eventClients)
		if consumer {
			name += ", 1 consumer"
			if _, err := bn.raw.Exec(ctx, `SELECT event_private.consumer_create('bench', '{page-view}')`); err != nil {
				return err
			}
		}
		log.Printf("%s ...", name)
		var work [][]eventReq
		var errs atomic.Int64
		var siloCPU, rawCPU, storeCPU cpuCost
		measures := []func() (float64, error){
			emptyStore(ctx, bn, siloCPU.around(ctx, bn, func() (float64, error) {
				return eventRate(work, func(r eventReq) error {
					bad, err := bn.postEvents(ctx, r.body, len(r.rows))
					errs.Add(bad)
					return err
				})
			})),
			rawCPU.around(ctx, bn, func() (float64, error) {
				return eventRate(work, func(r eventReq) error {
					_, err := bn.raw.CopyFrom(ctx, pgx.Identifier{"bench_events_raw"}, eventColumns, pgx.CopyFromRows(r.rows))
					return err
				})
			}),
		}
		if !consumer {
			measures = append(measures, emptyStore(ctx, bn, storeCPU.around(ctx, bn, func() (float64, error) {
				return eventRate(work, func(r eventReq) error { return copyIntoStore(ctx, bn, r) })
			})))
		}
		res, err := takeTurns(runs, 1,
			func(run int) error {
				work = eventRequests(run)
				_, err := bn.raw.Exec(ctx, `TRUNCATE bench_events_raw`)
				return err
			}, measures...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rp.throughput(name, "ev/s", "rows/s (COPY)", res[0], res[1], eventIngestTarget, errs.Load())
		ratio := median(res[0]) / median(res[1])
		rp.notes = append(rp.notes,
			fmt.Sprintf("%s: ratio to COPY %.2f× (target ≥ %.1f×: %s)", name, ratio, eventIngestRatioTo, verdict(ratio >= eventIngestRatioTo)),
			fmt.Sprintf("%s: CPU per event, medians of the runs: Silo %s; COPY %s", name, siloCPU.String(), rawCPU.String()))
		if !consumer {
			store := median(res[2])
			rp.notes = append(rp.notes,
				fmt.Sprintf("%s: COPY into the store's tables (event.events and event.event_ids, their indexes) %.0f rows/s (runs [%s]): %.2f× the plain COPY, the best ratio these tables allow; Silo %.2f× of it; CPU per event %s",
					name, store, list(res[2], "%.0f"), store/median(res[1]), median(res[0])/store, storeCPU.String()))
		}
	}
	_, err := bn.raw.Exec(ctx, `TRUNCATE event.events, event.event_ids, event.deliveries; DROP TABLE bench_events_raw;
		SELECT event_private.consumer_drop(id) FROM event.consumers WHERE name = 'bench'`)
	return err
}
