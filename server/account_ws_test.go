package server_test

import (
	"context"
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

// GET /{username}/ws: an access of the user hears of the user's event changes, and of nobody
// else's; another user's token is refused before the upgrade.
func TestAccountWS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	hub := startHub(t, pool)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
	t.Cleanup(srv.Close)
	var alice, bob string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.account_user_create('alice')`).Scan(&alice))
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.account_user_create('bobby')`).Scan(&bob))
	awaitHub(t, hub)
	b := &accountBundle{srv: srv}
	for _, tok := range []struct{ user, token string }{{"alice", alice}, {"bobby", bob}} {
		a := b.do(t, "POST", "/"+tok.user+"/streams", tok.token, `{"id": "diary", "name": "Diary"}`)
		require.Equal(t, 201, a.status, a.body)
	}
	a := b.do(t, "POST", "/alice/accesses", alice, `{"name": "reader", "permissions": [{"streamId": "diary", "level": "read"}]}`)
	require.Equal(t, 201, a.status, a.body)
	reader := a.object("access")["token"].(string)

	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http")
	_, resp, err := websocket.DefaultDialer.Dial(wsURL+"/alice/ws?auth="+bob, nil)
	require.ErrorIs(t, err, websocket.ErrBadHandshake)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, server.AccountAPIVersion, resp.Header.Get("API-Version"))

	conn, resp, err := websocket.DefaultDialer.Dial(wsURL+"/alice/ws", http.Header{"Authorization": {reader}})
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var m struct {
		Type, Channel, Kind string
		Payload             struct{ ID string }
	}
	require.NoError(t, conn.ReadJSON(&m))
	require.Equal(t, "ready", m.Type)

	a = b.do(t, "POST", "/bobby/events", bob, `{"streamId": "diary", "type": "note/txt", "content": "not for alice"}`)
	require.Equal(t, 201, a.status, a.body)
	a = b.do(t, "POST", "/alice/events", alice, `{"streamId": "diary", "type": "note/txt", "content": "x"}`)
	require.Equal(t, 201, a.status, a.body)
	id := a.object("event")["id"].(string)
	// The stream alice created before the socket connected may be sequenced after it: its change
	// can come first. The first event change is alice's own.
	for {
		m.Type = ""
		require.NoError(t, conn.ReadJSON(&m))
		if m.Type == "change" && m.Channel != "account:alice:streams" {
			break
		}
	}
	require.Equal(t, "account:alice:events", m.Channel, "bob's change never reaches alice's socket")
	require.Equal(t, "created", m.Kind)
	require.Equal(t, id, m.Payload.ID)
}
