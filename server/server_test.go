package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool                      *pgxpool.Pool
	srv                       *httptest.Server
	admin, writer, reader, pr string // tokens: admin; write only; read (no roles); read with role _pers
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	b := &testBundle{pool: pool, srv: httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))}
	t.Cleanup(b.srv.Close)
	tok := func(name, roles string, write, admin bool) string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT token FROM api.token_create($1, string_to_array($2, ','), $3, $4)`, name, roles, write, admin).Scan(&s))
		return s
	}
	b.admin = tok("admin", "", true, true)
	b.writer = tok("writer", "", true, false)
	b.reader = tok("reader", "", false, false)
	b.pr = tok("pers", "_pers", false, false)
	return b
}

// anonymousReads turns anonymous reads on or off (silo.settings auth.anonymous_reads, off by
// default). A server sees the change within the identity cache's 5 seconds; set it before the
// first request without a token.
func (b *testBundle) anonymousReads(t testing.TB, on bool) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `UPDATE silo.settings SET value = $1 WHERE key = 'auth.anonymous_reads'`, fmt.Sprint(on))
	require.NoError(t, err)
}

func (b *testBundle) do(t testing.TB, method, path, auth, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	require.NoError(t, err, "%s %s %q", method, path, body)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

func errID(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	id, _ := e["id"].(string)
	return id
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.do(t, "GET", "/healthz", "", "")
	require.Equal(t, 200, code)
	require.Equal(t, "ok", body["status"])
	code, body = b.do(t, "GET", "/readyz", "", "")
	require.Equal(t, 200, code)
	require.Equal(t, "ready", body["status"])
	code, body = b.do(t, "GET", "/nope", "", "")
	require.Equal(t, 404, code)
	require.Equal(t, "unknown-resource", errID(body))

	b.do(t, "POST", "/profile-updates", "Bearer "+b.writer, `{"_id":"m1","_path":["a"],"_value":{"_v":"x"}}`)
	resp, err := http.Get(b.srv.URL + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(raw), `silo_profile_updates_total{operation="_set",status="ok"} 1`)
	require.Contains(t, string(raw), `silo_http_requests_total{route="POST /profile-updates",status="200"} 1`)
	require.Contains(t, string(raw), `silo_db_pool_connections`)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	upd := `{"_id":"c1","_path":["a"],"_value":{"_v":"x"}}`
	for _, tc := range []struct {
		auth   string
		status int
		id     string
	}{
		{"", 401, "invalid-access-token"},
		{"Bearer nonsense", 401, "invalid-access-token"},
		{"Bearer " + b.reader, 403, "forbidden"},
		{"Bearer " + b.writer, 200, ""},
		{b.writer, 200, ""}, // a bare token
		{"bearer " + b.admin, 200, ""},
	} {
		code, body := b.do(t, "POST", "/profile-updates", tc.auth, upd)
		require.Equal(t, tc.status, code, tc.auth)
		require.Equal(t, tc.id, errID(body))
	}
	code, body := b.do(t, "GET", "/dead-letters", "Bearer "+b.writer, "")
	require.Equal(t, 403, code)
	require.Equal(t, "forbidden", errID(body))
	code, _ = b.do(t, "GET", "/profiles/_d/c1", "Bearer bad", "")
	require.Equal(t, 401, code)
	// Without a token, reads are refused too (anonymous reads are off by default).
	code, body = b.do(t, "GET", "/profiles/_d/c1", "", "")
	require.Equal(t, 401, code)
	require.Equal(t, "invalid-access-token", errID(body))
}

func TestProfileUpdatesAndReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.anonymousReads(t, true) // the reads without a token below
	w := "Bearer " + b.writer
	code, body := b.do(t, "POST", "/profile-updates", w, `[
		{"_id":"0815","_path":["a1"],"_value":{"_v":"abc","_c":0.4,"_in":123,"_reader":"_all"}},
		{"_id":"0815","_path":["a2","b1"],"_operation":"_set_with_history","_value":{"_v":"21","_in":"2018-09-21","_reader":"_pers"}},
		{"_id":"0815","_path":["a2","b1"],"_operation":"_set_with_history","_value":{"_v":"22","_in":"2018-09-22","_reader":"_pers"}},
		{"_id":"0815","_path":["a3"],"_operation":"_inc","_value":{"_v":"0|1|2"}},
		{"_id":"0815","_path":["a4"],"_operation":"_array_append","_value":{"_v":"not an array"}},
		{"_id":"0815","_path":["a1"],"_operation":"_set_if_not_exist","_value":{"_v":"zzz"}}
	]`)
	require.Equal(t, 200, code)
	results := body["results"].([]any)
	require.Len(t, results, 6)
	for i, want := range []string{"ok", "ok", "ok", "ok", "dead_letter", "noop"} {
		require.Equal(t, want, results[i].(map[string]any)["status"], i)
	}
	dl := results[4].(map[string]any)["error"].(map[string]any)
	require.NotEmpty(t, dl["id"])
	require.Equal(t, "Value must be an Array", dl["message"])
	dlID := dl["data"].(map[string]any)["deadLetterId"].(float64)

	// Anonymous: only _all grains.
	code, body = b.do(t, "GET", "/profiles/_d/0815", "", "")
	require.Equal(t, 200, code)
	require.Equal(t, "0815", body["correlationId"])
	require.Equal(t, "_d", body["type"])
	payload := body["jsonPayload"].(map[string]any)
	require.Equal(t, "0815", payload["_id"])
	require.Contains(t, payload, "a1")
	require.NotContains(t, payload, "a3")
	require.NotContains(t, payload, "a2")
	// Any token: _auth too (the counter); role _pers: the history grain.
	_, body = b.do(t, "GET", "/profiles/_d/0815", "Bearer "+b.reader, "")
	require.Contains(t, body["jsonPayload"], "a3")
	require.NotContains(t, body["jsonPayload"], "a2")
	_, body = b.do(t, "GET", "/profiles/_d/0815?withHistory=false", "Bearer "+b.pr, "")
	b1 := body["jsonPayload"].(map[string]any)["a2"].(map[string]any)["b1"].(map[string]any)
	require.Len(t, b1, 1)
	require.Equal(t, "22", b1["_latest"].(map[string]any)["_v"])
	_, body = b.do(t, "GET", "/profiles/_d/0815?fragments=/a2", "Bearer "+b.pr, "")
	require.Len(t, body["jsonPayload"].(map[string]any), 2) // _id and a2
	b1 = body["jsonPayload"].(map[string]any)["a2"].(map[string]any)["b1"].(map[string]any)
	require.Contains(t, b1, "_20180921T000000.000Z")

	code, body = b.do(t, "GET", "/profiles/_d/0815?withHistory=maybe", "", "")
	require.Equal(t, 400, code)
	require.Equal(t, "invalid-parameters-format", errID(body))
	code, body = b.do(t, "GET", "/profiles/_d/nobody", "", "")
	require.Equal(t, 404, code)
	require.Equal(t, "unknown-resource", errID(body))

	// Grain reads with paging.
	code, body = b.do(t, "GET", "/profiles/_d/0815/grain/a2/b1?pageSize=1", "Bearer "+b.pr, "")
	require.Equal(t, 200, code)
	require.EqualValues(t, 2, body["totalGrainVersions"])
	links := body["_links"].(map[string]any)
	require.Contains(t, links["next"].(map[string]any)["href"], "offset=1")
	_, body = b.do(t, "GET", "/profiles/_d/0815/grain/a2/b1?pageSize=1&offset=1", "Bearer "+b.pr, "")
	require.NotContains(t, body["_links"], "next")
	code, _ = b.do(t, "GET", "/profiles/_d/0815/grain/a2", "Bearer "+b.pr, "")
	require.Equal(t, 400, code)
	code, _ = b.do(t, "GET", "/profiles/_d/0815/grain/a2/b1?pageSize=251", "Bearer "+b.pr, "")
	require.Equal(t, 400, code)

	// Dead letters: list, then fix nothing and replay: it fails again and stays unresolved.
	a := "Bearer " + b.admin
	code, body = b.do(t, "GET", "/dead-letters?correlationId=0815", a, "")
	require.Equal(t, 200, code)
	dls := body["deadLetters"].([]any)
	require.Len(t, dls, 1)
	require.Equal(t, dlID, dls[0].(map[string]any)["id"])
	require.Equal(t, "_array_append", dls[0].(map[string]any)["operation"])
	code, body = b.do(t, "POST", "/dead-letters/"+jsonNum(dlID)+"/replay", a, "")
	require.Equal(t, 200, code)
	require.Equal(t, "dead_letter", body["status"])
	code, body = b.do(t, "POST", "/dead-letters/999999/replay", a, "")
	require.Equal(t, 404, code)
	code, _ = b.do(t, "POST", "/dead-letters/abc/replay", a, "")
	require.Equal(t, 400, code)
}

func jsonNum(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestBadBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := "Bearer " + b.writer
	for _, body := range []string{"", "not json", "42", `"str"`, "null", "{", `[1,2`, `{"_id":"a\u0000"}`, "{\"\":\"\xf8\"}"} {
		code, resp := b.do(t, "POST", "/profile-updates", w, body)
		require.Equal(t, 400, code, body)
		require.Equal(t, "invalid-request-structure", errID(resp), body)
	}
	// A lone UTF-16 surrogate passes Go's JSON check, but PostgreSQL refuses it: 400 for that
	// request alone, whatever it was joined with.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, resp := b.do(t, "POST", "/profile-updates", w, fmt.Sprintf(`{"_id":"s%d","_path":["p"],"_value":{"_v":"v"}}`, i))
			require.Equal(t, 200, code, resp)
		}()
	}
	for _, mode := range []string{"", "?mode=async"} {
		code, resp := b.do(t, "POST", "/profile-updates"+mode, w, `{"_id":"a","_path":["p"],"_value":{"_v":"\ud800"}}`)
		require.Equal(t, 400, code, resp)
		require.Equal(t, "invalid-parameters-format", errID(resp))
	}
	wg.Wait()

	// Elements that are not objects are dead letters, not request errors.
	code, resp := b.do(t, "POST", "/profile-updates", w, `[1, "x", null, {"_id":"ok","_path":["p"],"_value":{"_v":"v"}}]`)
	require.Equal(t, 200, code)
	res := resp["results"].([]any)
	require.Len(t, res, 4)
	require.Equal(t, "dead_letter", res[0].(map[string]any)["status"])
	require.Equal(t, "ok", res[3].(map[string]any)["status"])
}

// Text that is not UTF-8 in a path or query parameter is a client error.
func TestNotUTF8Parameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/profiles/_d/%F8", "/profiles/%F8/x", "/profiles/_d/x/grain/%F8",
		"/profiles/_d/x?fragments=%F8", "/dead-letters?correlationId=%F8"} {
		code, _ := b.do(t, "GET", path, "Bearer "+b.admin, "")
		require.True(t, code >= 400 && code < 500, "%s: %d", path, code)
	}
}

// FuzzProfileUpdates: whatever the body, the API answers without a server error.
func FuzzProfileUpdates(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `[{"_id":"x","_path":["a"],"_value":{"_v":"1"}}]`,
		`{"_id":"x","_path":["a"],"_operation":"_inc","_value":{"_v":"1|2|3"}}`, `[{"_id":1}]`, `{"_value":[]}`} {
		f.Add([]byte(s))
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, _ := b.do(t, "POST", "/profile-updates", "Bearer "+b.writer, string(body))
		require.Less(t, code, 500, "body %q", body)
	})
}

// Concurrent small requests are joined into shared batches; each must still get exactly its own
// results.
func TestConcurrentRequestsGetTheirOwnResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := "Bearer " + b.writer
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`[{"_id":"cc%d","_path":["a"],"_value":{"_v":"%d"}},{"_id":"cc%d","_path":["b"],"_value":{"_c":%d,"_v":"x"}}]`, i, i, i, i%2*5)
			code, resp := b.do(t, "POST", "/profile-updates", w, body)
			require.Equal(t, 200, code)
			res := resp["results"].([]any)
			require.Len(t, res, 2)
			require.Equal(t, "ok", res[0].(map[string]any)["status"])
			want := "ok"
			if i%2 == 1 { // _c 5 is out of range
				want = "dead_letter"
			}
			require.Equal(t, want, res[1].(map[string]any)["status"], i)
			code, resp = b.do(t, "GET", fmt.Sprintf("/profiles/_d/cc%d/grain/a", i), w, "")
			require.Equal(t, 200, code)
			require.Equal(t, fmt.Sprint(i), resp["jsonPayload"].(map[string]any)["a"].(map[string]any)["_latest"].(map[string]any)["_v"])
		}()
	}
	wg.Wait()
}

// Deny by default: without a token, every route is refused, websockets included, until an operator
// turns anonymous reads on; then only reads of _all grains, within the identity cache's 5 seconds
// either way.
func TestAnonymousAccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	hub := startHub(t, pool)
	b := &testBundle{pool: pool, srv: httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))}
	t.Cleanup(b.srv.Close)
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('writer', '{}', true, false)`).Scan(&b.writer))
	code, _ := b.do(t, "POST", "/profile-updates", "Bearer "+b.writer,
		`[{"_id":"anon","_path":["pub"],"_value":{"_v":"1","_reader":"_all"}},{"_id":"anon","_path":["auth"],"_value":{"_v":"2"}}]`)
	require.Equal(t, 200, code)
	awaitHub(t, hub)
	wsURL := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws"

	refused := func(t *testing.T) {
		for _, path := range []string{"/profiles/_d/anon", "/profiles/_d/anon/grain/pub", "/profiles/_d/nobody"} {
			code, body := b.do(t, "GET", path, "", "")
			require.Equal(t, 401, code, path)
			require.Equal(t, "invalid-access-token", errID(body), path)
			require.Contains(t, body["error"].(map[string]any)["data"].(map[string]any)["hint"], "auth.anonymous_reads")
		}
		_, resp, err := websocket.DefaultDialer.Dial(wsURL, nil)
		require.ErrorIs(t, err, websocket.ErrBadHandshake)
		resp.Body.Close()
		require.Equal(t, 401, resp.StatusCode)
	}
	refused(t)

	// Turned on: reads of _all grains, nothing else.
	b.anonymousReads(t, true)
	require.Eventually(t, func() bool {
		code, _ := b.do(t, "GET", "/profiles/_d/anon", "", "")
		return code == 200
	}, 10*time.Second, 100*time.Millisecond, "the setting is seen within the identity cache's 5 seconds")
	code, body := b.do(t, "GET", "/profiles/_d/anon", "", "")
	require.Equal(t, 200, code)
	require.Contains(t, body["jsonPayload"], "pub")
	require.NotContains(t, body["jsonPayload"], "auth")
	code, body = b.do(t, "POST", "/profile-updates", "", `{"_id":"anon","_path":["x"],"_value":{"_v":"1"}}`)
	require.Equal(t, 401, code)
	require.Equal(t, "invalid-access-token", errID(body))
	code, _ = b.do(t, "GET", "/dead-letters", "", "")
	require.Equal(t, 401, code)
	conn, resp, err := websocket.DefaultDialer.Dial(wsURL, nil)
	require.NoError(t, err)
	resp.Body.Close()
	conn.Close()

	// Off again: refused again.
	b.anonymousReads(t, false)
	require.Eventually(t, func() bool {
		code, _ := b.do(t, "GET", "/profiles/_d/anon", "", "")
		return code == 401
	}, 10*time.Second, 100*time.Millisecond)
	refused(t)
}

// A caller follows a profile link only when it may read the link grain, and no answer names the
// target of a link it may not read.
func TestProfileLinksRespectReaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, body := b.do(t, "POST", "/profile-updates", "Bearer "+b.writer, `[
		{"_id":"link-target","_path":["a"],"_value":{"_v":"1","_reader":"_all"}},
		{"_operation":"_profile_link","_id":"link-alias","_value":{"_v":"link-target","_reader":"_pers"}}]`)
	require.Equal(t, 200, code, body)
	for _, tc := range []struct {
		name, auth string
		follows    bool
	}{{"without the link's reader", "Bearer " + b.reader, false}, {"with it", "Bearer " + b.pr, true}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/profiles/_d/link-alias?resolveProfileLinks=true",
				"/profiles/_d/link-alias/grain/a?resolveProfileLinks=true"} {
				code, body := b.do(t, "GET", path, tc.auth, "")
				if tc.follows {
					require.Equal(t, 200, code, path)
					require.Equal(t, "link-target", body["correlationId"])
					continue
				}
				require.Equal(t, 404, code, path)
				raw, _ := json.Marshal(body)
				require.NotContains(t, string(raw), "link-target", path)
			}
			// Not found behind the link: the detail names the target only to the link's reader.
			code, body := b.do(t, "GET", "/profiles/_d/link-alias/grain/nothing?resolveProfileLinks=true", tc.auth, "")
			require.Equal(t, 404, code)
			raw, _ := json.Marshal(body)
			require.Equal(t, tc.follows, strings.Contains(string(raw), "link-target"), string(raw))
		})
	}
}

// A write token writes any grain, but its results tell nothing of a grain it may not read: ok
// rather than noop, a grain type clash without the existing type. The dead letter, which only
// admins read, keeps the full reason.
func TestWriteResultsTellOnlyWhatTheTokenMayRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var persWriter string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT token FROM api.token_create('pers-writer', '{_pers}', true, false)`).Scan(&persWriter))
	code, body := b.do(t, "POST", "/profile-updates", "Bearer "+b.admin, `[
		{"_id":"probe","_path":["hidden"],"_value":{"_v":"secret","_reader":"_pers"}},
		{"_id":"probe","_path":["open"],"_value":{"_v":"public"}}]`)
	require.Equal(t, 200, code, body)
	probes := `[
		{"_operation":"_set_if_not_exist","_id":"probe","_path":["hidden"],"_value":{"_v":"guess"}},
		{"_operation":"_set_with_history_distinct","_id":"probe","_path":["hidden"],"_value":{"_v":"secret"}},
		{"_operation":"_set_max","_id":"probe","_path":["hidden"],"_value":{"_v":"a"}},
		{"_operation":"_set_if_not_exist","_id":"probe","_path":["open"],"_value":{"_v":"guess"}},
		{"_operation":"_inc","_id":"probe","_path":["hidden"],"_value":{"_v":"0|1|1"}}]`
	results := func(auth string) ([]string, map[string]any) {
		code, body := b.do(t, "POST", "/profile-updates", auth, probes)
		require.Equal(t, 200, code, body)
		var statuses []string
		var clash map[string]any
		for _, r := range body["results"].([]any) {
			statuses = append(statuses, r.(map[string]any)["status"].(string))
			if e, ok := r.(map[string]any)["error"].(map[string]any); ok {
				clash = e
			}
		}
		return statuses, clash
	}

	statuses, clash := results("Bearer " + b.writer)
	require.Equal(t, []string{"ok", "ok", "ok", "noop", "dead_letter"}, statuses)
	require.Equal(t, "Grain type differs from the existing grain: _inc writes grain type c, the grain at /hidden has another grain type", clash["message"])
	dlID := jsonNum(clash["data"].(map[string]any)["deadLetterId"].(float64))

	statuses, clash = results("Bearer " + persWriter)
	require.Equal(t, []string{"noop", "noop", "noop", "noop", "dead_letter"}, statuses)
	require.Equal(t, "Grain type differs from the existing grain: _inc writes grain type c, the grain at /hidden has grain type t", clash["message"])

	// Nothing was written, and the admin reads the full reason in the dead letter.
	code, body = b.do(t, "GET", "/profiles/_d/probe/grain/hidden", "Bearer "+b.pr, "")
	require.Equal(t, 200, code)
	require.Equal(t, "secret", body["jsonPayload"].(map[string]any)["hidden"].(map[string]any)["_latest"].(map[string]any)["_v"])
	code, body = b.do(t, "GET", "/dead-letters?correlationId=probe&sqlstate=SPTYP", "Bearer "+b.admin, "")
	require.Equal(t, 200, code)
	dls := body["deadLetters"].([]any)
	require.Len(t, dls, 2)
	require.Equal(t, dlID, jsonNum(dls[0].(map[string]any)["id"].(float64)))
	for _, d := range dls {
		require.Equal(t, "Grain type differs from the existing grain: _inc writes grain type c, the grain at /hidden has grain type t",
			d.(map[string]any)["reason"])
	}
}

// A JSON string may hold a backslash followed by u0000: that is text and is stored as written.
// Only the escape of U+0000 itself is refused (jsonb cannot hold it).
func TestBackslashU0000IsText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := "Bearer " + b.writer
	code, resp := b.do(t, "POST", "/profile-updates", w, `{"_id":"nul1","_path":["dir"],"_value":{"_v":"C:\\u0000dir"}}`)
	require.Equal(t, 200, code, resp)
	require.Equal(t, "ok", resp["results"].([]any)[0].(map[string]any)["status"], resp)
	code, resp = b.do(t, "GET", "/profiles/_d/nul1", "Bearer "+b.reader, "")
	require.Equal(t, 200, code, resp)
	grain := resp["jsonPayload"].(map[string]any)["dir"].(map[string]any)["_latest"].(map[string]any)
	require.Equal(t, `C:\u0000dir`, grain["_v"], grain)

	for _, body := range []string{
		`{"_id":"nul2","_path":["dir"],"_value":{"_v":"C:\u0000dir"}}`,
		`{"_id":"nul2","_path":["dir"],"_value":{"_v":"C:\\\u0000dir"}}`,
		`[{"_id":"nul2","_path":["a"],"_value":{"_v":"\\u0000"}},{"_id":"nul2","_path":["b"],"_value":{"_v":"\u0000"}}]`,
	} {
		code, resp = b.do(t, "POST", "/profile-updates", w, body)
		require.Equal(t, 400, code, body)
		require.Equal(t, "invalid-request-structure", errID(resp), body)
	}
}
