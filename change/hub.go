package change

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// The hub: change notifications from PostgreSQL to the websocket subscribers of this process.
//
// One dedicated connection per process LISTENs on silo_change_pending and silo_changes. When
// pending changes are announced (and once every PollInterval without notifications, as a safety
// net), the hub calls api.change_sequence, which numbers committed changes in commit order and
// notifies silo_changes at its commit. Writers notify only while no hub is awake, because notifying
// commits wait for each other: a hub that hears two within AwakeLinger becomes the awake sequencer
// and sequences every AwakePollInterval by itself until it has seen no change for AwakeLinger
// (sequencer.go; the protocol is in sql/change/02_sequence.sql). A database whose writers never
// notify (silo.change_notify = off, set with ALTER DATABASE ... SET) is polled every 10 ms instead
// (listen.go). On silo_changes the hub reads the new rows once (api.changes_after) and fans each
// out, in id order, to the clients whose subscriptions match its channel and who may see it
// (fanout.go). Each client has a bounded queue (queue.go): a client that falls behind is
// disconnected and told the id to resume from, it never slows the others down. Everything a client
// misses while disconnected it reads back from the change log when it resumes (api.changes_since,
// see session.go).
//
// Channels are plain strings; the hub knows nothing of profiles. Kinds listed in
// Config.CoalesceKinds may be coalesced for subscribers that ask for a debounce.

// Config configures the hub. Zero values take the defaults in parentheses.
type Config struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// PollInterval: without notifications for this long, the hub sequences and reads anyway (1s;
	// 10ms when the database's silo.change_notify is off, so that writers do not notify).
	PollInterval time.Duration
	// AwakePollInterval: how often an awake hub sequences by itself, writers not notifying it (5ms).
	AwakePollInterval time.Duration
	// AwakeLinger: a hub that hears two writers within this time becomes the awake sequencer, and
	// goes on until this time has passed without a change, writers notifying again (20ms). Writers
	// further apart notify, which costs nothing at such a rate and is the quicker path.
	AwakeLinger time.Duration
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
	// ReauthInterval: how often an open connection's identity is checked again
	// (Identity.Reauthenticate), so a revoked token stops receiving (1m).
	ReauthInterval time.Duration
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.AwakePollInterval <= 0 {
		c.AwakePollInterval = 5 * time.Millisecond
	}
	if c.AwakeLinger <= 0 {
		c.AwakeLinger = 20 * time.Millisecond
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
// connections (Serve) and Stop it at shutdown (cmd/silo does both).
type Hub struct {
	cfg      Config
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

	sequenceSignal chan struct{} // sequence once (the safety net, a reconnection)
	wakeSignal     chan struct{} // a writer notified silo_change_pending: no hub was awake
	heard          atomic.Int64  // writers' notifications not yet seen by the sequencer
	fetchSignal    chan struct{}
	notified       atomic.Int64 // highest id announced by silo_changes or returned by change_sequence
	number         int32        // this hub's number in the awake sequencer's lease (1 to 999,999)
	notifyOff      atomic.Bool  // the database's silo.change_notify is off: writers never notify
	awake          atomic.Bool  // the sequencer is awake or draining (sequencer.go)

	ctx     context.Context // cancelled by Stop: clients close, loops end
	cancel  context.CancelFunc
	loops   sync.WaitGroup
	conns   sync.WaitGroup
	started bool

	mClients   prometheus.Gauge
	mLastID    prometheus.Gauge
	mMessages  prometheus.Counter
	mSlow      prometheus.Counter
	mFannedOut prometheus.Counter
	mAwake     prometheus.Gauge
	mWakeups   prometheus.Counter
}

// NewHub returns a hub; Start starts it.
func NewHub(cfg Config) *Hub {
	cfg.defaults()
	h := &Hub{
		cfg: cfg, q: db.New(cfg.Pool), log: cfg.Logger, coalesce: map[string]bool{},
		exact: map[string]map[*client]struct{}{}, prefix: map[string]map[*client]struct{}{},
		clients:        map[*client]struct{}{},
		sequenceSignal: make(chan struct{}, 1), wakeSignal: make(chan struct{}, 1), fetchSignal: make(chan struct{}, 1),
		number: 1 + rand.Int32N(999999),
	}
	for _, k := range cfg.CoalesceKinds {
		h.coalesce[k] = true
	}
	h.mClients = prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_ws_clients", Help: "Websocket clients connected to this process."})
	h.mLastID = prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_changes_last_id", Help: "Highest change id this process has fanned out."})
	h.mMessages = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_ws_messages_total", Help: "Change messages written to websocket clients."})
	h.mSlow = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_ws_slow_disconnects_total", Help: "Websocket clients disconnected because their queue was full."})
	h.mFannedOut = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_changes_fanned_out_total", Help: "Changes read from the change log and fanned out by this process."})
	h.mAwake = prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_change_sequencer_awake", Help: "1 while this process's hub is the awake sequencer (writers do not notify) or drains, 0 asleep."})
	h.mWakeups = prometheus.NewCounter(prometheus.CounterOpts{Name: "silo_change_sequencer_wakeups_total", Help: "Times this process's hub claimed the awake sequencer after a writer notified."})
	return h
}

// Collectors are the hub's metrics, for the registry that serves /metrics (server.New registers
// them).
func (h *Hub) Collectors() []prometheus.Collector {
	return []prometheus.Collector{h.mClients, h.mLastID, h.mMessages, h.mSlow, h.mFannedOut, h.mAwake, h.mWakeups}
}

// Start starts the listener. Once it listens, the hub reads the current end of the change log and
// is ready: clients see the changes made from then on, and older ones only when they resume with
// an id. Until then (the database is unreachable or not migrated yet) the hub is not Ready and
// refuses connections; the listener keeps trying.
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

// Awake reports whether this hub's sequencer is awake (writers do not notify it) or draining
// (sequencer.go).
func (h *Hub) Awake() bool {
	return h.awake.Load()
}

// LastID is the highest change id this hub has fanned out.
func (h *Hub) LastID() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastID
}
