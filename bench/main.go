// Command silo-bench runs Silo's benchmark workloads, each next to a raw PostgreSQL baseline
// measured in the same run, and prints medians and ratios. `make bench` runs it on a throw-away
// cluster with synchronous commit on (SILO_TEST_DATABASE_URL, SILO_TEST_TEMPLATE from
// `silo tempdb`). Requests go to 127.0.0.1 only and every loop is bounded in count and time.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
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
	runs      = 5
	batchSize = 500
	cids      = 2000
	paths     = 10
)

type update struct {
	ID    string         `json:"_id"`
	Path  []string       `json:"_path"`
	Op    string         `json:"_operation"`
	Value map[string]any `json:"_value"`
}

// makeBatch builds a batch: mix=true gives ~70% _set, 10% _set_with_history, 10% _inc, 10% array
// operations; otherwise only _set. Paths of one kind stay one kind, so grain types never clash.
func makeBatch(r *rand.Rand, mix bool) []update {
	out := make([]update, batchSize)
	for i := range out {
		cid := fmt.Sprintf("cust-%05d", r.IntN(cids))
		p := r.IntN(paths)
		u := update{ID: cid, Op: "_set", Value: map[string]any{"_c": 0.9, "_v": fmt.Sprintf("value-%d", r.IntN(1000))}}
		if mix {
			switch p {
			case 7:
				u.Op = "_set_with_history"
			case 8:
				u.Op, u.Value["_v"] = "_inc", "0|1|1"
			case 9:
				if r.IntN(2) == 0 {
					u.Op = "_array_put"
				} else {
					u.Op = "_array_append"
				}
				u.Value["_v"] = []string{fmt.Sprintf("tag-%d", r.IntN(20))}
			}
		}
		seg := "set"
		if mix {
			seg = "mix"
		}
		u.Path = []string{seg, fmt.Sprintf("grain%d", p)}
		out[i] = u
	}
	return out
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func percentile(xs []float64, p float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(float64(len(s)-1)*p)]
}

type result struct {
	name, silo, base, ratio, target, verdict string
}

var results []result

func report(name string, silo, base float64, unit string, higherBetter bool, target float64, targetText string) {
	ratio := silo / base
	ok := silo >= target
	if !higherBetter {
		ratio = base / silo
		ok = silo < target
	}
	verdict := "met"
	if !ok {
		verdict = "MISSED"
	}
	if targetText == "" {
		verdict = ""
	}
	results = append(results, result{name, fmt.Sprintf("%.0f %s", silo, unit), fmt.Sprintf("%.0f %s", base, unit),
		fmt.Sprintf("%.2f", ratio), targetText, verdict})
	if !higherBetter {
		results[len(results)-1].silo = fmt.Sprintf("%.2f %s", silo, unit)
		results[len(results)-1].base = fmt.Sprintf("%.2f %s", base, unit)
	}
	log.Printf("%s: silo %.2f %s, baseline %.2f %s", name, silo, unit, base, unit)
}

func main() {
	log.SetFlags(0)
	ctx := context.Background()
	serverURL, tpl := os.Getenv("SILO_TEST_DATABASE_URL"), os.Getenv("SILO_TEST_TEMPLATE")
	if serverURL == "" || tpl == "" {
		log.Fatal("run through `make bench` (silo tempdb provides SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE)")
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE silo_bench TEMPLATE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		log.Fatal(err)
	}
	var syncCommit string
	_ = conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&syncCommit)
	conn.Close(ctx)
	u, _ := url.Parse(serverURL)
	u.Path = "/silo_bench"
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	_, err = pool.Exec(ctx, `CREATE TABLE bench_raw (LIKE profile.profilestore INCLUDING ALL)`)
	must(err)
	var token string
	must(pool.QueryRow(ctx, `SELECT token FROM api.token_create('bench', '{}', true, true)`).Scan(&token))
	q := db.New(pool)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(err)
	srv := &http.Server{Handler: server.New(server.Config{Pool: pool, Logger: slog.New(slog.DiscardHandler), Version: "bench"})}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(body []byte) {
		req, _ := http.NewRequest("POST", base+"/profile-updates", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		must(err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("POST /profile-updates: %d", resp.StatusCode)
		}
	}

	log.Printf("PostgreSQL synchronous_commit=%s; %d runs per figure, medians", syncCommit, runs)

	// Raw baseline: the same rows as one INSERT ... ON CONFLICT DO UPDATE per batch.
	rawUpsert := func(ctx context.Context, batch []update) error {
		batch = append([]update(nil), batch...)
		// Rows in key order, so concurrent baseline statements cannot deadlock.
		sort.SliceStable(batch, func(i, j int) bool {
			return batch[i].ID+strings.Join(batch[i].Path, "/") < batch[j].ID+strings.Join(batch[j].Path, "/")
		})
		n := len(batch)
		c, p, v, g := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		seen := map[string]bool{}
		k := 0
		for _, x := range batch {
			path := "/" + strings.Join(x.Path, "/")
			key := x.ID + path
			if seen[key] { // one statement cannot touch a row twice
				continue
			}
			seen[key] = true
			b, _ := json.Marshal(x.Value["_v"])
			c[k], p[k], v[k], g[k] = x.ID, path, string(b), "t"
			k++
		}
		_, err := pool.Exec(ctx, `INSERT INTO bench_raw (correlation_id, profile_type, path, pit, value, certainty, grain_type, inserted, ttl, reader, ttn)
			SELECT c, '_d', p, '_latest', v::jsonb, 0.9, g, (extract(epoch FROM now()) * 1000)::bigint, 'P100Y', '_auth', 'P100Y'
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(c, p, v, g)
			ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
			SET value = excluded.value, certainty = excluded.certainty, inserted = excluded.inserted,
			    ttl = excluded.ttl, reader = excluded.reader, ttn = excluded.ttn, origin = excluded.origin`,
			c[:k], p[:k], v[:k], g[:k])
		return err
	}

	for _, mix := range []bool{false, true} {
		name := "100% _set"
		if mix {
			name = "mix"
		}
		r := rand.New(rand.NewPCG(1, 2))
		const perRun = 10
		var silo, raw []float64
		for run := 0; run < runs+1; run++ { // the first run warms up
			batches := make([][]update, perRun)
			bodies := make([][]byte, perRun)
			for i := range batches {
				batches[i] = makeBatch(r, mix)
				bodies[i], _ = json.Marshal(batches[i])
			}
			t0 := time.Now()
			for _, b := range bodies {
				rows, err := q.ProfileApplyBatch(ctx, b)
				must(err)
				for _, row := range rows {
					if row.Status == "dead_letter" {
						log.Fatalf("unexpected dead letter: %v", *row.Reason)
					}
				}
			}
			s := float64(perRun*batchSize) / time.Since(t0).Seconds()
			t0 = time.Now()
			for _, b := range batches {
				must(rawUpsert(ctx, b))
			}
			rr := float64(perRun*batchSize) / time.Since(t0).Seconds()
			if run > 0 {
				silo, raw = append(silo, s), append(raw, rr)
			}
		}
		report("api.profile_apply_batch, 500/batch, "+name, median(silo), median(raw), "updates/s", true,
			median(raw)/2, "≥ 0.5 × raw")
	}

	// HTTP: POST /profile-updates, batches of 500 (mix), 2 concurrent clients.
	{
		r := rand.New(rand.NewPCG(3, 4))
		var silo, raw []float64
		for run := 0; run < runs; run++ {
			const perClient = 6
			bodies := make([][][]byte, 2)
			batches := make([][][]update, 2)
			for c := range bodies {
				for range perClient {
					b := makeBatch(r, true)
					batches[c] = append(batches[c], b)
					body, _ := json.Marshal(b)
					bodies[c] = append(bodies[c], body)
				}
			}
			var wg sync.WaitGroup
			t0 := time.Now()
			for c := range bodies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, b := range bodies[c] {
						post(b)
					}
				}()
			}
			wg.Wait()
			silo = append(silo, float64(2*perClient*batchSize)/time.Since(t0).Seconds())
			t0 = time.Now()
			for c := range batches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, b := range batches[c] {
						must(rawUpsert(ctx, b))
					}
				}()
			}
			wg.Wait()
			raw = append(raw, float64(2*perClient*batchSize)/time.Since(t0).Seconds())
		}
		report("POST /profile-updates, 500/batch, mix, 2 clients", median(silo), median(raw), "updates/s", true, 20000, "≥ 20,000/s")
	}

	// Single-update requests, 16 concurrent clients, vs single-row raw upserts on 16 connections.
	{
		var silo, raw []float64
		for run := 0; run < 3; run++ {
			silo = append(silo, closedLoop(16, 3*time.Second, func(c, i int) {
				post([]byte(fmt.Sprintf(`{"_id":"single-%d-%d","_path":["a"],"_value":{"_v":"%d"}}`, c, i%500, i)))
			}))
			raw = append(raw, closedLoop(16, 3*time.Second, func(c, i int) {
				_, err := pool.Exec(ctx, `INSERT INTO bench_raw (correlation_id, path, value, grain_type, inserted) VALUES ($1, '/a', $2, 't', 1)
					ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE SET value = excluded.value, inserted = excluded.inserted`,
					fmt.Sprintf("single-%d-%d", c, i%500), fmt.Sprintf(`"%d"`, i))
				must(err)
			}))
		}
		report("POST /profile-updates, 1 update/request, 16 clients", median(silo), median(raw), "requests/s", true, 3000, "≥ 3,000/s")
	}

	// Reading a 20-grain profile (5 grains with 3 history pits each) over HTTP.
	{
		var ups []update
		for g := 0; g < 20; g++ {
			op := "_set"
			n := 1
			if g < 5 {
				op, n = "_set_with_history", 4
			}
			for k := 0; k < n; k++ {
				ups = append(ups, update{ID: "reader-1", Path: []string{"profile", fmt.Sprintf("g%02d", g)}, Op: op,
					Value: map[string]any{"_v": fmt.Sprintf("v%d", k), "_in": 1600000000000 + k*1000, "_reader": "_all"}})
			}
		}
		body, _ := json.Marshal(ups)
		post(body)
		var silo, raw []float64
		for i := 0; i < 2000; i++ {
			t0 := time.Now()
			resp, err := client.Get(base + "/profiles/_d/reader-1")
			must(err)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			silo = append(silo, float64(time.Since(t0).Microseconds())/1000)
			t0 = time.Now()
			rows, err := pool.Query(ctx, `SELECT * FROM profile.profilestore WHERE correlation_id = $1 AND profile_type = '_d'`, "reader-1")
			must(err)
			for rows.Next() {
			}
			must(rows.Err())
			raw = append(raw, float64(time.Since(t0).Microseconds())/1000)
		}
		report("GET /profiles (20 grains, 35 pits), median latency", median(silo), median(raw), "ms", false, 2, "median < 2 ms")
		log.Printf("  p99: silo %.2f ms, baseline %.2f ms", percentile(silo, 0.99), percentile(raw, 0.99))
		results = append(results, result{"GET /profiles, p99 latency", fmt.Sprintf("%.2f ms", percentile(silo, 0.99)),
			fmt.Sprintf("%.2f ms", percentile(raw, 0.99)), fmt.Sprintf("%.2f", percentile(raw, 0.99)/percentile(silo, 0.99)), "", ""})
	}

	fmt.Println()
	fmt.Printf("| %-55s | %-18s | %-18s | %-6s | %-14s | %-6s |\n", "workload", "silo", "raw PostgreSQL", "ratio", "target", "")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 57), strings.Repeat("-", 20), strings.Repeat("-", 20), strings.Repeat("-", 8), strings.Repeat("-", 16), strings.Repeat("-", 8))
	for _, r := range results {
		fmt.Printf("| %-55s | %-18s | %-18s | %-6s | %-14s | %-6s |\n", r.name, r.silo, r.base, r.ratio, r.target, r.verdict)
	}
}

// closedLoop runs fn from n goroutines for d and returns calls per second.
func closedLoop(n int, d time.Duration, fn func(client, i int)) float64 {
	var count atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(start) < d; i++ {
				fn(c, i)
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(count.Load()) / time.Since(start).Seconds()
}
