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
		errc := make(chan error, 2)
		var stops []func(context.Context) error

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
		}
		if serve {
			ln, err := net.Listen("tcp", cfg.addr)
			if err != nil {
				return fmt.Errorf("error listening on %s: %w", cfg.addr, err)
			}
			handler := server.New(server.Config{Pool: pool, Logger: logger, Version: version()})
			srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					errc <- fmt.Errorf("HTTP server: %w", err)
				}
			}()
			logger.Info("HTTP API listening", "addr", ln.Addr().String())
			stops = append([]func(context.Context) error{srv.Shutdown}, stops...)
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
