package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

type accountBundle struct {
	srv   *httptest.Server
	token string // alice's personal token
}

func accountSetup(t *testing.T) *accountBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	b := &accountBundle{srv: httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test"}))}
	t.Cleanup(b.srv.Close)
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT token FROM api.account_user_create('alice')`).Scan(&b.token))
	return b
}

type accountAnswer struct {
	status int
	header http.Header
	body   map[string]any
}

func (a accountAnswer) errID() string {
	e, _ := a.body["error"].(map[string]any)
	id, _ := e["id"].(string)
	return id
}

func (a accountAnswer) object(key string) map[string]any {
	m, _ := a.body[key].(map[string]any)
	return m
}

// do sends a request; auth sets the Authorization header as it is (empty: none).
func (b *accountBundle) do(t *testing.T, method, path, auth, body string) accountAnswer {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	return b.send(t, req)
}

func (b *accountBundle) send(t *testing.T, req *http.Request) accountAnswer {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := accountAnswer{status: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.body), "%s %s: %s", req.Method, req.URL.Path, raw)
	// Pryv's envelope, on every answer.
	require.Equal(t, server.AccountAPIVersion, resp.Header.Get("API-Version"), string(raw))
	meta := a.object("meta")
	require.Equal(t, server.AccountAPIVersion, meta["apiVersion"], string(raw))
	require.InDelta(t, float64(time.Now().UnixMicro())/1e6, meta["serverTime"], 60, string(raw))
	require.NotEmpty(t, meta["serial"], string(raw))
	return a
}

// The token in each of Pryv's places; without one, or with a wrong one, Pryv's errors.
func TestAccountHTTPAuthentication(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)

	a := b.do(t, "GET", "/alice/accesses", b.token, "")
	require.Equal(t, 200, a.status, a.body)
	a = b.do(t, "GET", "/alice/accesses", "Bearer "+b.token, "")
	require.Equal(t, 200, a.status, a.body)
	a = b.do(t, "GET", "/alice/accesses?auth="+url.QueryEscape(b.token), "", "")
	require.Equal(t, 200, a.status, a.body)
	u, err := url.Parse(b.srv.URL + "/alice/accesses")
	require.NoError(t, err)
	u.User = url.User(b.token) // http://{token}@host/alice/accesses: the user part of basic auth
	req, err := http.NewRequest("GET", u.String(), nil)
	require.NoError(t, err)
	a = b.send(t, req)
	require.Equal(t, 200, a.status, a.body)
	accesses := a.body["accesses"].([]any)
	require.Len(t, accesses, 1)
	require.Equal(t, "personal", accesses[0].(map[string]any)["type"])

	a = b.do(t, "GET", "/alice/access-info", b.token, "")
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, "personal", a.body["type"])
	require.Equal(t, map[string]any{"username": "alice"}, a.body["user"])

	// A browser's preflight, and the CORS headers of every answer.
	req, err = http.NewRequest("OPTIONS", b.srv.URL+"/alice/events", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://app.example")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "true", resp.Header.Get("Access-Control-Allow-Credentials"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Headers"), "Authorization")
	require.Equal(t, server.AccountAPIVersion, resp.Header.Get("API-Version"))
	a = b.do(t, "GET", "/alice/events", b.token, "")
	require.Equal(t, "*", a.header.Get("Access-Control-Allow-Origin"))

	for _, tc := range []struct {
		path, auth string
		status     int
		id         string
	}{
		{"/alice/events", "", 401, "missing-header"},
		{"/alice/events", "cnotatoken", 403, "invalid-access-token"},
		{"/alice/events", "Basic !!!", 401, "missing-header"},
		{"/nobody/events", b.token, 404, "unknown-resource"},
		{"/alice/nothing-here", b.token, 404, "unknown-resource"},
	} {
		a := b.do(t, "GET", tc.path, tc.auth, "")
		require.Equal(t, tc.status, a.status, "%s %q: %v", tc.path, tc.auth, a.body)
		require.Equal(t, tc.id, a.errID(), "%s %q", tc.path, tc.auth)
		require.NotEmpty(t, a.object("error")["message"])
	}
}

// A Pryv client's session: streams, an app access, events, a series holder, updates and deletes.
func TestAccountHTTPSession(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	tok := b.token

	a := b.do(t, "POST", "/alice/streams", tok, `{"id": "heart", "name": "Heart"}`)
	require.Equal(t, 201, a.status, a.body)
	require.Equal(t, "heart", a.object("stream")["id"])
	a = b.do(t, "POST", "/alice/streams", tok, `{"name": "Weight", "parentId": "heart"}`)
	require.Equal(t, 201, a.status, a.body)
	a = b.do(t, "POST", "/alice/streams", tok, `{"name": "Weight", "parentId": "heart"}`)
	require.Equal(t, 409, a.status, a.body)
	require.Equal(t, "item-already-exists", a.errID())
	a = b.do(t, "GET", "/alice/streams", tok, "")
	require.Equal(t, 200, a.status, a.body)
	streams := a.body["streams"].([]any)
	require.Len(t, streams, 1)
	require.Equal(t, "weight", streams[0].(map[string]any)["children"].([]any)[0].(map[string]any)["id"])

	// An app access that may only add to heart.
	a = b.do(t, "POST", "/alice/accesses", tok, `{"name": "scale", "permissions": [{"streamId": "heart", "level": "create-only"}]}`)
	require.Equal(t, 201, a.status, a.body)
	scale := a.object("access")["token"].(string)
	require.NotEmpty(t, scale)

	a = b.do(t, "POST", "/alice/events", scale, `{"streamIds": ["weight"], "type": "series:mass/kg"}`)
	require.Equal(t, 201, a.status, a.body)
	holder := a.object("event")
	id := holder["id"].(string)
	require.Equal(t, "series:mass/kg", holder["type"])
	require.Equal(t, 0.0, holder["duration"])
	a = b.do(t, "GET", "/alice/events/"+id, scale, "")
	require.Equal(t, 403, a.status, "create-only does not read")
	require.Equal(t, "forbidden", a.errID())
	a = b.do(t, "POST", "/alice/streams", scale, `{"name": "Mine", "parentId": "heart"}`)
	require.Equal(t, 403, a.status)

	a = b.do(t, "POST", "/alice/events", tok, `{"streamId": "heart", "type": "note/txt", "content": "hello", "time": 1700000000.5}`)
	require.Equal(t, 201, a.status, a.body)
	note := a.object("event")["id"].(string)

	// Listing: series left out unless asked for.
	list := func(query string) []string {
		a := b.do(t, "GET", "/alice/events"+query, tok, "")
		require.Equal(t, 200, a.status, "%s: %v", query, a.body)
		ids := []string{}
		for _, e := range a.body["events"].([]any) {
			ids = append(ids, e.(map[string]any)["id"].(string))
		}
		return ids
	}
	require.Equal(t, []string{note}, list(""))
	require.ElementsMatch(t, []string{note, id}, list("?includeSeries=true"))
	require.Equal(t, []string{id}, list("?types[]=series:mass/*"))
	require.Equal(t, []string{id}, list("?types=series:*"))
	require.Equal(t, []string{id}, list(`?types=["series:mass/kg"]`))
	require.Equal(t, []string{id}, list("?streams[]=weight&includeSeries=true"))
	require.ElementsMatch(t, []string{note, id}, list("?streams=heart&streams=weight&includeSeries=true"))
	require.Equal(t, []string{note}, list("?fromTime=1700000000&toTime=1700000001"))
	require.Equal(t, []string{note}, list("?limit=1&includeSeries=true&sortAscending=true"))
	for _, q := range []string{"?fromTime=yesterday", "?limit=-1", "?includeSeries=maybe", "?types=mass", "?state=gone"} {
		a := b.do(t, "GET", "/alice/events"+q, tok, "")
		require.Equal(t, 400, a.status, q)
		require.Equal(t, "invalid-parameters-format", a.errID(), q)
	}
	a = b.do(t, "GET", "/alice/events?streams=nowhere", tok, "")
	require.Equal(t, 400, a.status)
	require.Equal(t, "unknown-referenced-resource", a.errID())

	// Updates: a series event keeps its type, content and duration.
	a = b.do(t, "PUT", "/alice/events/"+id, tok, `{"description": "bathroom scale"}`)
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, "bathroom scale", a.object("event")["description"])
	for _, body := range []string{`{"type": "series:mass/lb"}`, `{"content": 1}`, `{"duration": 3}`} {
		a := b.do(t, "PUT", "/alice/events/"+id, tok, body)
		require.Equal(t, 400, a.status, body)
		require.Equal(t, "invalid-operation", a.errID(), body)
	}

	// Errors of shape.
	for _, tc := range []struct{ method, path, body, id string }{
		{"POST", "/alice/events", `not json`, "invalid-request-structure"},
		{"POST", "/alice/events", `[1, 2]`, "invalid-request-structure"},
		{"POST", "/alice/events", `{"streamId": "heart"}`, "invalid-parameters-format"},
		{"POST", "/alice/events", `{"streamId": "heart", "type": "series:mass/none"}`, "invalid-event-type"},
		{"POST", "/alice/events", `{"streamId": "nowhere", "type": "note/txt"}`, "unknown-referenced-resource"},
		{"POST", "/alice/accesses", `{"name": "x", "permissions": [{"streamId": "heart", "level": "owner"}]}`, "invalid-parameters-format"},
	} {
		a := b.do(t, tc.method, tc.path, tok, tc.body)
		require.Equal(t, 400, a.status, "%s %s", tc.path, tc.body)
		require.Equal(t, tc.id, a.errID(), "%s %s", tc.path, tc.body)
	}

	// DELETE trashes, then deletes.
	a = b.do(t, "DELETE", "/alice/events/"+id, tok, "")
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, true, a.object("event")["trashed"])
	a = b.do(t, "DELETE", "/alice/events/"+id, tok, "")
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, id, a.object("eventDeletion")["id"])
	a = b.do(t, "GET", "/alice/events/"+id, tok, "")
	require.Equal(t, 404, a.status)
	require.Equal(t, "unknown-resource", a.errID())
}

// Pryv's batch call, as its JavaScript client's connection.api() sends it: one result per call, in
// order, each its own success or error.
func TestAccountHTTPBatch(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	a := b.do(t, "POST", "/alice/", b.token, `[
		{"method": "streams.create", "params": {"id": "heart", "name": "Heart"}},
		{"method": "events.create", "params": {"streamIds": ["heart"], "type": "series:mass/kg"}},
		{"method": "events.create", "params": {"streamId": "heart", "type": "note/txt", "content": "hi", "time": 10}},
		{"method": "events.create", "params": {"streamId": "nowhere", "type": "note/txt"}},
		{"method": "events.get", "params": {"streams": ["heart"], "types": ["series:*"], "limit": 5}},
		{"method": "events.get", "params": {"fromTime": 0, "sortAscending": true}},
		{"method": "streams.get"},
		{"method": "getAccessInfo", "params": {}},
		{"method": "accesses.create", "params": {"name": "app", "permissions": [{"streamId": "heart", "level": "read"}]}},
		{"method": "events.fly", "params": {}},
		{"method": "events.get", "params": {"fromTime": {"x": 1}}}
	]`)
	require.Equal(t, 200, a.status, a.body)
	results := a.body["results"].([]any)
	require.Len(t, results, 11)
	res := func(i int) map[string]any { return results[i].(map[string]any) }
	require.Equal(t, "heart", res(0)["stream"].(map[string]any)["id"])
	holder := res(1)["event"].(map[string]any)["id"]
	note := res(2)["event"].(map[string]any)["id"]
	require.Equal(t, "unknown-referenced-resource", res(3)["error"].(map[string]any)["id"])
	require.Len(t, res(4)["events"], 1)
	require.Equal(t, holder, res(4)["events"].([]any)[0].(map[string]any)["id"])
	require.Len(t, res(5)["events"], 1)
	require.Equal(t, note, res(5)["events"].([]any)[0].(map[string]any)["id"])
	require.Len(t, res(6)["streams"], 1)
	require.Equal(t, map[string]any{"username": "alice"}, res(7)["user"])
	require.NotEmpty(t, res(8)["access"].(map[string]any)["token"])
	require.Equal(t, "invalid-method", res(9)["error"].(map[string]any)["id"])
	require.Equal(t, "invalid-parameters-format", res(10)["error"].(map[string]any)["id"])

	a = b.do(t, "POST", "/alice/", b.token, `[
		{"method": "events.update", "params": {"id": "`+holder.(string)+`", "update": {"content": 1}}},
		{"method": "events.update", "params": {"id": "`+note.(string)+`", "update": {"content": "bye"}}},
		{"method": "events.getOne", "params": {"id": "`+note.(string)+`"}},
		{"method": "events.delete", "params": {"id": "`+note.(string)+`"}},
		{"method": "events.delete", "params": {"id": "`+note.(string)+`"}}
	]`)
	require.Equal(t, 200, a.status, a.body)
	results = a.body["results"].([]any)
	require.Equal(t, "invalid-operation", res(0)["error"].(map[string]any)["id"])
	require.Equal(t, "bye", res(1)["event"].(map[string]any)["content"])
	require.Equal(t, "bye", res(2)["event"].(map[string]any)["content"])
	require.Equal(t, true, res(3)["event"].(map[string]any)["trashed"])
	require.Equal(t, note, res(4)["eventDeletion"].(map[string]any)["id"])

	for _, body := range []string{`{"method": "events.get"}`, `[1]`, `[{"method": 3}]`} {
		a := b.do(t, "POST", "/alice/", b.token, body)
		require.Equal(t, 400, a.status, body)
		require.Equal(t, "invalid-request-structure", a.errID(), body)
	}
	a = b.do(t, "POST", "/alice/", "", `[]`)
	require.Equal(t, 401, a.status)
}
