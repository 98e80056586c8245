package main

// Workload 4: GET /profiles/_d/{id} of a 20-grain profile with history (35 rows), sequential
// requests with the token after 100 warm-up requests. Baseline, sent in turn with each request:
// SELECT * of the profile's rows, every row read. Reported: median (target < 2 ms) and p99.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"
)

const reads = 2000 // sequential requests

func init() {
	register(workload{order: 50, run: readWorkload})
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

// readWorkload: sequential reads of one 20-grain profile: 5 grains with 3 history pits each,
// 2 arrays, a counter and 12 text grains (35 rows).
func readWorkload(ctx context.Context, bn *bench, rp *report) error {
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
