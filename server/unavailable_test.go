package server_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

// When the database cannot serve a request (down, restarting, out of connection slots), the
// client gets 503 database-unavailable with Retry-After, never 500, and /readyz says not-ready.

// get sends one request and returns its status, Retry-After and error id.
func get(t *testing.T, srvURL, method, path, auth, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, srvURL+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	id := ""
	if i := strings.Index(string(raw), `"id":"`); i >= 0 {
		id = strings.SplitN(string(raw[i+6:]), `"`, 2)[0]
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), id
}

// requireUnavailable checks a profile read, a write and /readyz against a server whose database
// cannot serve them.
func requireUnavailable(t *testing.T, srvURL, token string) {
	t.Helper()
	upd := `{"_id":"u1","_path":["a"],"_value":{"_v":"x"}}`
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/profiles/_d/u1", ""},
		{"POST", "/profile-updates", upd},
		{"POST", "/profile-updates?mode=async", upd},
	} {
		code, retry, id := get(t, srvURL, r.method, r.path, "Bearer "+token, r.body)
		require.Equal(t, 503, code, "%s %s", r.method, r.path)
		require.Equal(t, "1", retry, "%s %s", r.method, r.path)
		require.Equal(t, server.UnavailableID, id, "%s %s", r.method, r.path)
	}
	code, _, id := get(t, srvURL, "GET", "/readyz", "", "")
	require.Equal(t, 503, code)
	require.Equal(t, "not-ready", id)
}

// A pool pointed at a port where no database listens: every connection attempt fails.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/silo?connect_timeout=2")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))
	t.Cleanup(srv.Close)
	requireUnavailable(t, srv.URL, "any-token")
}

// The database goes away under a running server (its connections are terminated, as in a
// restart, and it accepts none for a while), then comes back: the server answers 503 meanwhile
// and serves again afterwards with no restart of its own, the pool having reconnected.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w := "Bearer " + b.writer
	code, _ := b.do(t, "POST", "/profile-updates", w, `{"_id":"u1","_path":["a"],"_value":{"_v":"x"}}`)
	require.Equal(t, 200, code)

	var dbName string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	u, err := url.Parse(b.pool.Config().ConnString())
	require.NoError(t, err)
	u.Path = "/postgres"
	admin, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(ctx) })
	allow := func(on bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{dbName}.Sanitize(), on))
		require.NoError(t, err)
	}
	allow(false)
	t.Cleanup(func() { allow(true) })
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)

	requireUnavailable(t, b.srv.URL, b.writer)

	allow(true)
	code, _ = b.do(t, "GET", "/readyz", "", "")
	require.Equal(t, 200, code)
	code, _ = b.do(t, "POST", "/profile-updates", w, `{"_id":"u1","_path":["b"],"_value":{"_v":"y"}}`)
	require.Equal(t, 200, code)
	code, body := b.do(t, "GET", "/profiles/_d/u1", "Bearer "+b.reader, "")
	require.Equal(t, 200, code)
	require.Contains(t, body["jsonPayload"], "b")
}

// A database with no free connection slot for the server (53300, "too many clients"): the role
// it connects as has a connection limit of 0.
func TestDatabaseTooManyClients(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := fmt.Sprintf("silo_full_%08x", rand.Uint32())
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN CONNECTION LIMIT 0`, role))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `DROP ROLE `+role) })
	u, err := url.Parse(b.pool.Config().ConnString())
	require.NoError(t, err)
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))
	t.Cleanup(srv.Close)
	requireUnavailable(t, srv.URL, b.writer)
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.ErrorContains(t, err, "53300")
}

// A registered SQLSTATE and a missing profile keep their answers beside the above.
func TestRegisteredErrorsStay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, id := get(t, b.srv.URL, "GET", "/profiles/_d/u1", "Bearer nonsense", "")
	require.Equal(t, 401, code)
	require.Equal(t, "invalid-access-token", id)
	code, retry, id := get(t, b.srv.URL, "GET", "/profiles/_d/nobody", "Bearer "+b.reader, "")
	require.Equal(t, 404, code)
	require.Empty(t, retry)
	require.Equal(t, "unknown-resource", id)
}
