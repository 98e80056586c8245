package main

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// A malformed SILO_DB_MAX_CONNS fails the start with one line naming it, before anything starts.
func TestDBMaxConnsMalformed(t *testing.T) {
	bin := buildSilo(t)
	for _, tc := range []struct{ cmd, value string }{
		{"serve", "abc"}, {"serve", "0"}, {"serve", "-3"}, {"serve", "1"}, {"serve", "2.5"}, {"serve", "10001"},
		{"up", "0"}, {"work", "x"}, {"migrate", "1"}, {"token", "0"},
	} {
		t.Run(tc.cmd+" "+tc.value, func(t *testing.T) {
			env, dataDir := untouchedEnv(t)
			args := []string{tc.cmd}
			if tc.cmd == "token" {
				args = []string{"token", "create", "--name", "n"}
			}
			r := runSilo(t, bin, append(env, "SILO_DB_MAX_CONNS="+tc.value), 30*time.Second, args...)
			require.Equal(t, 1, r.code, r.stderr)
			require.Empty(t, r.stdout)
			require.Equal(t, `silo: SILO_DB_MAX_CONNS: not a number from 2 to 10000: "`+tc.value+"\"\n", r.stderr)
			requireNoDir(t, dataDir)
		})
	}
}

// SILO_DB_MAX_CONNS wins over pool_max_conns of DATABASE_URL, which applies when the setting is
// unset; the pool's connections are named after the command unless the URL names them.
func TestPoolSettings(t *testing.T) {
	const url = "postgres://silo@127.0.0.1:5432/silo?pool_max_conns=7"
	for _, tc := range []struct {
		name    string
		url     string
		cfg     config
		max     int32
		appName string
	}{
		{"URL's pool_max_conns", url, config{appName: "silo serve"}, 7, "silo serve"},
		{"setting over pool_max_conns", url, config{appName: "silo work", dbMaxConns: 3}, 3, "silo work"},
		{"URL's application_name", url + "&application_name=api-eu", config{appName: "silo up", dbMaxConns: 12}, 12, "api-eu"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := pgxpool.ParseConfig(tc.url)
			require.NoError(t, err)
			tc.cfg.poolSettings(pc)
			require.Equal(t, tc.max, pc.MaxConns)
			require.Equal(t, tc.appName, pc.ConnConfig.RuntimeParams["application_name"])
		})
	}
}

// Under load, `silo serve` with SILO_DB_MAX_CONNS=3 holds 3 pool connections, named "silo serve",
// and no more (over a pool_max_conns of 2 in DATABASE_URL), plus its change listener.
func TestDBMaxConnsReachesThePool(t *testing.T) {
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	addr := freeAddr(t)
	srv := exec.Command(bin, "serve")
	srv.Env = cleanEnv("DATABASE_URL="+dbURL+"&pool_max_conns=2", "SILO_ADDR="+addr, "SILO_DB_MAX_CONNS=3",
		"SILO_LOG_LEVEL=warn", "SILO_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	waitReady(t, addr, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	// Requests that each take a pool connection, from more clients than the pool holds.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(loadCtx, "GET", "http://"+addr+"/readyz", nil)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	defer func() { stopLoad(); wg.Wait() }()

	most := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rows, err := conn.Query(ctx, `SELECT application_name, count(*)::int FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`)
		require.NoError(t, err)
		counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Name string
			N    int
		}])
		require.NoError(t, err)
		for _, c := range counts {
			most[c.Name] = max(most[c.Name], c.N)
		}
		require.LessOrEqual(t, most["silo serve"], 3, "more pool connections than SILO_DB_MAX_CONNS: %v", most)
		if most["silo serve"] == 3 && most["silo change listener"] == 1 && time.Now().After(deadline.Add(-7*time.Second)) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, 3, most["silo serve"], "the pool never grew to SILO_DB_MAX_CONNS under load: %v", most)
	require.Equal(t, 1, most["silo change listener"], "%v", most)
	for name := range most {
		require.True(t, strings.HasPrefix(name, "silo "), "a connection not named by Silo: %q in %v", name, most)
	}
}
