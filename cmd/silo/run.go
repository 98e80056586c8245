package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/server"
	"github.com/silo-db/silo/worker"
)

// cmdRun runs the HTTP API and/or the River workers until ctx is cancelled (SIGINT/SIGTERM), then
// shuts down in order: stop accepting requests and finish the ones in flight, stop the workers
// (jobs in progress finish), close the pool, stop the embedded database.
func cmdRun(ctx context.Context, cfg config, logger *slog.Logger, serve, work bool) error {
	return withDatabase(ctx, cfg, logger, func(pool *pgxpool.Pool, _ string) error {
		if serve && work { // `silo up`: one command does it all
			if err := db.Migrate(ctx, pool, logger); err != nil {
				return err
			}
		}
		errc := make(chan error, 3)
		var stops []func(context.Context) error
		registry := prometheus.NewRegistry()

		if work {
			client, err := worker.NewClient(pool, worker.Config{
				Logger: logger, DeadLetterRetention: cfg.deadLetterRetention,
				ReaperInterval: cfg.reaperInterval, ReaperBudget: cfg.reaperBudget,
			})
			if err != nil {
				return err
			}
			if err := client.Start(ctx); err != nil {
				return fmt.Errorf("error starting River: %w", err)
			}
			logger.Info("workers started")
			stops = append(stops, client.Stop)
			if cfg.updaterWorkers > 0 {
				updater := worker.NewUpdater(pool, worker.UpdaterConfig{Logger: logger, Workers: cfg.updaterWorkers, Registerer: registry})
				updater.Start(ctx)
				logger.Info("profile updater started", "workers_per_priority", cfg.updaterWorkers)
				stops = append(stops, updater.Stop)
			}
			if !serve && cfg.metricsAddr != "" {
				registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
				stop, err := listenAndServe(cfg.metricsAddr, mux, errc)
				if err != nil {
					return err
				}
				logger.Info("metrics listening", "addr", cfg.metricsAddr)
				stops = append([]func(context.Context) error{stop}, stops...)
			}
		}
		if serve {
			if !work || cfg.updaterWorkers == 0 {
				registry.MustRegister(worker.NewBacklogCollector(pool)) // the updater registers it otherwise
			}
			// Change notifications (package change): the process's LISTEN connection and its
			// websocket sessions, served by the HTTP API on GET /ws.
			hub := change.NewHub(change.Config{Pool: pool, Logger: logger})
			if err := hub.Start(ctx); err != nil {
				return err
			}
			handler := server.New(server.Config{Pool: pool, Logger: logger, Version: version(), Registry: registry, Hub: hub})
			stop, err := listenAndServe(cfg.addr, handler, errc)
			if err != nil {
				_ = hub.Stop(ctx)
				return err
			}
			logger.Info("HTTP API listening", "addr", cfg.addr)
			// Stop taking requests, then close the websockets (each told where to resume).
			stops = append([]func(context.Context) error{stop, hub.Stop}, stops...)
		}

		var runErr error
		select {
		case <-ctx.Done():
			logger.Info("shutting down")
		case runErr = <-errc:
		}
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, stop := range stops {
			if err := stop(shutdownCtx); err != nil {
				logger.Error("error during shutdown", "err", err)
			}
		}
		return runErr
	})
}

// listenAndServe serves handler on addr until the returned stop is called; a failure of the server
// is sent to errc.
func listenAndServe(addr string, handler http.Handler, errc chan<- error) (func(context.Context) error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("error listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server on %s: %w", addr, err)
		}
	}()
	return srv.Shutdown, nil
}
