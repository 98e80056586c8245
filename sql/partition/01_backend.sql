-- Time partitioning: which backend a table has, and the checks every partition function makes
-- before it touches one. The tables and the functions domain migrations call (create and drop a
-- time-partitioned table) are in migration 00015, schema partition: migrations run while sql/ is
-- dropped. What runs later is here: introspection (02_chunks), retention (03_retention) and the
-- periodic maintenance of silo work (04_maintain).
--
-- A table's backend is recorded when it is created (partition.tables) and never changes, so a
-- database may hold both kinds: one migrated without TimescaleDB and later given the extension by
-- a DBA keeps its native tables and makes hypertables from then on. Every function here follows
-- the table's own backend, and refuses (STBKD) before it would call into an extension the server
-- does not load: TimescaleDB ends the session of a call into it when it is not preloaded.

CREATE SCHEMA partition_private;
COMMENT ON SCHEMA partition_private IS 'Internals of time partitioning (sql/partition/): not a public contract. Rebuilt with schema api.';

CREATE FUNCTION api.partition_backend()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT partition.backend();
$$;
COMMENT ON FUNCTION api.partition_backend() IS
    'The backend of the tables made time-partitioned from now on in this database: timescaledb (hypertables; the database has the timescaledb extension, which migration 00015 creates when the server preloads TimescaleDB) or native (PARTITION BY RANGE with partitions made by pg_partman). Tables made earlier keep their own (api.partition_tables). Raises STBKD when timescaledb is in the database but the server does not preload it, or when the server has neither TimescaleDB nor pg_partman.';

-- One table's backend and the schema of the extension that serves it, checked usable.
CREATE FUNCTION partition_private.table_of(p_table regclass, OUT backend text, OUT time_column name, OUT ext name)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    -- TimescaleDB in the database without its library preloaded ends the session at the first DDL
    -- or hypertable use (the library refuses to load late), whatever the table's backend.
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'timescaledb') AND NOT partition.timescaledb_preloaded() THEN
        RAISE EXCEPTION 'timescaledb is installed in this database but the server does not preload it'
            USING ERRCODE = 'STBKD',
                  DETAIL = 'Until the server loads TimescaleDB at start, TimescaleDB ends the session of any DDL or use of a hypertable, so no partition of either backend can be made or dropped.',
                  HINT = 'Set shared_preload_libraries = ''timescaledb'' (and timescaledb.telemetry_level = off) and restart PostgreSQL; Silo''s embedded PostgreSQL does so when TimescaleDB is installed.';
    END IF;
    SELECT t.backend, t.time_column INTO backend, time_column FROM partition.tables t WHERE t.relation = p_table;
    IF backend IS NULL THEN
        RAISE EXCEPTION 'table % is not time-partitioned', coalesce(p_table::text, 'NULL')
            USING ERRCODE = 'STNTP', HINT = 'SELECT table_name FROM api.partition_tables() lists the time-partitioned tables.';
    END IF;
    SELECT e.extnamespace::regnamespace::name INTO ext
      FROM pg_catalog.pg_extension e
     WHERE e.extname = CASE backend WHEN 'timescaledb' THEN 'timescaledb' ELSE 'pg_partman' END;
    IF backend = 'timescaledb' AND ext IS NULL THEN
        RAISE EXCEPTION 'table % is a hypertable but timescaledb is not in this database', p_table
            USING ERRCODE = 'STBKD';
    END IF;
    IF backend = 'native' AND ext IS NULL THEN
        RAISE EXCEPTION 'table % is partitioned natively but pg_partman is not in this database', p_table
            USING ERRCODE = 'STBKD', HINT = 'A superuser can run CREATE EXTENSION pg_partman SCHEMA partman; in this database.';
    END IF;
END
$$;
COMMENT ON FUNCTION partition_private.table_of(regclass) IS
    'The backend (timescaledb or native) and time column of time-partitioned table p_table, and the schema of the extension serving it (timescaledb or pg_partman). Raises STBKD when timescaledb is in the database but the server does not preload it (whatever the table''s backend), or when the extension the table needs is missing; STNTP when p_table is not time-partitioned.';

-- The tables of partition.tables that still exist (a table dropped without
-- partition.drop_time_partitioned leaves its row behind, with an oid that names nothing).
CREATE FUNCTION partition_private.tables()
RETURNS TABLE (relation regclass, backend text, time_column name)
LANGUAGE sql STABLE
AS $$
    SELECT t.relation, t.backend, t.time_column
      FROM partition.tables t
     WHERE EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = t.relation)
     ORDER BY t.relation::text;
$$;
COMMENT ON FUNCTION partition_private.tables() IS
    'The rows of partition.tables whose table exists, by name. Raises nothing.';
