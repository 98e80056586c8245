package change

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// Identity is who a session serves, as the transport authenticated it.
type Identity struct {
	// Readers: the reader values whose changes it may see (_all, _auth and its roles, as
	// api.token_authenticate gives them).
	Readers []string
	// Admin sees every change, those without readers too.
	Admin bool
	// Reauthenticate checks, every Config.ReauthInterval, that the identity is still valid: an
	// error wrapping ErrRevoked closes the connection (4001); any other error (the check could not
	// be made) keeps it. nil: never checked again.
	Reauthenticate func(context.Context) error
	// Requests are the message types the transport serves on the connection besides subscribe
	// and unsubscribe (a write, such as a series append), by type. A handler gets the whole
	// message and returns the JSON object to send back (an acknowledgement or an error, carrying
	// the client's id); it runs on a goroutine of its own, at most MaxRequests at once per
	// connection (the reader waits for a free slot), so writes from one client are pipelined and
	// changes flow meanwhile. Answers may come in another order than their requests.
	Requests map[string]func(ctx context.Context, msg []byte) []byte
	// ReadLimit is the largest message the client may send, in bytes (0: 64 KiB).
	ReadLimit int64
}

// MaxRequests is how many requests (Identity.Requests) of one connection run at once.
const MaxRequests = 8

// ErrRevoked is what Identity.Reauthenticate returns once the identity is no longer valid.
var ErrRevoked = errors.New("access token no longer valid")

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

// session is the writer's side of one connection: it alone writes to the websocket (the gorilla
// pattern: one writer goroutine, one reader goroutine per connection).
type session struct {
	h      *Hub
	c      *client
	reauth func(context.Context) error
	ctrl   chan clientMessage
	// requests and their answers (Identity.Requests): the reader starts them, the writer sends
	// what they answer.
	requests  map[string]func(context.Context, []byte) []byte
	readLimit int64
	answers   chan []byte
	slots     chan struct{}
	reqCtx    context.Context
	reqCancel context.CancelFunc
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

// Serve runs a session on an upgraded connection until it ends, and closes the connection before
// it returns. A hub that is not ready or is stopping closes the connection at once (1001).
func (h *Hub) Serve(conn *websocket.Conn, id Identity, opts SessionOptions) {
	c := &client{hub: h, conn: conn, readers: map[string]struct{}{}, readerL: id.Readers, isAdmin: id.Admin,
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
	s := &session{h: h, c: c, reauth: id.Reauthenticate, ctrl: make(chan clientMessage), readerDone: make(chan struct{}),
		writerDone: make(chan struct{}), subs: map[string]time.Duration{}, seen: start, written: start,
		requests: id.Requests, readLimit: cmp.Or(id.ReadLimit, 64<<10), answers: make(chan []byte, MaxRequests),
		slots: make(chan struct{}, MaxRequests)}
	// A request still running when the connection ends is not waited for: its client, which got
	// no answer, sends it again (with an idempotency key, it is not applied twice).
	s.reqCtx, s.reqCancel = context.WithCancel(h.ctx)
	defer s.reqCancel()
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
	conn.SetReadLimit(s.readLimit)
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
		if handle, ok := s.requests[m.Type]; ok && m.bad == "" {
			select {
			case s.slots <- struct{}{}:
			case <-s.writerDone:
				return
			}
			go func() {
				answer := handle(s.reqCtx, data)
				<-s.slots
				select {
				case s.answers <- answer:
				case <-s.writerDone:
				}
			}()
			continue
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

// run is the writer loop (the write pump). It returns the close code and reason to send (0: none).
func (s *session) run(opts SessionOptions) (int, string) {
	h := s.h
	if opts.After != nil {
		if err := s.resumeFrom(*opts.After); err != nil {
			return s.failed(err)
		}
	}
	if err := s.writeJSON(map[string]any{"type": "ready", "position": s.written}); err != nil {
		return 0, ""
	}
	if len(opts.Channels) > 0 {
		d := opts.Debounce.Milliseconds()
		if err := s.subscribe(clientMessage{Type: "subscribe", Channels: opts.Channels, DebounceMS: &d}); err != nil {
			return s.failed(err)
		}
	}
	ping := time.NewTicker(h.cfg.PingPeriod)
	defer ping.Stop()
	var reauth <-chan time.Time // nil: the identity is never checked again
	if s.reauth != nil {
		t := time.NewTicker(h.cfg.ReauthInterval)
		defer t.Stop()
		reauth = t.C
	}
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
		case a := <-s.answers:
			if err := s.reply(json.RawMessage(a)); err != nil {
				return s.failed(err)
			}
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
				err = s.writeError("invalid-request-structure", fmt.Sprintf("unknown message type %q: %s", m.Type, s.knownTypes()), nil)
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
		case <-reauth:
			ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
			err := s.reauth(ctx)
			cancel()
			if errors.Is(err, ErrRevoked) {
				return closeAuth, "access token no longer valid"
			}
		}
	}
}

// knownTypes lists the message types the connection takes, for an error message.
func (s *session) knownTypes() string {
	types := []string{"subscribe", "unsubscribe"}
	for t := range s.requests {
		types = append(types, t)
	}
	slices.Sort(types[2:])
	return strings.Join(types[:len(types)-1], ", ") + " or " + types[len(types)-1]
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
	return s.writeJSON(map[string]any{"type": "error", "error": wireError{ID: id, Message: msg, Data: data}})
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

// subscribe adds channels (patterns) and catches the connection up on all its channels. Patterns
// it may not have (CheckChannels) are each answered with an error naming them and left out; the
// others are subscribed and answered with subscribed, unless none is left.
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
	if m.After != nil {
		switch {
		case *m.After < 0:
			return s.writeError("invalid-parameters-format", "after must be a change id (0 or more)", nil)
		case s.emitted && *m.After != s.written:
			return s.writeError("invalid-request-structure",
				fmt.Sprintf("after %d does not match this connection's position %d: changes were delivered already; reconnect with ?after=%d to resume from there", *m.After, s.written, *m.After),
				map[string]any{"position": s.written})
		}
	}
	var added []string
	for _, p := range m.Channels {
		if _, ok := s.subs[p]; !ok && !slices.Contains(added, p) {
			added = append(added, p)
		}
	}
	if len(added) > h.cfg.MaxChannels {
		return s.writeError("invalid-request-structure", fmt.Sprintf("at most %d channels per connection", h.cfg.MaxChannels), nil)
	}
	refused := map[string]bool{}
	if len(added) > 0 {
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		refusals, err := h.CheckChannels(ctx, added, s.c.isAdmin)
		cancel()
		if err != nil {
			return err
		}
		for _, f := range refusals {
			refused[f.Channel] = true
			data := map[string]any{"channel": f.Channel}
			if f.Hint != "" {
				data["hint"] = f.Hint
			}
			if err := s.writeError(f.ID, f.Message, data); err != nil {
				return err
			}
		}
		added = slices.DeleteFunc(added, func(p string) bool { return refused[p] })
	}
	accepted := slices.DeleteFunc(slices.Clone(m.Channels), func(p string) bool { return refused[p] })
	if len(accepted) == 0 {
		return nil
	}
	if len(s.subs)+len(added) > h.cfg.MaxChannels {
		return s.writeError("invalid-request-structure", fmt.Sprintf("at most %d channels per connection", h.cfg.MaxChannels), nil)
	}
	if m.After != nil && !s.emitted {
		if err := s.resumeFrom(*m.After); err != nil {
			return err
		}
	}
	if _, err := h.subscribe(s.c, added); err != nil {
		return err
	}
	for _, p := range accepted {
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

// unsubscribe removes channels and answers unsubscribed with those it removed (a pattern the
// connection did not have is not listed).
func (s *session) unsubscribe(m clientMessage) error {
	removed := []string{}
	for _, p := range m.Channels {
		if _, ok := s.subs[p]; ok {
			delete(s.subs, p)
			removed = append(removed, p)
		}
	}
	s.h.unsubscribe(s.c, removed)
	return s.reply(map[string]any{"type": "unsubscribed", "channels": removed})
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
			s.emit(newMessage(r).withFrame())
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
