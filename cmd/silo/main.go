// Command silo runs Silo: `silo up` starts everything in one process (an embedded PostgreSQL when
// DATABASE_URL is unset, migrations, the HTTP API and the River workers); the other commands run
// one part each. Configuration comes from the environment (see usage).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
	"github.com/silo-db/silo/server"
)

const usage = `silo — a PostgreSQL-first engine for entity data

Usage:
  silo up                      embedded database if needed, migrate, HTTP API and workers
  silo migrate                 apply migrations and rebuild schema api
  silo serve                   HTTP API only
  silo work                    River workers only
  silo token create --name N [--roles r1,r2] [--write] [--admin]
                               create an access token and print it
  silo token revoke --name N   revoke a token
  silo psql [args...]          psql on the configured or embedded database
  silo tempdb -- CMD [ARGS...] run CMD against a throw-away cluster with a migrated template
                               (SILO_TEST_DATABASE_URL, SILO_TEST_TEMPLATE): how the tests run
  silo version                 print the version

Environment:
  DATABASE_URL          PostgreSQL to use; unset: an embedded cluster in $SILO_DATA_DIR/pg
  SILO_ADDR             HTTP listen address (default :8080)
  SILO_DATA_DIR         data directory of the embedded cluster (default ./.silo)
  SILO_LOG_LEVEL        debug, info, warn or error (default info)
  SILO_DEAD_LETTER_RETENTION  how long resolved dead letters are kept (default 720h; 0 keeps them)
  SILO_REAPER_INTERVAL  how often the reaper deletes expired (ttl) and notifies due (ttn) grains
                        (default 1m; 0 disables it); batch size and event retention are the
                        silo.settings rows reaper.batch_size and reaper.event_retention
  SILO_REAPER_BUDGET    how long one reaper run may go on while grains are due (default 1m)
  SILO_UPDATER_WORKERS  asynchronous profile updater workers per priority stream in this process
                        (default 2; 0: this process applies no queued updates)
  SILO_METRICS_ADDR     where silo work serves /metrics (default unset: not served; silo up
                        and silo serve serve it on SILO_ADDR)
`

type config struct {
	databaseURL         string
	addr                string
	dataDir             string
	logLevel            slog.Level
	deadLetterRetention time.Duration
	reaperInterval      time.Duration // negative: the reaper does not run
	reaperBudget        time.Duration
	updaterWorkers      int
	metricsAddr         string
}

func loadConfig() (config, error) {
	cfg := config{
		databaseURL:         os.Getenv("DATABASE_URL"),
		addr:                envOr("SILO_ADDR", ":8080"),
		dataDir:             envOr("SILO_DATA_DIR", ".silo"),
		deadLetterRetention: 30 * 24 * time.Hour,
		reaperInterval:      time.Minute,
		reaperBudget:        time.Minute,
		updaterWorkers:      2,
		metricsAddr:         os.Getenv("SILO_METRICS_ADDR"),
	}
	if err := cfg.logLevel.UnmarshalText([]byte(envOr("SILO_LOG_LEVEL", "info"))); err != nil {
		return cfg, fmt.Errorf("SILO_LOG_LEVEL: %w", err)
	}
	if v := os.Getenv("SILO_DEAD_LETTER_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return cfg, fmt.Errorf("SILO_DEAD_LETTER_RETENTION: not a duration: %q", v)
		}
		cfg.deadLetterRetention = d
	}
	if v := os.Getenv("SILO_REAPER_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return cfg, fmt.Errorf("SILO_REAPER_INTERVAL: not a duration: %q", v)
		}
		cfg.reaperInterval = d
		if d == 0 {
			cfg.reaperInterval = -1
		}
	}
	if v := os.Getenv("SILO_UPDATER_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 256 {
			return cfg, fmt.Errorf("SILO_UPDATER_WORKERS: not a number from 0 to 256: %q", v)
		}
		cfg.updaterWorkers = n
	}
	if v := os.Getenv("SILO_REAPER_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("SILO_REAPER_BUDGET: not a positive duration: %q", v)
		}
		cfg.reaperBudget = d
	}
	return cfg, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			os.Exit(exitErr.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "silo:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Print(usage)
		return nil
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch args[0] {
	case "up":
		return cmdRun(ctx, cfg, logger, true, true)
	case "serve":
		return cmdRun(ctx, cfg, logger, true, false)
	case "work":
		return cmdRun(ctx, cfg, logger, false, true)
	case "migrate":
		return withDatabase(ctx, cfg, logger, func(pool *pgxpool.Pool, _ string) error {
			return db.Migrate(ctx, pool, logger)
		})
	case "token":
		return cmdToken(ctx, cfg, logger, args[1:])
	case "psql":
		return cmdPsql(ctx, cfg, logger, args[1:])
	case "tempdb":
		return cmdTempDB(ctx, logger, args[1:])
	case "version":
		fmt.Println(version())
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q (silo help lists them)", args[0])
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
		return "silo " + v
	}
	return "silo (unknown version)"
}

// withDatabase resolves the database (DATABASE_URL, or the embedded cluster started or reused for
// the time of fn), opens a pool and calls fn with it and the URL.
func withDatabase(ctx context.Context, cfg config, logger *slog.Logger, fn func(pool *pgxpool.Pool, url string) error) error {
	url := cfg.databaseURL
	if url == "" {
		cluster, err := embedpg.Start(ctx, embedpg.Options{
			Dir: filepath.Join(cfg.dataDir, "pg"),
			Log: func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) },
		})
		if err != nil {
			return fmt.Errorf("error starting the embedded PostgreSQL: %w", err)
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				logger.Error("error stopping the embedded PostgreSQL", "err", err)
			} else if cluster.Owned() {
				logger.Info("embedded PostgreSQL stopped", "pid", cluster.Pid())
			}
		}()
		url = cluster.URL("postgres")
	}
	pool, err := db.Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool, url)
}

func cmdToken(ctx context.Context, cfg config, logger *slog.Logger, args []string) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "revoke") {
		return errors.New("usage: silo token create --name N [--roles r1,r2] [--write] [--admin] | silo token revoke --name N")
	}
	fs := flag.NewFlagSet("token "+args[0], flag.ContinueOnError)
	name := fs.String("name", "", "token name (unique)")
	roles := fs.String("roles", "", "comma-separated reader roles")
	write := fs.Bool("write", false, "may apply profile updates")
	admin := fs.Bool("admin", false, "may administer (dead letters, configuration); implies --write")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	return withDatabase(ctx, cfg, logger, func(pool *pgxpool.Pool, _ string) error {
		q := db.New(pool)
		if args[0] == "revoke" {
			_, err := q.TokenRevoke(ctx, *name)
			return describe(err)
		}
		var roleList []string
		for _, r := range strings.Split(*roles, ",") {
			if r = strings.TrimSpace(r); r != "" {
				roleList = append(roleList, r)
			}
		}
		row, err := q.TokenCreate(ctx, db.TokenCreateParams{Name: *name, Roles: roleList, CanWrite: *write, IsAdmin: *admin})
		if err != nil {
			return describe(err)
		}
		fmt.Println(row.Token)
		return nil
	})
}

// describe turns a registered SQL error into its message for the terminal.
func describe(err error) error {
	if apiErr, ok := server.ErrorFor(err); ok {
		return errors.New(apiErr.Message)
	}
	return err
}

func cmdPsql(ctx context.Context, cfg config, logger *slog.Logger, args []string) error {
	return withDatabase(ctx, cfg, logger, func(pool *pgxpool.Pool, url string) error {
		pool.Close()
		psql, err := exec.LookPath("psql")
		if err != nil {
			return errors.New("psql not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)")
		}
		cmd := exec.Command(psql, append([]string{url}, args...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		signal.Ignore(os.Interrupt) // Ctrl-C belongs to psql while it runs
		defer signal.Reset(os.Interrupt)
		return cmd.Run()
	})
}

// cmdTempDB starts a throw-away cluster, migrates a template database once, runs the command with
// SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE set, then stops the cluster and removes it.
func cmdTempDB(ctx context.Context, logger *slog.Logger, args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return errors.New("usage: silo tempdb -- CMD [ARGS...]")
	}
	dir, err := os.MkdirTemp("", "silo-tempdb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	settings := dbtest.TestSettings
	if os.Getenv("SILO_TEMPDB_DURABLE") != "" {
		settings = map[string]string{"max_connections": "300", "shared_buffers": "256MB"}
	}
	cluster, err := embedpg.Start(ctx, embedpg.Options{Dir: dir, Settings: settings})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	logger.Debug("throw-away cluster started", "pid", cluster.Pid(), "port", cluster.Port())
	if err := dbtest.CreateTemplate(ctx, cluster.URL("postgres"), "silo_template"); err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		dbtest.EnvURL+"="+cluster.URL("postgres"),
		dbtest.EnvTemplate+"=silo_template",
	)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(os.Interrupt)
		err = <-done
	}
	return err
}
