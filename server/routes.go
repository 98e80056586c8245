package server

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/silo-db/silo/db"
)

// New returns Silo's HTTP API: the route table.
func New(cfg Config) http.Handler {
	return newServer(cfg).routes()
}

// newServer makes what the HTTP API and the MQTT broker share: the pool, the metrics, the joiners.
func newServer(cfg Config) *server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	s := &server{pool: cfg.Pool, log: cfg.Logger, version: cfg.Version,
		maxBody: cfg.MaxBodyBytes, metrics: newMetrics(cfg.Pool, cfg.Registry), hub: cfg.Hub, cacheCtx: cfg.CacheContext}
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
	s.seriesJoin = newJoiner(func(ctx context.Context, _ struct{}, requests []byte) ([]db.SeriesAppendRequestsRow, error) {
		return s.q.SeriesAppendRequests(ctx, requests)
	}, func(r db.SeriesAppendRequestsRow) int32 { return r.Request })
	s.columnsJoin = newColumnsJoiner(func(ctx context.Context, p db.SeriesAppendColumnsParams) error {
		_, err := s.q.SeriesAppendColumns(ctx, p)
		return err
	})
	return s
}

// routes is the route table.
func (s *server) routes() http.Handler {
	rt := newRouter(s.instrument)
	route := func(pattern string, h http.HandlerFunc) {
		rt.handle(pattern, s.instrument(pattern, h))
	}
	route("GET /healthz", s.healthz)
	route("GET /readyz", s.readyz)
	rt.handle("GET /metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}))
	route("POST /profile-updates", s.profileUpdates)
	route("GET /profiles/{profileType}/{correlationId}", s.profileGet)
	route("GET /profiles/{profileType}/{correlationId}/grain/{path...}", s.profileGrainGet)
	route("GET /dead-letters", s.deadLetterList)
	route("POST /dead-letters/{id}/replay", s.deadLetterReplay)
	route("GET /ws", s.changeWS)
	route("GET /belts", s.beltList)
	route("POST /belts", s.beltCreate)
	route("GET /belts/{id}", s.beltGet)
	route("PUT /belts/{id}", s.beltUpdate)
	route("DELETE /belts/{id}", s.beltDelete)
	route("GET /belts/{id}/state", s.beltStateGet)
	route("POST /belts/{id}/state", s.beltStateSet)
	route("GET /belts/{id}/dead-letters", s.beltDeadLetterList)
	route("POST /belts/{id}/dead-letters/replay", s.beltDeadLetterReplay)
	s.eventRoutes(route)
	s.odsRoutes(route)
	s.purgeRoutes(route)
	s.jobJoin = s.newJobJoin()
	route("POST /job-events", s.jobEvents)
	route("GET /jobs", s.jobList)
	route("GET /jobs/stats", s.jobStats)
	route("GET /jobs/{id}", s.jobGet)

	// Accounts in Pryv's model, under /{username}/: a mux of their own (router.go says why).
	account := func(pattern string, h http.HandlerFunc) {
		rt.account(pattern, s.instrument(pattern, h))
	}
	account("POST /{username}/{$}", s.accountBatch)
	account("POST /{username}/accesses", s.accountAccessCreate)
	account("GET /{username}/accesses", s.accountAccessesGet)
	account("GET /{username}/access-info", s.accountAccessInfo)
	account("POST /{username}/streams", s.accountStreamCreate)
	account("GET /{username}/streams", s.accountStreamsGet)
	account("POST /{username}/events", s.accountEventCreate)
	account("GET /{username}/events", s.accountEventsGet)
	account("GET /{username}/events/{id}", s.accountEventGet)
	account("PUT /{username}/events/{id}", s.accountEventUpdate)
	account("DELETE /{username}/events/{id}", s.accountEventDelete)
	account("GET /{username}/ws", s.accountWS)
	account("POST /{username}/events/{id}/series", s.seriesAppend)
	account("GET /{username}/events/{id}/series", s.seriesGet)
	account("DELETE /{username}/events/{id}/series", s.seriesDelete)
	account("POST /{username}/series/batch", s.seriesBatch)

	// The API cache, around Silo's own routes (not the account routes).
	if s.pool != nil {
		cache := newAPICache(s.q, s.log, s.metrics.registry)
		if s.cacheCtx != nil {
			cache.listen(s.cacheCtx, s.pool)
		}
		rt.ownRoutes = cacheWrap(cache, s.authenticate, rt.main)
	}
	return rt
}
