package server_test

// Tests of change notifications over GET /ws (server/hub.go, server/ws.go) against the real
// PostgreSQL: authentication, what a token may see, resuming without gap or duplicate, expired
// resumes, slow clients, debounce, the listener's reconnection and shutdown.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

type wsBundle struct {
	pool                 *pgxpool.Pool
	hub                  *server.Hub
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

func setupWS(t *testing.T, cfg server.HubConfig, smallBuffers bool, prepare ...func(*pgxpool.Pool)) *wsBundle {
	t.Helper()
	ctx := context.Background()
	b := &wsBundle{pool: dbtest.Pool(t)}
	for _, p := range prepare {
		p(b.pool)
	}
	cfg.Pool = b.pool
	b.hub = server.NewHub(cfg)
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
func (b *wsBundle) apply(t *testing.T, updates string) {
	t.Helper()
	rows, err := db.New(b.pool).ProfileApplyBatch(context.Background(), json.RawMessage(updates))
	require.NoError(t, err)
	for _, r := range rows {
		if r.Status == "dead_letter" && !strings.Contains(updates, `"_v":null`) {
			t.Fatalf("update dead-lettered: %v", *r.Reason)
		}
	}
}

// settled waits until no change is pending: everything committed so far is in the change log.
func (b *wsBundle) settled(t *testing.T) {
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
func (b *wsBundle) fannedOut(t *testing.T, id int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for b.hub.LastID() < id {
		require.True(t, time.Now().Before(deadline), "the hub stays at %d, before %d", b.hub.LastID(), id)
		time.Sleep(10 * time.Millisecond)
	}
}

// expectedIDs lists the ids of the changes after after whose channel starts with prefix and that
// readers may see (nil: all), from the change log.
func (b *wsBundle) expectedIDs(t *testing.T, prefix string, after int64, readers []string) []int64 {
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
		ID      string `json:"id"`
		Message string `json:"message"`
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

func (b *wsBundle) dial(t *testing.T, query string, header http.Header) *wsClient {
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

func ids(ms []wsMsg) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestWSRefusesBadTokensBeforeTheUpgrade(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	for _, tc := range []struct {
		name, query string
		header      http.Header
		status      int
		errID       string
	}{
		{"unknown token in the header", "", bearer("silo_nope"), 401, "invalid-access-token"},
		{"unknown token in ?auth", "?auth=silo_nope", nil, 401, "invalid-access-token"},
		{"bad after", "?after=-1", bearer(b.reader), 400, "invalid-parameters-format"},
		{"bad debounce", "?debounce_ms=x", nil, 400, "invalid-parameters-format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := websocket.DefaultDialer.Dial(b.url+tc.query, tc.header)
			require.ErrorIs(t, err, websocket.ErrBadHandshake)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			body, _ := io.ReadAll(resp.Body)
			var e struct {
				Error struct{ ID string } `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, tc.errID, e.Error.ID)
		})
	}
	// A plain GET is not an upgrade.
	resp, err := http.Get(b.srv.URL + "/ws")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	// Without a hub the route exists but does not serve.
	plain := httptest.NewServer(server.New(server.Config{Pool: b.pool}))
	defer plain.Close()
	resp, err = http.Get(plain.URL + "/ws")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
}

// Every token receives the changes of the grains it may read and nothing else: not a path of
// another reader, not a dead letter unless it is an admin.
func TestWSDeliversOnlyWhatTheTokenMayRead(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	q := "?channels=profile:vis:*,dead-letters"
	clients := map[string]*wsClient{
		"anonymous": b.dial(t, q, nil),
		"reader":    b.dial(t, q, bearer(b.reader)),
		"roleA":     b.dial(t, q+"&auth="+b.roleA, nil),
		"admin":     b.dial(t, q, bearer(b.admin)),
	}
	for _, c := range clients {
		c.nextType("ready")
		require.Equal(t, []string{"dead-letters", "profile:vis:*"}, c.nextType("subscribed").Channels)
	}
	b.apply(t, `[
		{"_id":"p","_profile_type":"vis","_path":["all"],"_value":{"_v":"1","_reader":"_all"}},
		{"_id":"p","_profile_type":"vis","_path":["auth"],"_value":{"_v":"1"}},
		{"_id":"p","_profile_type":"vis","_path":["a"],"_value":{"_v":"1","_reader":"roleA"}},
		{"_id":"p","_profile_type":"vis","_path":["b"],"_value":{"_v":"1","_reader":"roleB"}},
		{"_id":"p","_profile_type":"vis","_path":["bad"],"_value":{"_v":null}}]`)
	b.apply(t, `{"_id":"end","_profile_type":"vis","_path":["end"],"_value":{"_v":"1","_reader":"_all"}}`)

	want := map[string][]string{
		"anonymous": {"/all", "/end"},
		"reader":    {"/all", "/auth", "/end"},
		"roleA":     {"/a", "/all", "/auth", "/end"},
		"admin":     {"/a", "/all", "/auth", "/b", "/end", "dead_letter"},
	}
	for name, c := range clients {
		var got []string
		for _, m := range c.changesUntil("profile:vis:end") {
			if m.Kind == "dead_letter" {
				require.Equal(t, "dead-letters", m.Channel)
				require.Equal(t, "SPVAL", m.Payload["sqlstate"])
				got = append(got, m.Kind)
				continue
			}
			require.Equal(t, "changed", m.Kind)
			require.Equal(t, "vis", m.Payload["profile_type"])
			require.NotContains(t, m.raw, `"1"`, "a value reached the client")
			got = append(got, m.paths()...)
		}
		slices.Sort(got)
		require.Equal(t, want[name], got, name)
	}
}

// A client that drops its connection now and then and resumes with the last id it saw receives
// every change exactly once, in order, while writes go on; a client that never drops does too.
func TestWSResumeHasNoGapAndNoDuplicate(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{ReplayPage: 7}, false)
	steady := b.dial(t, "?channels=profile:res:*", bearer(b.reader))
	start := steady.nextType("ready").Position
	steady.nextType("subscribed")

	const writes = 300
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range writes + 1 {
			u := fmt.Sprintf(`{"_id":"c%d","_profile_type":"res","_path":["p%d"],"_value":{"_v":"%d"}}`, i%7, i, i)
			if i%10 == 0 { // now and then a change the reader may not see
				u = fmt.Sprintf(`[%s,{"_id":"c%d","_profile_type":"res","_path":["s%d"],"_value":{"_v":"x","_reader":"secret"}}]`, u, i%7, i)
			}
			if i == writes { // the last one
				u = `{"_id":"end","_profile_type":"res","_path":["end"],"_value":{"_v":"x"}}`
			}
			if _, err := db.New(b.pool).ProfileApplyBatch(context.Background(), json.RawMessage(u)); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	r := rand.New(rand.NewPCG(1, 2))
	var got []int64
	last := start
	for round, end := 0, false; !end; round++ {
		var c *wsClient
		if round%2 == 0 {
			c = b.dial(t, fmt.Sprintf("?channels=profile:res:*&after=%d", last), bearer(b.reader))
			require.Equal(t, last, c.nextType("ready").Position)
		} else {
			c = b.dial(t, "", bearer(b.reader))
			c.nextType("ready")
			c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:res:*"}, "after": last})
		}
		n := 5 + r.IntN(40)
		for i := 0; i < n && !end; {
			m := c.next()
			if m.Type == "subscribed" {
				continue
			}
			require.Equal(t, "change", m.Type, m.raw)
			require.NotContains(t, m.paths()[0], "/s", "a secret path reached the reader")
			got = append(got, m.ID)
			last = m.ID
			end = m.Channel == "profile:res:end"
			i++
		}
		// Drop the connection without a close handshake.
		_ = c.conn.NetConn().Close()
	}
	<-done
	final := b.expectedIDs(t, "profile:res:", start, []string{"_all", "_auth"})
	require.Len(t, final, writes+1)
	require.Equal(t, final, got)

	var steadyGot []int64
	for len(steadyGot) < len(final) {
		steadyGot = append(steadyGot, steady.nextType("change").ID)
	}
	require.Equal(t, final, steadyGot)
}

// A resume from before the trim horizon is reported (expired) and goes on with what is kept; a
// resume from beyond the log is reported too (ahead).
func TestWSReportsAnExpiredResume(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	ctx := context.Background()
	b.apply(t, `[{"_id":"1","_profile_type":"exp","_path":["a"],"_value":{"_v":"1"}},
		{"_id":"2","_profile_type":"exp","_path":["a"],"_value":{"_v":"1"}},
		{"_id":"3","_profile_type":"exp","_path":["a"],"_value":{"_v":"1"}}]`)
	last, err := db.New(b.pool).ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int64(3), last)
	// The hub must have fanned the three out before the trim, or it finds itself behind the log
	// and disconnects everyone (4002, tested below).
	b.fannedOut(t, last)
	_, err = b.pool.Exec(ctx, `UPDATE silo.changes SET sequenced = now() - interval '2 days' WHERE id <= 2`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `SELECT api.change_trim()`)
	require.NoError(t, err)

	c := b.dial(t, "?after=1&channels=profile:exp:*", bearer(b.reader))
	m := c.nextType("expired")
	require.Equal(t, []any{int64(1), int64(2), "expired"}, []any{m.After, m.ResumeAfter, m.Cause})
	require.Equal(t, int64(2), c.nextType("ready").Position)
	ch := c.nextType("change")
	require.Equal(t, []any{int64(3), "profile:exp:3"}, []any{ch.ID, ch.Channel})
	c.nextType("subscribed")

	c = b.dial(t, "?after=1000", bearer(b.reader))
	m = c.nextType("expired")
	require.Equal(t, []any{int64(1000), int64(3), "ahead"}, []any{m.After, m.ResumeAfter, m.Cause})
	require.Equal(t, int64(3), c.nextType("ready").Position)

	// In a subscribe message, before anything was delivered.
	c = b.dial(t, "", bearer(b.reader))
	c.nextType("ready")
	c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:exp:*"}, "after": 0})
	m = c.nextType("expired")
	require.Equal(t, []any{int64(0), int64(2)}, []any{m.After, m.ResumeAfter})
	require.Equal(t, int64(3), c.nextType("change").ID)
	require.Equal(t, int64(3), c.nextType("subscribed").Position)
}

// A client that never reads is disconnected when its queue is full, with a close reason that
// names the id to resume from; a fast client meanwhile receives everything. Resuming from that id
// gives the rest.
func TestWSSlowClientIsDisconnectedWithItsResumeID(t *testing.T) {
	t.Parallel()
	// The queue must hold a burst: the hub fans out up to 1000 changes (a page) at once.
	b := setupWS(t, server.HubConfig{ClientBuffer: 1000}, true)
	fast := b.dial(t, "?channels=profile:slow:*", bearer(b.reader))
	start := fast.nextType("ready").Position
	fast.nextType("subscribed")
	small := &websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}
	slow := dialWS(t, b.url+"?channels=profile:slow:*", bearer(b.reader), small)
	slow.nextType("ready")
	slow.nextType("subscribed")

	const batches, perBatch = 30, 100
	// The fast client reads all along; each batch is written once it has the previous one, so
	// that no burst exceeds its queue (a burst larger than the queue disconnects any client).
	var fastGot []int64
	for i := range batches {
		var us []string
		for j := range perBatch {
			us = append(us, fmt.Sprintf(`{"_id":"c%d","_profile_type":"slow","_path":["p%d"],"_value":{"_v":"a value long enough to fill buffers"}}`, j, i))
		}
		b.apply(t, "["+strings.Join(us, ",")+"]")
		for len(fastGot) < (i+1)*perBatch {
			fastGot = append(fastGot, fast.nextType("change").ID)
		}
	}
	final := b.expectedIDs(t, "profile:slow:", start, nil)
	require.Len(t, final, batches*perBatch)
	require.Equal(t, final, fastGot)

	// Now the slow client reads: what was written to it, then the close.
	var slowGot []int64
	var closeErr *websocket.CloseError
	for {
		_ = slow.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := slow.conn.ReadMessage()
		if err != nil {
			require.ErrorAs(t, err, &closeErr)
			break
		}
		var m wsMsg
		require.NoError(t, json.Unmarshal(data, &m))
		require.Equal(t, "change", m.Type)
		slowGot = append(slowGot, m.ID)
	}
	require.Equal(t, 4000, closeErr.Code)
	require.Less(t, len(slowGot), len(final))
	require.Equal(t, final[:len(slowGot)], slowGot)
	resumeFrom := start
	if len(slowGot) > 0 {
		resumeFrom = slowGot[len(slowGot)-1]
	}
	require.Equal(t, fmt.Sprintf("too slow: resume with after=%d", resumeFrom), closeErr.Text)

	again := b.dial(t, fmt.Sprintf("?channels=profile:slow:*&after=%d", resumeFrom), bearer(b.reader))
	again.nextType("ready")
	for len(slowGot) < len(final) {
		m := again.next()
		if m.Type == "subscribed" {
			continue
		}
		require.Equal(t, "change", m.Type)
		slowGot = append(slowGot, m.ID)
	}
	require.Equal(t, final, slowGot)
}

// With a debounce, changes of one channel and kind are coalesced into the first one's message
// (paths united, the count and the last id added); other messages keep their place behind it.
func TestWSDebounceCoalesces(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	start := b.hub.LastID()
	for _, u := range []string{
		`{"_id":"A","_profile_type":"deb","_path":["p1"],"_value":{"_v":"1"}}`,
		`{"_id":"B","_profile_type":"deb","_path":["q1"],"_value":{"_v":"1"}}`,
		`{"_id":"A","_profile_type":"deb","_path":["p2"],"_value":{"_v":"1"}}`,
		`{"_operation":"_delete","_id":"A","_profile_type":"deb","_path":["p1"],"_value":{"_v":""}}`,
		`{"_id":"A","_profile_type":"deb","_path":["p3"],"_value":{"_v":"1"}}`,
	} {
		b.apply(t, u) // one transaction each
	}
	all := b.expectedIDs(t, "profile:deb:", start, nil)
	require.Len(t, all, 5)

	// Caught up from the log: all five are taken into the output at once.
	c := b.dial(t, fmt.Sprintf("?after=%d", start), bearer(b.reader))
	c.nextType("ready")
	c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:deb:*"}, "debounce_ms": 200})
	m := c.nextType("change")
	require.Equal(t, []any{all[0], "profile:deb:A", "changed", 3, all[4]}, []any{m.ID, m.Channel, m.Kind, m.Coalesced, m.LastID})
	require.Equal(t, []string{"/p1", "/p2", "/p3"}, m.paths())
	m = c.nextType("change")
	require.Equal(t, []any{all[1], "profile:deb:B", "changed", 0}, []any{m.ID, m.Channel, m.Kind, m.Coalesced})
	m = c.nextType("change")
	require.Equal(t, []any{all[3], "profile:deb:A", "deleted", []string{"/p1"}}, []any{m.ID, m.Channel, m.Kind, m.paths()})
	c.nextType("subscribed")

	// Live: whatever the timing, the paths all arrive, in id order.
	for i := range 4 {
		b.apply(t, fmt.Sprintf(`{"_id":"A","_profile_type":"deb","_path":["live%d"],"_value":{"_v":"1"}}`, i))
	}
	var paths []string
	var prev int64
	for len(paths) < 4 {
		m := c.nextType("change")
		require.Greater(t, m.ID, prev)
		prev = m.ID
		paths = append(paths, m.paths()...)
	}
	slices.Sort(paths)
	require.Equal(t, []string{"/live0", "/live1", "/live2", "/live3"}, paths)
}

// Protocol errors are answered on the connection, which stays usable; unsubscribe stops delivery.
func TestWSProtocolMessages(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	c := b.dial(t, "", bearer(b.reader))
	c.nextType("ready")
	c.send(map[string]any{"type": "subscribe", "channels": []string{"a*b"}})
	require.Equal(t, "invalid-parameters-format", c.nextType("error").Error.ID)
	c.send(map[string]any{"type": "subscribe"})
	require.Equal(t, "invalid-request-structure", c.nextType("error").Error.ID)
	c.send(map[string]any{"type": "shout"})
	require.Equal(t, "invalid-request-structure", c.nextType("error").Error.ID)
	require.NoError(t, c.conn.WriteMessage(websocket.TextMessage, []byte("not json")))
	require.Equal(t, "invalid-request-structure", c.nextType("error").Error.ID)

	c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:pm:one", "profile:pm:two"}})
	require.Equal(t, []string{"profile:pm:one", "profile:pm:two"}, c.nextType("subscribed").Channels)
	b.apply(t, `{"_id":"one","_profile_type":"pm","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:pm:one", c.nextType("change").Channel)

	// after, once changes were delivered, must match the position.
	c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:pm:three"}, "after": 0})
	require.Equal(t, "invalid-request-structure", c.nextType("error").Error.ID)

	c.send(map[string]any{"type": "unsubscribe", "channels": []string{"profile:pm:one"}})
	require.Equal(t, []string{"profile:pm:two"}, c.nextType("unsubscribed").Channels)
	b.apply(t, `{"_id":"one","_profile_type":"pm","_path":["b"],"_value":{"_v":"1"}}`)
	b.apply(t, `{"_id":"two","_profile_type":"pm","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:pm:two", c.nextType("change").Channel)
}

// The listener survives the loss of its connection: it listens again and catches up.
func TestWSListenerReconnects(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	c := b.dial(t, "?channels=profile:lst:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	var killed int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'silo change listener'`).Scan(&killed))
	require.Equal(t, 1, killed)
	b.apply(t, `{"_id":"x","_profile_type":"lst","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:lst:x", c.nextType("change").Channel)
}

// Stopping the hub closes every connection with 1001 and the id to resume from.
func TestWSShutdownTellsWhereToResume(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	c := b.dial(t, "?channels=profile:sd:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	b.apply(t, `{"_id":"x","_profile_type":"sd","_path":["a"],"_value":{"_v":"1"}}`)
	id := c.nextType("change").ID
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.hub.Stop(ctx))
	_, _, err := c.conn.ReadMessage()
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, websocket.CloseGoingAway, closeErr.Code)
	require.Equal(t, fmt.Sprintf("server shutting down: resume with after=%d", id), closeErr.Text)
	require.False(t, b.hub.Ready())
}

// Many clients on one channel, subscribing and leaving while changes flow: every client that
// stays receives everything after its position (a race detector workout for the hub).
func TestWSManyClients(t *testing.T) {
	t.Parallel()
	b := setupWS(t, server.HubConfig{}, false)
	start := b.hub.LastID()
	const n = 20
	var wg sync.WaitGroup
	got := make([][]int64, n)
	var final []int64
	finalReady := make(chan struct{})
	for i := range n {
		c := b.dial(t, fmt.Sprintf("?channels=profile:many:*&after=%d", start), bearer(b.reader))
		c.nextType("ready")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, data, err := c.conn.ReadMessage()
				if err != nil {
					t.Error(err)
					return
				}
				var m wsMsg
				if err := json.Unmarshal(data, &m); err != nil {
					t.Error(err)
					return
				}
				if m.Type != "change" {
					continue
				}
				got[i] = append(got[i], m.ID)
				select {
				case <-finalReady:
					if len(got[i]) >= len(final) {
						return
					}
				default:
				}
			}
		}()
	}
	for i := range 30 {
		b.apply(t, fmt.Sprintf(`{"_id":"c%d","_profile_type":"many","_path":["a"],"_value":{"_v":"1"}}`, i))
	}
	final = b.expectedIDs(t, "profile:many:", start, nil)
	close(finalReady)
	// The last change wakes every reader that was waiting.
	b.apply(t, `{"_id":"zz","_profile_type":"many","_path":["a"],"_value":{"_v":"1"}}`)
	wg.Wait()
	for i := range n {
		require.Equal(t, final, got[i][:len(final)], "client %d", i)
	}
}

// With silo.change_notify off for the database, writers do not notify and the hub finds their
// changes by polling.
func TestWSWithoutWriterNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWS(t, server.HubConfig{}, false, func(pool *pgxpool.Pool) {
		_, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET silo.change_notify = off', current_database()); END $$`)
		require.NoError(t, err)
	})
	c := b.dial(t, "?channels=profile:quiet:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	for i := range 3 {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL silo.change_notify = off`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT api.profile_apply_batch($1)`, fmt.Sprintf(`{"_id":"q%d","_profile_type":"quiet","_path":["a"],"_value":{"_v":"1"}}`, i))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, fmt.Sprintf("profile:quiet:q%d", i), c.nextType("change").Channel)
	}
}

// When the log was trimmed past what the hub has fanned out (it could not read for longer than the
// retention), every client is disconnected and, resuming, told what it missed.
func TestWSHubBehindTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupWS(t, server.HubConfig{}, false)
	c := b.dial(t, "?channels=profile:gap:*", bearer(b.reader))
	position := c.nextType("ready").Position
	c.nextType("subscribed")
	// Changes the hub never saw, already trimmed, and one after them.
	for _, q := range []string{
		`INSERT INTO silo.changes (id, channel, kind, payload, readers, created) VALUES ($1 + 10, 'profile:gap:x', 'changed', '{}', '{_all}', now())`,
		`UPDATE silo.change_horizon SET trimmed_through = $1 + 5`,
		`SELECT setval('silo.change_id_seq', $1 + 10)`,
		`SELECT pg_notify('silo_changes', ($1 + 10)::text)`,
	} {
		_, err := b.pool.Exec(ctx, q, position)
		require.NoError(t, err)
	}
	_, _, err := c.conn.ReadMessage()
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, 4002, closeErr.Code)
	require.Equal(t, fmt.Sprintf("server behind: resume with after=%d", position), closeErr.Text)

	c = b.dial(t, fmt.Sprintf("?channels=profile:gap:*&after=%d", position), bearer(b.reader))
	m := c.nextType("expired")
	require.Equal(t, []any{position, position + 5, "expired"}, []any{m.After, m.ResumeAfter, m.Cause})
	c.nextType("ready")
	require.Equal(t, position+10, c.nextType("change").ID)
}
