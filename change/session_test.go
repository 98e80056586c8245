package change_test

// Tests of the session protocol against the real PostgreSQL: what a token may see, resuming
// without gap or duplicate, expired resumes, slow clients, debounce, protocol errors and revoked
// identities.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
)

// Every token receives the changes of the grains it may read and nothing else: not a path of
// another reader, not a dead letter unless it is an admin.
func TestSessionDeliversOnlyWhatTheTokenMayRead(t *testing.T) {
	t.Parallel()
	// The anonymous identity too, which an operator turns on.
	b := setup(t, change.Config{}, false, func(pool *pgxpool.Pool) {
		_, err := pool.Exec(context.Background(), `UPDATE silo.settings SET value = 'true' WHERE key = 'auth.anonymous_reads'`)
		require.NoError(t, err)
	})
	q := "?channels=profile:vis:*,dead-letters"
	clients := map[string]*wsClient{
		"anonymous": b.dial(t, q, nil),
		"reader":    b.dial(t, q, bearer(b.reader)),
		"roleA":     b.dial(t, q+"&auth="+b.roleA, nil),
		"admin":     b.dial(t, q, bearer(b.admin)),
	}
	for name, c := range clients {
		c.nextType("ready")
		if name == "admin" {
			require.Equal(t, []string{"dead-letters", "profile:vis:*"}, c.nextType("subscribed").Channels)
			continue
		}
		// Only admins may read dead-letters: the others are told so, and subscribed to the rest.
		e := c.nextType("error")
		require.Equal(t, "forbidden", e.Error.ID, name)
		require.Equal(t, "dead-letters", e.Error.Data["channel"], name)
		require.Equal(t, []string{"profile:vis:*"}, c.nextType("subscribed").Channels, name)
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
func TestSessionResumeHasNoGapAndNoDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{ReplayPage: 7}, false)
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
			if _, err := db.New(b.pool).ProfileApplyBatch(context.Background(), db.ProfileApplyBatchParams{Updates: json.RawMessage(u)}); err != nil {
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
func TestSessionReportsAnExpiredResume(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
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
func TestSessionSlowClientIsDisconnectedWithItsResumeID(t *testing.T) {
	t.Parallel()
	// The queue must hold a burst: the hub fans out up to 1000 changes (a page) at once. The close
	// waits in the slow client's full buffers until it reads again, after the whole write phase:
	// WriteWait outlasts that phase however busy the machine (past it, the close is given up and
	// the client sees the connection drop, 1006).
	b := setup(t, change.Config{ClientBuffer: 1000, WriteWait: 3 * time.Minute}, true)
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
func TestSessionDebounceCoalesces(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
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
func TestSessionProtocolMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
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

	// unsubscribed lists the channels removed, not those the connection never had.
	c.send(map[string]any{"type": "unsubscribe", "channels": []string{"profile:pm:one", "profile:pm:never"}})
	require.Equal(t, []string{"profile:pm:one"}, c.nextType("unsubscribed").Channels)
	b.apply(t, `{"_id":"one","_profile_type":"pm","_path":["b"],"_value":{"_v":"1"}}`)
	b.apply(t, `{"_id":"two","_profile_type":"pm","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:pm:two", c.nextType("change").Channel)
}

// A subscribe is answered channel by channel: each pattern that is no channel pattern, or a
// channel the token may never read, gets an error naming it and stays out; the others are
// subscribed; the connection stays open, whatever the bytes of a name.
func TestSessionRefusesChannelsOneByOne(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
	c := b.dial(t, "", bearer(b.reader))
	c.nextType("ready")
	refused := func(id, channel string) {
		t.Helper()
		m := c.nextType("error")
		require.Equal(t, id, m.Error.ID, m.raw)
		require.Equal(t, channel, m.Error.Data["channel"], m.raw)
		require.NotEmpty(t, m.Error.Message)
	}

	c.send(map[string]any{"type": "subscribe", "channels": []string{"dead-letters"}})
	refused("forbidden", "dead-letters")
	// Nothing else answers that subscribe: the next message answers the next one.
	c.send(map[string]any{"type": "subscribe",
		"channels": []string{"bogus", "profile:ref:*", "", "a*b", "x\u0000y", "ops:" + strings.Repeat("x", 1000), "dead-letters"}})
	refused("invalid-parameters-format", "bogus")
	refused("invalid-parameters-format", "")
	refused("invalid-parameters-format", "a*b")
	refused("invalid-parameters-format", "x\u0000y")
	refused("invalid-parameters-format", "ops:"+strings.Repeat("x", 1000))
	refused("forbidden", "dead-letters")
	require.Equal(t, []string{"profile:ref:*"}, c.nextType("subscribed").Channels)

	// A NUL in a message once closed the connection (1011, PostgreSQL's 22021); it stays open.
	require.NoError(t, c.conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","channels":["nul\u0000"]}`)))
	refused("invalid-parameters-format", "nul\u0000")
	b.apply(t, `{"_id":"one","_profile_type":"ref","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:ref:one", c.nextType("change").Channel)

	// An admin may read dead-letters.
	a := b.dial(t, "?channel=dead-letters", bearer(b.admin))
	a.nextType("ready")
	require.Equal(t, []string{"dead-letters"}, a.nextType("subscribed").Channels)
	// A token that may not is told so on the connection when it asks in the opening parameters.
	r := b.dial(t, "?channel=dead-letters&channel=profile:ref:*", bearer(b.reader))
	r.nextType("ready")
	m := r.nextType("error")
	require.Equal(t, "forbidden", m.Error.ID)
	require.Equal(t, "dead-letters", m.Error.Data["channel"])
	require.Equal(t, []string{"profile:ref:*"}, r.nextType("subscribed").Channels)
}

// A session whose identity is revoked is closed with 4001; a re-authentication that merely fails
// (the database is unreachable) keeps it open.
func TestSessionClosesWhenTheIdentityIsRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{ReauthInterval: 20 * time.Millisecond}, false)
	var revoked, checked atomic.Bool
	id := change.Identity{Readers: []string{"_all"}, Reauthenticate: func(context.Context) error {
		checked.Store(true)
		if revoked.Load() {
			return fmt.Errorf("token check: %w", change.ErrRevoked)
		}
		return errors.New("database unreachable")
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		b.hub.Serve(conn, id, change.SessionOptions{})
	}))
	t.Cleanup(srv.Close)
	c := dialWS(t, "ws"+strings.TrimPrefix(srv.URL, "http"), nil, nil)
	c.nextType("ready")
	require.Eventually(t, checked.Load, 30*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several failed checks
	c.send(map[string]any{"type": "subscribe", "channels": []string{"profile:rev:*"}})
	c.nextType("subscribed")

	revoked.Store(true)
	_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _, err := c.conn.ReadMessage()
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, 4001, closeErr.Code)
	require.Equal(t, "access token no longer valid", closeErr.Text)
}
