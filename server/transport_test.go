package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

// wsMessage is any server message of the websocket protocol, as far as these tests read it.
type wsMessage struct {
	Type     string
	ID       json.RawMessage
	Channel  string
	Result   map[string]any
	Replayed bool
	Error    struct {
		ID, Message string
	}
}

// Series appends over GET /{username}/ws: acknowledged or refused by the client's id, under the
// access's permissions, on the connection that also carries the user's changes; GET /ws, whose
// tokens hold no account access, refuses them.
func TestWSSeriesAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	hub := startHub(t, pool)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
	t.Cleanup(srv.Close)
	b := &accountBundle{srv: srv}
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.account_user_create('alice')`).Scan(&b.token))
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/alice/streams", b.token, `{"id": "heart", "name": "Heart"}`).status)
	a := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["heart"], "type": "series:mass/kg", "time": 1000}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	event := a.object("event")["id"].(string)
	a = b.do(t, "POST", "/alice/accesses", b.token, `{"name": "reader", "permissions": [{"streamId": "heart", "level": "read"}]}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	reader := a.object("access")["token"].(string)
	awaitHub(t, hub)

	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")
	dial := func(path, token string) *websocket.Conn {
		conn, resp, err := websocket.DefaultDialer.Dial(wsURL+path, http.Header{"Authorization": {token}})
		require.NoError(t, err)
		resp.Body.Close()
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var m wsMessage
		require.NoError(t, conn.ReadJSON(&m))
		require.Equal(t, "ready", m.Type)
		return conn
	}
	// answer sends a message and returns the answer carrying its id, skipping changes.
	answer := func(conn *websocket.Conn, msg string, id string) wsMessage {
		t.Helper()
		require.NoError(t, conn.WriteMessage(websocket.TextMessage, []byte(msg)))
		for {
			var m wsMessage
			require.NoError(t, conn.ReadJSON(&m))
			if m.Type == "change" || m.Type == "subscribed" {
				continue
			}
			require.JSONEq(t, id, string(m.ID), "%+v", m)
			return m
		}
	}

	conn := dial("/alice/ws", b.token)
	flat := `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[0,1.5],[1,2.5]]}`
	m := answer(conn, `{"type":"series.append","id":"a1","eventId":"`+event+`","body":`+flat+`}`, `"a1"`)
	require.Equal(t, "ack", m.Type, m.Error.Message)
	require.Equal(t, "ok", m.Result["status"])
	m = answer(conn, `{"type":"series.append","id":2,"eventId":"`+event+`","csv":"deltaTime,value\n2,3.5\n"}`, `2`)
	require.Equal(t, "ack", m.Type, m.Error.Message)
	batch := `{"format":"seriesBatch","data":[{"eventId":"` + event + `","data":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[3,4.5]]}}]}`
	m = answer(conn, `{"type":"series.batch","id":{"n":3},"body":`+batch+`}`, `{"n":3}`)
	require.Equal(t, "ack", m.Type, m.Error.Message)
	// A key repeated: the first answer, nothing applied again.
	m = answer(conn, `{"type":"series.append","id":"k1","idempotencyKey":"once","eventId":"`+event+`","body":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[4,5.5]]}}`, `"k1"`)
	require.Equal(t, "ack", m.Type, m.Error.Message)
	require.False(t, m.Replayed)
	m = answer(conn, `{"type":"series.append","id":"k2","idempotencyKey":"once","eventId":"`+event+`","body":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[4,5.5]]}}`, `"k2"`)
	require.Equal(t, "ack", m.Type, m.Error.Message)
	require.True(t, m.Replayed)

	for _, c := range []struct{ msg, id, errID string }{
		{`{"type":"series.append","id":"e1","eventId":"` + event + `","body":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,"x"]]}}`, `"e1"`, "invalid-request-structure"},
		{`{"type":"series.append","id":"e2","eventId":"` + event + `","body":[1]}`, `"e2"`, "invalid-request-structure"},
		{`{"type":"series.append","id":"e3","body":` + flat + `}`, `"e3"`, "invalid-request-structure"},
		{`{"type":"series.append","id":"e4","eventId":"nosuchevent","body":` + flat + `}`, `"e4"`, "unknown-resource"},
		{`{"type":"series.append","id":"e5","eventId":"` + event + `","csv":"deltaTime,value\n5,\"open\n"}`, `"e5"`, "invalid-request-structure"},
		{`{"type":"series.append","eventId":"` + event + `","body":` + flat + `}`, `null`, "invalid-request-structure"},
	} {
		m = answer(conn, c.msg, c.id)
		require.Equal(t, "error", m.Type, c.msg)
		require.Equal(t, c.errID, m.Error.ID, m.Error.Message)
	}

	// Appends and subscriptions share the connection: an event created over HTTP arrives.
	a = b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["heart"], "type": "note/txt", "content": "x"}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	for {
		var c wsMessage
		require.NoError(t, conn.ReadJSON(&c))
		if c.Type == "change" && c.Channel == "account:alice:events" {
			break
		}
	}

	// The reader's token: refused, by id.
	rc := dial("/alice/ws", reader)
	m = answer(rc, `{"type":"series.append","id":"r1","eventId":"`+event+`","body":`+flat+`}`, `"r1"`)
	require.Equal(t, "error", m.Type)
	require.Equal(t, "forbidden", m.Error.ID, m.Error.Message)
	m = answer(rc, `{"type":"series.batch","id":"r2","body":`+batch+`}`, `"r2"`)
	require.Equal(t, "forbidden", m.Error.ID, m.Error.Message)

	a = b.do(t, "GET", "/alice/events/"+event+"/series", b.token, "")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, []any{[]any{0.0, 1.5}, []any{1.0, 2.5}, []any{2.0, 3.5}, []any{3.0, 4.5}, []any{4.0, 5.5}}, a.body["points"])

	// The metrics: messages and points applied (a replay too), refusals by reason.
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range []string{
		`silo_series_transport_messages_total{transport="websocket"} 5`,
		`silo_series_transport_points_total{transport="websocket"} 6`,
		`silo_series_transport_rejects_total{reason="invalid-request-structure",transport="websocket"} 5`,
		`silo_series_transport_rejects_total{reason="unknown-resource",transport="websocket"} 1`,
		`silo_series_transport_rejects_total{reason="forbidden",transport="websocket"} 2`,
	} {
		require.Contains(t, string(raw), line+"\n")
	}

	// GET /ws: Silo tokens, no account access.
	var admin string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('ws-admin', p_is_admin => true)`).Scan(&admin))
	sc := dial("/ws", "Bearer "+admin)
	m = answer(sc, `{"type":"series.append","id":"s1","eventId":"`+event+`","body":`+flat+`}`, `"s1"`)
	require.Equal(t, "error", m.Type)
	require.Equal(t, "invalid-operation", m.Error.ID)
	require.Contains(t, m.Error.Message, "/{username}/ws")
}
