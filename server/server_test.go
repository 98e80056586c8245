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

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	srv                       *httptest.Server
	admin, writer, reader, pr string // tokens: admin; write only; read (no roles); read with role _pers
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	b := &testBundle{srv: httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))}
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
}

func TestProfileUpdatesAndReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
