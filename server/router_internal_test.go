package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// One ServeMux cannot hold both /{username}/events and a Silo route /events/{correlationId}:
// /events/events matches both and neither is more specific. That is why the account routes have
// a mux of their own.
func TestRouterOneMuxConflicts(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /events/{correlationId}", func(http.ResponseWriter, *http.Request) {})
	require.Panics(t, func() { mux.HandleFunc("GET /{username}/events", func(http.ResponseWriter, *http.Request) {}) })
}

// The router serves both: Silo's /events/... and a user's /{username}/events, each path to one of
// them, whatever the order of registration.
func TestRouterSeparatesSiloAndAccountRoutes(t *testing.T) {
	t.Parallel()
	answer := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"route":"`+name+`","user":"`+r.PathValue("username")+`"}`)
		})
	}
	plain := func(_ string, h http.HandlerFunc) http.Handler { return h }
	rt := newRouter(plain)
	rt.account("GET /{username}/events", answer("user events"))
	rt.account("GET /{username}/events/{id}", answer("user event"))
	rt.handle("GET /events/{correlationId}", answer("event store"))
	rt.handle("POST /events", answer("event store post"))
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/events/abc", 200, `{"route":"event store","user":""}`},
		{"GET", "/events/events", 200, `{"route":"event store","user":""}`},
		{"POST", "/events", 200, `{"route":"event store post","user":""}`},
		{"GET", "/alice/events", 200, `{"route":"user events","user":"alice",`},
		{"GET", "/alice/events/c1", 200, `{"route":"user event","user":"alice",`},
		{"GET", "/events/abc/events", 404, `"unknown-resource"`},      // Silo's namespace: not a user's
		{"GET", "/alice/nothing", 404, `"unknown-resource"`},          // a user's namespace, with meta
		{"DELETE", "/alice/events", 405, `"method-not-allowed"`},      // with meta too
		{"GET", "/alice", 404, `"unknown-resource"`},                  // no second segment: not a user's
		{"PUT", "/events/abc", 405, `"method-not-allowed","message"`}, // Silo's 405
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		name := tc.method + " " + tc.path
		require.Equal(t, tc.status, resp.StatusCode, name)
		require.Contains(t, string(raw), tc.body, name)
		// Every answer under /{username}/ carries Pryv's meta; Silo's own answers do not.
		user := rt.accountPath(tc.path)
		require.Equal(t, user, resp.Header.Get("API-Version") != "", name)
		if user {
			require.Contains(t, string(raw), `"meta":{"apiVersion":"`+AccountAPIVersion+`","serverTime":`, name)
		}
	}
	require.Panics(t, func() { rt.handle("GET /{anything}/x", answer("x")) }, "a Silo route begins with a literal")
	require.Panics(t, func() { rt.account("GET /events/x", answer("x")) }, "an account route begins with /{username}/")
}

// No user may be named after the first segment of one of Silo's own routes: every one of them,
// read from the route table itself, is reserved in the database, so a route added later without
// its reservation fails here.
func TestRouterTopLevelSegmentsReserved(t *testing.T) {
	t.Parallel()
	rt := New(Config{Version: "test"}).(*router)
	top := rt.topLevel()
	require.Contains(t, top, "profiles")
	require.Contains(t, top, "ws")
	require.Contains(t, top, "metrics")

	tx := dbtest.Tx(t)
	for _, seg := range top {
		var reserved bool
		require.NoError(t, tx.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM account.reserved_usernames WHERE username = $1)`, seg).Scan(&reserved))
		require.True(t, reserved, "a user named %q would shadow Silo's routes /%s/...: add it to account.reserved_usernames in a migration", seg, seg)
	}
}

// A streamed answer (a large series read) goes out as written once the handler flushes, with the
// API-Version header; the handler writes meta where its body ends.
func TestRouterAccountStreaming(t *testing.T) {
	t.Parallel()
	rt := newRouter(func(route string, h http.HandlerFunc) http.Handler { return h })
	stream := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"points":[`)
		require.NoError(t, http.NewResponseController(w).Flush())
		_, _ = io.WriteString(w, `[1,2]],"meta":`)
		_, _ = w.Write(accountMeta(time.Now()))
		_, _ = io.WriteString(w, `}`)
	}
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	s := &server{log: slog.New(slog.DiscardHandler), metrics: newMetrics(nil, nil)}
	rt.account("GET /{username}/stream", s.instrument("GET /{username}/stream", stream))
	resp, err := http.Get(srv.URL + "/alice/stream")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, AccountAPIVersion, resp.Header.Get("API-Version"))
	var body struct {
		Points [][]int
		Meta   struct{ ServerTime float64 }
	}
	require.NoError(t, json.Unmarshal(raw, &body), string(raw))
	require.Equal(t, [][]int{{1, 2}}, body.Points)
	require.Positive(t, body.Meta.ServerTime)
	require.Equal(t, 1, strings.Count(string(raw), `"meta"`))
}

// The event store's paths and the per-user routes /{username}/events live together: the router
// sends /events/... to the event store and /{username}/events to the accounts, and refuses a user
// named events.
func TestEventRoutesBesidePerUserRoutes(t *testing.T) {
	t.Parallel()
	rt := newRouter(func(_ string, h http.HandlerFunc) http.Handler { return h })
	var got string
	h := func(name string) http.HandlerFunc { return func(http.ResponseWriter, *http.Request) { got = name } }
	require.NotPanics(t, func() {
		rt.handle("POST /events", h("ingest"))
		rt.handle("GET /events", h("by type"))
		rt.handle("GET /events/{correlationId}", h("by correlation id"))
		rt.handle("GET /events/{correlationId}/{eventId}", h("one event"))
		rt.account("GET /{username}/events", h("user's events"))
		rt.account("GET /{username}/events/{id}", h("user's event"))
	})
	for path, want := range map[string]string{
		"/events":            "by type",
		"/events/cookie123":  "by correlation id",
		"/events/events":     "by correlation id",
		"/events/cookie/e1":  "one event",
		"/alice-1/events":    "user's events",
		"/alice-1/events/e1": "user's event",
	} {
		got = ""
		rt.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
		require.Equal(t, want, got, path)
	}
	require.Contains(t, rt.topLevel(), "events")
}
