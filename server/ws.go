package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// GET /ws: change notifications over a websocket. The protocol (README, "Change notifications"):
//
//	GET /ws[?auth=<token>][&after=<id>][&channel=<pattern>...|&channels=<p1>,<p2>][&debounce_ms=<ms>]
//
// The token comes from the Authorization header, as for the HTTP API, or from ?auth= (browsers
// cannot set headers on a websocket); none is the anonymous identity (readers _all). A bad token is
// refused with 401 before the upgrade.
//
// Server → client, one JSON object per text message:
//
//	{"type":"ready","position":N}                         first; N is where the connection starts
//	{"type":"change","id":N,"channel":...,"kind":...,"payload":{...},"created":...}
//	{"type":"subscribed","channels":[...],"position":N}   after a subscribe has caught up
//	{"type":"unsubscribed","channels":[...]}
//	{"type":"expired","after":A,"resume_after":R,"cause":"expired"|"ahead","message":...}
//	{"type":"error","error":{"id":...,"message":...}}
//
// Client → server:
//
//	{"type":"subscribe","channels":["profile:customer:42","profile:contract:*"],"after":N,"debounce_ms":200}
//	{"type":"unsubscribe","channels":[...]}
//
// Each connection has a position: the id of the last change written to it, or, before the first,
// the after it was opened with (or the end of the change log when it was opened without one).
// Whenever channels are added, the connection catches up from the change log (api.changes_since)
// with every change after its position on any of its channels, then goes on with live changes:
// ids only grow, nothing is skipped and nothing comes twice. A client that reconnects with
// after=<last id it saw> therefore misses nothing (within the retention).

// Close codes and reasons.
const (
	closeSlow   = 4000 // the client's queue overflowed: "too slow: resume with after=N"
	closeAuth   = 4001 // the token was revoked: "access token no longer valid"
	closeBehind = 4002 // the process fell behind the change log's retention: "server behind: resume with after=N"
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 4096,
	// Idle connections hold no write buffer.
	WriteBufferPool: &sync.Pool{},
	// Silo authenticates by token, never by cookie: a page from another origin can do nothing
	// with a websocket that it could not do with the token itself.
	CheckOrigin: func(*http.Request) bool { return true },
}

// clientMessage is a message from the client.
type clientMessage struct {
	Type       string   `json:"type"`
	Channels   []string `json:"channels"`
	After      *int64   `json:"after"`
	DebounceMS *int64   `json:"debounce_ms"`
	bad        string   // why the message could not be read
}

// client is one websocket connection as the hub sees it.
type client struct {
	hub      *Hub
	conn     *websocket.Conn
	readers  map[string]struct{}
	readerL  []string
	isAdmin  bool
	queue    *clientQueue
	kicked   chan struct{} // closed when the hub ends the connection: kickCode, kickWhy say why
	kickOnce sync.Once
	kickCode int
	kickWhy  string

	// Guarded by hub.mu.
	lastPushed  int64
	gone        bool
	hubPatterns map[string]struct{}
}

// kick tells the writer to close the connection with code and a reason naming the resume id.
func (c *client) kick(code int, why string) {
	c.kickOnce.Do(func() {
		c.kickCode, c.kickWhy = code, why
		close(c.kicked)
	})
}

// ws upgrades GET /ws after authenticating the token.
func (s *server) ws(w http.ResponseWriter, r *http.Request) {
	if s.hub == nil || !s.hub.Ready() {
		writeError(w, http.StatusServiceUnavailable, "not-available", "this process does not serve change notifications (yet)", nil)
		return
	}
	token := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(token) > 7 && strings.EqualFold(token[:7], "bearer ") {
		token = strings.TrimSpace(token[7:])
	}
	ar := r
	if token == "" {
		if t := strings.TrimSpace(r.URL.Query().Get("auth")); t != "" {
			token = t
			ar = r.Clone(r.Context())
			ar.Header.Set("Authorization", "Bearer "+t)
		}
	}
	id, ok := s.identity(w, ar)
	if !ok {
		return
	}
	opts, msg := parseWSQuery(r)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "invalid-parameters-format", msg, nil)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "GET /ws expects a websocket upgrade", nil)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	reauth := func(ctx context.Context) error {
		if token == "" {
			return nil
		}
		key := sha256.Sum256([]byte(token))
		now := time.Now()
		if _, ok := s.identities.get(key, now); ok {
			return nil
		}
		fresh, err := s.q.TokenAuthenticate(ctx, &token)
		if err == nil {
			s.identities.put(key, fresh, now)
		}
		return err
	}
	s.hub.serve(conn, id, opts, reauth)
}

// wsOptions are the query parameters of GET /ws.
type wsOptions struct {
	after    *int64
	channels []string
	debounce time.Duration
}

func parseWSQuery(r *http.Request) (wsOptions, string) {
	var o wsOptions
	q := r.URL.Query()
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return o, "after must be a change id (a whole number, 0 or more)"
		}
		o.after = &n
	}
	o.channels = append(o.channels, q["channel"]...)
	for _, v := range q["channels"] {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				o.channels = append(o.channels, c)
			}
		}
	}
	if v := q.Get("debounce_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 60000 {
			return o, "debounce_ms must be a whole number of milliseconds between 0 and 60000"
		}
		o.debounce = time.Duration(n) * time.Millisecond
	}
	return o, ""
}

// session is the writer's side of one connection: it alone writes to the websocket (the gorilla
// pattern: one writer goroutine, one reader goroutine per connection).
type session struct {
	h      *Hub
	c      *client
	reauth func(context.Context) error
	ctrl   chan clientMessage
	// readerDone is closed when the reader goroutine ends (the client went away or sent garbage).
	readerDone chan struct{}
	writerDone chan struct{}

	subs    map[string]time.Duration // pattern → debounce
	seen    int64                    // highest change id taken into the output (the catch-up cursor)
	written int64                    // the position: last change id written, or where the connection started
	emitted bool                     // whether any change was taken into the output
	out     []*outItem               // changes waiting to be written, in id order
	timer   *time.Timer
	timerOn bool
}

// outItem is a change (or a reply that must not overtake the changes before it) waiting to be
// written; a debounced change gathers the later changes of its channel and kind until its deadline.
type outItem struct {
	m        *message // nil: a reply, reply holds its frame
	reply    []byte
	deadline time.Time // zero: ready
	payload  json.RawMessage
	count    int
	lastID   int64
}

// serve runs a connection until it ends. It returns after the connection is closed.
func (h *Hub) serve(conn *websocket.Conn, id db.TokenAuthenticateRow, opts wsOptions, reauth func(context.Context) error) {
	c := &client{hub: h, conn: conn, readers: map[string]struct{}{}, readerL: id.Readers, isAdmin: id.IsAdmin,
		queue: newClientQueue(h.cfg.ClientBuffer), kicked: make(chan struct{}), hubPatterns: map[string]struct{}{}}
	for _, r := range id.Readers {
		c.readers[r] = struct{}{}
	}
	start, err := h.register(c)
	if err != nil {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, err.Error()),
			time.Now().Add(h.cfg.WriteWait))
		_ = conn.Close()
		return
	}
	defer h.conns.Done()
	s := &session{h: h, c: c, reauth: reauth, ctrl: make(chan clientMessage), readerDone: make(chan struct{}),
		writerDone: make(chan struct{}), subs: map[string]time.Duration{}, seen: start, written: start}
	go s.readPump()
	code, reason := s.run(opts)
	close(s.writerDone)
	h.remove(c)
	if code != 0 {
		_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(h.cfg.WriteWait))
		// Give the client a moment to answer the close, so what was written reaches it.
		select {
		case <-s.readerDone:
		case <-time.After(time.Second):
		}
	}
	_ = conn.Close()
	<-s.readerDone
}

// readPump reads the client's messages and hands them to the writer.
func (s *session) readPump() {
	defer close(s.readerDone)
	conn, wait := s.c.conn, s.h.cfg.PongWait
	conn.SetReadLimit(64 << 10)
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wait)) })
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		var m clientMessage
		if err := json.Unmarshal(data, &m); err != nil {
			m = clientMessage{bad: "a message must be a JSON object such as {\"type\":\"subscribe\",\"channels\":[\"dead-letters\"]}"}
		}
		select {
		case s.ctrl <- m:
		case <-s.writerDone:
			return
		}
	}
}

// errWrite: the websocket could not be written; the connection is over.
var errWrite = errors.New("websocket write failed")

// run is the writer loop. It returns the close code and reason to send (0: none).
func (s *session) run(opts wsOptions) (int, string) {
	h := s.h
	if opts.after != nil {
		if err := s.resumeFrom(*opts.after); err != nil {
			return s.failed(err)
		}
	}
	if err := s.writeJSON(map[string]any{"type": "ready", "position": s.written}); err != nil {
		return 0, ""
	}
	if len(opts.channels) > 0 {
		d := opts.debounce.Milliseconds()
		if err := s.subscribe(clientMessage{Type: "subscribe", Channels: opts.channels, DebounceMS: &d}); err != nil {
			return s.failed(err)
		}
	}
	ping := time.NewTicker(h.cfg.PingPeriod)
	defer ping.Stop()
	reauth := time.NewTicker(h.cfg.ReauthInterval)
	defer reauth.Stop()
	s.timer = time.NewTimer(time.Hour)
	s.timer.Stop()
	defer s.timer.Stop()
	for {
		// A full queue ends the connection before anything else is written.
		select {
		case <-s.c.kicked:
			return s.c.kickCode, s.resumeReason(s.c.kickWhy)
		default:
		}
		select {
		case <-h.ctx.Done():
			return websocket.CloseGoingAway, s.resumeReason("server shutting down")
		case <-s.c.kicked:
			return s.c.kickCode, s.resumeReason(s.c.kickWhy)
		case <-s.readerDone:
			return 0, ""
		case m := <-s.ctrl:
			var err error
			switch {
			case m.bad != "":
				err = s.writeError("invalid-request-structure", m.bad, nil)
			case m.Type == "subscribe":
				err = s.subscribe(m)
			case m.Type == "unsubscribe":
				err = s.unsubscribe(m)
			default:
				err = s.writeError("invalid-request-structure", fmt.Sprintf("unknown message type %q: subscribe or unsubscribe", m.Type), nil)
			}
			if err != nil {
				return s.failed(err)
			}
		case <-s.c.queue.notify:
			for _, m := range s.c.queue.take() {
				s.emit(m)
			}
			if !s.flushOK() {
				return s.overflowOrWriteFailed()
			}
		case <-s.timer.C:
			s.timerOn = false
			if !s.flushOK() {
				return s.overflowOrWriteFailed()
			}
		case <-ping.C:
			if err := s.c.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(h.cfg.WriteWait)); err != nil {
				return 0, ""
			}
		case <-reauth.C:
			ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
			err := s.reauth(ctx)
			cancel()
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "SLAUT" {
				return closeAuth, "access token no longer valid"
			}
		}
	}
}

func (s *session) resumeReason(why string) string {
	return fmt.Sprintf("%s: resume with after=%d", why, s.written)
}

// failed turns an error of the writer into the close to send.
func (s *session) failed(err error) (int, string) {
	if errors.Is(err, errWrite) {
		return 0, ""
	}
	if s.h.ctx.Err() != nil {
		return websocket.CloseGoingAway, s.resumeReason("server shutting down")
	}
	select {
	case <-s.c.kicked:
		// The hub ended the connection while the writer was busy (a subscribe found it gone).
		return s.c.kickCode, s.resumeReason(s.c.kickWhy)
	default:
	}
	s.h.log.Error("websocket error", "err", err)
	return websocket.CloseInternalServerErr, s.resumeReason("server error")
}

func (s *session) overflowOrWriteFailed() (int, string) {
	if len(s.out) > s.h.cfg.ClientBuffer {
		s.h.mSlow.Inc()
		return closeSlow, s.resumeReason("too slow")
	}
	return 0, ""
}

func (s *session) write(frame []byte) error {
	_ = s.c.conn.SetWriteDeadline(time.Now().Add(s.h.cfg.WriteWait))
	if err := s.c.conn.WriteMessage(websocket.TextMessage, frame); err != nil {
		return errWrite
	}
	return nil
}

func (s *session) writeJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(b)
}

func (s *session) writeError(id, msg string, data map[string]any) error {
	return s.writeJSON(map[string]any{"type": "error", "error": errorObject{ID: id, Message: msg, Data: data}})
}

// resumeFrom sets the position to after, as api.change_resume decides: when changes after it were
// trimmed (or it was never handed out), the client is told so and the position is where the kept
// log goes on.
func (s *session) resumeFrom(after int64) error {
	ctx, cancel := context.WithTimeout(s.h.ctx, 30*time.Second)
	defer cancel()
	r, err := s.h.q.ChangeResume(ctx, after)
	if err != nil {
		return fmt.Errorf("error checking the resume position: %w", err)
	}
	if r.Status != "ok" {
		msg := fmt.Sprintf("changes after %d up to %d are no longer in the change log (silo.settings change_retention): reload the state you follow; the changes kept follow", after, r.TrimmedThrough)
		if r.Status == "ahead" {
			msg = fmt.Sprintf("change %d is beyond the change log, which ends at %d (was the database restored?): reload the state you follow; new changes follow", after, r.LastID)
		}
		if err := s.writeJSON(map[string]any{"type": "expired", "after": after, "resume_after": r.ResumeAfter,
			"cause": r.Status, "trimmed_through": r.TrimmedThrough, "message": msg}); err != nil {
			return err
		}
	}
	s.seen, s.written = r.ResumeAfter, r.ResumeAfter
	return nil
}

// subscribe adds channels (patterns) and catches the connection up on all its channels.
func (s *session) subscribe(m clientMessage) error {
	h := s.h
	if len(m.Channels) == 0 {
		return s.writeError("invalid-request-structure", "subscribe needs channels, e.g. {\"type\":\"subscribe\",\"channels\":[\"profile:customer:42\"]}", nil)
	}
	var debounce time.Duration
	if m.DebounceMS != nil {
		if *m.DebounceMS < 0 || *m.DebounceMS > 60000 {
			return s.writeError("invalid-parameters-format", "debounce_ms must be between 0 and 60000", nil)
		}
		debounce = time.Duration(*m.DebounceMS) * time.Millisecond
	}
	var added []string
	for _, p := range m.Channels {
		if _, ok := s.subs[p]; !ok && !slices.Contains(added, p) {
			added = append(added, p)
		}
	}
	if len(s.subs)+len(added) > h.cfg.MaxChannels {
		return s.writeError("invalid-request-structure", fmt.Sprintf("at most %d channels per connection", h.cfg.MaxChannels), nil)
	}
	if m.After != nil {
		switch {
		case *m.After < 0:
			return s.writeError("invalid-parameters-format", "after must be a change id (0 or more)", nil)
		case s.emitted && *m.After != s.written:
			return s.writeError("invalid-request-structure",
				fmt.Sprintf("after %d does not match this connection's position %d: changes were delivered already; reconnect with ?after=%d to resume from there", *m.After, s.written, *m.After),
				map[string]any{"position": s.written})
		case !s.emitted:
			if err := s.resumeFrom(*m.After); err != nil {
				return err
			}
		}
	}
	if _, err := h.subscribe(s.c, added); err != nil {
		return err
	}
	for _, p := range m.Channels {
		s.subs[p] = debounce
	}
	if err := s.catchUp(); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "SLINV" {
			h.unsubscribe(s.c, added)
			for _, p := range added {
				delete(s.subs, p)
			}
			return s.writeError("invalid-parameters-format", pgErr.Message, map[string]any{"hint": pgErr.Hint})
		}
		return err
	}
	return s.reply(map[string]any{"type": "subscribed", "channels": s.patterns(), "position": s.seen})
}

// reply writes a reply behind the changes already taken into the output.
func (s *session) reply(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.out = append(s.out, &outItem{reply: b})
	if !s.flushOK() {
		if len(s.out) > s.h.cfg.ClientBuffer {
			return errors.New("too many changes waiting")
		}
		return errWrite
	}
	return nil
}

func (s *session) unsubscribe(m clientMessage) error {
	var removed []string
	for _, p := range m.Channels {
		if _, ok := s.subs[p]; ok {
			delete(s.subs, p)
			removed = append(removed, p)
		}
	}
	s.h.unsubscribe(s.c, removed)
	return s.reply(map[string]any{"type": "unsubscribed", "channels": s.patterns()})
}

func (s *session) patterns() []string {
	ps := make([]string, 0, len(s.subs))
	for p := range s.subs {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// catchUp writes every change after the connection's position on any of its channels from the
// change log (api.changes_since: the same rule as the hub's). Live changes queued meanwhile that
// it has already written are skipped later by their id.
func (s *session) catchUp() error {
	h := s.h
	patterns := s.patterns()
	for {
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		rows, err := h.q.ChangesSince(ctx, db.ChangesSinceParams{After: s.seen, Channels: patterns,
			Readers: s.c.readerL, IsAdmin: s.c.isAdmin, MaxChanges: int32(h.cfg.ReplayPage)})
		cancel()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "SCEXP" {
			// Trimmed while the connection caught up: say so, go on from what is kept.
			if err := s.resumeFrom(s.seen); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		for _, r := range rows {
			s.emit(newMessage(r))
		}
		if !s.flushOK() {
			if len(s.out) > h.cfg.ClientBuffer {
				return errors.New("too many changes waiting")
			}
			return errWrite
		}
		if len(rows) < h.cfg.ReplayPage {
			return nil
		}
	}
}

// emit takes a change into the output: once (by id), only while the connection still subscribes
// to its channel, coalesced into a waiting change of the same channel and kind when the
// subscription has a debounce.
func (s *session) emit(m *message) {
	if m.id <= s.seen {
		return
	}
	s.seen = m.id
	debounce, ok := s.debounceFor(m.channel)
	if !ok {
		return
	}
	s.emitted = true
	if debounce > 0 && s.h.coalesce[m.kind] {
		for _, it := range s.out {
			if !it.deadline.IsZero() && it.m != nil && it.m.channel == m.channel && it.m.kind == m.kind {
				it.payload = mergePayload(it.payload, m.payload)
				it.count++
				it.lastID = m.id
				return
			}
		}
		s.out = append(s.out, &outItem{m: m, deadline: time.Now().Add(debounce), payload: m.payload, count: 1, lastID: m.id})
		return
	}
	s.out = append(s.out, &outItem{m: m})
}

// debounceFor: whether the connection subscribes to channel, and the longest debounce of the
// patterns that match it.
func (s *session) debounceFor(channel string) (time.Duration, bool) {
	var d time.Duration
	found := false
	if v, ok := s.subs[channel]; ok {
		d, found = v, true
	}
	for p, v := range s.subs {
		if strings.HasSuffix(p, "*") && matches(p, channel) {
			d, found = max(d, v), true
		}
	}
	return d, found
}

// flushOK writes the waiting changes from the head while they are due; a debounced change not yet
// due holds back the ones behind it (ids stay in order). False when a write failed or too many
// changes wait.
func (s *session) flushOK() bool {
	now := time.Now()
	for len(s.out) > 0 {
		it := s.out[0]
		if !it.deadline.IsZero() && now.Before(it.deadline) {
			if !s.timerOn {
				s.timer.Reset(it.deadline.Sub(now))
				s.timerOn = true
			}
			return len(s.out) <= s.h.cfg.ClientBuffer
		}
		if it.m == nil {
			if err := s.write(it.reply); err != nil {
				return false
			}
			s.out[0] = nil
			s.out = s.out[1:]
			continue
		}
		frame := it.m.frame
		if it.count > 1 {
			frame, _ = json.Marshal(wireChange{Type: "change", ID: it.m.id, Channel: it.m.channel, Kind: it.m.kind,
				Payload: it.payload, Created: it.m.created, Coalesced: it.count, LastID: it.lastID})
		}
		if err := s.write(frame); err != nil {
			return false
		}
		s.h.mMessages.Inc()
		s.written = it.m.id
		s.out[0] = nil
		s.out = s.out[1:]
	}
	s.out = nil
	return true
}

// mergePayload coalesces two payloads of one channel and kind: the later one, with the union of
// both "paths" arrays when both have one.
func mergePayload(a, b json.RawMessage) json.RawMessage {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return b
	}
	var pa, pb []string
	if json.Unmarshal(ma["paths"], &pa) != nil || json.Unmarshal(mb["paths"], &pb) != nil {
		return b
	}
	for _, p := range pa {
		if !slices.Contains(pb, p) {
			pb = append(pb, p)
		}
	}
	slices.Sort(pb)
	mb["paths"], _ = json.Marshal(pb)
	out, err := json.Marshal(mb)
	if err != nil {
		return b
	}
	return out
}
