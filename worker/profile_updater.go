package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// InboxChannel is the channel api.profile_enqueue notifies (payload: the priority) when it
// accepted updates.
const InboxChannel = "silo_inbox"

// Priorities are the updater's two streams.
var Priorities = []string{"high", "low"}

// UpdaterConfig configures the asynchronous profile updater.
type UpdaterConfig struct {
	Logger *slog.Logger
	// Workers per priority stream in this process (0: Start does nothing).
	Workers int
	// Registerer receives the updater's metrics and the backlog collector (nil: not registered).
	Registerer prometheus.Registerer
	// IdleMax is the longest pause of an idle worker between two looks at the inbox (default 1s).
	// A notification on InboxChannel wakes the idle workers of its stream at once.
	IdleMax time.Duration
	// PollOnly leaves out the LISTEN connection (for a pooler in transaction mode, where LISTEN
	// does not work): idle workers only poll.
	PollOnly bool
}

// Updater applies the profile inbox: Workers goroutines per priority stream, each calling
// api.profile_inbox_process step after step. Ordering, lanes, retries and the throttle decision
// are the SQL's (sql/profile/); the updater only sleeps where the SQL says so, wakes on notifications and reports
// metrics. It uses a pool of its own (the caller's configuration, one connection per worker and
// one more), so that a busy updater never makes HTTP requests wait for a connection.
type Updater struct {
	shared *pgxpool.Pool // the caller's: the backlog collector's
	pool   *pgxpool.Pool // the workers'
	q      *db.Queries
	cfg    UpdaterConfig
	wake   map[string]*waker

	applySeconds *prometheus.HistogramVec
	stepSeconds  *prometheus.HistogramVec
	updates      *prometheus.CounterVec
	steps        *prometheus.CounterVec
	throttled    prometheus.Gauge

	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup

	mu        sync.Mutex
	status    map[string]db.ProfileUpdaterStatusRow
	checkedAt time.Time
}

// NewUpdater returns an updater on the database of pool; Start runs it.
func NewUpdater(pool *pgxpool.Pool, cfg UpdaterConfig) *Updater {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = time.Second
	}
	u := &Updater{shared: pool, pool: pool, cfg: cfg,
		wake: map[string]*waker{"high": {}, "low": {}},
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "silo_profile_update_apply_seconds",
			Help: "Execution time of asynchronously applied profile updates by operation: the apply time of each step, " +
				"measured in SQL, shared evenly among the step's updates (a step applies up to updater.batch_size updates set-based).",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1, .3, 1, 3, 10},
		}, []string{"operation"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "silo_profile_updater_step_seconds",
			Help:    "Apply time of the updater's steps (one transaction each, up to updater.batch_size updates), measured in SQL, by priority.",
			Buckets: []float64{.001, .003, .01, .03, .1, .3, 1, 3, 10, 30, 100},
		}, []string{"priority"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_profile_updater_updates_total",
			Help: "Profile updates applied by the asynchronous updater, by priority and status (ok, noop, dead_letter).",
		}, []string{"priority", "status"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_profile_updater_steps_total",
			Help: "Steps of the asynchronous updater by priority and outcome (applied, idle, lane_failed, error).",
		}, []string{"priority", "outcome"}),
		throttled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "silo_profile_updater_low_throttled",
			Help: "1 while this process throttles the low priority stream (the high stream's backlog was above updater.lag_barrier at the last check).",
		}),
	}
	if cfg.Workers > 0 {
		pc := pool.Config()
		pc.MaxConns = int32(len(Priorities)*cfg.Workers + 1)
		pc.MinConns = 0
		// Named apart from the process's pool, so a DBA can count them in pg_stat_activity.
		pc.ConnConfig.RuntimeParams = named(pc.ConnConfig.RuntimeParams, "silo profile updater")
		if own, err := pgxpool.NewWithConfig(context.Background(), pc); err == nil {
			u.pool = own
		} else {
			cfg.Logger.Warn("profile updater: using the shared pool", "err", err)
		}
	}
	u.q = db.New(u.pool)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(u.applySeconds, u.stepSeconds, u.updates, u.steps, u.throttled, NewBacklogCollector(pool))
	}
	return u
}

// Start launches the workers (and the LISTEN connection that wakes them); they run until Stop.
func (u *Updater) Start(ctx context.Context) {
	if u.cfg.Workers <= 0 {
		return
	}
	ctx, u.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if !u.cfg.PollOnly {
		u.wg.Add(1)
		go func() {
			defer u.wg.Done()
			listenLoop(ctx, u.pool, "silo profile updater listener", InboxChannel, u.cfg.Logger, u.notified)
		}()
	}
	for _, prio := range Priorities {
		for i := 0; i < u.cfg.Workers; i++ {
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				u.run(ctx, prio)
			}()
		}
	}
}

// Stop stops the workers: a step in progress runs to its commit (its query does not see the
// cancellation), waits end at once. Then the updater's pool is closed.
func (u *Updater) Stop(ctx context.Context) error {
	if u.cancel == nil {
		if u.pool != u.shared {
			u.pool.Close()
		}
		return nil
	}
	u.stopping.Store(true)
	u.cancel()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
		if u.pool != u.shared {
			u.pool.Close()
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is one worker of stream prio: step after step; idle, it waits with back-off up to IdleMax
// or until a notification; throttled (low stream), it applies one message per step and waits the
// throttle's time per message; after a failed step (the database away), it waits with back-off.
func (u *Updater) run(ctx context.Context, prio string) {
	var idle time.Duration
	failures := 0
	for !u.stopping.Load() {
		var maxUpdates *int32
		var wait time.Duration
		if prio == "low" {
			if st, ok := u.lowStatus(ctx); ok && st.Throttled {
				one := int32(1)
				maxUpdates, wait = &one, time.Duration(st.WaitMs)*time.Millisecond
			}
		}
		woken := u.wake[prio].channel() // before the step: a notification during it is not lost
		// The step runs on a context that Stop does not cancel: it commits or rolls back whole.
		res, err := u.q.ProfileInboxProcess(context.WithoutCancel(ctx), db.ProfileInboxProcessParams{Priority: prio, MaxUpdates: maxUpdates})
		if err != nil {
			// The database is away or the step failed as a whole: nothing was applied or removed.
			u.steps.WithLabelValues(prio, "error").Inc()
			failures++
			backoff := min(time.Duration(1<<min(failures, 10))*10*time.Millisecond, 5*time.Second)
			u.cfg.Logger.Warn("profile updater step failed, retrying", "priority", prio, "err", err, "backoff", backoff)
			if !sleep(ctx, backoff, nil) {
				return
			}
			continue
		}
		failures = 0
		if res.Taken == 0 && res.FailedLanes == 0 {
			u.steps.WithLabelValues(prio, "idle").Inc()
			idle = min(max(idle*2, time.Millisecond), u.cfg.IdleMax)
			if !sleep(ctx, idle, woken) {
				return
			}
			continue
		}
		idle = 0
		u.record(prio, res)
		if wait > 0 && res.Taken > 0 && !sleep(ctx, wait*time.Duration(res.Taken), nil) {
			return
		}
	}
}

// record turns a step's result into metrics and logs.
func (u *Updater) record(prio string, res db.ProfileInboxProcessRow) {
	outcome := "applied"
	if res.FailedLanes > 0 {
		outcome = "lane_failed"
		u.cfg.Logger.Error("profile updater: unexpected error, the lane waits and retries (see api.profile_inbox_blocked_lanes)",
			"priority", prio, "failed_lanes", res.FailedLanes, "err", deref(res.Error))
	}
	u.steps.WithLabelValues(prio, outcome).Inc()
	u.updates.WithLabelValues(prio, "ok").Add(float64(res.Ok))
	u.updates.WithLabelValues(prio, "noop").Add(float64(res.Noop))
	u.updates.WithLabelValues(prio, "dead_letter").Add(float64(res.DeadLetter))
	u.stepSeconds.WithLabelValues(prio).Observe(res.ApplyMs / 1000)
	var ops map[string]int
	_ = json.Unmarshal(res.Operations, &ops)
	if res.Taken > 0 {
		per := res.ApplyMs / 1000 / float64(res.Taken)
		for op, n := range ops {
			h := u.applySeconds.WithLabelValues(op)
			for range n {
				h.Observe(per)
			}
		}
	}
	threshold := int32(1000)
	if st, ok := u.cachedStatus(prio); ok {
		threshold = st.LongRunningMs
	}
	if threshold > 0 && res.ApplyMs > float64(threshold) {
		u.cfg.Logger.Warn("profile updater: long running step", "priority", prio, "apply_ms", res.ApplyMs,
			"updates", res.Taken, "lanes", res.Lanes, "operations", string(res.Operations), "threshold_ms", threshold)
	}
}

// lowStatus returns the low stream's status (throttle decision), asking the database at most once
// per updater.check_interval_ms.
func (u *Updater) lowStatus(ctx context.Context) (db.ProfileUpdaterStatusRow, bool) {
	u.mu.Lock()
	st, ok := u.status["low"]
	fresh := ok && time.Since(u.checkedAt) < time.Duration(st.CheckIntervalMs)*time.Millisecond
	u.mu.Unlock()
	if fresh {
		return st, true
	}
	rows, err := u.q.ProfileUpdaterStatus(ctx)
	if err != nil {
		return st, ok // the step will meet the same trouble and back off
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.status = make(map[string]db.ProfileUpdaterStatusRow, len(rows))
	for _, r := range rows {
		u.status[r.Priority] = r
	}
	u.checkedAt = time.Now()
	st, ok = u.status["low"]
	if st.Throttled {
		u.throttled.Set(1)
	} else {
		u.throttled.Set(0)
	}
	return st, ok
}

func (u *Updater) cachedStatus(prio string) (db.ProfileUpdaterStatusRow, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st, ok := u.status[prio]
	return st, ok
}

// notified wakes the idle workers of the stream a notification names, and those of every stream
// for the empty payload of a (re)connection: what was enqueued while no one listened.
func (u *Updater) notified(payload string) {
	if payload == "" {
		for _, w := range u.wake {
			w.wakeUp()
		}
	} else if w, ok := u.wake[payload]; ok {
		w.wakeUp()
	}
}

// waker wakes every worker waiting on the channel it handed out.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *waker) channel() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *waker) wakeUp() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sleep waits d, or until woken (nil: never) or ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-woken:
		return true
	case <-ctx.Done():
		return false
	}
}

// NewBacklogCollector returns the collector of the inbox depth per priority (with the oldest
// message's age and the blocked lanes), read from the database at scrape time: the signal to scale
// `silo work` processes on (the topic lag of the original). The updater registers it itself; a
// process that serves /metrics without running the updater registers it with this.
func NewBacklogCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &backlogCollector{q: db.New(pool)}
}

type backlogCollector struct{ q *db.Queries }

var (
	backlogDesc = prometheus.NewDesc("silo_profile_inbox_backlog", "Profile updates accepted and not yet applied, by priority.", []string{"priority"}, nil)
	ageDesc     = prometheus.NewDesc("silo_profile_inbox_oldest_age_seconds", "Age of the oldest profile update waiting in the inbox, by priority.", []string{"priority"}, nil)
	blockedDesc = prometheus.NewDesc("silo_profile_inbox_blocked_lanes", "Inbox lanes waiting after an unexpected error, by priority.", []string{"priority"}, nil)
)

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backlogDesc
	ch <- ageDesc
	ch <- blockedDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.q.ProfileUpdaterStatus(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(backlogDesc, err)
		return
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(r.Backlog), r.Priority)
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, r.OldestAgeSeconds, r.Priority)
		ch <- prometheus.MustNewConstMetric(blockedDesc, prometheus.GaugeValue, float64(r.BlockedLanes), r.Priority)
	}
}

// named returns the runtime parameters params (a copy of a pool's) with application_name set.
func named(params map[string]string, name string) map[string]string {
	if params == nil {
		params = map[string]string{}
	}
	params["application_name"] = name
	return params
}
