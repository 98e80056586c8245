package change_test

// The test bundle of package change: a hub on a database of its own (the hub commits and listens),
// served over GET /ws by Silo's HTTP API through httptest, which authenticates the tokens the
// tests create; and a websocket client that reads the protocol's messages.

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool                 *pgxpool.Pool
	hub                  *change.Hub
	srv                  *httptest.Server
	url                  string // ws://.../ws
	admin, reader, roleA string
}

// smallBufListener gives accepted connections a small socket send buffer, so that a client that
// does not read blocks the server's writes after a few kilobytes.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

func setup(t *testing.T, cfg change.Config, smallBuffers bool, prepare ...func(*pgxpool.Pool)) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{pool: dbtest.Pool(t)}
	for _, p := range prepare {
		p(b.pool)
	}
	cfg.Pool = b.pool
	b.hub = change.NewHub(cfg)
	require.NoError(t, b.hub.Start(ctx))
	b.srv = httptest.NewUnstartedServer(server.New(server.Config{Pool: b.pool, Version: "test", Hub: b.hub}))
	if smallBuffers {
		b.srv.Listener = smallBufListener{b.srv.Listener}
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, b.hub.Stop(sctx))
	})
	b.url = "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws"
	tok := func(name, roles string, write, admin bool) string {
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT token FROM api.token_create($1, string_to_array($2, ','), $3, $4)`,
			name, roles, write, admin).Scan(&s))
		return s
	}
	b.admin = tok("admin", "", true, true)
	b.reader = tok("reader", "", false, false)
	b.roleA = tok("role-a", "roleA", false, false)
	deadline := time.Now().Add(30 * time.Second)
	for !b.hub.Ready() {
		require.True(t, time.Now().Before(deadline), "the hub did not get ready")
		time.Sleep(20 * time.Millisecond)
	}
	return b
}

// apply applies a batch of profile updates in its own transaction.
func (b *testBundle) apply(t *testing.T, updates string) {
	t.Helper()
	rows, err := db.New(b.pool).ProfileApplyBatch(context.Background(), db.ProfileApplyBatchParams{Updates: json.RawMessage(updates)})
	require.NoError(t, err)
	for _, r := range rows {
		if r.Status == "dead_letter" && !strings.Contains(updates, `"_v":null`) {
			t.Fatalf("update dead-lettered: %v", *r.Reason)
		}
	}
}

// settled waits until no change is pending: everything committed so far is in the change log.
func (b *testBundle) settled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM silo.change_pending`).Scan(&n))
		if n == 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "changes stay pending")
		time.Sleep(10 * time.Millisecond)
	}
}

// fannedOut waits until the hub has handed out every change up to id.
func (b *testBundle) fannedOut(t *testing.T, id int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.hub.LastID() < id {
		require.True(t, time.Now().Before(deadline), "the hub stays at %d, before %d", b.hub.LastID(), id)
		time.Sleep(10 * time.Millisecond)
	}
}

// expectedIDs lists the ids of the changes after after whose channel starts with prefix and that
// readers may see (nil: all), from the change log.
func (b *testBundle) expectedIDs(t *testing.T, prefix string, after int64, readers []string) []int64 {
	t.Helper()
	b.settled(t)
	rows, err := b.pool.Query(context.Background(), `SELECT id FROM silo.changes
		WHERE starts_with(channel, $1) AND id > $2 AND ($3::text[] IS NULL OR readers && $3) ORDER BY id`, prefix, after, readers)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ids
}

type wsMsg struct {
	Type        string         `json:"type"`
	ID          int64          `json:"id"`
	Channel     string         `json:"channel"`
	Kind        string         `json:"kind"`
	Payload     map[string]any `json:"payload"`
	Position    int64          `json:"position"`
	Channels    []string       `json:"channels"`
	After       int64          `json:"after"`
	ResumeAfter int64          `json:"resume_after"`
	Cause       string         `json:"cause"`
	Coalesced   int            `json:"coalesced"`
	LastID      int64          `json:"last_id"`
	Error       struct {
		ID      string         `json:"id"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
	raw string
}

func (m wsMsg) paths() []string {
	var out []string
	ps, _ := m.Payload["paths"].([]any)
	for _, p := range ps {
		out = append(out, p.(string))
	}
	return out
}

type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

func (b *testBundle) dial(t *testing.T, query string, header http.Header) *wsClient {
	t.Helper()
	return dialWS(t, b.url+query, header, nil)
}

func dialWS(t *testing.T, u string, header http.Header, dialer *websocket.Dialer) *wsClient {
	t.Helper()
	if dialer == nil {
		dialer = websocket.DefaultDialer
	}
	conn, resp, err := dialer.Dial(u, header)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	require.NoError(t, err)
	c := &wsClient{t: t, conn: conn}
	t.Cleanup(func() { conn.Close() })
	return c
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func (c *wsClient) next() wsMsg {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, data, err := c.conn.ReadMessage()
	require.NoError(c.t, err)
	var m wsMsg
	require.NoError(c.t, json.Unmarshal(data, &m), string(data))
	m.raw = string(data)
	return m
}

// nextType reads the next message and requires its type.
func (c *wsClient) nextType(typ string) wsMsg {
	c.t.Helper()
	m := c.next()
	require.Equal(c.t, typ, m.Type, m.raw)
	return m
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	require.NoError(c.t, c.conn.WriteJSON(v))
}

// changesUntil reads change messages until one on channel arrives (that one included); other
// message types fail the test.
func (c *wsClient) changesUntil(channel string) []wsMsg {
	c.t.Helper()
	var out []wsMsg
	for {
		m := c.nextType("change")
		out = append(out, m)
		if m.Channel == channel {
			return out
		}
	}
}
