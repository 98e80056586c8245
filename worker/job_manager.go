package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// Channels of the job service: api.job_event_ingest (and every publication of jobs) notifies
// JobChannel; api.job_config_load notifies JobConfigChannel.
const (
	JobChannel       = "silo_job"
	JobConfigChannel = "silo_job_config"
)

// JobConfig configures the job manager of a process.
type JobConfig struct {
	Logger *slog.Logger
	// Disabled: Start does nothing (the process dispatches no job).
	Disabled bool
	// Registerer receives the manager's metrics (nil: not registered).
	Registerer prometheus.Registerer
	// MaxConns bounds the manager's own connection pool (default 16): the pools' workers share it.
	MaxConns int32
	// Batch is how many jobs a worker of a database hook (mock, sql:) takes per step (default 100).
	Batch int32
	// HTTPBatch is how many jobs a worker of an http or cache hook takes at once (default 10).
	HTTPBatch int32
	// Lease is how long an http or cache job stays taken before another worker may take it again
	// (default 60s): longer than a hook call may take.
	Lease time.Duration
	// IdleMax is the longest pause of an idle worker (default 1s); JobChannel wakes idle workers.
	IdleMax time.Duration
	// Client makes the hooks' HTTP calls (default: a client with a 30s timeout).
	Client *http.Client
	// PollOnly leaves out the LISTEN connection (for a pooler in transaction mode): the
	// configuration is then read again every ReloadEvery.
	PollOnly bool
	// ReloadEvery is how often the pools are read again besides the notifications (default 30s).
	ReloadEvery time.Duration
}

// Jobs is the job manager of a process: for each pool of the loaded configuration (a topic and
// a priority range, api.job_pools) it runs pool_size workers, each looping on steps: a database
// hook's step is one call of api.job_dispatch (expiry, deduplication, the hook and the outcomes in
// one transaction); an http or cache hook's workers take jobs with a lease (api.job_take), call
// the hook, and record the outcomes (api.job_finish). A new configuration (JobConfigChannel)
// replaces the pools whose size or hook changed, without a restart. The rules are the SQL's
// (sql/job/).
type Jobs struct {
	shared *pgxpool.Pool
	pool   *pgxpool.Pool
	q      *db.Queries
	cfg    JobConfig
	wake   waker

	jobs  *prometheus.CounterVec
	steps *prometheus.CounterVec
	calls *prometheus.HistogramVec

	mu      sync.Mutex
	running map[poolKey]*poolRun
	version int32
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type poolKey struct {
	topic  string
	lo, hi int32
}

type poolRun struct {
	hook   string
	size   int32
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewJobs returns the job manager on the database of pool; Start runs it.
func NewJobs(pool *pgxpool.Pool, cfg JobConfig) *Jobs {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 16
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.HTTPBatch <= 0 {
		cfg.HTTPBatch = 10
	}
	if cfg.Lease <= 0 {
		cfg.Lease = time.Minute
	}
	if cfg.IdleMax <= 0 {
		cfg.IdleMax = time.Second
	}
	if cfg.ReloadEvery <= 0 {
		cfg.ReloadEvery = 30 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	j := &Jobs{shared: pool, pool: pool, cfg: cfg, running: map[poolKey]*poolRun{},
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_jobs_total",
			Help: "Jobs handled by this process's job manager, by topic and outcome: done, failed, retried, dropped (expired or duplicate), children (jobs the hooks published).",
		}, []string{"topic", "outcome"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_job_steps_total",
			Help: "Job manager steps by outcome: worked, idle, error.",
		}, []string{"outcome"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "silo_job_hook_call_seconds",
			Help:    "Time of the HTTP calls of the http and cache hooks, by hook.",
			Buckets: []float64{.001, .003, .01, .03, .1, .3, 1, 3, 10, 30},
		}, []string{"hook"}),
	}
	if !cfg.Disabled {
		pc := pool.Config()
		pc.MaxConns = cfg.MaxConns
		pc.MinConns = 0
		pc.ConnConfig.RuntimeParams = named(pc.ConnConfig.RuntimeParams, "silo jobs")
		if own, err := pgxpool.NewWithConfig(context.Background(), pc); err == nil {
			j.pool = own
		} else {
			cfg.Logger.Warn("jobs: using the shared pool", "err", err)
		}
	}
	j.q = db.New(j.pool)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(j.jobs, j.steps, j.calls)
	}
	return j
}

// Start reads the pools and runs their workers, and the listener that wakes them and reloads the
// configuration; they run until Stop.
func (j *Jobs) Start(ctx context.Context) {
	if j.cfg.Disabled {
		return
	}
	j.ctx, j.cancel = context.WithCancel(context.WithoutCancel(ctx))
	reload := make(chan struct{}, 1)
	poke := func() {
		select {
		case reload <- struct{}{}:
		default:
		}
	}
	if !j.cfg.PollOnly {
		j.wg.Add(2)
		go func() {
			defer j.wg.Done()
			listenLoop(j.ctx, j.pool, "silo jobs listener", JobChannel, j.cfg.Logger, func(string) { j.wake.wakeUp() })
		}()
		go func() {
			defer j.wg.Done()
			listenLoop(j.ctx, j.pool, "silo jobs config listener", JobConfigChannel, j.cfg.Logger, func(string) { poke() })
		}()
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		t := time.NewTicker(j.cfg.ReloadEvery)
		defer t.Stop()
		for {
			if err := j.Reload(j.ctx); err != nil && j.ctx.Err() == nil {
				j.cfg.Logger.Warn("jobs: reading the pools failed", "err", err)
			}
			select {
			case <-j.ctx.Done():
				return
			case <-reload:
			case <-t.C:
			}
		}
	}()
}

// Reload reads the pools of the loaded configuration and starts, stops or resizes this process's
// workers to match.
func (j *Jobs) Reload(ctx context.Context) error {
	pools, err := j.q.JobPools(ctx)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	want := map[poolKey]db.APIJobPool{}
	for _, p := range pools {
		want[poolKey{p.Topic, p.Lo, p.Hi}] = p
		j.version = p.Version
	}
	for k, r := range j.running {
		if p, ok := want[k]; !ok || p.Hook != r.hook || p.PoolSize != r.size {
			r.cancel()
			delete(j.running, k)
		}
	}
	for k, p := range want {
		if _, ok := j.running[k]; ok {
			continue
		}
		pctx, cancel := context.WithCancel(j.ctx)
		r := &poolRun{hook: p.Hook, size: p.PoolSize, cancel: cancel}
		j.running[k] = r
		for range p.PoolSize {
			j.wg.Add(1)
			go func() {
				defer j.wg.Done()
				j.run(pctx, k, p.Hook)
			}()
		}
		j.cfg.Logger.Info("job pool started", "topic", k.topic, "priorities", fmt.Sprintf("%d-%d", k.lo, k.hi),
			"hook", p.Hook, "workers", p.PoolSize)
	}
	return nil
}

// Pools reports the pools this process runs: "topic lo-hi hook xN", sorted by the caller.
func (j *Jobs) Pools() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for k, r := range j.running {
		out = append(out, fmt.Sprintf("%s %d-%d %s x%d", k.topic, k.lo, k.hi, r.hook, r.size))
	}
	return out
}

// Stop stops the workers (a step in progress runs to its commit) and closes the manager's pool.
func (j *Jobs) Stop(ctx context.Context) error {
	if j.cancel != nil {
		j.cancel()
		done := make(chan struct{})
		go func() { j.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if j.pool != j.shared {
		j.pool.Close()
	}
	return nil
}

// run is one worker of pool k: steps while there is work, sleeps with back-off otherwise.
func (j *Jobs) run(ctx context.Context, k poolKey, hook string) {
	var idle time.Duration
	failures := 0
	for ctx.Err() == nil {
		woken := j.wake.channel()
		var worked bool
		var err error
		if hook == "http" || hook == "cache" {
			worked, err = j.outsideStep(ctx, k, hook)
		} else {
			worked, err = j.dbStep(ctx, k)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			j.steps.WithLabelValues("error").Inc()
			failures++
			backoff := min(time.Duration(1<<min(failures, 10))*10*time.Millisecond, 5*time.Second)
			j.cfg.Logger.Warn("job step failed, retrying", "topic", k.topic, "err", err, "backoff", backoff)
			if !sleep(ctx, backoff, nil) {
				return
			}
			continue
		}
		failures = 0
		if worked {
			j.steps.WithLabelValues("worked").Inc()
			idle = 0
			continue
		}
		j.steps.WithLabelValues("idle").Inc()
		idle = min(max(idle*2, time.Millisecond), j.cfg.IdleMax)
		if !sleep(ctx, idle, woken) {
			return
		}
	}
}

// dbStep is one api.job_dispatch step; it runs to its commit even when the pool is stopped.
func (j *Jobs) dbStep(ctx context.Context, k poolKey) (bool, error) {
	res, err := j.q.JobDispatch(context.WithoutCancel(ctx), db.JobDispatchParams{Topic: k.topic, Lo: k.lo, Hi: k.hi, MaxJobs: j.cfg.Batch})
	if err != nil {
		return false, err
	}
	j.record(k.topic, res)
	return deref32(res.Taken) > 0, nil
}

func (j *Jobs) record(topic string, res db.APIJobDispatched) {
	j.jobs.WithLabelValues(topic, "done").Add(float64(deref32(res.Done)))
	j.jobs.WithLabelValues(topic, "failed").Add(float64(deref32(res.Failed)))
	j.jobs.WithLabelValues(topic, "retried").Add(float64(deref32(res.Retried)))
	j.jobs.WithLabelValues(topic, "dropped").Add(float64(deref32(res.ExpiredOrDuplicate)))
	j.jobs.WithLabelValues(topic, "children").Add(float64(deref32(res.Children)))
}

// jobResult is one outcome for api.job_finish.
type jobResult struct {
	ID       int64           `json:"id"`
	Outcome  string          `json:"outcome"`
	Error    string          `json:"error,omitempty"`
	SQLState string          `json:"sqlstate,omitempty"`
	Jobs     json.RawMessage `json:"jobs,omitempty"`
}

// outsideStep takes jobs of an http or cache pool with a lease (committed), calls their hooks
// concurrently, and records the outcomes.
func (j *Jobs) outsideStep(ctx context.Context, k poolKey, hook string) (bool, error) {
	taken, err := j.q.JobTake(context.WithoutCancel(ctx), db.JobTakeParams{Topic: k.topic, Lo: k.lo, Hi: k.hi,
		MaxJobs: j.cfg.HTTPBatch, LeaseSeconds: j.cfg.Lease.Seconds()})
	if err != nil || len(taken) == 0 {
		return false, err
	}
	results := make([]jobResult, len(taken))
	var wg sync.WaitGroup
	for i, t := range taken {
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.cfg.Lease*9/10)
			defer cancel()
			if t.Hook != nil && *t.Hook == "cache" {
				results[i] = j.cacheHook(callCtx, t)
			} else {
				results[i] = j.httpHook(callCtx, t)
			}
		}()
	}
	wg.Wait()
	body, err := json.Marshal(results)
	if err != nil {
		return true, err
	}
	res, err := j.q.JobFinish(context.WithoutCancel(ctx), body)
	if err != nil {
		return true, err
	}
	j.record(k.topic, res)
	return true, nil
}

// httpHook POSTs the job to feed_manager.worker_url ({type}, {id} replaced) with the unique hash
// as Idempotency-Key. A 2xx is done (its body may carry {"jobs": [...]}, the jobs the hook made);
// 408, 429, 5xx and network errors use an attempt; any other status fails the job.
func (j *Jobs) httpHook(ctx context.Context, t db.APIJobTaken) jobResult {
	r := jobResult{ID: deref64(t.ID)}
	tmpl := deref(t.URL)
	if tmpl == "" {
		r.Outcome, r.Error, r.SQLState = "fail", "feed_manager.worker_url is not configured", "NOURL"
		return r
	}
	u := fill(tmpl, map[string]string{"type": deref(t.ResourceType), "id": deref(t.ResourceID)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(t.Job))
	if err != nil {
		r.Outcome, r.Error, r.SQLState = "fail", "invalid hook URL: "+err.Error(), "NOURL"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", deref(t.UniqueHash))
	start := time.Now()
	resp, err := j.cfg.Client.Do(req)
	j.calls.WithLabelValues("http").Observe(time.Since(start).Seconds())
	if err != nil {
		r.Outcome, r.Error, r.SQLState = "error", err.Error(), "NET"
		return r
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return outcomeOf(r, resp.StatusCode, data)
}

// outcomeOf reads a hook's HTTP answer.
func outcomeOf(r jobResult, status int, body []byte) jobResult {
	switch {
	case status >= 200 && status < 300:
		r.Outcome = "ok"
		var out struct {
			Jobs json.RawMessage `json:"jobs"`
		}
		if json.Unmarshal(body, &out) == nil && len(out.Jobs) > 0 && out.Jobs[0] == '[' {
			r.Jobs = out.Jobs
		}
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500:
		r.Outcome, r.SQLState = "error", fmt.Sprintf("HTTP %d", status)
		r.Error = fmt.Sprintf("hook answered %d: %s", status, snippet(body))
	default:
		r.Outcome, r.SQLState = "fail", fmt.Sprintf("HTTP %d", status)
		r.Error = fmt.Sprintf("hook answered %d: %s", status, snippet(body))
	}
	return r
}

// ruleJob is one job of a cache_manager rule.
type ruleJob struct {
	OthersAffected bool              `json:"others_affected"`
	EntityType     string            `json:"entity_type"`
	EntityIDOffset *int              `json:"entity_id_offset"`
	Params         map[string]string `json:"params"`
	Topic          string            `json:"topic"`
	UpdateFields   json.RawMessage   `json:"update_fields"`
}

// cacheHook runs a cache job: the invalidation itself is recorded by api.job_finish; here the
// jobs of its cache_manager rule are made, calling the affected-users endpoint for a rule job
// with others_affected (one job per element of the JSON array it answers). A rule job with
// entity_type makes jobs of that resource type (PostsById -> Post), so that the rules of the
// entity's type apply to them in turn, up to generations_limit.
func (j *Jobs) cacheHook(ctx context.Context, t db.APIJobTaken) jobResult {
	r := jobResult{ID: deref64(t.ID), Outcome: "ok"}
	var rules []ruleJob
	if len(t.RuleJobs) == 0 || json.Unmarshal(t.RuleJobs, &rules) != nil || len(rules) == 0 {
		return r
	}
	var parent struct {
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(t.Job, &parent)
	var children []map[string]any
	for _, rj := range rules {
		child := map[string]any{"topic": rj.Topic}
		if rj.EntityType != "" {
			child["resource_type"] = rj.EntityType
		}
		if len(rj.UpdateFields) > 0 {
			child["update_fields"] = rj.UpdateFields
		}
		if !rj.OthersAffected {
			children = append(children, child)
			continue
		}
		vals, ok := affectedParams(rj, deref(t.ResourceURL))
		if !ok || deref(t.AffectedURL) == "" {
			r.Outcome, r.SQLState = "fail", "NOAFF"
			r.Error = "others_affected: the resource url gives no type and id, or cache_manager.ppro_user_id/token_endpoint is not configured"
			return r
		}
		affected, err := j.affected(ctx, fill(deref(t.AffectedURL), vals))
		if err != nil {
			r.Outcome, r.SQLState, r.Error = "error", "NET", "affected-users endpoint: "+err.Error()
			return r
		}
		for _, a := range affected {
			c := map[string]any{"topic": rj.Topic, "payload": affectedPayload(parent.Payload, a)}
			if rj.EntityType != "" {
				c["resource_type"] = rj.EntityType // the entity's jobs: the rules of its type apply next
			}
			if len(rj.UpdateFields) > 0 {
				c["update_fields"] = rj.UpdateFields
			}
			children = append(children, c)
		}
	}
	if len(children) > 0 {
		r.Jobs, _ = json.Marshal(children)
	}
	return r
}

// affectedParams gives the values of the affected-users endpoint's placeholders: with
// entity_type and entity_id_offset, {type} is the entity type and {id} the path segment at the
// offset (/posts/42, offset 1: 42); with params, each resource url query parameter named by a key
// fills the placeholder of that key and of its mapped name.
func affectedParams(rj ruleJob, resourceURL string) (map[string]string, bool) {
	u, err := url.Parse(resourceURL)
	if err != nil {
		return nil, false
	}
	vals := map[string]string{}
	if rj.EntityType != "" && rj.EntityIDOffset != nil {
		var segs []string
		for _, s := range strings.Split(u.Path, "/") {
			if s != "" {
				segs = append(segs, s)
			}
		}
		if *rj.EntityIDOffset >= len(segs) {
			return nil, false
		}
		vals["type"], vals["id"] = rj.EntityType, segs[*rj.EntityIDOffset]
		if len(u.Query()) == 0 || len(rj.Params) == 0 {
			return vals, true
		}
	}
	q := u.Query()
	for src, dst := range rj.Params {
		v := q.Get(src)
		if v == "" {
			if len(vals) > 0 {
				continue
			}
			return nil, false
		}
		vals[src], vals[dst] = v, v
	}
	return vals, len(vals) > 0
}

// affectedPayload is a child's payload: the parent's (an object) with "affected" the endpoint's
// element and, when the element is a string or has one, "access_token" (the session whose cached
// responses the child invalidates).
func affectedPayload(parent json.RawMessage, a json.RawMessage) map[string]any {
	p := map[string]any{}
	_ = json.Unmarshal(parent, &p)
	p["affected"] = a
	var s string
	var o struct {
		AccessToken string `json:"access_token"`
	}
	if json.Unmarshal(a, &s) == nil && s != "" {
		p["access_token"] = s
	} else if json.Unmarshal(a, &o) == nil && o.AccessToken != "" {
		p["access_token"] = o.AccessToken
	}
	return p
}

// affected GETs the affected-users endpoint; it answers a JSON array (or {"users": [...]}).
func (j *Jobs) affected(ctx context.Context, u string) ([]json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	resp, err := j.cfg.Client.Do(req)
	j.calls.WithLabelValues("cache").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("answered %d: %s", resp.StatusCode, snippet(data))
	}
	var list []json.RawMessage
	if err := json.Unmarshal(data, &list); err == nil {
		return list, nil
	}
	var obj struct {
		Users []json.RawMessage `json:"users"`
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, errors.New("answered no JSON array")
	}
	return obj.Users, nil
}

// fill replaces {name} in tmpl by the query-escaped value of vals[name].
func fill(tmpl string, vals map[string]string) string {
	for k, v := range vals {
		tmpl = strings.ReplaceAll(tmpl, "{"+k+"}", url.QueryEscape(v))
	}
	return tmpl
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func deref32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func deref64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// NewJobStatsCollector returns the collector of the job service's counters and states for
// /metrics (api.job_stats, read at each scrape): silo_job_events_total{topic, counter} and
// silo_jobs_waiting{topic, state}.
func NewJobStatsCollector(pool *pgxpool.Pool) prometheus.Collector {
	return &jobStatsCollector{q: db.New(pool)}
}

type jobStatsCollector struct{ q *db.Queries }

var (
	jobCounterDesc = prometheus.NewDesc("silo_job_counter_total",
		"The job service's counters by topic: scheduled, deduplicated, superseded, expired, dispatched, failed, retried, discarded_generation.",
		[]string{"topic", "counter"}, nil)
	jobWaitingDesc = prometheus.NewDesc("silo_jobs_waiting", "Jobs pending or running now, by topic and state.", []string{"topic", "state"}, nil)
)

func (c *jobStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobCounterDesc
	ch <- jobWaitingDesc
}

func (c *jobStatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.q.JobStats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(jobCounterDesc, err)
		return
	}
	for _, r := range rows {
		t := r.Topic
		for name, v := range map[string]int64{"scheduled": r.Scheduled, "deduplicated": r.Deduplicated, "superseded": r.Superseded,
			"expired": r.Expired, "dispatched": r.Dispatched, "failed": r.Failed, "retried": r.Retried,
			"discarded_generation": r.DiscardedGeneration} {
			ch <- prometheus.MustNewConstMetric(jobCounterDesc, prometheus.CounterValue, float64(v), t, name)
		}
		ch <- prometheus.MustNewConstMetric(jobWaitingDesc, prometheus.GaugeValue, float64(r.Pending), t, "pending")
		ch <- prometheus.MustNewConstMetric(jobWaitingDesc, prometheus.GaugeValue, float64(r.Running), t, "running")
	}
}
