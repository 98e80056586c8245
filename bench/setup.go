package main

// The bench's setup: a fresh database cloned from the migrated template, Silo's pool (as
// `silo serve` opens it) and the baselines' pool, the baselines' table, an admin token, and the
// HTTP API served in process with a client for it.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/server"
)

const requestTimeout = 30 * time.Second

// bench is what the workloads share.
type bench struct {
	silo   *pgxpool.Pool // Silo's pool, configured as `silo serve` configures it
	raw    *pgxpool.Pool // the baselines' connections
	q      *db.Queries
	dbURL  string // the bench database, for the processes a workload starts
	base   string // http://127.0.0.1:port
	token  string
	client *http.Client
	// metrics is the in-process server's registry: the workloads read how the server joined
	// requests into calls of api.profile_apply_batch (silo_profile_apply_batch_updates).
	metrics *prometheus.Registry

	// pgVersion, syncCommit and fsync are the server's settings, for the report's heading.
	pgVersion, syncCommit, fsync string
}

// openBench clones a fresh database from the template tpl on the server at serverURL and sets up
// the bench on it; the function it returns releases it all, last opened first (the database stays).
func openBench(ctx context.Context, serverURL, tpl string) (_ *bench, _ func(), err error) {
	var closers []func()
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	bn := &bench{}

	dbName := fmt.Sprintf("silo_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, nil, fmt.Errorf("error connecting to %s: %w", serverURL, err)
	}
	closers = append(closers, func() { admin.Close(context.Background()) })
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{dbName}.Sanitize()+" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()); err != nil {
		return nil, nil, fmt.Errorf("error creating the bench database: %w", err)
	}
	if err := admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('fsync')`).
		Scan(&bn.pgVersion, &bn.syncCommit, &bn.fsync); err != nil {
		return nil, nil, err
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, nil, err
	}
	u.Path = "/" + dbName
	bn.dbURL = u.String()

	if bn.silo, err = db.Open(ctx, bn.dbURL); err != nil { // as `silo serve` opens it
		return nil, nil, err
	}
	closers = append(closers, bn.silo.Close)
	bn.q = db.New(bn.silo)
	rawCfg, err := pgxpool.ParseConfig(bn.dbURL)
	if err != nil {
		return nil, nil, err
	}
	rawCfg.MaxConns = singleClients + 2 // the most a baseline uses at once (profile_http.go), and two more
	if bn.raw, err = pgxpool.NewWithConfig(ctx, rawCfg); err != nil {
		return nil, nil, err
	}
	closers = append(closers, bn.raw.Close)

	if _, err := bn.raw.Exec(ctx, `CREATE TABLE bench_raw (LIKE profile.profilestore INCLUDING ALL)`); err != nil {
		return nil, nil, err
	}
	if err := bn.raw.QueryRow(ctx, `SELECT token FROM api.token_create('bench', '{}', true, true)`).Scan(&bn.token); err != nil {
		return nil, nil, fmt.Errorf("error creating a token: %w", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	bn.metrics = prometheus.NewRegistry()
	srv := &http.Server{
		Handler:           server.New(server.Config{Pool: bn.silo, Logger: slog.New(slog.DiscardHandler), Version: "bench", Registry: bn.metrics}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	closers = append(closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	bn.base = "http://" + ln.Addr().String()
	// Enough idle connections for the most concurrent clients of a workload (profile_http.go), so
	// that every client keeps its connection.
	bn.client = &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true}}
	closers = append(closers, bn.client.CloseIdleConnections)
	return bn, closeAll, nil
}

// applyCalls returns how many calls of api.profile_apply_batch the in-process server has made and
// how many updates they held, from its metrics.
func (bn *bench) applyCalls() (calls, updates float64, err error) {
	families, err := bn.metrics.Gather()
	if err != nil {
		return 0, 0, err
	}
	for _, f := range families {
		if f.GetName() == "silo_profile_apply_batch_updates" {
			for _, m := range f.GetMetric() {
				calls += float64(m.GetHistogram().GetSampleCount())
				updates += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return calls, updates, nil
}

// cpuTimes returns the CPU time used so far by this process (the HTTP clients, the in-process
// server, the pools) and by the PostgreSQL backends connected to the bench database, read from
// /proc (Linux). A backend that has exited since is not counted; the pools keep theirs.
func (bn *bench) cpuTimes(ctx context.Context) (self, backends time.Duration, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rows, err := bn.raw.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return 0, 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // exited, or not on this machine
		}
		// utime and stime are fields 14 and 15, counted after the command name, which is in
		// parentheses and may hold spaces; in clock ticks of 1/100 s.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		backends += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return self, backends, nil
}
