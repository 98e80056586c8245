package server

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/change"
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
	Hub *change.Hub
	// CacheContext, when set, gives the API cache its front cache in memory, kept coherent by a
	// LISTEN connection on silo_cache that lives until the context ends. Unset: the cache uses
	// the shared store (cache.entries) alone.
	CacheContext context.Context
}

// server is what every handler shares: the pool and its generated queries, the logger, the
// metrics, the identity cache, the joiners of write requests and the change hub. New (routes.go) makes it.
type server struct {
	pool    *pgxpool.Pool
	q       *db.Queries
	log     *slog.Logger
	version string
	maxBody int64
	metrics *metrics

	identities  identityCache
	applyJoin   *joiner[[]string, db.ProfileApplyRequestsRow] // POST /profile-updates, by readers
	jobJoin     *joiner[struct{}, db.APIJobEventResult]       // POST /job-events
	enqueueJoin *joiner[string, db.ProfileEnqueueRequestsRow] // its async mode, by priority
	seriesJoin  *joiner[struct{}, db.SeriesAppendRequestsRow] // the series write routes
	columnsJoin *columnsJoiner                                // their bodies read as columns
	hub         *change.Hub
	cacheCtx    context.Context // Config.CacheContext: while it lasts, the API cache hears invalidations
}
