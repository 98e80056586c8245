package server

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the HTTP API's Prometheus metrics, served on GET /metrics from registry.
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
