package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// BeltChannel is the channel api.event_ingest and api.belt_dead_letter_replay notify when they
// deliver events to a belt lane that had nothing waiting.
const BeltChannel = "silo_belt"

// BeltConfig configures the belt workers of a process.
type BeltConfig struct {
	Logger *slog.Logger
	// Workers in this process (0: Start does nothing). Each runs steps of any running belt.
	Workers int
	// Registerer receives the workers' metrics (nil: not registered).
	Registerer prometheus.Registerer
	// IdleMax is the longest pause of an idle worker between two looks for work (default 1s). A
	// notification on BeltChannel wakes the idle workers at once; a retry's back-off ending does not.
	IdleMax time.Duration
	// PollOnly leaves out the LISTEN connection (for a pooler in transaction mode).
	PollOnly bool
}

// Belts runs the belts: Workers goroutines, each asking which running belts have ready lanes
// (api.belt_work) and running api.belt_process steps of them until they have nothing left. The
// rules (lanes, order, retries, dead letters, exactly once) are the SQL's (sql/belt/); the workers
// add what a SQL statement cannot do to itself: a SQL belt's step runs with statement_timeout
// CALLBACK_TIMEOUT_SEC, and a step that hits it is redone one event per lane to find the event
// that times out, which api.belt_lane_timeout records. It uses a pool of its own (one connection
// per worker and one more), like the profile updater.
type Belts struct {
	shared *pgxpool.Pool
	pool   *pgxpool.Pool
	q      *db.Queries
	cfg    BeltConfig
	wake   waker

	events      *prometheus.CounterVec
	steps       *prometheus.CounterVec
	stepSeconds *prometheus.HistogramVec

	cancel   context.CancelFunc
	stopping atomic.Bool
	wg       sync.WaitGroup
}

// NewBelts returns the belt workers on the database of pool; Start runs them.
func NewBelts(pool *pgxpool.Pool, cfg BeltConfig) *Belts {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = time.Second
	}
	b := &Belts{shared: pool, pool: pool, cfg: cfg,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_belt_events_total",
			Help: "Events of belts by belt and outcome: processed (the callback returned), failed (it raised or timed out), " +
				"dead_lettered, retried (a lane set to wait for a retry), long_running.",
		}, []string{"belt", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_belt_steps_total",
			Help: "Belt processing steps by outcome: processed, idle (no belt had work), timeout (a SQL callback hit CALLBACK_TIMEOUT_SEC), error.",
		}, []string{"outcome"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "silo_belt_step_seconds",
			Help:    "Time of belt steps, measured in SQL, by part: callback (running the callback over the step's events) and apply (the profile updates).",
			Buckets: []float64{.0003, .001, .003, .01, .03, .1, .3, 1, 3, 10, 30, 100},
		}, []string{"part"}),
	}
	if cfg.Workers > 0 {
		pc := pool.Config()
		pc.MaxConns = int32(cfg.Workers + 1)
		pc.MinConns = 0
		pc.ConnConfig.RuntimeParams = named(pc.ConnConfig.RuntimeParams, "silo belts")
		if own, err := pgxpool.NewWithConfig(context.Background(), pc); err == nil {
			b.pool = own
		} else {
			cfg.Logger.Warn("belts: using the shared pool", "err", err)
		}
	}
	b.q = db.New(b.pool)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(b.events, b.steps, b.stepSeconds)
	}
	return b
}

// Start launches the workers (and the LISTEN connection that wakes them); they run until Stop.
func (b *Belts) Start(ctx context.Context) {
	if b.cfg.Workers <= 0 {
		return
	}
	ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if !b.cfg.PollOnly {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			listenLoop(ctx, b.pool, "silo belts listener", BeltChannel, b.cfg.Logger, func(string) { b.wake.wakeUp() })
		}()
	}
	for range b.cfg.Workers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.run(ctx)
		}()
	}
}

// Stop stops the workers: a step in progress runs to its commit, waits end at once. Then the
// workers' pool is closed.
func (b *Belts) Stop(ctx context.Context) error {
	if b.cancel == nil {
		if b.pool != b.shared {
			b.pool.Close()
		}
		return nil
	}
	b.stopping.Store(true)
	b.cancel()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		if b.pool != b.shared {
			b.pool.Close()
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is one worker: it looks for belts with ready lanes, drains each (step after step while the
// step says more), and sleeps with back-off when none had work.
func (b *Belts) run(ctx context.Context) {
	var idle time.Duration
	failures := 0
	for !b.stopping.Load() {
		woken := b.wake.channel() // before looking: a notification meanwhile is not lost
		work, err := b.q.BeltWork(ctx)
		if err == nil {
			var did bool
			did, err = b.drainAll(ctx, work)
			if err == nil && did {
				idle, failures = 0, 0
				continue
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.steps.WithLabelValues("error").Inc()
			failures++
			backoff := min(time.Duration(1<<min(failures, 10))*10*time.Millisecond, 5*time.Second)
			b.cfg.Logger.Warn("belt step failed, retrying", "err", err, "backoff", backoff)
			if !sleep(ctx, backoff, nil) {
				return
			}
			continue
		}
		failures = 0
		b.steps.WithLabelValues("idle").Inc()
		idle = min(max(idle*2, time.Millisecond), b.cfg.IdleMax)
		if !sleep(ctx, idle, woken) {
			return
		}
	}
}

// drainAll runs the belts of work that have ready lanes, starting at a random one so that
// workers spread over them; it reports whether any step took events.
func (b *Belts) drainAll(ctx context.Context, work []db.APIBeltWork) (bool, error) {
	did := false
	start := 0
	if len(work) > 1 {
		start = rand.IntN(len(work))
	}
	for i := range work {
		w := work[(start+i)%len(work)]
		if w.ReadyLanes == 0 {
			continue
		}
		for !b.stopping.Load() {
			res, err := b.step(ctx, w, nil, nil)
			if isTimeout(err) && w.Language == "sql" {
				b.steps.WithLabelValues("timeout").Inc()
				if err := b.findTimeout(ctx, w); err != nil {
					return did, err
				}
				did = true
				break
			}
			if err != nil {
				return did, err
			}
			if res.Taken > 0 {
				did = true
			}
			if !res.More || res.Taken == 0 {
				break
			}
		}
	}
	return did, nil
}

// step runs one api.belt_process step of belt w in a transaction of its own, with statement_timeout
// CALLBACK_TIMEOUT_SEC for a SQL belt (a Python callback's timeout is enforced inside PL/Python).
// The step runs on a context that Stop does not cancel: it commits or rolls back whole.
func (b *Belts) step(ctx context.Context, w db.APIBeltWork, maxEvents *int32, lanes []int16) (db.BeltProcessRow, error) {
	var res db.BeltProcessRow
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		q := b.q.WithTx(tx)
		if w.Language == "sql" {
			ms := int64(w.CallbackTimeoutSec * 1000)
			if err := q.BeltStatementTimeout(ctx, strconv.FormatInt(max(ms, 1), 10)); err != nil {
				return err
			}
		}
		id := w.BeltID
		r, err := q.BeltProcess(ctx, db.BeltProcessParams{BeltID: &id, MaxEvents: maxEvents, Lanes: lanes})
		res = r
		return err
	})
	if err != nil {
		return res, err
	}
	b.record(w.BeltID, res)
	return res, nil
}

// findTimeout redoes a SQL belt's step one event per ready lane; a lane whose first event still
// times out is recorded by api.belt_lane_timeout (a retry with back-off, or a dead letter when
// the retries ran out), so the belt's other lanes go on.
func (b *Belts) findTimeout(ctx context.Context, w db.APIBeltWork) error {
	lanes, err := b.q.BeltLanesReady(ctx, w.BeltID)
	if err != nil {
		return err
	}
	one := int32(1)
	for _, lane := range lanes {
		if b.stopping.Load() {
			return nil
		}
		_, err := b.step(ctx, w, &one, []int16{lane})
		if !isTimeout(err) {
			if err != nil {
				return err
			}
			continue
		}
		outcome, err := b.q.BeltLaneTimeout(context.WithoutCancel(ctx), db.BeltLaneTimeoutParams{
			BeltID: w.BeltID, Lane: lane, Seconds: w.CallbackTimeoutSec})
		if err != nil {
			return err
		}
		belt := strconv.FormatInt(w.BeltID, 10)
		b.events.WithLabelValues(belt, "failed").Inc()
		b.events.WithLabelValues(belt, "long_running").Inc()
		if outcome == "dead_letter" {
			b.events.WithLabelValues(belt, "dead_lettered").Inc()
		} else {
			b.events.WithLabelValues(belt, "retried").Inc()
		}
		b.cfg.Logger.Warn("belt callback timed out", "belt", w.BeltID, "lane", lane,
			"timeout_sec", w.CallbackTimeoutSec, "outcome", outcome)
	}
	return nil
}

// record turns a step's result into metrics and logs.
func (b *Belts) record(beltID int64, res db.BeltProcessRow) {
	if res.Taken == 0 {
		return
	}
	belt := strconv.FormatInt(beltID, 10)
	b.steps.WithLabelValues("processed").Inc()
	b.events.WithLabelValues(belt, "processed").Add(float64(res.Processed))
	b.events.WithLabelValues(belt, "failed").Add(float64(res.Failed))
	b.events.WithLabelValues(belt, "dead_lettered").Add(float64(res.DeadLettered))
	b.events.WithLabelValues(belt, "retried").Add(float64(res.Retried))
	b.events.WithLabelValues(belt, "long_running").Add(float64(res.LongRunning))
	b.stepSeconds.WithLabelValues("callback").Observe(res.CallbackMs / 1000)
	b.stepSeconds.WithLabelValues("apply").Observe(res.ApplyMs / 1000)
	if res.DeadLettered > 0 || res.Retried > 0 {
		b.cfg.Logger.Warn("belt events failed", "belt", beltID, "dead_lettered", res.DeadLettered,
			"lanes_retrying", res.Retried, "failed", res.Failed)
	}
	if res.LongRunning > 0 {
		b.cfg.Logger.Warn("belt callbacks ran longer than CALLBACK_LONGRUNNING_SEC", "belt", beltID, "events", res.LongRunning)
	}
}

// isTimeout reports whether err is a canceled statement (statement_timeout, SQLSTATE 57014).
func isTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// listenLoop holds a LISTEN connection on channel and calls notified for each notification; it
// reconnects with back-off until ctx ends. Each (re)connection calls notified once with an empty
// payload, for what was sent while no one listened.
func listenLoop(ctx context.Context, pool *pgxpool.Pool, name, channel string, log *slog.Logger, notified func(payload string)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		listening, err := listenOnce(ctx, pool, name, channel, notified)
		if ctx.Err() != nil {
			return
		}
		if listening {
			backoff = 100 * time.Millisecond
		}
		log.Warn(fmt.Sprintf("%s: LISTEN connection lost, idle workers poll until it is back", name), "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff, nil) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func listenOnce(ctx context.Context, pool *pgxpool.Pool, name, channel string, notified func(string)) (bool, error) {
	cc := pool.Config().ConnConfig
	cc.RuntimeParams = named(cc.RuntimeParams, name)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	notified("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		notified(n.Payload)
	}
}
