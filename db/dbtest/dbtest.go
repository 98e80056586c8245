// Package dbtest is Silo's test harness: one throw-away PostgreSQL cluster per test run, a template
// database migrated once, a rolled-back transaction per test by default, and a database cloned from
// the template for tests that must commit (LISTEN/NOTIFY, River, end-to-end HTTP).
//
// Under `make test` the cluster and the migrated template are made once for the whole run by
// `silo tempdb`, which passes them on in SILO_TEST_DATABASE_URL and SILO_TEST_TEMPLATE. A package
// tested on its own (`go test ./db/`) starts its own cluster and migrates its own template.
//
// Every package that uses it has
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
package dbtest

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/embedpg"
)

// Environment passed from `silo tempdb` to the test processes.
const (
	EnvURL      = "SILO_TEST_DATABASE_URL" // server URL (database postgres)
	EnvTemplate = "SILO_TEST_TEMPLATE"     // name of the migrated template database
)

// TestSettings make a throw-away cluster fast; durability does not matter for it. TimescaleDB,
// preloaded when the server has it (embedpg), runs no background workers: its scheduler would hold
// a connection to each database, the template among them, which CREATE DATABASE ... TEMPLATE
// refuses; the tests run TimescaleDB's jobs themselves. A server without TimescaleDB ignores it.
var TestSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"max_connections":    "300",
	"shared_buffers":     "128MB",

	"timescaledb.max_background_workers": "0",
}

var (
	mainCalled bool
	once       sync.Once
	setupErr   error
	serverURL  string // database postgres on the server
	template   string // migrated template database
	cluster    *embedpg.Cluster
	clusterDir string        // removed at the end when this process made the cluster
	pkgPool    *pgxpool.Pool // database of this test process, for Tx
	pkgDB      string
	pkgOnce    sync.Once
	pkgErr     error
	mu         sync.Mutex
	cloned     []string // databases to drop at the end
)

// Main runs the package's tests and then drops what the harness made and stops the cluster it
// started. Call it from TestMain.
func Main(m *testing.M) {
	mainCalled = true
	code := m.Run()
	teardown()
	os.Exit(code)
}

func setup() {
	ctx := context.Background()
	serverURL, template = os.Getenv(EnvURL), os.Getenv(EnvTemplate)
	if serverURL != "" && template != "" {
		return
	}
	dir, err := os.MkdirTemp("", "silo-test-")
	if err != nil {
		setupErr = err
		return
	}
	_ = os.Chmod(dir, 0o755)
	clusterDir = dir
	cluster, err = embedpg.Start(ctx, embedpg.Options{Dir: dir, Settings: TestSettings})
	if err != nil {
		setupErr = err
		return
	}
	serverURL, template = cluster.URL("postgres"), "silo_template"
	setupErr = CreateTemplate(ctx, serverURL, template)
}

// CreateTemplate creates database name on the server at url and migrates it.
func CreateTemplate(ctx context.Context, url, name string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("error creating template database: %w", err)
	}
	pool, err := db.Open(ctx, withDatabase(url, name))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, nil); err != nil {
		return fmt.Errorf("error migrating template database: %w", err)
	}
	return nil
}

func ensure(t testing.TB) {
	t.Helper()
	if !mainCalled {
		t.Fatal("dbtest: call dbtest.Main(m) from the package's TestMain")
	}
	once.Do(setup)
	if setupErr != nil {
		t.Fatalf("dbtest: test database unavailable: %v", setupErr)
	}
}

// Clone creates a new database from the migrated template and returns its URL; it is dropped at
// the end of the test process (or earlier by the caller with Drop).
func Clone(t testing.TB) (string, string) {
	ensure(t)
	name := fmt.Sprintf("silo_t_%d_%08x", os.Getpid(), rand.Uint32())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	defer conn.Close(ctx)
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize()))
		if err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the template is briefly in use by another clone
	}
	if err != nil {
		t.Fatalf("dbtest: error cloning template: %v", err)
	}
	mu.Lock()
	cloned = append(cloned, name)
	mu.Unlock()
	return withDatabase(serverURL, name), name
}

// Pool returns a pool on a fresh database cloned from the migrated template, for tests whose code
// commits. The pool is closed and the database dropped when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url, name := Clone(t)
	pool, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		drop(name)
	})
	return pool
}

// URL returns the connection URL of a fresh cloned database (dropped when the test ends), for
// tests that start processes of their own.
func URL(t testing.TB) string {
	t.Helper()
	url, name := Clone(t)
	t.Cleanup(func() { drop(name) })
	return url
}

// Tx returns a transaction in this test process's migrated database, rolled back when the test
// ends. Expected SQL errors belong in Savepoint so the transaction stays usable.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	ensure(t)
	pkgOnce.Do(func() {
		url, name := Clone(t)
		cfg, err := pgxpool.ParseConfig(url)
		if err == nil {
			cfg.MaxConns = 16
			pkgPool, err = pgxpool.NewWithConfig(context.Background(), cfg)
		}
		pkgErr, pkgDB = err, name
	})
	if pkgErr != nil {
		t.Fatalf("dbtest: %v", pkgErr)
	}
	pool := pkgPool
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("dbtest: error beginning transaction: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Savepoint runs fn in a savepoint of tx: when fn fails, the savepoint is rolled back and tx stays
// usable. It returns fn's error.
func Savepoint(t testing.TB, tx pgx.Tx, fn func(tx pgx.Tx) error) error {
	t.Helper()
	sp, err := tx.Begin(context.Background())
	if err != nil {
		t.Fatalf("dbtest: error opening savepoint: %v", err)
	}
	if err := fn(sp); err != nil {
		if rbErr := sp.Rollback(context.Background()); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			t.Fatalf("dbtest: error rolling savepoint back: %v", rbErr)
		}
		return err
	}
	if err := sp.Commit(context.Background()); err != nil {
		t.Fatalf("dbtest: error releasing savepoint: %v", err)
	}
	return nil
}

func drop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err == nil {
		mu.Lock()
		for i, n := range cloned {
			if n == name {
				cloned = append(cloned[:i], cloned[i+1:]...)
				break
			}
		}
		mu.Unlock()
	}
}

func teardown() {
	if pkgPool != nil {
		pkgPool.Close()
	}
	mu.Lock()
	names := append([]string(nil), cloned...)
	mu.Unlock()
	for _, n := range names {
		drop(n)
	}
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			log.Printf("dbtest: error stopping the test cluster: %v", err)
		}
	}
	if clusterDir != "" {
		_ = os.RemoveAll(clusterDir)
	}
}

func withDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.Path = "/" + name
	return u.String()
}
