package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// UpdaterConfig configures the asynchronous profile updater.
type UpdaterConfig struct {
	Logger *slog.Logger
	// Workers per priority stream in this process (0: the updater does not run).
	Workers int
	// Registerer receives the updater's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// IdleMax is the longest pause of an idle worker between two looks at the inbox (default 250ms).
	IdleMax time.Duration
}

// Updater applies the profile inbox: Workers goroutines per priority stream, each calling
// api.profile_inbox_process step after step. Ordering, lanes, retries and the throttle decision
// are the SQL's; the updater only sleeps where the SQL says so and reports metrics.
type Updater struct {
	pool *pgxpool.Pool
	q    *db.Queries
	cfg  UpdaterConfig

	applySeconds *prometheus.HistogramVec
	updates      *prometheus.CounterVec
	steps        *prometheus.CounterVec

	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup

	mu        sync.Mutex
	status    map[string]db.ProfileUpdaterStatusRow
	checkedAt time.Time
}

// NewUpdater returns an updater on pool; Start runs it.
func NewUpdater(pool *pgxpool.Pool, cfg UpdaterConfig) *Updater {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = 250 * time.Millisecond
	}
	u := &Updater{pool: pool, q: db.New(pool), cfg: cfg,
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "silo_profile_update_apply_seconds",
			Help:    "Execution time of asynchronously applied profile updates by operation: the SQL-measured apply time of each step shared evenly among its updates.",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1, .3, 1, 3, 10},
		}, []string{"operation"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_profile_updater_updates_total",
			Help: "Profile updates applied by the asynchronous updater, by priority and status (ok, noop, dead_letter).",
		}, []string{"priority", "status"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_profile_updater_steps_total",
			Help: "Steps of the asynchronous updater by priority and outcome (applied, idle, lane_failed, error).",
		}, []string{"priority", "outcome"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(u.applySeconds, u.updates, u.steps, &backlogCollector{q: u.q})
	}
	return u
}

// Start launches the workers; they run until Stop.
func (u *Updater) Start(ctx context.Context) {
	ctx, u.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, prio := range []string{"high", "low"} {
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
// cancellation), waits end at once.
func (u *Updater) Stop(ctx context.Context) error {
	if u.cancel == nil {
		return nil
	}
	u.stopping.Store(true)
	u.cancel()
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (u *Updater) run(ctx context.Context, prio string) {
	idle := time.Millisecond
	failures := 0
	for !u.stopping.Load() {
		var max *int32
		wait := time.Duration(0)
		if prio == "low" {
			if st, err := u.throttle(ctx); err == nil && st.Throttled {
				one := int32(1)
				max, wait = &one, time.Duration(st.WaitMs)*time.Millisecond
			}
		}
		// The step runs on a context that Stop does not cancel: it commits or rolls back whole.
		res, err := u.q.ProfileInboxProcess(context.WithoutCancel(ctx), db.ProfileInboxProcessParams{Priority: prio, MaxUpdates: max})
		if err != nil {
			// The database is away or the step failed as a whole: nothing was applied or removed.
			u.steps.WithLabelValues(prio, "error").Inc()
			failures++
			backoff := min(time.Duration(1<<min(failures, 10))*10*time.Millisecond, 5*time.Second)
			u.cfg.Logger.Warn("profile updater step failed, retrying", "priority", prio, "err", err, "backoff", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			continue
		}
		failures = 0
		if res.Taken == 0 && res.FailedLanes == 0 {
			u.steps.WithLabelValues(prio, "idle").Inc()
			if !sleep(ctx, idle) {
				return
			}
			idle = min(idle*2, u.cfg.IdleMax)
			continue
		}
		idle = time.Millisecond
		u.record(prio, res)
		if wait > 0 && !sleep(ctx, wait*time.Duration(max1(res.Taken))) {
			return
		}
		if !res.More && !sleep(ctx, idle) {
			return
		}
	}
}

func max1(n int32) int32 {
	if n < 1 {
		return 1
	}
	return n
}

// record turns a step's result into metrics and logs.
func (u *Updater) record(prio string, res db.ProfileInboxProcessRow) {
	outcome := "applied"
	if res.FailedLanes > 0 {
		outcome = "lane_failed"
		u.cfg.Logger.Error("profile updater: unexpected error, the lane waits and retries", "priority", prio,
			"failed_lanes", res.FailedLanes, "err", deref(res.Error))
	}
	u.steps.WithLabelValues(prio, outcome).Inc()
	u.updates.WithLabelValues(prio, "ok").Add(float64(res.Ok))
	u.updates.WithLabelValues(prio, "noop").Add(float64(res.Noop))
	u.updates.WithLabelValues(prio, "dead_letter").Add(float64(res.DeadLetter))
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
	if st, ok := u.cachedStatus(prio); ok && st.LongRunningMs > 0 && res.ApplyMs > float64(st.LongRunningMs) {
		u.cfg.Logger.Warn("profile updater: long running step", "priority", prio, "apply_ms", res.ApplyMs,
			"updates", res.Taken, "operations", string(res.Operations), "threshold_ms", st.LongRunningMs)
	}
}

// throttle returns the low stream's status, asking the database at most once per check interval.
func (u *Updater) throttle(ctx context.Context) (db.ProfileUpdaterStatusRow, error) {
	u.mu.Lock()
	st, ok := u.status["low"]
	fresh := ok && time.Since(u.checkedAt) < time.Duration(st.CheckIntervalMs)*time.Millisecond
	u.mu.Unlock()
	if fresh {
		return st, nil
	}
	rows, err := u.q.ProfileUpdaterStatus(ctx)
	if err != nil {
		return st, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.status = make(map[string]db.ProfileUpdaterStatusRow, len(rows))
	for _, r := range rows {
		u.status[r.Priority] = r
	}
	u.checkedAt = time.Now()
	if st, ok = u.status["low"]; !ok {
		return st, errors.New("no status of the low stream")
	}
	return st, nil
}

func (u *Updater) cachedStatus(prio string) (db.ProfileUpdaterStatusRow, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	st, ok := u.status[prio]
	return st, ok
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// NewBacklogCollector returns the collector of the inbox depth per priority, for processes that
// serve /metrics without running the updater.
func NewBacklogCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &backlogCollector{q: db.New(pool)}
}

// backlogCollector reports the inbox depth per priority at scrape time: the signal to scale
// `silo work` processes on (the topic lag of the original).
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
