package main

import (
	"context"
	"crypto/tls"
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
// (jobs in progress finish), close the pool, leave the embedded database.
//
// The listen addresses are taken first, before the database is opened and anything starts: an
// address in use fails the start with one line, and no worker runs in the meantime.
func cmdRun(ctx context.Context, cfg config, logger *slog.Logger, serve, work bool) error {
	var apiLn, metricsLn, mqttLn net.Listener
	var err error
	if serve {
		if apiLn, err = listen("SILO_ADDR", cfg.addr); err != nil {
			return err
		}
		defer apiLn.Close()
		if cfg.mqttAddr != "" {
			if mqttLn, err = listen("SILO_MQTT_ADDR", cfg.mqttAddr); err != nil {
				return err
			}
			defer mqttLn.Close()
			if !cfg.mqttPlain {
				tc, fingerprint, created, err := mqttTLS(cfg)
				if err != nil {
					return err
				}
				if created {
					cert, _ := mqttSelfSignedFiles(cfg.dataDir)
					logger.Info("made a self-signed certificate for the MQTT broker", "file", cert)
				}
				logger.Info("MQTT TLS certificate", "sha256_fingerprint", fingerprint)
				mqttLn = tls.NewListener(mqttLn, tc)
			}
		}
	}
	if work && !serve && cfg.metricsAddr != "" {
		if metricsLn, err = listen("SILO_METRICS_ADDR", cfg.metricsAddr); err != nil {
			return err
		}
		defer metricsLn.Close()
	}
	return withDatabase(ctx, cfg, logger, true, func(pool *pgxpool.Pool, _ string) (runErr error) {
		if serve && work { // `silo up`: one command does it all
			if err := db.Migrate(ctx, pool, logger); err != nil {
				return err
			}
		}
		errc := make(chan error, 3)
		var stops []func(context.Context) error
		// Whatever has started is stopped again, also when a later part fails to start.
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, stop := range stops {
				if err := stop(shutdownCtx); err != nil {
					logger.Error("error during shutdown", "err", err)
				}
			}
		}()
		registry := prometheus.NewRegistry()

		if work {
			client, err := worker.NewClient(pool, worker.Config{
				Logger: logger, DeadLetterRetention: cfg.deadLetterRetention,
				ReaperInterval: cfg.reaperInterval, ReaperBudget: cfg.reaperBudget, RescueStuckJobsAfter: cfg.jobRescueAfter,
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
			if cfg.beltWorkers > 0 {
				belts := worker.NewBelts(pool, worker.BeltConfig{Logger: logger, Workers: cfg.beltWorkers, Registerer: registry})
				belts.Start(ctx)
				logger.Info("belts started", "workers", cfg.beltWorkers)
				stops = append(stops, belts.Stop)
			}
			if cfg.jobs {
				jobs := worker.NewJobs(pool, worker.JobConfig{Logger: logger, Registerer: registry})
				jobs.Start(ctx)
				logger.Info("job manager started")
				stops = append(stops, jobs.Stop)
			}
			if metricsLn != nil {
				registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
				stops = append([]func(context.Context) error{serveOn(metricsLn, mux, errc)}, stops...)
				logger.Info("metrics listening", "addr", cfg.metricsAddr)
			}
		}
		if serve {
			if !work || cfg.updaterWorkers == 0 {
				registry.MustRegister(worker.NewBacklogCollector(pool)) // the updater registers it otherwise
			}
			registry.MustRegister(worker.NewJobStatsCollector(pool))
			// Change notifications (package change): the process's LISTEN connection and its
			// websocket sessions, served by the HTTP API on GET /ws.
			hub := change.NewHub(change.Config{Pool: pool, Logger: logger})
			if err := hub.Start(ctx); err != nil {
				return err
			}
			stops = append([]func(context.Context) error{hub.Stop}, stops...)
			handler, broker, err := server.NewWithMQTT(server.Config{Pool: pool, Logger: logger, Version: version(), Registry: registry, Hub: hub, CacheContext: ctx})
			if err != nil {
				return err
			}
			// Stop taking requests, then close the websockets (each told where to resume).
			stops = append([]func(context.Context) error{serveOn(apiLn, handler, errc)}, stops...)
			logger.Info("HTTP API listening", "addr", cfg.addr)
			if mqttLn != nil {
				if err := broker.Serve(mqttLn); err != nil {
					return err
				}
				stops = append([]func(context.Context) error{func(context.Context) error { return broker.Close() }}, stops...)
				logger.Info("MQTT broker listening", "addr", mqttLn.Addr().String(), "tls", !cfg.mqttPlain)
			}
		}

		select {
		case <-ctx.Done():
			logger.Info("shutting down")
		case runErr = <-errc:
		}
		return runErr
	})
}

// serveOn serves handler on ln until the returned stop is called; a failure of the server is sent
// to errc.
func serveOn(ln net.Listener, handler http.Handler, errc chan<- error) func(context.Context) error {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server on %s: %w", ln.Addr(), err)
		}
	}()
	return srv.Shutdown
}
