package server_test

// The API cache over HTTP, against two servers on one database (two Silo processes): a miss then
// hits (front and shared), ETag and 304, session entries per token (header or access_token
// parameter), invalidation by the profile store's writes and by api.cache_invalidate, seen by
// both servers.

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

type cacheResp struct {
	status int
	body   string
	header http.Header
}

func cacheGet(t *testing.T, base, path, auth string, hdr map[string]string) cacheResp {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return cacheResp{resp.StatusCode, string(raw), resp.Header}
}

// cacheServers starts two servers on the test's database, each with an API cache of its own (two
// Silo processes).
func cacheServers(t *testing.T, b *testBundle) (*httptest.Server, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var out [2]*httptest.Server
	for i := range out {
		out[i] = httptest.NewServer(server.New(server.Config{Pool: b.pool, Version: "test", CacheContext: ctx}))
		t.Cleanup(out[i].Close)
	}
	return out[0], out[1]
}

func TestAPICache(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1, s2 := cacheServers(t, b)
	_, err := b.pool.Exec(context.Background(), `SELECT api.cache_config_load('{
		"GET/profiles/{profileType}/{correlationId}/": {"defaults": {"action": "cache", "session": "false", "expires": "60000 ms"}},
		"GET/profiles/{profileType}/{correlationId}/grain/{a}": {"defaults": {"action": "cache", "session": true, "expires": 60000}}}')`)
	require.NoError(t, err)
	w := "Bearer " + b.writer
	code, _ := b.do(t, "POST", "/profile-updates", w, `[{"_id": "c1", "_path": ["a"], "_value": {"_v": "one", "_reader": "_auth"}}]`)
	require.Equal(t, 200, code)

	r := "Bearer " + b.reader
	first := cacheGet(t, s1.URL, "/profiles/_d/c1", r, nil)
	require.Equal(t, 200, first.status, first.body)
	require.Equal(t, "miss", first.header.Get("X-Silo-Cache"))
	require.Contains(t, first.body, "one")
	etag := first.header.Get("ETag")
	require.NotEmpty(t, etag)
	again := cacheGet(t, s1.URL, "/profiles/_d/c1", r, nil)
	require.Equal(t, "hit", again.header.Get("X-Silo-Cache"))
	require.Equal(t, first.body, again.body)
	require.Equal(t, etag, again.header.Get("ETag"))
	require.Empty(t, again.header.Get("Cache-Control"), "a shared entry is not private")
	// The other process finds it in the shared store.
	other := cacheGet(t, s2.URL, "/profiles/_d/c1", r, nil)
	require.Equal(t, "hit", other.header.Get("X-Silo-Cache"))
	// If-None-Match: 304, no body.
	nm := cacheGet(t, s1.URL, "/profiles/_d/c1", r, map[string]string{"If-None-Match": etag})
	require.Equal(t, 304, nm.status)
	require.Empty(t, nm.body)
	// A caller with other readers has an entry of its own; a caller without a token is refused by
	// the handler as before.
	pers := cacheGet(t, s1.URL, "/profiles/_d/c1", "Bearer "+b.pr, nil)
	require.Equal(t, "miss", pers.header.Get("X-Silo-Cache"))
	require.Equal(t, 401, cacheGet(t, s1.URL, "/profiles/_d/c1", "", nil).status)

	// A profile update invalidates the profile's cached reads in both processes.
	code, _ = b.do(t, "POST", "/profile-updates", w, `[{"_id": "c1", "_path": ["a"], "_value": {"_v": "two", "_reader": "_auth"}}]`)
	require.Equal(t, 200, code)
	for _, base := range []string{s1.URL, s2.URL} {
		require.Eventually(t, func() bool {
			g := cacheGet(t, base, "/profiles/_d/c1", r, nil)
			return strings.Contains(g.body, "two")
		}, 2*time.Second, 10*time.Millisecond, base)
	}

	// Session entries: per token, private; the access_token parameter is a token too (and is not
	// part of the key).
	g1 := cacheGet(t, s1.URL, "/profiles/_d/c1/grain/a", r, nil)
	require.Equal(t, 200, g1.status, g1.body)
	require.Equal(t, "miss", g1.header.Get("X-Silo-Cache"))
	require.Equal(t, "private", g1.header.Get("Cache-Control"))
	require.Equal(t, "hit", cacheGet(t, s1.URL, "/profiles/_d/c1/grain/a?access_token="+b.reader, "", nil).header.Get("X-Silo-Cache"))
	require.Equal(t, "miss", cacheGet(t, s1.URL, "/profiles/_d/c1/grain/a", "Bearer "+b.admin, nil).header.Get("X-Silo-Cache"))

	// api.cache_invalidate of the profile's path drops its grain reads too, everywhere.
	_, err = b.pool.Exec(context.Background(), `SELECT api.cache_invalidate('/profiles/_d/c1')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return cacheGet(t, s2.URL, "/profiles/_d/c1/grain/a", r, nil).header.Get("X-Silo-Cache") == "miss"
	}, 2*time.Second, 10*time.Millisecond)

	// A path no rule names is not cached.
	h := cacheGet(t, s1.URL, "/healthz", "", nil)
	require.Empty(t, h.header.Get("X-Silo-Cache"))
}

// A rule whose action is invalidate, on a write route: its 2xx answer drops the cached reads of
// its path and of the paths under it, in every process; other paths keep theirs, and a refused
// write drops nothing.
func TestAPICacheInvalidateRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1, s2 := cacheServers(t, b)
	_, err := b.pool.Exec(context.Background(), `CREATE FUNCTION public.cache_cb(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'`)
	require.NoError(t, err)
	a := "Bearer " + b.admin
	var belts []string
	for _, name := range []string{"one", "two"} {
		code, body := b.do(t, "POST", "/belts", a, `{"name": "`+name+`", "eventTypes": ["t"], "sqlCallback": "cache_cb"}`)
		require.Equal(t, 201, code, body)
		belts = append(belts, "/belts/"+body["id"].(string))
	}
	_, err = b.pool.Exec(context.Background(), `SELECT api.cache_config_load('{
		"GET/belts/{id}": {"defaults": {"action": "cache", "expires": 60000}},
		"GET/belts/{id}/state": {"defaults": {"action": "cache", "expires": 60000}},
		"PUT/belts/{id}": {"defaults": {"action": "invalidate"}}}')`)
	require.NoError(t, err)
	reads := []string{belts[0], belts[0] + "/state", belts[1]}
	for _, base := range []string{s1.URL, s2.URL} {
		for _, p := range reads {
			cacheGet(t, base, p, a, nil)
			require.Equal(t, "hit", cacheGet(t, base, p, a, nil).header.Get("X-Silo-Cache"), base+p)
		}
	}
	put := func(body string) int {
		t.Helper()
		req, err := http.NewRequest("PUT", s1.URL+belts[0], strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", a)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Refused (400): nothing dropped.
	require.Equal(t, 400, put(`{"colour": "red"}`))
	require.Equal(t, "hit", cacheGet(t, s1.URL, belts[0], a, nil).header.Get("X-Silo-Cache"))

	require.Equal(t, 200, put(`{"description": "changed"}`))
	var left string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT string_agg(DISTINCT path, ',') FROM cache.entries`).Scan(&left))
	require.Equal(t, belts[1], left)
	// The other process drops its front entries on the notification (a miss there stores the
	// entry again, so each process is asked for a path of its own).
	require.Eventually(t, func() bool {
		return cacheGet(t, s2.URL, belts[0]+"/state", a, nil).header.Get("X-Silo-Cache") == "miss"
	}, 2*time.Second, 10*time.Millisecond)
	g := cacheGet(t, s1.URL, belts[0], a, nil)
	require.Equal(t, "miss", g.header.Get("X-Silo-Cache"))
	require.Contains(t, g.body, "changed")
	for _, base := range []string{s1.URL, s2.URL} {
		require.Equal(t, "hit", cacheGet(t, base, belts[1], a, nil).header.Get("X-Silo-Cache"), base)
	}
}
