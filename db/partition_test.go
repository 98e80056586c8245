package db_test

// Time partitioning on both backends. The test cluster preloads TimescaleDB when the server has
// it installed (embedpg), so its databases make hypertables; native partitioning (pg_partman) is
// then tested on a second throw-away cluster that preloads nothing, a server without TimescaleDB.
// Without TimescaleDB installed, the test cluster is that server, and the TimescaleDB subtests
// skip, saying so; with it installed, a test cluster that does not preload it fails the test
// rather than skipping.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
)

const skipNoTimescaleDB = "TimescaleDB is not installed on this server: make test builds it from a TimescaleDB source tarball beside the project (TIMESCALEDB_SRC); the native backend is tested alone"

// timescaleDBInstalled reports whether the server the tests run on has TimescaleDB installed.
func timescaleDBInstalled(t *testing.T) bool {
	t.Helper()
	bin, err := embedpg.FindBinDir()
	require.NoError(t, err)
	return embedpg.TimescaleDBInstalled(bin)
}

// otherCluster is a throw-away cluster of the test's own, started with preload as its
// shared_preload_libraries ("" preloads nothing; "auto" leaves it to embedpg, which preloads
// TimescaleDB when installed), and restarted with another by restart.
type otherCluster struct {
	t       *testing.T
	dir     string
	cluster *embedpg.Cluster
}

func startOtherCluster(t *testing.T, preload string) *otherCluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "silo-partition-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c := &otherCluster{t: t, dir: dir}
	t.Cleanup(func() {
		if c.cluster != nil {
			_ = c.cluster.Stop()
		}
		_ = os.RemoveAll(dir)
	})
	c.start(preload)
	return c
}

func (c *otherCluster) start(preload string) {
	c.t.Helper()
	settings := map[string]string{}
	for k, v := range dbtest.TestSettings {
		settings[k] = v
	}
	settings["max_connections"] = "50"
	if preload != "auto" {
		settings["shared_preload_libraries"] = preload
	}
	cluster, err := embedpg.Start(context.Background(), embedpg.Options{Dir: c.dir, Settings: settings})
	require.NoError(c.t, err)
	c.cluster = cluster
}

func (c *otherCluster) restart(preload string) {
	c.t.Helper()
	require.NoError(c.t, c.cluster.Stop())
	c.cluster = nil
	c.start(preload)
}

// open connects to database name of the cluster; the pool is closed when the test ends.
func (c *otherCluster) open(name string) *pgxpool.Pool {
	c.t.Helper()
	pool, err := db.Open(context.Background(), strings.Replace(c.cluster.URL(name), "/"+name+"?", "/"+name+"?pool_max_conns=4&", 1))
	require.NoError(c.t, err)
	c.t.Cleanup(pool.Close)
	return pool
}

// onBothBackends runs test once per partitioning backend: "native" on a database of a second
// throw-away cluster that preloads nothing (on the test cluster itself when TimescaleDB is not
// installed), and "timescaledb" on a database of the test cluster, skipped with the reason when
// TimescaleDB is not installed. Each database is migrated afresh.
func onBothBackends(t *testing.T, test func(t *testing.T, pool *pgxpool.Pool, backend string)) {
	t.Helper()
	installed := timescaleDBInstalled(t)
	shared := dbtest.Pool(t)
	native := shared
	if installed {
		other := startOtherCluster(t, "")
		require.NoError(t, dbtest.CreateTemplate(context.Background(), other.cluster.URL("postgres"), "native"))
		native = other.open("native")
	}
	t.Run("native", func(t *testing.T) { test(t, native, "native") })
	t.Run("timescaledb", func(t *testing.T) {
		if !installed {
			t.Skip(skipNoTimescaleDB)
		}
		test(t, shared, "timescaledb")
	})
}

// sqlState returns the SQLSTATE of err ("" when it has none).
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestPartitionBackends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	installed := timescaleDBInstalled(t)
	shared := dbtest.Pool(t)
	var sharedBackend string
	require.NoError(t, shared.QueryRow(ctx, `SELECT api.partition_backend()`).Scan(&sharedBackend))
	if installed {
		require.Equal(t, "timescaledb", sharedBackend, "TimescaleDB is installed, but the test cluster's databases do not use it: does the cluster preload it?")
	} else {
		require.Equal(t, "native", sharedBackend)
	}

	// The server without TimescaleDB: the test cluster itself, or a cluster that preloads nothing.
	native := shared
	var other *otherCluster
	if installed {
		other = startOtherCluster(t, "")
		require.NoError(t, dbtest.CreateTemplate(ctx, other.cluster.URL("postgres"), "native"))
		native = other.open("native")
	}

	t.Run("native", func(t *testing.T) { testPartitionBackend(t, native, "native") })
	t.Run("timescaledb", func(t *testing.T) {
		if !installed {
			t.Skip(skipNoTimescaleDB)
		}
		testPartitionBackend(t, shared, "timescaledb")
	})
	t.Run("same table on both", func(t *testing.T) {
		if !installed {
			t.Skip(skipNoTimescaleDB)
		}
		a := declareEvents(t, native, "shape", "native")
		b := declareEvents(t, shared, "shape", "timescaledb")
		require.Equal(t, a, b)
	})
	t.Run("declarations refused", func(t *testing.T) {
		testPartitionRefusals(t, native)
		if installed {
			testPartitionRefusals(t, shared)
		}
	})
	t.Run("backend rule", func(t *testing.T) {
		if !installed {
			t.Skip(skipNoTimescaleDB)
		}
		native.Close()
		testPartitionBackendRule(t, other)
	})
}

// declareEvents declares table <schema>.events as a domain migration would, makes it
// time-partitioned (checking it gets backend want), adds an index, and returns a description of
// the table as a DBA sees it: columns, constraints, indexes, comments, grants.
func declareEvents(t *testing.T, pool *pgxpool.Pool, schema, want string) string {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, fmt.Sprintf(`
		CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.events (
		    id             bigint      GENERATED ALWAYS AS IDENTITY,
		    correlation_id text        NOT NULL,
		    at             timestamptz NOT NULL,
		    body           text        NOT NULL DEFAULT '' CHECK (length(body) < 100),
		    CONSTRAINT events_pkey PRIMARY KEY (correlation_id, at, id)
		) PARTITION BY RANGE (at);
		COMMENT ON TABLE %[1]s.events IS 'Events of the partition tests.';
		COMMENT ON COLUMN %[1]s.events.at IS 'When it happened.';
		GRANT SELECT ON %[1]s.events TO pg_monitor`, schema))
	require.NoError(t, err)
	var backend string
	require.NoError(t, pool.QueryRow(ctx, `SELECT partition.create_time_partitioned($1, 'at', interval '1 day')`,
		schema+".events").Scan(&backend))
	require.Equal(t, want, backend)
	_, err = pool.Exec(ctx, fmt.Sprintf(`CREATE INDEX events_at_idx ON %[1]s.events (at);
		COMMENT ON INDEX %[1]s.events_at_idx IS 'By time.'`, schema))
	require.NoError(t, err)

	var desc string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT concat_ws(E'\n',
		    (SELECT string_agg(format('column %s %s notnull=%s identity=%s default=%s comment=%s', a.attname,
		                              format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
		                              pg_get_expr(d.adbin, d.adrelid), col_description(a.attrelid, a.attnum)), E'\n' ORDER BY a.attnum)
		       FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		      WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped),
		    (SELECT string_agg(format('constraint %s %s', conname, pg_get_constraintdef(oid)), E'\n' ORDER BY conname)
		       FROM pg_constraint WHERE conrelid = $1::regclass),
		    (SELECT string_agg(format('index %s %s comment=%s', c.relname,
		                              replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON '),
		                              obj_description(c.oid, 'pg_class')), E'\n' ORDER BY c.relname)
		       FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass),
		    'comment ' || obj_description($1::regclass, 'pg_class'),
		    'owner ' || (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = $1::regclass),
		    'grants ' || (SELECT relacl::text FROM pg_class WHERE oid = $1::regclass))`,
		schema+".events").Scan(&desc))
	return desc
}

// partRow is one row of the test table with the partition or chunk that holds it.
type partRow struct {
	CorrelationID string
	At            time.Time
	Part          string
	IsDefault     bool
	Covered       bool // the part's range holds At (or it is the default partition)
}

func partRows(t *testing.T, pool *pgxpool.Pool, table string) []partRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(`
		SELECT e.correlation_id, e.at, c.part, c.is_default,
		       c.is_default OR (c.range_start <= e.at AND e.at < c.range_end) AS covered
		  FROM %s e
		  JOIN api.partition_chunks($1) c ON c.part = e.tableoid::regclass::text
		 ORDER BY e.at`, table), table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[partRow])
	require.NoError(t, err)
	return out
}

type tableInfo struct {
	Backend       string
	TimeColumn    string
	ChunkInterval time.Duration
	Premake       *int32
	Partitions    int32
	DefaultRows   *int64
	TotalBytes    int64
}

func partitionTable(t *testing.T, pool *pgxpool.Pool, table string) tableInfo {
	t.Helper()
	var ti tableInfo
	var secs int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT backend, time_column, extract(epoch FROM chunk_interval)::bigint, premake, partitions, default_rows, total_bytes
		  FROM api.partition_tables() WHERE table_name = $1`, table).
		Scan(&ti.Backend, &ti.TimeColumn, &secs, &ti.Premake, &ti.Partitions, &ti.DefaultRows, &ti.TotalBytes))
	ti.ChunkInterval = time.Duration(secs) * time.Second
	return ti
}

func maintain(t *testing.T, pool *pgxpool.Pool, table string) (moved int64, created int32) {
	t.Helper()
	rows, err := db.New(pool).PartitionMaintain(context.Background())
	require.NoError(t, err)
	for _, r := range rows {
		require.Empty(t, r.SQLState, "maintenance of %s failed: %s", r.TableName, r.Message)
		if r.TableName == table {
			return r.MovedRows, r.CreatedPartitions
		}
	}
	t.Fatalf("maintenance did not report %s: %+v", table, rows)
	return 0, 0
}

func dropOlder(t *testing.T, pool *pgxpool.Pool, table string, before time.Time) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT partition_private.drop_older($1, $2)`, table, before)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// testPartitionBackend runs the life of a time-partitioned table on a database whose new tables
// get backend want: declared, written across chunks (far in the past and the future too), read,
// maintained, introspected, trimmed by drop_older, dropped.
func testPartitionBackend(t *testing.T, pool *pgxpool.Pool, want string) {
	ctx := context.Background()
	var backend string
	require.NoError(t, pool.QueryRow(ctx, `SELECT api.partition_backend()`).Scan(&backend))
	require.Equal(t, want, backend)
	declareEvents(t, pool, "life", want)
	const table = "life.events"

	// Times: now and ten days either side (beyond the 4 premade days), 1970 and 2200.
	var now time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT date_trunc('second', now())`).Scan(&now))
	times := []time.Time{
		time.Date(1970, 1, 1, 12, 0, 0, 0, time.UTC),
		now.Add(-10 * 24 * time.Hour),
		now,
		now.Add(10 * 24 * time.Hour),
		time.Date(2200, 6, 1, 0, 0, 0, 0, time.UTC),
	}
	_, err := pool.Exec(ctx, `INSERT INTO life.events (correlation_id, at, body)
		SELECT 'c' || i, t, 'row ' || i FROM unnest($1::timestamptz[]) WITH ORDINALITY u(t, i)`, times)
	require.NoError(t, err)

	readBack := func() []time.Time {
		rows, err := pool.Query(ctx, `SELECT at FROM life.events ORDER BY at`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
		require.NoError(t, err)
		return got
	}
	equalTimes := func(want, got []time.Time) {
		t.Helper()
		require.Len(t, got, len(want))
		for i := range want {
			require.True(t, want[i].Equal(got[i]), "row %d: want %s, got %s", i, want[i], got[i])
		}
	}
	equalTimes(times, readBack())

	// Where the rows are: TimescaleDB made a chunk for each; natively, the rows outside the
	// premade partitions wait in the default partition.
	rows := partRows(t, pool, table)
	require.Len(t, rows, len(times))
	inDefault := 0
	for _, r := range rows {
		require.True(t, r.Covered, "row %s at %s is in %s, whose range does not hold it", r.CorrelationID, r.At, r.Part)
		if r.IsDefault {
			inDefault++
		}
	}
	ti := partitionTable(t, pool, table)
	require.Equal(t, want, ti.Backend)
	require.Equal(t, "at", ti.TimeColumn)
	require.Equal(t, 24*time.Hour, ti.ChunkInterval)
	require.Positive(t, ti.TotalBytes)
	if want == "timescaledb" {
		require.Zero(t, inDefault)
		require.Nil(t, ti.DefaultRows)
		require.Nil(t, ti.Premake)
		require.EqualValues(t, len(times), ti.Partitions)
	} else {
		require.Equal(t, 4, inDefault, "1970, 2200 and ten days either side of now are outside the premade partitions")
		require.NotNil(t, ti.DefaultRows)
		require.EqualValues(t, 4, *ti.DefaultRows)
		require.NotNil(t, ti.Premake)
		require.EqualValues(t, 4, *ti.Premake)
	}

	// Maintenance: natively, the default partition's rows move into partitions made for them.
	moved, created := maintain(t, pool, table)
	if want == "timescaledb" {
		require.Zero(t, moved)
		require.Zero(t, created)
	} else {
		require.EqualValues(t, 4, moved)
		require.EqualValues(t, 4, created)
	}
	equalTimes(times, readBack())
	for _, r := range partRows(t, pool, table) {
		require.False(t, r.IsDefault, "row %s at %s is still in the default partition", r.CorrelationID, r.At)
		require.True(t, r.Covered)
	}
	if want == "native" {
		require.EqualValues(t, 0, *partitionTable(t, pool, table).DefaultRows)
		// Nothing left to do; a premade partition gone is made again, though partitions exist far
		// beyond it (pg_partman's own run_maintenance would premake after the 2200 one only).
		moved, created = maintain(t, pool, table)
		require.Zero(t, moved)
		require.Zero(t, created)
		var ahead string
		require.NoError(t, pool.QueryRow(ctx, `SELECT part FROM api.partition_chunks($1)
			WHERE range_start <= now() + interval '2 days' AND now() + interval '2 days' < range_end`, table).Scan(&ahead))
		_, err = pool.Exec(ctx, `DROP TABLE `+ahead)
		require.NoError(t, err)
		moved, created = maintain(t, pool, table)
		require.Zero(t, moved)
		require.EqualValues(t, 1, created)
		var covered bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT bool_and(EXISTS (
			SELECT FROM api.partition_chunks($1) c
			 WHERE NOT c.is_default AND c.range_start <= now() + i * interval '1 day' AND now() + i * interval '1 day' < c.range_end))
			FROM generate_series(0, 4) i`, table).Scan(&covered))
		require.True(t, covered, "partitions from now to 4 days ahead")
	}

	// drop_older at the end of the 1970 chunk drops that chunk only; a row exactly at the cutoff
	// would be in the next one.
	var end1970 time.Time
	var part1970 string
	require.NoError(t, pool.QueryRow(ctx, `SELECT part, range_end FROM api.partition_chunks($1)
		WHERE range_start <= '1970-01-01 12:00Z' AND '1970-01-01 12:00Z' < range_end`, table).Scan(&part1970, &end1970))
	require.Equal(t, []string{part1970}, dropOlder(t, pool, table, end1970))
	equalTimes(times[1:], readBack())
	require.Empty(t, dropOlder(t, pool, table, end1970))

	// A cutoff inside a chunk keeps that chunk whole: now's row stays, the one ten days ago goes.
	dropped := dropOlder(t, pool, table, now)
	require.NotEmpty(t, dropped)
	equalTimes(times[2:], readBack())

	// A row far in the past written after maintenance: TimescaleDB gives it a chunk, native
	// partitioning parks it in the default partition; drop_older removes it on both.
	_, err = pool.Exec(ctx, `INSERT INTO life.events (correlation_id, at) VALUES ('old', '1950-06-01Z')`)
	require.NoError(t, err)
	dropped = dropOlder(t, pool, table, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))
	if want == "timescaledb" {
		require.Len(t, dropped, 1)
	} else {
		require.Empty(t, dropped, "the row was in the default partition, no partition of its own")
	}
	equalTimes(times[2:], readBack())

	// Errors: a table that is not time-partitioned, twice the same table.
	_, err = pool.Exec(ctx, `SELECT partition_private.drop_older('pg_class', now())`)
	require.Equal(t, "STNTP", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT * FROM api.partition_chunks('pg_class')`)
	require.Equal(t, "STNTP", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition.create_time_partitioned('life.events', 'at', interval '1 day')`)
	require.Equal(t, "SLCNF", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition_private.drop_older('life.events', NULL)`)
	require.Equal(t, "SLINV", sqlState(err), "%v", err)

	// Dropped with all its partitions, its registry row and (native) pg_partman's configuration.
	_, err = pool.Exec(ctx, `SELECT partition.drop_time_partitioned('life.events')`)
	require.NoError(t, err)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM partition.tables WHERE relation::text LIKE 'life.%')
		+ (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'life')
		+ (SELECT count(*) FROM api.partition_tables() WHERE table_name LIKE 'life.%')`).Scan(&left))
	require.Zero(t, left)
	if want == "native" {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM partman.part_config WHERE parent_table LIKE 'life.%'`).Scan(&left))
		require.Zero(t, left)
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'partman' AND tablename LIKE 'template_life%'`).Scan(&left))
		require.Zero(t, left)
	}
	_, err = pool.Exec(ctx, `SELECT partition.drop_time_partitioned('pg_class')`)
	require.Equal(t, "STNTP", sqlState(err), "%v", err)
}

// testPartitionRefusals: declarations create_time_partitioned refuses, on either backend, each in
// a transaction rolled back.
func testPartitionRefusals(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"not partitioned", `CREATE TABLE r (at timestamptz NOT NULL);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"partitioned by another column", `CREATE TABLE r (at timestamptz NOT NULL, b timestamptz NOT NULL) PARTITION BY RANGE (b);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"by list", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY LIST (at);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"not timestamptz", `CREATE TABLE r (at timestamp NOT NULL) PARTITION BY RANGE (at);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"no such column", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at);
			SELECT partition.create_time_partitioned('r', 'nope', interval '1 day')`, "SLINV"},
		{"chunk not positive", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at);
			SELECT partition.create_time_partitioned('r', 'at', interval '0')`, "SLINV"},
		{"premake out of range", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day', 0)`, "SLINV"},
		{"index before", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at); CREATE INDEX ON r (at);
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"partition before", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at);
			CREATE TABLE r1 PARTITION OF r FOR VALUES FROM ('2000-01-01') TO ('2000-01-02');
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
		{"trigger before", `CREATE TABLE r (at timestamptz NOT NULL) PARTITION BY RANGE (at);
			CREATE TRIGGER r_t AFTER INSERT ON r FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
			SELECT partition.create_time_partitioned('r', 'at', interval '1 day')`, "SLINV"},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, tc.sql)
			if err == nil {
				return errors.New("accepted")
			}
			return err
		})
		require.Equal(t, tc.want, sqlState(err), "%s: %v", tc.name, err)
	}
}

// testPartitionBackendRule: a database keeps the backend it was migrated with, table by table.
// Migrated on a server without TimescaleDB, it stays native when the server preloads it later;
// after a DBA's CREATE EXTENSION timescaledb its new tables are hypertables, its old ones native,
// and both are maintained. Served again without TimescaleDB preloaded, every partition function
// refuses (STBKD) rather than run DDL, which TimescaleDB answers by ending the session; the data
// still reads, and with TimescaleDB preloaded again all of it works.
func testPartitionBackendRule(t *testing.T, other *otherCluster) {
	ctx := context.Background()
	require.NoError(t, dbtest.CreateTemplate(ctx, other.cluster.URL("postgres"), "rule"))
	pool := other.open("rule")
	declareEvents(t, pool, "before", "native")
	_, err := pool.Exec(ctx, `INSERT INTO before.events (correlation_id, at) VALUES ('a', now())`)
	require.NoError(t, err)
	pool.Close()

	other.restart("auto") // embedpg preloads TimescaleDB
	pool = other.open("rule")
	var preload, backend string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries'), api.partition_backend()`).Scan(&preload, &backend))
	require.Equal(t, "timescaledb", preload)
	require.Equal(t, "native", backend, "no extension in the database: it stays native")
	_, err = pool.Exec(ctx, `INSERT INTO before.events (correlation_id, at) VALUES ('b', now())`)
	require.NoError(t, err)
	maintain(t, pool, "before.events")

	_, err = pool.Exec(ctx, `CREATE EXTENSION timescaledb`)
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT api.partition_backend()`).Scan(&backend))
	require.Equal(t, "timescaledb", backend)
	declareEvents(t, pool, "after", "timescaledb")
	_, err = pool.Exec(ctx, `INSERT INTO after.events (correlation_id, at) VALUES ('c', now());
		INSERT INTO before.events (correlation_id, at) VALUES ('d', now())`)
	require.NoError(t, err)
	require.Equal(t, "native", partitionTable(t, pool, "before.events").Backend)
	require.Equal(t, "timescaledb", partitionTable(t, pool, "after.events").Backend)
	maintain(t, pool, "before.events")
	maintain(t, pool, "after.events")
	pool.Close()

	other.restart("") // TimescaleDB no longer preloaded
	pool = other.open("rule")
	_, err = pool.Exec(ctx, `SELECT api.partition_backend()`)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT * FROM api.partition_tables()`)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition_private.drop_older('after.events', now())`)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = db.New(pool).PartitionMaintain(ctx)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition_private.drop_older('before.events', now())`)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition.drop_time_partitioned('before.events')`)
	require.Equal(t, "STBKD", sqlState(err), "%v", err)
	_, err = pool.Exec(ctx, `SELECT partition.create_time_partitioned('before.events', 'at', interval '1 day')`)
	require.Equal(t, "SLCNF", sqlState(err), "%v", err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM before.events`).Scan(&n))
	require.Equal(t, 3, n, "the native table still reads")

	other.restart("auto") // and preloaded again, all of it works
	pool = other.open("rule")
	maintain(t, pool, "before.events")
	maintain(t, pool, "after.events")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM before.events`).Scan(&n))
	require.Equal(t, 3, n)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM after.events`).Scan(&n))
	require.Equal(t, 1, n)
}
