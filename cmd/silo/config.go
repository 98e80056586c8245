package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
)

type config struct {
	databaseURL         string
	addr                string
	dataDir             string
	logLevel            slog.Level
	deadLetterRetention time.Duration
	reaperInterval      time.Duration // negative: the reaper does not run
	reaperBudget        time.Duration
	jobRescueAfter      time.Duration // 0: worker's default
	updaterWorkers      int
	beltWorkers         int
	jobs                bool // the job manager runs in this process (up, work)
	metricsAddr         string
	dbMaxConns          int32  // 0: pool_max_conns of DATABASE_URL, else pgxpool's default
	appName             string // application_name of the pool's connections: "silo <command>"
	mqttAddr            string // "": no MQTT broker
	mqttCert, mqttKey   string // PEM files; both empty: the self-signed pair in the data directory
	mqttPlain           bool   // plain TCP instead of TLS (loopback addresses only)
}

// maxDBMaxConns bounds SILO_DB_MAX_CONNS: more is a typing mistake (PostgreSQL's own
// max_connections rarely goes past a few thousand).
const maxDBMaxConns = 10000

// minDBMaxConns is the smallest pool that works: migrating holds one connection for goose's
// session lock while River's migration runs on another, so a pool of one waits forever.
const minDBMaxConns = 2

func loadConfig() (config, error) {
	cfg := config{
		databaseURL:         os.Getenv("DATABASE_URL"),
		addr:                envOr("SILO_ADDR", ":8080"),
		dataDir:             envOr("SILO_DATA_DIR", ".silo"),
		deadLetterRetention: 30 * 24 * time.Hour,
		reaperInterval:      time.Minute,
		reaperBudget:        time.Minute,
		updaterWorkers:      2,
		beltWorkers:         2,
		jobs:                true,
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
	if v := os.Getenv("SILO_BELT_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 256 {
			return cfg, fmt.Errorf("SILO_BELT_WORKERS: not a number from 0 to 256: %q", v)
		}
		cfg.beltWorkers = n
	}
	switch v := os.Getenv("SILO_JOBS"); v {
	case "", "on":
	case "off":
		cfg.jobs = false
	default:
		return cfg, fmt.Errorf("SILO_JOBS: on or off, got %q", v)
	}
	if v := os.Getenv("SILO_DB_MAX_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < minDBMaxConns || n > maxDBMaxConns {
			return cfg, fmt.Errorf("SILO_DB_MAX_CONNS: not a number from %d to %d: %q", minDBMaxConns, maxDBMaxConns, v)
		}
		cfg.dbMaxConns = int32(n)
	}
	if err := cfg.loadMQTT(); err != nil {
		return cfg, err
	}
	if v := os.Getenv("SILO_JOB_RESCUE_AFTER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("SILO_JOB_RESCUE_AFTER: not a positive duration: %q", v)
		}
		cfg.jobRescueAfter = d
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

func embeddedDir(cfg config) string { return filepath.Join(cfg.dataDir, "pg") }

// listen takes the TCP address addr of setting name (SILO_ADDR, SILO_METRICS_ADDR). Its errors
// are one line naming the setting and what to change.
func listen(name, addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return nil, fmt.Errorf("%s=%q is not a listen address: want host:port, e.g. :8080 or 127.0.0.1:8080", name, addr)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	switch {
	case err == nil:
		return ln, nil
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s=%s: the address is already in use by another process: stop it or set %s to a free address", name, addr, name)
	case errors.Is(err, syscall.EACCES):
		return nil, fmt.Errorf("%s=%s: permission denied (ports below 1024 need privileges): set %s to another address", name, addr, name)
	default:
		return nil, fmt.Errorf("%s=%s: cannot listen there: %w: set %s to an address of this machine", name, addr, err, name)
	}
}

// connectTimeout bounds the first connection to the database, so a server that does not answer
// fails the start instead of hanging it.
const connectTimeout = 20 * time.Second

// openDatabase opens the pool on url and checks that the server answers. fromEnv: url is
// DATABASE_URL, which the errors then name.
// The pool's size and connection names come from cfg (poolSettings).
func openDatabase(ctx context.Context, cfg config, url string, fromEnv bool) (*pgxpool.Pool, error) {
	if !fromEnv {
		return db.Open(ctx, url, cfg.poolSettings)
	}
	if _, err := pgxpool.ParseConfig(url); err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a valid PostgreSQL connection string: %s", parseReason(err))
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := db.Open(cctx, url, cfg.poolSettings)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var connErr *pgconn.ConnectError
		if errors.As(err, &connErr) {
			err = connErr
		}
		if cctx.Err() != nil {
			return nil, fmt.Errorf("DATABASE_URL: no answer from PostgreSQL within %s: %w", connectTimeout, err)
		}
		return nil, fmt.Errorf("DATABASE_URL: cannot connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// poolSettings applies the settings to the pool's configuration parsed from the database URL:
//   - SILO_DB_MAX_CONNS, when set, is the pool's size, over a pool_max_conns in DATABASE_URL;
//     unset, pool_max_conns applies, else pgxpool's default (4 or the number of CPUs, whichever
//     is larger).
//   - application_name "silo <command>" names the pool's connections in pg_stat_activity, unless
//     the URL (or PGAPPNAME) names them already. The connections Silo opens beside the pool
//     start from the pool's configuration: the change listener renames its own.
func (c config) poolSettings(pc *pgxpool.Config) {
	if c.dbMaxConns > 0 {
		pc.MaxConns = c.dbMaxConns
		if pc.MinConns > pc.MaxConns {
			pc.MinConns = pc.MaxConns
		}
	}
	if _, named := pc.ConnConfig.RuntimeParams["application_name"]; !named && c.appName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = c.appName
	}
}

// parseReason is why a connection string did not parse. pgx masks the password in the string it
// quotes; a URL parser's error quoting the raw string is replaced by its reason alone.
func parseReason(err error) string {
	text := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		text = strings.Replace(text, ue.Error(), ue.Err.Error(), 1)
	}
	return text
}
