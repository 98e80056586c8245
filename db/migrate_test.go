package db_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestMigrateIdempotentAndReversible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t) // already migrated from the template

	var hash string
	require.NoError(t, pool.QueryRow(ctx, `SELECT hash FROM silo.api_code`).Scan(&hash))
	want, err := db.CodeHash(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, want, hash)

	// Unchanged code: nothing is rebuilt (the schema's oid stays).
	var before, after uint32
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'api'::regnamespace::oid`).Scan(&before))
	require.NoError(t, db.Migrate(ctx, pool, nil))
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'api'::regnamespace::oid`).Scan(&after))
	require.Equal(t, before, after)

	// Down removes everything, up again restores it.
	require.NoError(t, db.MigrateDown(ctx, pool))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname IN ('api','silo','profile')`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'river%'`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, db.Migrate(ctx, pool, nil))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname IN ('api','silo','profile')`).Scan(&n))
	require.Equal(t, 3, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = 'river_job'`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestMigrateConcurrentFromEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	pool, err := db.Open(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, db.MigrateDown(ctx, pool))

	// Four processes' worth of migrators, each with its own pool, starting at once on an empty
	// database.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := db.Open(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer p.Close()
			errs[i] = db.Migrate(ctx, p, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE pronamespace = 'api'::regnamespace`).Scan(&n))
	require.Positive(t, n)
}

func TestMigrateRebuildsChangedAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	// A stale record (or a function left behind by older code) is replaced by a clean rebuild.
	_, err := pool.Exec(ctx, `UPDATE silo.api_code SET hash = 'old'; CREATE FUNCTION api.left_behind() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, pool, nil))
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE proname = 'left_behind'`).Scan(&n))
	require.Zero(t, n)
}

// Every function, view, table, type and schema of Silo's schemas carries a COMMENT for DBAs.
func TestEverythingCommented(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	rows, err := tx.Query(context.Background(), `
		SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
		JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE (n.nspname IN ('api', 'partition') OR n.nspname LIKE '%\_private') AND obj_description(p.oid, 'pg_proc') IS NULL
		UNION ALL
		SELECT 'relation ' || c.oid::regclass::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE (n.nspname IN ('api', 'silo', 'profile', 'partition') OR n.nspname LIKE '%\_private') AND c.relkind IN ('r', 'v', 'p', 'm')
		  AND obj_description(c.oid, 'pg_class') IS NULL
		UNION ALL
		SELECT 'type ' || t.oid::regtype::text FROM pg_type t
		JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE (n.nspname = 'api' OR n.nspname LIKE '%\_private') AND t.typtype = 'c'
		  AND NOT EXISTS (SELECT FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
		  AND obj_description(t.oid, 'pg_type') IS NULL
		UNION ALL
		SELECT 'schema ' || n.nspname FROM pg_namespace n
		WHERE (n.nspname IN ('api', 'silo', 'profile', 'partition') OR n.nspname LIKE '%\_private')
		  AND obj_description(n.oid, 'pg_namespace') IS NULL`)
	require.NoError(t, err)
	var missing []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		missing = append(missing, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, missing, "objects without COMMENT ON")
}
