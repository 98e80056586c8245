-- +goose Up
-- Time partitioning, one mechanism for every domain whose table grows with time (events, series,
-- what a purge drops by age). Two backends, chosen per table when it is created:
--   - timescaledb: a hypertable (TimescaleDB makes a chunk when a row needs one);
--   - native: a table PARTITION BY RANGE whose partitions pg_partman makes (premade ahead of time
--     by silo work, with a default partition for rows outside them).
-- A table gets timescaledb when the database has the timescaledb extension, native otherwise.
-- This migration creates the extensions the server offers: pg_partman always (in schema partman),
-- timescaledb only when the server also preloads it (CREATE EXTENSION fails otherwise). So a
-- database migrated on a server with TimescaleDB uses it, and one migrated without stays native:
-- nothing converts a database, or a table, later (see partition.backend).
--
-- Why the functions below live in a migration, not in sql/: a domain's migration calls
-- partition.create_time_partitioned, and sql/ is dropped while migrations run. It also keeps a
-- migration doing the same thing on every database: a fresh database running migration N meets
-- the function as migrations up to N left it, as an old database did. A change to these functions
-- is a new migration (CREATE OR REPLACE). Maintenance, retention and introspection, which only run
-- later, are in sql/partition/.
CREATE SCHEMA partition;
COMMENT ON SCHEMA partition IS 'Time partitioning (migration 00015): the registry of time-partitioned tables and the functions domain migrations call to create and drop them. Maintenance, retention and introspection: sql/partition/ (api.partition_*).';

-- +goose StatementBegin
DO $extensions$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'pg_partman') THEN
        BEGIN
            CREATE SCHEMA IF NOT EXISTS partman;
            CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'pg_partman not created: %', SQLERRM
                USING HINT = 'A superuser can run CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman; in this database.';
        END;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'timescaledb')
       AND 'timescaledb' = ANY (SELECT regexp_replace(btrim(l, ' "'), '^\$libdir/', '')
                                FROM unnest(string_to_array(current_setting('shared_preload_libraries'), ',')) l) THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS timescaledb;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'timescaledb not created: %', SQLERRM
                USING HINT = 'Without it the database uses native partitioning (pg_partman).';
        END;
    END IF;
END
$extensions$;
-- +goose StatementEnd

CREATE TABLE partition.tables (
    relation    regclass    PRIMARY KEY,
    time_column name        NOT NULL,
    backend     text        NOT NULL CHECK (backend IN ('timescaledb', 'native')),
    created     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE partition.tables IS 'The time-partitioned tables of Silo, one row per table, written by partition.create_time_partitioned and deleted by partition.drop_time_partitioned. Their partitions or chunks, ranges and sizes: SELECT * FROM api.partition_chunks().';
COMMENT ON COLUMN partition.tables.relation IS 'The table (the hypertable, or the parent of the native partitions).';
COMMENT ON COLUMN partition.tables.time_column IS 'The timestamptz column the table is partitioned by.';
COMMENT ON COLUMN partition.tables.backend IS 'timescaledb (a hypertable) or native (PARTITION BY RANGE, partitions made by pg_partman). Chosen when the table was created and never changed: every partition function follows it.';
COMMENT ON COLUMN partition.tables.created IS 'When the table was made time-partitioned.';

-- +goose StatementBegin
CREATE FUNCTION partition.timescaledb_preloaded()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT 'timescaledb' = ANY (SELECT regexp_replace(btrim(l, ' "'), '^\$libdir/', '')
                                FROM unnest(string_to_array(current_setting('shared_preload_libraries'), ',')) l);
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION partition.timescaledb_preloaded() IS
    'Whether the server preloads TimescaleDB (shared_preload_libraries names timescaledb), which TimescaleDB needs before any hypertable can be used. Raises nothing.';

-- +goose StatementBegin
CREATE FUNCTION partition.backend()
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'timescaledb') THEN
        IF NOT partition.timescaledb_preloaded() THEN
            RAISE EXCEPTION 'timescaledb is installed in this database but the server does not preload it'
                USING ERRCODE = 'STBKD',
                      DETAIL = 'Until the server loads TimescaleDB at start, TimescaleDB ends the session of any DDL (its event triggers) or use of a hypertable, so no partition of either backend can be made or dropped.',
                      HINT = 'Set shared_preload_libraries = ''timescaledb'' (and timescaledb.telemetry_level = off) and restart PostgreSQL; Silo''s embedded PostgreSQL does so when TimescaleDB is installed.';
        END IF;
        RETURN 'timescaledb';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_partman')
       OR EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'pg_partman') THEN
        RETURN 'native';
    END IF;
    RAISE EXCEPTION 'no time partitioning on this server: neither timescaledb in this database nor pg_partman on the server'
        USING ERRCODE = 'STBKD',
              HINT = format('Install pg_partman (Debian: postgresql-%s-partman), or TimescaleDB preloaded before the database is migrated.',
                            current_setting('server_version_num')::integer / 10000);
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION partition.backend() IS
    'The backend a table made time-partitioned now gets in this database: timescaledb when the database has the timescaledb extension (created by migration 00015 when the server preloaded TimescaleDB then, or by a DBA later), else native (pg_partman). Tables made earlier keep the backend recorded in partition.tables. Raises STBKD when timescaledb is in the database but the server does not preload it, or when neither backend is there.';

-- A domain's migration declares its table as it would for native partitioning, then calls this
-- right away, before its indexes and triggers:
--     CREATE TABLE event.events (..., at timestamptz NOT NULL, PRIMARY KEY (correlation_id, at))
--         PARTITION BY RANGE (at);
--     SELECT partition.create_time_partitioned('event.events', 'at', interval '1 day');
--     CREATE INDEX events_kind_idx ON event.events (kind, at);  -- then triggers, foreign keys
-- Native: pg_partman takes the table over as it is. TimescaleDB cannot use a partitioned table,
-- so the empty declaration is made again as a plain table (LIKE ... INCLUDING ALL: columns,
-- defaults, identity, generated columns, NOT NULL, CHECK, storage, column comments; the table
-- comment, owner, grants, and the PRIMARY KEY, UNIQUE and EXCLUDE constraints under their own
-- names are carried over by hand) and becomes a hypertable. What LIKE cannot carry (indexes,
-- triggers, foreign keys, rules, policies, views on it) is refused on both backends, so a migration
-- written on a server of one kind runs on the other, and both end up with the same table under
-- the same names.
-- +goose StatementBegin
CREATE FUNCTION partition.create_time_partitioned(p_table regclass, p_column name, p_chunk interval, p_premake integer DEFAULT 4)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_backend  text;
    v_schema   name;
    v_name     name;
    v_kind     "char";
    v_owner    name;
    v_comment  text;
    v_attnum   smallint;
    v_type     regtype;
    v_strategy "char";
    v_keys     int2vector;
    v_old      name;
    v_ext      name;
    v_what     text;
    v_cons     record;
    v_saved    text[] := '{}';
    v_seq      record;
    v_new      regclass;
BEGIN
    IF p_table IS NULL OR p_column IS NULL THEN
        RAISE EXCEPTION 'a table and its time column are required' USING ERRCODE = 'SLINV';
    END IF;
    IF p_chunk IS NULL OR p_chunk <= interval '0' THEN
        RAISE EXCEPTION 'chunk interval must be positive, not %', coalesce(p_chunk::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF p_premake IS NULL OR p_premake < 1 OR p_premake > 1000 THEN
        RAISE EXCEPTION 'premake must be between 1 and 1000, not %', coalesce(p_premake::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF EXISTS (SELECT FROM partition.tables WHERE relation = p_table) THEN
        RAISE EXCEPTION 'table % is already time-partitioned', p_table USING ERRCODE = 'SLCNF';
    END IF;

    SELECT n.nspname, c.relname, c.relkind, pg_catalog.pg_get_userbyid(c.relowner), pg_catalog.obj_description(c.oid, 'pg_class'),
           pt.partstrat, pt.partattrs
      INTO v_schema, v_name, v_kind, v_owner, v_comment, v_strategy, v_keys
      FROM pg_catalog.pg_class c
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid = c.oid
     WHERE c.oid = p_table;
    SELECT a.attnum, a.atttypid::regtype INTO v_attnum, v_type
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF v_attnum IS NULL THEN
        RAISE EXCEPTION 'table % has no column %', p_table, p_column USING ERRCODE = 'SLINV';
    END IF;
    IF v_type <> 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'column % of % is %, not timestamptz', p_column, p_table, v_type USING ERRCODE = 'SLINV';
    END IF;
    IF v_kind <> 'p' OR v_strategy <> 'r' OR pg_catalog.array_length(v_keys::smallint[], 1) <> 1 OR v_keys[0] <> v_attnum THEN
        RAISE EXCEPTION 'table % is not declared PARTITION BY RANGE (%)', p_table, p_column
            USING ERRCODE = 'SLINV',
                  HINT = 'Declare the table with CREATE TABLE ... PARTITION BY RANGE (' || quote_ident(p_column) || '): both backends start from that declaration.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_inherits WHERE inhparent = p_table) THEN
        RAISE EXCEPTION 'table % already has partitions', p_table USING ERRCODE = 'SLINV',
            HINT = 'Call partition.create_time_partitioned right after CREATE TABLE.';
    END IF;

    SELECT string_agg(what, ', ') INTO v_what FROM (
        SELECT 'index ' || i.indexrelid::regclass::text AS what
          FROM pg_catalog.pg_index i
         WHERE i.indrelid = p_table
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = p_table)
        UNION ALL
        SELECT 'trigger ' || t.tgname FROM pg_catalog.pg_trigger t WHERE t.tgrelid = p_table AND NOT t.tgisinternal
        UNION ALL
        SELECT 'foreign key ' || k.conname FROM pg_catalog.pg_constraint k
         WHERE k.contype = 'f' AND (k.conrelid = p_table OR k.confrelid = p_table)
        UNION ALL
        SELECT 'policy ' || p.polname FROM pg_catalog.pg_policy p WHERE p.polrelid = p_table
        UNION ALL
        SELECT 'rule or view ' || r.ev_class::regclass::text
          FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
         WHERE d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.refobjid = p_table

        UNION ALL
        SELECT 'inheritance from ' || h.inhparent::regclass::text FROM pg_catalog.pg_inherits h WHERE h.inhrelid = p_table
    ) found;
    IF v_what IS NOT NULL THEN
        RAISE EXCEPTION 'table % has %, which must come after partition.create_time_partitioned', p_table, v_what
            USING ERRCODE = 'SLINV',
                  HINT = 'Declare columns and constraints, call partition.create_time_partitioned, then create indexes, triggers and foreign keys.';
    END IF;

    v_backend := partition.backend();
    IF v_backend = 'native' THEN
        SELECT e.extnamespace::regnamespace::name INTO v_ext FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_partman';
        IF v_ext IS NULL THEN -- installed on the server after migration 00015 ran
            CREATE SCHEMA IF NOT EXISTS partman;
            CREATE EXTENSION pg_partman SCHEMA partman;
            v_ext := 'partman';
        END IF;
        EXECUTE format('SELECT %I.create_parent(p_parent_table => %L, p_control => %L, p_type => %L, p_interval => %L, p_premake => %s, p_jobmon => false)',
                       v_ext, format('%s.%s', v_schema, v_name), p_column, 'native', p_chunk::text, p_premake);
        -- Premake relative to now, whatever the data holds; no row in the default partition moves
        -- the window; Silo's maintenance (api.partition_maintain) is the one that runs it.
        EXECUTE format('UPDATE %I.part_config SET infinite_time_partitions = true, ignore_default_data = true, automatic_maintenance = %L WHERE parent_table = %L',
                       v_ext, 'off', format('%s.%s', v_schema, v_name));
        v_new := p_table;
    ELSE
        v_old := left(v_name, 40) || '_declared_' || pg_catalog.txid_current();
        EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', v_schema, v_name, v_old);
        FOR v_cons IN
            SELECT k.conname, pg_catalog.pg_get_constraintdef(k.oid) AS def, pg_catalog.obj_description(k.oid, 'pg_constraint') AS comment
              FROM pg_catalog.pg_constraint k
             WHERE k.conrelid = p_table AND k.contype IN ('p', 'u', 'x')
             ORDER BY k.oid
        LOOP
            v_saved := v_saved || format('ALTER TABLE %I.%I ADD CONSTRAINT %I %s', v_schema, v_name, v_cons.conname, v_cons.def);
            IF v_cons.comment IS NOT NULL THEN
                v_saved := v_saved || format('COMMENT ON CONSTRAINT %I ON %I.%I IS %L', v_cons.conname, v_schema, v_name, v_cons.comment);
            END IF;
        END LOOP;
        v_saved := v_saved || ARRAY(
            SELECT format('GRANT %s ON %I.%I TO %s%s', a.privilege_type, v_schema, v_name,
                          CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,
                          CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END)
              FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
             WHERE c.oid = p_table AND a.grantee <> c.relowner);
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING ALL EXCLUDING INDEXES)', v_schema, v_name, v_schema, v_old);
        v_new := format('%I.%I', v_schema, v_name)::regclass;
        -- A serial column's sequence belongs to the declared table: hand it over before the drop.
        FOR v_seq IN
            SELECT d.objid::regclass AS seq, a.attname
              FROM pg_catalog.pg_depend d
              JOIN pg_catalog.pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
             WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refobjid = p_table AND d.deptype = 'a'
               AND d.refclassid = 'pg_catalog.pg_class'::regclass
               AND EXISTS (SELECT FROM pg_catalog.pg_class s WHERE s.oid = d.objid AND s.relkind = 'S')
        LOOP
            EXECUTE format('ALTER SEQUENCE %s OWNED BY %s.%I', v_seq.seq, v_new, v_seq.attname);
        END LOOP;
        EXECUTE format('DROP TABLE %I.%I', v_schema, v_old);
        FOR i IN 1 .. coalesce(array_length(v_saved, 1), 0) LOOP
            EXECUTE v_saved[i];
        END LOOP;
        IF v_comment IS NOT NULL THEN
            EXECUTE format('COMMENT ON TABLE %s IS %L', v_new, v_comment);
        END IF;
        IF v_owner <> current_user THEN
            EXECUTE format('ALTER TABLE %s OWNER TO %I', v_new, v_owner);
        END IF;
        SELECT e.extnamespace::regnamespace::name INTO v_ext FROM pg_catalog.pg_extension e WHERE e.extname = 'timescaledb';
        EXECUTE format('SELECT %I.create_hypertable(%L::regclass, %I.by_range(%L, %L::interval), create_default_indexes => false)',
                       v_ext, v_new, v_ext, p_column, p_chunk);
    END IF;

    INSERT INTO partition.tables (relation, time_column, backend) VALUES (v_new, p_column, v_backend);
    RETURN v_backend;
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION partition.create_time_partitioned(regclass, name, interval, integer) IS
    'Makes p_table time-partitioned by its timestamptz column p_column in chunks of p_chunk, on the backend of partition.backend(), and records it in partition.tables; returns the backend (timescaledb or native). The table must be declared CREATE TABLE ... PARTITION BY RANGE (p_column), empty and without partitions, and every PRIMARY KEY or UNIQUE constraint must include p_column. Call it right after CREATE TABLE: indexes, triggers, foreign keys, policies and views come after it, on both backends (TimescaleDB makes the declaration again as a plain table, keeping columns, constraints, comments, owner and grants). Native: pg_partman makes p_premake (default 4) partitions before and after now, a default partition for rows outside them, and silo work keeps p_premake partitions ahead (api.partition_maintain). TimescaleDB: a hypertable with chunks of p_chunk, made as rows arrive; no default index on p_column. Raises SLINV (no such column, not timestamptz, not declared PARTITION BY RANGE (p_column), partitions already, an object that must come after, p_chunk not positive, p_premake outside 1 to 1000), SLCNF (already time-partitioned), STBKD (no backend usable: see partition.backend).';

-- +goose StatementBegin
CREATE FUNCTION partition.drop_time_partitioned(p_table regclass)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_backend  text;
    v_ext      name;
    v_template text;
BEGIN
    SELECT t.backend INTO v_backend FROM partition.tables t WHERE t.relation = p_table;
    IF v_backend IS NULL THEN
        RAISE EXCEPTION 'table % is not time-partitioned', p_table USING ERRCODE = 'STNTP';
    END IF;
    -- TimescaleDB's event triggers end the session of any DROP in a database that has the
    -- extension while the server does not preload it: refuse first.
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'timescaledb') AND NOT partition.timescaledb_preloaded() THEN
        RAISE EXCEPTION 'timescaledb is installed in this database but the server does not preload it'
            USING ERRCODE = 'STBKD', HINT = 'Set shared_preload_libraries = ''timescaledb'' and restart PostgreSQL.';
    END IF;
    SELECT e.extnamespace::regnamespace::name INTO v_ext FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_partman';
    IF v_backend = 'native' AND v_ext IS NOT NULL THEN
        EXECUTE format('DELETE FROM %I.part_config WHERE parent_table = %L RETURNING template_table', v_ext,
                       (SELECT format('%s.%s', n.nspname, c.relname) FROM pg_catalog.pg_class c
                          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_table))
            INTO v_template;
        IF pg_catalog.to_regclass(v_template) IS NOT NULL THEN
            EXECUTE format('DROP TABLE %s', pg_catalog.to_regclass(v_template));
        END IF;
    END IF;
    DELETE FROM partition.tables WHERE relation = p_table;
    EXECUTE format('DROP TABLE %s', p_table);
END
$$;
-- +goose StatementEnd
COMMENT ON FUNCTION partition.drop_time_partitioned(regclass) IS
    'Drops time-partitioned table p_table with all its partitions or chunks, its pg_partman configuration and template table (native), and its row of partition.tables: what a domain''s Down migration calls instead of DROP TABLE. Raises STNTP (p_table is not time-partitioned), STBKD (timescaledb is in the database but the server does not preload it).';

-- +goose Down
DROP SCHEMA partition CASCADE;
DROP EXTENSION IF EXISTS timescaledb;
DROP EXTENSION IF EXISTS pg_partman;
DROP SCHEMA IF EXISTS partman;
