package server

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/silo-db/silo/db"
)

// New returns Silo's HTTP API: the route table.
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
		for _, c := range cfg.Hub.Collectors() {
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
	route("GET /ws", s.changeWS)
	mux.Handle("/", s.instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "unknown-resource", "no route for "+r.Method+" "+r.URL.Path, nil)
	}))
	return mux
}
