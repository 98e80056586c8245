package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// The hub: change notifications from PostgreSQL to the websocket subscribers of this process.
//
// One dedicated connection per process LISTENs on silo_change_pending and silo_changes. When
// pending changes are announced (and once every PollInterval without notifications, as a safety
// net), the hub calls api.change_sequence, which numbers committed changes in commit order and
// notifies silo_changes. A database whose writers do not notify (silo.change_notify = off, set
// with ALTER DATABASE ... SET: notifying serializes the commits of concurrent writers) is polled
// every 10 ms instead. On silo_changes the hub reads the new rows once (api.changes_after) and
// fans each out, in id order, to the clients whose subscriptions match its channel and who may see
// it. Each client has a bounded queue: a client that falls behind is disconnected and told the id
// to resume from, it never slows the others down. Everything a client misses while disconnected
// it reads back from the change log when it resumes (api.changes_since, see ws.go).
//
// Channels are plain strings; the hub knows nothing of profiles. Kinds listed in
// HubConfig.CoalesceKinds may be coalesced for subscribers that ask for a debounce.

// Channels PostgreSQL notifies on (sql/030_changes.sql).
const (
	notifyPending = "silo_change_pending"
	notifyChanges = "silo_changes"
)

// listenerName is the application_name of the LISTEN connection (pg_stat_activity shows it).
const listenerName = "silo change listener"

// HubConfig configures the hub. Zero values take the defaults in parentheses.
type HubConfig struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// PollInterval: without notifications for this long, the hub sequences and reads anyway (1s;
	// 10ms when the database's silo.change_notify is off, so that writers do not notify).
	PollInterval time.Duration
	// ClientBuffer: changes queued for one client before it counts as too slow and is disconnected
	// (4096).
	ClientBuffer int
	// MaxChannels: channel patterns one connection may subscribe to (1000, the limit of
	// api.changes_since).
	MaxChannels int
	// ReplayPage: changes read per call of api.changes_since when a client catches up (1000).
	ReplayPage int
	// CoalesceKinds: kinds of change a debounced subscription may coalesce ("changed").
	CoalesceKinds []string
	// WriteWait, PongWait, PingPeriod: the websocket timing (10s, 60s, 54s).
	WriteWait  time.Duration
	PongWait   time.Duration
	PingPeriod time.Duration
	// ReauthInterval: how often an open connection's token is checked again, so a revoked token
	// stops receiving (1m).
	ReauthInterval time.Duration
}

func (c *HubConfig) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ClientBuffer <= 0 {
		c.ClientBuffer = 4096
	}
	if c.MaxChannels <= 0 || c.MaxChannels > 1000 {
		c.MaxChannels = 1000
	}
	if c.ReplayPage <= 0 || c.ReplayPage > 10000 {
		c.ReplayPage = 1000
	}
	if c.CoalesceKinds == nil {
		c.CoalesceKinds = []string{"changed"}
	}
	if c.WriteWait <= 0 {
		c.WriteWait = 10 * time.Second
	}
	if c.PongWait <= 0 {
		c.PongWait = 60 * time.Second
	}
	if c.PingPeriod <= 0 || c.PingPeriod >= c.PongWait {
		c.PingPeriod = c.PongWait * 9 / 10
	}
	if c.ReauthInterval <= 0 {
		c.ReauthInterval = time.Minute
	}
}

// Hub fans the change log out to the websocket clients of this process. Start it before serving
// GET /ws and Stop it at shutdown (cmd/silo does both).
type Hub struct {
	cfg      HubConfig
	q        *db.Queries
	log      *slog.Logger
	coalesce map[string]bool

	mu      sync.Mutex
	lastID  int64                           // highest change fanned out; guarded by mu
	exact   map[string]map[*client]struct{} // channel → clients subscribed to exactly it
	prefix  map[string]map[*client]struct{} // pattern without its * → clients
	clients map[*client]struct{}
	closed  bool
	ready   bool // the end of the change log is known

	sequenceSignal chan struct{}
	fetchSignal    chan struct{}
	notified       atomic.Int64 // highest id announced by silo_changes or returned by change_sequence

	ctx     context.Context // cancelled by Stop: clients close, loops end
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	conns   sync.WaitGroup
	started bool

	mClients   prometheus.Gauge
	mLastID    prometheus.Gauge
	mMessages  prometheus.Counter
	mSlow      prometheus.Counter
	mSequenced prometheus.Counter
}

// NewHub returns a hub; Start starts it.
func NewHub(cfg HubConfig) *Hub {
	cfg.defaults()
	h := &Hub{
		cfg: cfg, q: db.New(cfg.Pool), log: cfg.Logger, coalesce: map[string]bool{},
		exact: map[string]map[*client]struct{}{}, prefix: map[string]map[*client]struct{}{},
		clients:        map[*client]struct{}{},
		sequenceSignal: make(chan struct{}, 1), fetchSignal: make(chan struct{}, 1),
	}
	for _, k := range cfg.CoalesceKinds {
		h.coalesce[k] = true
	}
	h.mClients = prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_ws_clients", Help: "Websocket clients connected to this process."})
	h.mLastID = prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_changes_last_id", Help: "Highest change id this process has fanned out."})
	h.mMessages = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_ws_messages_total", Help: "Change messages written to websocket clients."})
	h.mSlow = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_ws_slow_disconnects_total", Help: "Websocket clients disconnected because their queue was full."})
	h.mSequenced = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_changes_fanned_out_total", Help: "Changes read from the change log and fanned out by this process."})
	return h
}

// collectors are the hub's metrics, registered by server.New.
func (h *Hub) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.mClients, h.mLastID, h.mMessages, h.mSlow, h.mSequenced}
}

// Start starts the listener. Once it listens, the hub reads the current end of the change log and
// is ready: clients see the changes made from then on, and older ones only when they resume with
// an id. Until then (the database is unreachable or not migrated yet) GET /ws answers 503; the
// listener keeps trying.
func (h *Hub) Start(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started {
		return errors.New("the change hub is already started")
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.started = true
	h.loops.Add(3)
	go h.listenLoop()
	go h.sequenceLoop()
	go h.fetchLoop()
	return nil
}

// Ready reports whether the hub listens and knows where the change log ends.
func (h *Hub) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready && !h.closed
}

// Stop closes every client (close code 1001, with the id to resume from) and stops the listener.
// It waits for the clients' connections to close until ctx is done.
func (h *Hub) Stop(ctx context.Context) error {
	h.mu.Lock()
	if !h.started || h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	done := make(chan struct{})
	go func() {
		h.conns.Wait()
		h.loops.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("error stopping the change hub: %w", ctx.Err())
	}
}

// Clients is the number of websocket clients connected to this hub.
func (h *Hub) Clients() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// LastID is the highest change id this hub has fanned out.
func (h *Hub) LastID() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastID
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// listenLoop keeps one LISTEN connection open, reconnecting with a growing pause; after every
// (re)connection it sequences and reads, so nothing announced while it was away is left behind.
func (h *Hub) listenLoop() {
	defer h.loops.Done()
	pause := 100 * time.Millisecond
	for h.ctx.Err() == nil {
		start := time.Now()
		err := h.listen(h.ctx)
		if h.ctx.Err() != nil {
			return
		}
		h.log.Warn("change listener disconnected", "err", err)
		if time.Since(start) > time.Minute {
			pause = 100 * time.Millisecond
		}
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*time.Second)
	}
}

func (h *Hub) listen(ctx context.Context) error {
	cc := h.cfg.Pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = listenerName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("error connecting: %w", err)
	}
	defer conn.Close(context.Background())
	for _, ch := range []string{notifyPending, notifyChanges} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return fmt.Errorf("error listening on %s: %w", ch, err)
		}
	}
	poll := h.cfg.PollInterval
	if poll <= 0 {
		poll = time.Second
		var notify string
		if err := conn.QueryRow(ctx, `SELECT coalesce(current_setting('silo.change_notify', true), '')`).Scan(&notify); err != nil {
			return fmt.Errorf("error reading silo.change_notify: %w", err)
		}
		if notify == "off" {
			poll = 10 * time.Millisecond
		}
	}
	if !h.Ready() {
		// Listening first, then reading where the log ends: nothing falls in between.
		st, err := h.q.ChangeStatus(ctx)
		if err != nil {
			return fmt.Errorf("error reading the change log status: %w", err)
		}
		h.mu.Lock()
		h.lastID, h.ready = st.LastID, true
		h.mu.Unlock()
		h.mLastID.Set(float64(st.LastID))
		h.log.Info("change hub listening", "last_id", st.LastID)
	}
	signal(h.sequenceSignal)
	signal(h.fetchSignal)
	lastFetch := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, poll)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
				// Quiet for a while: sequence anyway (what it moves is announced), and read now and
				// then in case a notification was lost.
				signal(h.sequenceSignal)
				if time.Since(lastFetch) >= time.Second {
					signal(h.fetchSignal)
					lastFetch = time.Now()
				}
				continue
			}
			return err
		}
		switch n.Channel {
		case notifyPending:
			signal(h.sequenceSignal)
		case notifyChanges:
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				h.announce(id)
			} else {
				signal(h.fetchSignal)
			}
		}
	}
}

// announce records that changes up to id exist and wakes the reader when this hub is behind.
func (h *Hub) announce(id int64) {
	for {
		cur := h.notified.Load()
		if id <= cur || h.notified.CompareAndSwap(cur, id) {
			break
		}
	}
	if id > h.LastID() {
		signal(h.fetchSignal)
	}
}

// sequenceLoop runs api.change_sequence when asked; requests that arrive while it runs are served
// by one more run.
func (h *Hub) sequenceLoop() {
	defer h.loops.Done()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.sequenceSignal:
		}
		known := h.notified.Load()
		ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
		last, err := h.q.ChangeSequence(ctx, false)
		if err == nil && last > known {
			// This run moved changes: tell every process, outside the run's transaction.
			if aerr := h.q.ChangeAnnounce(ctx, last); aerr != nil && h.ctx.Err() == nil {
				h.log.Warn("error announcing changes", "err", aerr)
			}
		}
		cancel()
		if err != nil {
			if h.ctx.Err() == nil {
				h.log.Warn("error sequencing changes", "err", err)
			}
			continue
		}
		h.announce(last)
	}
}

// fetchLoop reads the changes after the last one fanned out and fans them out, page by page.
func (h *Hub) fetchLoop() {
	defer h.loops.Done()
	const page = 1000
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.fetchSignal:
		}
		if !h.Ready() {
			continue // where the log ends is not known yet: reading from 0 would replay it all
		}
		for h.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
			rows, err := h.q.ChangesAfter(ctx, db.ChangesAfterParams{After: h.LastID(), MaxChanges: page})
			cancel()
			if err != nil {
				if h.ctx.Err() == nil {
					h.log.Warn("error reading changes", "err", err)
				}
				break
			}
			if len(rows) > 0 && rows[0].ID > h.LastID()+1 && !h.checkGap(rows[0].ID) {
				break
			}
			if len(rows) > 0 {
				h.fanout(rows)
			}
			if len(rows) < page {
				break
			}
		}
	}
}

// checkGap is called when the next change read is not the one after the last fanned out. Ids are
// skipped when a sequencer run fails, which is harmless; but when the log was trimmed past the
// hub's position (it could not read for longer than the retention), changes are gone that clients
// expected: every client is disconnected (4002) and, resuming, is told what it missed. It returns
// false when the gap could not be checked (read again later).
func (h *Hub) checkGap(next int64) bool {
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	r, err := h.q.ChangeResume(ctx, h.LastID())
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("error checking a gap in the change log", "err", err)
		}
		return false
	}
	if r.Status != "expired" {
		return true
	}
	h.log.Warn("the change log was trimmed past this process's position: disconnecting every websocket client",
		"position", h.LastID(), "trimmed_through", r.TrimmedThrough, "next", next)
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		h.removeLocked(c)
		c.kick(closeBehind, "server behind")
	}
	return true
}

// message is one change as the hub hands it to clients: its coordinates for filtering and its
// websocket frame, encoded once for every client.
type message struct {
	id      int64
	channel string
	kind    string
	readers []string
	payload json.RawMessage
	created time.Time
	frame   []byte
}

// wireChange is the JSON of a change message (type "change").
type wireChange struct {
	Type    string          `json:"type"`
	ID      int64           `json:"id"`
	Channel string          `json:"channel"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	Created time.Time       `json:"created"`
	// Coalesced: how many changes a debounced message stands for (absent: one); LastID the
	// highest id among them.
	Coalesced int   `json:"coalesced,omitempty"`
	LastID    int64 `json:"last_id,omitempty"`
}

func newMessage(c db.SiloChange) *message {
	m := &message{id: c.ID, channel: c.Channel, kind: c.Kind, readers: c.Readers, payload: c.Payload, created: c.Created}
	m.frame, _ = json.Marshal(wireChange{Type: "change", ID: c.ID, Channel: c.Channel, Kind: c.Kind, Payload: c.Payload, Created: c.Created})
	return m
}

// visible is the rule of api.changes_since (sql/030_changes.sql) for live changes: an admin sees
// every change; anyone else sees a change whose readers overlap its own (_all, _auth, roles);
// a change without readers is for admins only.
func visible(changeReaders []string, readers map[string]struct{}, isAdmin bool) bool {
	if isAdmin {
		return true
	}
	for _, r := range changeReaders {
		if _, ok := readers[r]; ok {
			return true
		}
	}
	return false
}

// matches is the channel rule of api.changes_since: a pattern equal to the channel, or a pattern
// ending in * whose part before the * starts the channel.
func matches(pattern, channel string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(channel, p)
	}
	return pattern == channel
}

// fanout hands each change, in id order, to the clients it concerns. It holds the hub's lock, so a
// client that subscribes sees either all of a change's fan-out or none of it (then it reads the
// change from the log when it catches up).
func (h *Hub) fanout(rows []db.SiloChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rows {
		if r.ID <= h.lastID {
			continue
		}
		m := newMessage(r)
		for c := range h.exact[m.channel] {
			h.push(c, m)
		}
		for p, set := range h.prefix {
			if strings.HasPrefix(m.channel, p) {
				for c := range set {
					h.push(c, m)
				}
			}
		}
		h.lastID = m.id
	}
	h.mSequenced.Add(float64(len(rows)))
	h.mLastID.Set(float64(h.lastID))
}

// push queues m for c unless c may not see it or already has it (a change matching two of its
// patterns); a full queue disconnects c. Called with h.mu held.
func (h *Hub) push(c *client, m *message) {
	if m.id <= c.lastPushed || !visible(m.readers, c.readers, c.isAdmin) {
		return
	}
	c.lastPushed = m.id
	if !c.queue.push(m) {
		h.mSlow.Inc()
		h.removeLocked(c)
		c.kick(closeSlow, "too slow")
	}
}

// subscribe adds patterns to c's subscriptions in the hub's index and returns the last id fanned
// out: every later change on these patterns reaches c's queue. It fails when the hub is stopping.
func (h *Hub) subscribe(c *client, patterns []string) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, errors.New("the server is shutting down")
	}
	if c.gone {
		return 0, errors.New("the connection is closing")
	}
	for _, p := range patterns {
		idx, key := h.exact, p
		if k, ok := strings.CutSuffix(p, "*"); ok {
			idx, key = h.prefix, k
		}
		set := idx[key]
		if set == nil {
			set = map[*client]struct{}{}
			idx[key] = set
		}
		set[c] = struct{}{}
		c.hubPatterns[p] = struct{}{}
	}
	if c.lastPushed < h.lastID {
		c.lastPushed = h.lastID
	}
	return h.lastID, nil
}

// unsubscribe removes patterns from c's subscriptions in the hub's index.
func (h *Hub) unsubscribe(c *client, patterns []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range patterns {
		h.unindexLocked(c, p)
		delete(c.hubPatterns, p)
	}
}

func (h *Hub) unindexLocked(c *client, p string) {
	idx, key := h.exact, p
	if k, ok := strings.CutSuffix(p, "*"); ok {
		idx, key = h.prefix, k
	}
	if set := idx[key]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(idx, key)
		}
	}
}

// register adds a connected client; it fails when the hub is stopping.
func (h *Hub) register(c *client) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.ready {
		return 0, errors.New("the change hub is not running")
	}
	h.clients[c] = struct{}{}
	h.conns.Add(1)
	h.mClients.Inc()
	c.lastPushed = h.lastID
	return h.lastID, nil
}

// remove takes c out of the hub (idempotent).
func (h *Hub) remove(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(c)
}

func (h *Hub) removeLocked(c *client) {
	if c.gone {
		return
	}
	c.gone = true
	for p := range c.hubPatterns {
		h.unindexLocked(c, p)
	}
	delete(h.clients, c)
	h.mClients.Dec()
}

// clientQueue is a client's bounded queue of live changes. It holds no memory while empty, so idle
// clients stay small.
type clientQueue struct {
	mu     sync.Mutex
	items  []*message
	max    int
	notify chan struct{} // a signal that items are waiting
}

func newClientQueue(max int) *clientQueue {
	return &clientQueue{max: max, notify: make(chan struct{}, 1)}
}

// push appends m; false when the queue is full.
func (q *clientQueue) push(m *message) bool {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, m)
	q.mu.Unlock()
	signal(q.notify)
	return true
}

// take returns every queued item and empties the queue.
func (q *clientQueue) take() []*message {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}
