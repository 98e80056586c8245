package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/silo-db/silo/db"
)

// Config configures the HTTP API.
type Config struct {
	Pool    *pgxpool.Pool
	Logger  *slog.Logger
	Version string
	// MaxBodyBytes limits request bodies (default 32 MiB).
	MaxBodyBytes int64
	// Registry serves /metrics; other parts of the process (the workers) may register on it too.
	// nil: a registry of the server's own.
	Registry *prometheus.Registry
	// Hub serves change notifications on GET /ws (nil: the route answers 503). The caller starts
	// and stops it with the process.
	Hub *Hub
}

type server struct {
	pool    *pgxpool.Pool
	q       *db.Queries
	log     *slog.Logger
	version string
	maxBody int64
	metrics *metrics

	identities identityCache
	batcher    *batcher
	hub        *Hub
}

// New returns Silo's HTTP API.
func New(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	s := &server{pool: cfg.Pool, q: db.New(cfg.Pool), log: cfg.Logger, version: cfg.Version,
		maxBody: cfg.MaxBodyBytes, metrics: newMetrics(cfg.Pool, cfg.Registry), hub: cfg.Hub}
	if cfg.Hub != nil {
		for _, c := range cfg.Hub.collectors() {
			_ = s.metrics.registry.Register(c) // already registered when two servers share hub and registry
		}
	}
	s.batcher = newBatcher(s.q)

	mux := http.NewServeMux()
	route := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, h))
	}
	route("GET /healthz", s.healthz)
	route("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	route("POST /profile-updates", s.profileUpdates)
	route("GET /profiles/{profileType}/{correlationId}", s.profileGet)
	route("GET /profiles/{profileType}/{correlationId}/grain/{path...}", s.profileGrainGet)
	route("GET /dead-letters", s.deadLetterList)
	route("POST /dead-letters/{id}/replay", s.deadLetterReplay)
	route("GET /ws", s.ws)
	mux.Handle("/", s.instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "unknown-resource", "no route for "+r.Method+" "+r.URL.Path, nil)
	}))
	return mux
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.version})
}

// readyz: the database answers and is migrated.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1 FROM silo.api_code WHERE to_regnamespace('api') IS NOT NULL`).Scan(&one); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not-ready", "database not reachable or not migrated", nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// statusWriter records the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Hijack hands the connection over to the websocket endpoint.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// instrument logs each request, records its metrics and turns a panic into a 500.
func (s *server) instrument(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic in handler", "route", route, "panic", p, "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, http.StatusInternalServerError, "unexpected-error", "unexpected error", nil)
				}
			}
			d := time.Since(start)
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
			s.metrics.duration.WithLabelValues(route).Observe(d.Seconds())
			s.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.String("route", route), slog.Int("status", sw.status),
				slog.Duration("duration", d), slog.Int("bytes", sw.bytes))
		}()
		h(sw, r)
	})
}

type metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	updates  *prometheus.CounterVec
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
	m.updates = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "silo_profile_updates_total",
		Help: "Profile updates applied, by operation and result (ok, noop, dead_letter)."}, []string{"operation", "status"})
	m.registry.MustRegister(m.requests, m.duration, m.updates,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pool != nil {
		m.registry.MustRegister(poolCollector{pool})
	}
	return m
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

// errorBody is Pryv's error shape.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	ID      string         `json:"id"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRawJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, id, message string, data map[string]any) {
	writeJSON(w, status, errorBody{Error: errorObject{ID: id, Message: message, Data: data}})
}

// fail answers an error from a query: a registered SQLSTATE with its status and id, anything else
// with a logged 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if apiErr, ok := ErrorFor(err); ok {
		writeError(w, apiErr.Status, apiErr.ID, apiErr.Message, apiErr.Data)
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	s.log.Error("unexpected error", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "unexpected-error", "unexpected error", nil)
}
