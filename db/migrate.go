package db

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/silo-db/silo/migrations"
	apisql "github.com/silo-db/silo/sql"
)

// RiverMigrationVersion is the River schema version Silo runs on. A River upgrade that adds a
// migration needs a new goose migration that raises it.
const riverMigrationVersion = 8

// apiLockKey is the advisory lock taken while schema api is rebuilt ("silo-api" in ASCII).
const apiLockKey int64 = 0x73696c6f2d617069

// Migrate brings the database up to date: goose migrations (stateful DDL, River's own tables as
// migration 2), then schema api rebuilt from sql/ when that code changed. Idempotent and safe to
// run from several processes at once: goose runs under a session advisory lock, and the rebuild of
// api under a transaction advisory lock.
func Migrate(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	provider, closeDB, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer closeDB()

	pending, err := provider.HasPending(ctx)
	if err != nil {
		return fmt.Errorf("error checking pending migrations: %w", err)
	}
	if pending {
		// api's views and functions depend on tables a migration may change: drop api first, and
		// rebuild it after.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, apiLockKey)
			if err == nil {
				_, err = tx.Exec(ctx, dropCode)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("error dropping schema api before migrating: %w", err)
		}
		results, err := provider.Up(ctx)
		if err != nil {
			return fmt.Errorf("error running migrations: %w", err)
		}
		for _, r := range results {
			log.Info("migration applied", "version", r.Source.Version, "source", r.Source.Path, "duration", r.Duration)
		}
	}
	return rebuildAPI(ctx, pool, log)
}

// MigrateDown rolls every goose migration back (schema api first). For tests of the migrations.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, dropCode); err != nil {
		return fmt.Errorf("error dropping schema api: %w", err)
	}
	provider, closeDB, err := newProvider(pool)
	if err != nil {
		return err
	}
	defer closeDB()
	if _, err := provider.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("error rolling migrations back: %w", err)
	}
	return nil
}

func newProvider(pool *pgxpool.Pool) (*goose.Provider, func(), error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, nil, fmt.Errorf("error creating migration lock: %w", err)
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	river := goose.NewGoMigration(2,
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *sql.DB) error { return migrateRiver(ctx, pool, rivermigrate.DirectionUp) }},
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *sql.DB) error { return migrateRiver(ctx, pool, rivermigrate.DirectionDown) }},
	)
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithGoMigrations(river),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		sqlDB.Close()
		return nil, nil, fmt.Errorf("error creating migration provider: %w", err)
	}
	return provider, func() { sqlDB.Close() }, nil
}

func migrateRiver(ctx context.Context, pool *pgxpool.Pool, dir rivermigrate.Direction) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("error creating River migrator: %w", err)
	}
	opts := &rivermigrate.MigrateOpts{TargetVersion: riverMigrationVersion}
	if dir == rivermigrate.DirectionDown {
		opts.TargetVersion = -1
	}
	if _, err := migrator.Migrate(ctx, dir, opts); err != nil {
		return fmt.Errorf("error running River migrations: %w", err)
	}
	return nil
}

// APICode returns the sql/ files in the order they are run (api.sql, then each folder of
// apisql.Domains in order, its files in name order) and the hash of their content.
func APICode() (names []string, contents []string, hash string, err error) {
	files := []string{"api.sql"}
	for _, domain := range apisql.Domains {
		entries, err := fs.Glob(apisql.FS, domain+"/*.sql")
		if err != nil {
			return nil, nil, "", err
		}
		if len(entries) == 0 {
			return nil, nil, "", fmt.Errorf("sql/%s: no .sql files", domain)
		}
		sort.Strings(entries)
		files = append(files, entries...)
	}
	h := sha256.New()
	for _, name := range files {
		b, err := fs.ReadFile(apisql.FS, name)
		if err != nil {
			return nil, nil, "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
		names = append(names, name)
		contents = append(contents, string(b))
	}
	return names, contents, hex.EncodeToString(h.Sum(nil)), nil
}

// dropCode drops the schemas sql/ builds: api and every <domain>_private schema. Nothing in
// migrations/ depends on them, so the cascade removes only views, functions and triggers of sql/.
const dropCode = `DO $drop$
DECLARE
    v_schema name;
BEGIN
    FOR v_schema IN SELECT n.nspname FROM pg_namespace n
                    WHERE n.nspname = 'api' OR n.nspname LIKE '%\_private' ORDER BY n.nspname LOOP
        EXECUTE format('DROP SCHEMA %I CASCADE', v_schema);
    END LOOP;
END
$drop$`

// codeHash is the hash silo.api_code records for sql/ files of hash filesHash in the database
// of q: some of sql/ is built only where the database has what it needs (the Python runtime of
// belts needs plpython3u), so the database's languages and extensions are part of it, and a DBA
// who adds one gets that code built by the next migrate, whatever the files.
func codeHash(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, filesHash string) (string, error) {
	var features string
	if err := q.QueryRow(ctx, `SELECT (SELECT string_agg(lanname, ',' ORDER BY lanname) FROM pg_catalog.pg_language)
		|| ';' || (SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_catalog.pg_extension)`).Scan(&features); err != nil {
		return "", fmt.Errorf("error reading the database's languages and extensions: %w", err)
	}
	sum := sha256.Sum256([]byte(filesHash + "\n" + features))
	return hex.EncodeToString(sum[:]), nil
}

// CodeHash is the hash that silo.api_code holds in the database of q when its sql/ code is this
// build's.
func CodeHash(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	_, _, files, err := APICode()
	if err != nil {
		return "", err
	}
	return codeHash(ctx, q, files)
}

// rebuildAPI drops schema api and the private schemas and runs the sql/ files in one transaction
// under an advisory lock,
// unless silo.api_code already records the same code.
func rebuildAPI(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	names, contents, hash, err := APICode()
	if err != nil {
		return fmt.Errorf("error reading sql/: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, apiLockKey); err != nil {
			return fmt.Errorf("error locking schema api: %w", err)
		}
		hash, err := codeHash(ctx, tx, hash)
		if err != nil {
			return err
		}
		var current string
		err = tx.QueryRow(ctx, `SELECT hash FROM silo.api_code WHERE to_regnamespace('api') IS NOT NULL`).Scan(&current)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("error reading the installed api code: %w", err)
		}
		if current == hash {
			return nil
		}
		if _, err := tx.Exec(ctx, dropCode); err != nil {
			return fmt.Errorf("error dropping schema api: %w", err)
		}
		for i, body := range contents {
			if _, err := tx.Conn().PgConn().Exec(ctx, body).ReadAll(); err != nil {
				return fmt.Errorf("error running sql/%s: %w", names[i], err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO silo.api_code (hash, files) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET hash = excluded.hash, files = excluded.files, installed = now()`, hash, names); err != nil {
			return fmt.Errorf("error recording the api code: %w", err)
		}
		log.Info("schema api rebuilt", "files", len(names), "hash", hash[:12])
		return nil
	})
}

// Open connects a pool to the database at url and checks it answers. Each of configure, in
// order, adjusts the pool's configuration parsed from url (size, connection names) before the
// pool is made; each connection then gets Silo's codecs (registerCodecs).
func Open(ctx context.Context, url string, configure ...func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("error parsing database URL: %w", err)
	}
	for _, c := range configure {
		c(cfg)
	}
	cfg.AfterConnect = afterConnect(cfg.AfterConnect)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("error opening database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("error connecting to the database: %w", err)
	}
	return pool, nil
}
