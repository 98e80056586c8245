package server

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

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
	s := &server{pool: cfg.Pool, log: cfg.Logger, version: cfg.Version,
		maxBody: cfg.MaxBodyBytes, metrics: newMetrics(cfg.Pool, cfg.Registry), hub: cfg.Hub}
	s.q = db.New(timedDB{DBTX: cfg.Pool, m: s.metrics})
	if cfg.Hub != nil {
		for _, c := range cfg.Hub.Collectors() {
			_ = s.metrics.registry.Register(c) // already registered when two servers share hub and registry
		}
	}
	s.applyJoin = newJoiner(func(ctx context.Context, readers []string, requests []byte) ([]db.ProfileApplyRequestsRow, error) {
		return s.q.ProfileApplyRequests(ctx, db.ProfileApplyRequestsParams{Requests: requests, Readers: readers})
	}, func(r db.ProfileApplyRequestsRow) int32 { return r.Request })
	s.enqueueJoin = newJoiner(func(ctx context.Context, priority string, requests []byte) ([]db.ProfileEnqueueRequestsRow, error) {
		return s.q.ProfileEnqueueRequests(ctx, db.ProfileEnqueueRequestsParams{Requests: requests, Priority: priority})
	}, func(r db.ProfileEnqueueRequestsRow) int32 { return r.Request })

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
	// Every path under /events/ is the event store's, served by a mux of its own (server/event.go).
	events := http.NewServeMux()
	s.eventRoutes(route, func(pattern string, h http.HandlerFunc) { events.Handle(pattern, s.instrument(pattern, h)) })
	muxFor := func(r *http.Request) *http.ServeMux {
		if strings.HasPrefix(r.URL.Path, "/events/") {
			return events
		}
		return mux
	}

	// No catch-all route: one would match every request and hide the mux's own answer for a path
	// that exists for other methods only (405 with Allow). A request no route serves gets the mux's
	// answer (404, 405, or a redirect to the cleaned path) with the JSON error body.
	unmatched := s.instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
		muxFor(r).ServeHTTP(&jsonMiss{ResponseWriter: w, r: r}, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := muxFor(r)
		if _, pattern := m.Handler(r); pattern == "" {
			unmatched.ServeHTTP(w, r)
			return
		}
		m.ServeHTTP(w, r)
	})
}

// jsonMiss writes the mux's 404 and 405 as Silo's JSON errors (the 405 keeps the mux's Allow
// header) and passes anything else through.
type jsonMiss struct {
	http.ResponseWriter
	r       *http.Request
	written bool // the JSON error is written: the mux's plain text body is dropped
}

func (w *jsonMiss) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		w.written = true
		writeError(w.ResponseWriter, code, "unknown-resource", "no route for "+w.r.Method+" "+w.r.URL.Path, nil)
	case http.StatusMethodNotAllowed:
		w.written = true
		allow := w.Header().Get("Allow")
		writeError(w.ResponseWriter, code, "method-not-allowed",
			w.r.URL.Path+" does not answer "+w.r.Method+": allowed are "+allow,
			map[string]any{"allow": strings.Split(allow, ", ")})
	default:
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *jsonMiss) Write(b []byte) (int, error) {
	if w.written {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
