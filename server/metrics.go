package server

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/silo-db/silo/db"
)

// metrics are the HTTP API's Prometheus metrics, served on GET /metrics from registry. No label
// value comes from a client: routes are the route table's patterns, operations and statuses the
// closed sets below.
type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	updates  updateCounter
	// Every call of api.profile_apply_batch by this server (the batcher's joined calls, large
	// requests on their own, each retry of a deadlocked call): its duration by outcome and its
	// updates.
	batchSeconds *prometheus.HistogramVec
	batchUpdates prometheus.Histogram
	// Series appends by MQTT and websocket messages (transport.go).
	transport transportMetrics
}

// profileOperations are the 21 operations of profile updates (profile_private.op_class in
// sql/profile/01_types.sql; a test holds the two equal). Any other _operation is counted as
// invalid, so a client cannot add label values.
var profileOperations = []string{
	"_set", "_set_if_not_exist", "_set_with_history", "_set_with_history_distinct",
	"_set_max", "_set_min", "_set_max_with_history", "_set_min_with_history",
	"_delete", "_delete_with_history", "_inc",
	"_array_append", "_array_append_with_history", "_array_put", "_array_put_with_history",
	"_array_put_with_history_distinct", "_array_remove", "_array_remove_with_history",
	"_set_ttl", "_set_ttn", "_profile_link",
}

// updateStatuses are the results of a profile update (api.profile_apply_batch).
var updateStatuses = []string{"ok", "noop", "dead_letter"}

// invalidOperation is the operation label of an update whose _operation is missing, not a
// string or none of the 21.
const invalidOperation = "invalid"

// updateCounter is silo_profile_updates_total: profile updates by operation and status, each
// label from its closed set.
type updateCounter struct {
	vec *prometheus.CounterVec
	ops map[string]bool
}

// WithLabelValues returns the counter of an operation and status as a client sent or the SQL
// returned them: an operation outside the 21 counts as invalid, a status outside ok, noop and
// dead_letter as dead_letter (api.profile_apply_batch returns no other).
func (c updateCounter) WithLabelValues(operation, status string) prometheus.Counter {
	if !c.ops[operation] {
		operation = invalidOperation
	}
	switch status {
	case "ok", "noop":
	default:
		status = "dead_letter"
	}
	return c.vec.WithLabelValues(operation, status)
}

func newMetrics(pool *pgxpool.Pool, registry *prometheus.Registry) *metrics {
	if registry == nil {
		registry = prometheus.NewRegistry()
	}
	m := &metrics{registry: registry}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_http_requests_total",
		Help: "HTTP requests by route and status."}, []string{"route", "status"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "silo_http_request_duration_seconds",
		Help: "HTTP request durations by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"route"})
	m.updates = updateCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_profile_updates_total",
		Help: "Profile updates applied synchronously (POST /profile-updates), by operation (one of the 21, or invalid) and status (ok, noop, dead_letter)."},
		[]string{"operation", "status"}), ops: map[string]bool{}}
	for _, op := range append(slices.Clone(profileOperations), invalidOperation) {
		m.updates.ops[op] = true
		for _, st := range updateStatuses {
			m.updates.vec.WithLabelValues(op, st) // every series from zero
		}
	}
	m.batchSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "silo_profile_apply_batch_seconds",
		Help: "Duration of the calls of api.profile_apply_batch for synchronous profile updates (one transaction each, joining concurrent small requests), by outcome (ok, error).",
		// The buckets of the asynchronous updater's steps (silo_profile_updater_step_seconds).
		Buckets: []float64{.001, .003, .01, .03, .1, .3, 1, 3, 10, 30, 100}}, []string{"outcome"})
	m.batchUpdates = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "silo_profile_apply_batch_updates",
		Help:    "Updates per call of api.profile_apply_batch for synchronous profile updates (how well concurrent requests are joined).",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}})
	for _, o := range []string{"ok", "error"} {
		m.batchSeconds.WithLabelValues(o)
	}
	m.transport = newTransportMetrics()
	m.registry.MustRegister(m.requests, m.duration, m.updates.vec, m.batchSeconds, m.batchUpdates,
		m.transport.messages, m.transport.points, m.transport.rejects, m.transport.mqttConns, m.transport.mqttConnects,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pool != nil {
		m.registry.MustRegister(poolCollector{pool})
	}
	return m
}

// timedDB is the server's connection to the database (its db.Queries use it): it passes every
// query through and times the calls of api.profile_apply_batch, wherever in the server they are
// made, from the call to the last row read.
type timedDB struct {
	db.DBTX
	m *metrics
}

// applyBatchCall is how the generated query ProfileApplyRequests calls the function.
const applyBatchCall = "api.profile_apply_requests("

func (t timedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !strings.Contains(sql, applyBatchCall) {
		return t.DBTX.Query(ctx, sql, args...)
	}
	start := time.Now()
	rows, err := t.DBTX.Query(ctx, sql, args...)
	if err != nil {
		t.m.batchSeconds.WithLabelValues("error").Observe(time.Since(start).Seconds())
		return rows, err
	}
	return &timedRows{Rows: rows, m: t.m, start: start}, nil
}

// timedRows records the call when its rows are closed: its duration and outcome, and, when it
// succeeded, its number of updates (one row each).
type timedRows struct {
	pgx.Rows
	m     *metrics
	start time.Time
	n     int
	done  bool
}

func (r *timedRows) Next() bool {
	ok := r.Rows.Next()
	if ok {
		r.n++
	}
	return ok
}

func (r *timedRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	outcome := "ok"
	if r.Rows.Err() != nil {
		outcome = "error"
	} else {
		r.m.batchUpdates.Observe(float64(r.n))
	}
	r.m.batchSeconds.WithLabelValues(outcome).Observe(time.Since(r.start).Seconds())
}

var (
	poolTotal    = prometheus.NewDesc("silo_db_pool_connections", "Database pool connections by state.", []string{"state"}, nil)
	poolAcquires = prometheus.NewDesc("silo_db_pool_acquires_total", "Connections acquired from the pool.", nil, nil)
	poolWait     = prometheus.NewDesc("silo_db_pool_acquire_wait_seconds_total", "Time spent waiting for a pool connection.", nil, nil)
)

type poolCollector struct{ pool *pgxpool.Pool }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolTotal
	ch <- poolAcquires
	ch <- poolWait
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(st.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(st.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(st.MaxConns()), "max")
	ch <- prometheus.MustNewConstMetric(poolAcquires, prometheus.CounterValue, float64(st.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWait, prometheus.CounterValue, st.AcquireDuration().Seconds())
}

// transportMetrics count the series appends of MQTT and websocket messages. Their labels come
// from closed sets: the transport (mqtt, websocket), and a reject's reason, which is an error id of
// the registry (errors.go), or one of rejectReasons.
type transportMetrics struct {
	messages     *prometheus.CounterVec // applied messages, by transport
	points       *prometheus.CounterVec // their points
	rejects      *prometheus.CounterVec // refused messages, by transport and reason
	mqttConns    prometheus.Gauge       // MQTT clients connected now
	mqttConnects *prometheus.CounterVec // MQTT connection attempts, by result
}

// rejectReasons are the reasons of a refused message that are not error ids of the registry.
var rejectReasons = []string{"invalid-request-structure", "invalid-topic", UnavailableID, "unexpected-error", "too-large"}

func newTransportMetrics() transportMetrics {
	m := transportMetrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_series_transport_messages_total",
			Help: "Series append messages applied, by transport (mqtt, websocket); rate() gives messages per second."}, []string{"transport"}),
		points: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_series_transport_points_total",
			Help: "Points of the series append messages applied, by transport (mqtt, websocket); rate() gives points per second."}, []string{"transport"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_series_transport_rejects_total",
			Help: "Series append messages refused, by transport (mqtt, websocket) and reason (the error id of the answer)."}, []string{"transport", "reason"}),
		mqttConns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "silo_mqtt_connections",
			Help: "MQTT clients connected to this process."}),
		mqttConnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_mqtt_connects_total",
			Help: "MQTT connection attempts, by result (ok, refused: bad username or token, unavailable: the database could not check)."}, []string{"result"}),
	}
	for _, t := range []string{"mqtt", "websocket"} {
		m.messages.WithLabelValues(t)
		m.points.WithLabelValues(t)
	}
	for _, r := range []string{"ok", "refused", "unavailable"} {
		m.mqttConnects.WithLabelValues(r)
	}
	return m
}

// add counts one applied message of points points.
func (m transportMetrics) add(transport string, points int) {
	m.messages.WithLabelValues(transport).Inc()
	m.points.WithLabelValues(transport).Add(float64(points))
}

// reject counts one refused message; a reason outside the closed sets counts as unexpected-error.
func (m transportMetrics) reject(transport, reason string) {
	if !slices.Contains(rejectReasons, reason) && !registeredID(reason) {
		reason = "unexpected-error"
	}
	m.rejects.WithLabelValues(transport, reason).Inc()
}
