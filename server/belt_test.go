package server_test

// The Belt API over HTTP: admin tokens only, Granary's statuses and shapes, paging links, state
// changes on the websocket channel belts. The rules of the documents are tested in SQL
// (db/belt_registry_test.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

func TestBeltAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE FUNCTION public.visits(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $$
		SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{last_page}'), p ->> 'page') $$`)
	require.NoError(t, err)
	admin := "Bearer " + b.admin
	belt := `{"name": "visits", "eventTypes": ["page-view"], "sqlCallback": "visits", "replicas": 2}`

	// Admin tokens only.
	for _, tc := range []struct {
		auth   string
		status int
		id     string
	}{{"", 401, "invalid-access-token"}, {"Bearer " + b.writer, 403, "forbidden"}, {"Bearer " + b.reader, 403, "forbidden"}} {
		for _, req := range [][2]string{{"GET", "/belts"}, {"POST", "/belts"}, {"GET", "/belts/1"}, {"PUT", "/belts/1"},
			{"DELETE", "/belts/1"}, {"GET", "/belts/1/state"}, {"POST", "/belts/1/state"}} {
			status, body := b.do(t, req[0], req[1], tc.auth, belt)
			require.Equal(t, tc.status, status, "%s %s %s", tc.auth, req[0], req[1])
			require.Equal(t, tc.id, errID(body))
		}
	}

	// POST: 201, the whole belt, Location.
	req, err := http.NewRequest("POST", b.srv.URL+"/belts", strings.NewReader(belt))
	require.NoError(t, err)
	req.Header.Set("Authorization", admin)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode, string(raw))
	var created map[string]any
	require.NoError(t, json.Unmarshal(raw, &created))
	id := created["id"].(string)
	require.Equal(t, "/belts/"+id, resp.Header.Get("Location"))
	require.Equal(t, "visits", created["name"])
	require.Equal(t, "public.visits(jsonb, jsonb)", created["sqlCallback"])
	require.Equal(t, "RUNNING", created["status"])
	require.Equal(t, 1.0, created["version"])
	require.NotContains(t, created, "replicas", "deployment fields are ignored")
	for _, k := range []string{"processed", "failed", "retried", "deadLettered", "longRunning"} {
		require.Equal(t, 0.0, created[k], k)
	}

	// The same name again: 409 "<name> exists already"; an unknown field or a bad body: 400.
	status, body := b.do(t, "POST", "/belts", admin, belt)
	require.Equal(t, 409, status)
	require.Equal(t, "item-already-exists", errID(body))
	require.Equal(t, "visits exists already", body["error"].(map[string]any)["message"])
	status, body = b.do(t, "POST", "/belts", admin, `{"name": "x", "eventTypes": ["a"], "sqlCallback": "visits", "colour": "red"}`)
	require.Equal(t, 400, status)
	require.Equal(t, "invalid-request-structure", errID(body))
	require.Contains(t, body["error"].(map[string]any)["message"], "colour")
	status, _ = b.do(t, "POST", "/belts", admin, `[{"name": "x"}]`)
	require.Equal(t, 400, status)
	status, _ = b.do(t, "POST", "/belts", admin, `not json`)
	require.Equal(t, 400, status)
	// A callback that does not validate: stored FAILED, with the reason.
	status, body = b.do(t, "POST", "/belts", admin, `{"name": "broken", "eventTypes": ["a"], "sqlCallback": "visits", "fetchProfile": "TRUE"}`)
	require.Equal(t, 201, status)
	require.Equal(t, "FAILED", body["status"])
	require.Contains(t, body["statusReason"], "exactly 3 parameters")
	brokenID := body["id"].(string)

	// GET one, and the list with Granary's links.
	status, body = b.do(t, "GET", "/belts/"+id, admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, created, body)
	for _, path := range []string{"/belts/999999", "/belts/abc", "/belts/0", "/belts/-1"} {
		status, body = b.do(t, "GET", path, admin, "")
		require.Equal(t, 404, status, path)
		require.Equal(t, "unknown-resource", errID(body), path)
	}
	status, body = b.do(t, "GET", "/belts?pagesize=1", admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, 2.0, body["totalCount"])
	require.Len(t, body["items"], 1)
	links := body["_links"].(map[string]any)
	require.Equal(t, "/belts?offset=0&pagesize=1", links["self"].(map[string]any)["href"])
	require.Equal(t, "/belts?offset=1&pagesize=1", links["next"].(map[string]any)["href"])
	status, body = b.do(t, "GET", "/belts?pagesize=1&offset=1", admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, brokenID, body["items"].([]any)[0].(map[string]any)["id"])
	require.NotContains(t, body["_links"], "next")
	status, _ = b.do(t, "GET", "/belts?pagesize=0", admin, "")
	require.Equal(t, 400, status)

	// PUT: version + 1.
	status, body = b.do(t, "PUT", "/belts/"+id, admin, `{"description": "last page seen"}`)
	require.Equal(t, 200, status)
	require.Equal(t, 2.0, body["version"])
	require.Equal(t, "last page seen", body["description"])
	status, _ = b.do(t, "PUT", "/belts/999999", admin, `{}`)
	require.Equal(t, 404, status)

	// State: STOP, START; a bad action.
	status, body = b.do(t, "GET", "/belts/"+id+"/state", admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, map[string]any{"status": "RUNNING", "reason": nil}, body)
	status, body = b.do(t, "POST", "/belts/"+id+"/state", admin, `{"action": "STOP"}`)
	require.Equal(t, 200, status)
	require.Equal(t, "STOPPED", body["status"])
	status, body = b.do(t, "POST", "/belts/"+id+"/state", admin, `{"action": "START"}`)
	require.Equal(t, 200, status)
	require.Equal(t, "RUNNING", body["status"])
	status, body = b.do(t, "POST", "/belts/"+brokenID+"/state", admin, `{"action": "START"}`)
	require.Equal(t, 200, status)
	require.Equal(t, "FAILED", body["status"])
	require.Contains(t, body["reason"], "exactly 3 parameters")
	for _, bad := range []string{`{"action": "PAUSE"}`, `{}`, `{"action": "START", "force": true}`, `{"action": 1}`} {
		status, body = b.do(t, "POST", "/belts/"+id+"/state", admin, bad)
		require.Equal(t, 400, status, bad)
		require.Equal(t, "invalid-request-structure", errID(body), bad)
	}

	// DELETE: {"content": true}, then 404.
	status, body = b.do(t, "DELETE", "/belts/"+id, admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, map[string]any{"content": true}, body)
	status, body = b.do(t, "DELETE", "/belts/"+id, admin, "")
	require.Equal(t, 404, status)
	require.Equal(t, "unknown-resource", errID(body))
}

// A Python belt needs PL/Python: without the runtime it is refused with 501 and the reason, SQL
// belts work; with it (a stand-in of belt_private.python_check here) it is registered.
func TestBeltAPIPython(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `DROP FUNCTION IF EXISTS belt_private.python_check(text, text)`)
	require.NoError(t, err)
	admin := "Bearer " + b.admin
	py := `{"name": "py", "eventTypes": ["page-view"], "extractorFn": "def execute(event_headers, event_payload, profile=None):\n    return None\n"}`
	status, body := b.do(t, "POST", "/belts", admin, py)
	require.Equal(t, 501, status)
	require.Equal(t, "python-belts-unavailable", errID(body))
	require.Contains(t, body["error"].(map[string]any)["data"].(map[string]any)["hint"], "CREATE EXTENSION plpython3u")
	_, err = b.pool.Exec(ctx, `CREATE FUNCTION belt_private.python_check(p_source text, p_fetch_profile text) RETURNS text
		LANGUAGE sql AS $$ SELECT CASE WHEN strpos(p_source, 'def execute(') = 0 THEN 'no method execute' END $$`)
	require.NoError(t, err)
	status, body = b.do(t, "POST", "/belts", admin, py)
	require.Equal(t, 201, status)
	require.Equal(t, "RUNNING", body["status"])
	require.Nil(t, body["sqlCallback"])
}

// Every change of a belt's state reaches admins subscribed to channel belts.
func TestBeltStateChangesReachTheWebsocket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	hub := startHub(t, b.pool)
	srv := httptest.NewServer(server.New(server.Config{Pool: b.pool, Version: "test", Hub: hub}))
	t.Cleanup(srv.Close)
	awaitHub(t, hub)
	_, err := b.pool.Exec(ctx, `CREATE FUNCTION public.noop(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'`)
	require.NoError(t, err)

	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws?channel=belts"
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + b.admin}})
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	type message struct {
		Type    string
		Channel string
		Kind    string
		Payload struct {
			BeltID int64 `json:"belt_id"`
			Status string
		}
	}
	next := func(typ string) message {
		t.Helper()
		for {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var m message
			require.NoError(t, conn.ReadJSON(&m))
			if m.Type == typ {
				return m
			}
		}
	}
	next("subscribed")
	// Only admins: another token is told so on its connection.
	other, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + b.writer}})
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { other.Close() })
	for {
		_ = other.SetReadDeadline(time.Now().Add(30 * time.Second))
		var m struct {
			Type  string
			Error struct{ ID string }
		}
		require.NoError(t, other.ReadJSON(&m))
		if m.Type == "error" {
			require.Equal(t, "forbidden", m.Error.ID)
			break
		}
	}

	call := func(method, path, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.admin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Less(t, resp.StatusCode, 300)
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return out
	}
	created := call("POST", "/belts", `{"name": "ws", "eventTypes": ["a"], "sqlCallback": "noop"}`)
	id := created["id"].(string)
	call("POST", "/belts/"+id+"/state", `{"action": "STOP"}`)
	call("PUT", "/belts/"+id, `{"fetchProfile": "TRUE"}`)
	call("POST", "/belts/"+id+"/state", `{"action": "START"}`)
	call("DELETE", "/belts/"+id, "")
	// The update of a stopped belt whose callback no longer validates makes it FAILED; START
	// leaves it FAILED with the same reason, which is no change and not published.
	var got []string
	for range 4 {
		m := next("change")
		require.Equal(t, "belts", m.Channel)
		require.Equal(t, "state", m.Kind)
		require.Equal(t, id, fmt.Sprint(m.Payload.BeltID))
		got = append(got, m.Payload.Status)
	}
	require.Equal(t, []string{"RUNNING", "STOPPED", "FAILED", "DELETED"}, got)
}

// FuzzBeltCreate: whatever the belt document, POST and PUT answer without a server error (501 is
// the answer to a Python belt where PL/Python is missing).
func FuzzBeltCreate(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"name": "a", "eventTypes": ["t"], "sqlCallback": "f"}`,
		`{"name": "b", "eventTypes": ["t"], "sqlCallback": "f(jsonb", "fetchProfile": true}`,
		`{"name": "c", "eventTypes": [1], "extractorFn": "def execute(h, p): pass"}`,
		`{"name": "d", "eventTypes": ["t"], "sqlCallback": "a.b.c.d", "extraEnv": [{"name": "RETRY_MAX_RETRIES", "value": "1e400"}]}`,
		`{"name": "e", "eventTypes": ["t"], "sqlCallback": "f", "extraEnv": [{"name": "CALLBACK_TIMEOUT_SEC", "value": 1e-400}]}`,
		`{"name": "", "labels": [], "profileType": null, "secretX": {}}`} {
		f.Add([]byte(s))
	}
	b := setup(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, _ := b.do(t, "POST", "/belts", "Bearer "+b.admin, string(body))
		require.True(t, code < 500 || code == 501, "POST body %q: %d", body, code)
		code, _ = b.do(t, "PUT", "/belts/1", "Bearer "+b.admin, string(body))
		require.True(t, code < 500 || code == 501, "PUT body %q: %d", body, code)
	})
}

// Dead letters over HTTP: a belt step dead-letters an event, GET lists it with paging links and the
// replayed filter, POST replays it (all, or by ids), and bad requests are 400s, other tokens 403.
func TestBeltDeadLettersAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `CREATE FUNCTION public.picky(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $$
		SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{n}'), (p ->> 'n')::int::text) $$`)
	require.NoError(t, err)
	admin := "Bearer " + b.admin
	status, created := b.do(t, "POST", "/belts", admin, `{"name": "picky", "eventTypes": ["num"], "sqlCallback": "picky"}`)
	require.Equal(t, 201, status)
	id := created["id"].(string)
	status, evs := b.do(t, "POST", "/events", admin, `[{"event_headers": {"grnry-event-id": "n1", "grnry-event-type": "num", "grnry-correlation-id": "c1"}, "event_payload": {"n": "x"}},
		{"event_headers": {"grnry-event-id": "n2", "grnry-event-type": "num", "grnry-correlation-id": "c2"}, "event_payload": {"n": "y"}}]`)
	require.Equal(t, 200, status, "%v", evs)
	_, err = b.pool.Exec(ctx, `SELECT * FROM api.belt_process()`)
	require.NoError(t, err)

	for _, auth := range []string{"Bearer " + b.writer, "Bearer " + b.reader} {
		status, body := b.do(t, "GET", "/belts/"+id+"/dead-letters", auth, "")
		require.Equal(t, 403, status)
		require.Equal(t, "forbidden", errID(body))
		status, _ = b.do(t, "POST", "/belts/"+id+"/dead-letters/replay", auth, "")
		require.Equal(t, 403, status)
	}
	status, page := b.do(t, "GET", "/belts/"+id+"/dead-letters?pagesize=1", admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, 2.0, page["totalCount"])
	items := page["items"].([]any)
	require.Len(t, items, 1)
	first := items[0].(map[string]any)
	require.Equal(t, "n1", first["eventId"])
	require.Equal(t, "22P02", first["sqlstate"])
	require.Equal(t, map[string]any{"n": "x"}, first["event_payload"])
	require.Contains(t, page["_links"].(map[string]any)["next"].(map[string]any)["href"], "offset=1")

	for _, body := range []string{`{"ids": ["x"]}`, `{"ids": [0]}`, `{"other": 1}`, `[1]`} {
		status, resp := b.do(t, "POST", "/belts/"+id+"/dead-letters/replay", admin, body)
		require.Equal(t, 400, status, body)
		require.Equal(t, "invalid-request-structure", errID(resp))
	}
	status, resp := b.do(t, "POST", "/belts/"+id+"/dead-letters/replay", admin, `{"ids": [`+fmt.Sprint(first["id"])+`]}`)
	require.Equal(t, 200, status)
	require.Equal(t, 1.0, resp["replayed"])
	status, page = b.do(t, "GET", "/belts/"+id+"/dead-letters?replayed=false", admin, "")
	require.Equal(t, 200, status)
	require.Equal(t, 1.0, page["totalCount"])
	status, resp = b.do(t, "POST", "/belts/"+id+"/dead-letters/replay", admin, "{}")
	require.Equal(t, 200, status)
	require.Equal(t, 1.0, resp["replayed"])
	status, body := b.do(t, "GET", "/belts/"+id+"/dead-letters?replayed=maybe", admin, "")
	require.Equal(t, 400, status, "%v", body)
	status, body = b.do(t, "GET", "/belts/999999/dead-letters", admin, "")
	require.Equal(t, 404, status)
	require.Equal(t, "unknown-resource", errID(body))
	status, _ = b.do(t, "POST", "/belts/999999/dead-letters/replay", admin, "{}")
	require.Equal(t, 404, status)
	var pending int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM event.deliveries WHERE dead_letter_id IS NOT NULL`).Scan(&pending))
	require.Equal(t, 2, pending, "both dead letters are delivered again")
}
