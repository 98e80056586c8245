-- Maintenance, run by silo work every few minutes (worker/partition_maintenance.go). TimescaleDB
-- needs none: it makes a chunk when a row needs one. A native table needs two things, in this
-- order:
--   1. rows in the default partition (outside every partition: far in the past or future, or
--      ahead of the premade ones) move into partitions of their own, made for them
--      (pg_partman's partition_data_time), so that the default partition stays empty and no new
--      partition is refused for overlapping rows left in it;
--   2. partitions from now to premake intervals ahead exist (pg_partman's show_partition_name and
--      create_partition_time), so that new rows go straight into their partition.
-- Why not pg_partman's run_maintenance: it premakes after the newest partition, so a single row
-- far in the future (moved into a partition of its own) stops the premaking for now, and without
-- ignore_default_data a row in the default partition makes it premake up to that row's time.
-- Silo's window is relative to now, whatever the data holds.

CREATE FUNCTION partition_private.maintain_native(p_table regclass, p_ext name, OUT moved_rows bigint, OUT created_partitions integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_parent   text;
    v_interval interval;
    v_premake  integer;
    v_start    timestamptz;
    v_exists   boolean;
    v_before   bigint;
BEGIN
    SELECT format('%s.%s', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_table;
    EXECUTE format('SELECT partition_interval::interval, premake FROM %I.part_config WHERE parent_table = %L', p_ext, v_parent)
        INTO v_interval, v_premake;
    SELECT count(*) INTO v_before FROM pg_catalog.pg_inherits WHERE inhparent = p_table;
    EXECUTE format('SELECT %I.partition_data_time(%L, p_batch_count => 1000, p_analyze => false)', p_ext, v_parent)
        INTO moved_rows;
    -- pg_partman moves the rows through a temporary table shaped like the parent, dropped only at
    -- commit: the next table maintained in this transaction must not find this one's.
    DROP TABLE IF EXISTS pg_temp.partman_temp_data_storage;
    FOR i IN 0 .. coalesce(v_premake, 4) LOOP
        EXECUTE format('SELECT suffix_timestamp, table_exists FROM %I.show_partition_name(%L, %L)',
                       p_ext, v_parent, (now() + v_interval * i)::text)
            INTO v_start, v_exists;
        IF NOT v_exists THEN
            EXECUTE format('SELECT %I.create_partition_time(%L, ARRAY[%L::timestamptz], p_analyze => false)', p_ext, v_parent, v_start);
        END IF;
    END LOOP;
    SELECT count(*) - v_before INTO created_partitions FROM pg_catalog.pg_inherits WHERE inhparent = p_table;
END
$$;
COMMENT ON FUNCTION partition_private.maintain_native(regclass, name) IS
    'Maintains native time-partitioned table p_table with pg_partman in schema p_ext: moves the rows of its default partition into partitions made for them (moved_rows, up to 1000 partitions'' worth per call), then makes the missing partitions from now to premake (part_config) intervals ahead; created_partitions counts the partitions made for either. Raises what pg_partman and PostgreSQL raise (api.partition_maintain catches it per table).';

CREATE FUNCTION api.partition_maintain()
RETURNS TABLE (table_name text, backend text, moved_rows bigint, created_partitions integer, sqlstate text, message text)
LANGUAGE plpgsql
AS $$
DECLARE
    v_t            record;
    v_e            record;
    v_r            record;
    v_state        text;
    v_message      text;
    v_lock_timeout text := current_setting('lock_timeout');
BEGIN
    -- Checked once for all tables, before any DDL: see partition_private.table_of.
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'timescaledb') AND NOT partition.timescaledb_preloaded() THEN
        RAISE EXCEPTION 'timescaledb is installed in this database but the server does not preload it'
            USING ERRCODE = 'STBKD',
                  DETAIL = 'No partition of either backend can be made until the server loads TimescaleDB at start.',
                  HINT = 'Set shared_preload_libraries = ''timescaledb'' (and timescaledb.telemetry_level = off) and restart PostgreSQL.';
    END IF;
    -- One maintenance at a time ("silo-prt" in ASCII); a second one finds nothing to do.
    IF NOT pg_catalog.pg_try_advisory_xact_lock(8316297411675845236) THEN
        RETURN;
    END IF;
    -- A partition is attached under a lock that writers of the table queue behind: wait for it
    -- briefly, and leave the table to the next run rather than stall its writers.
    PERFORM pg_catalog.set_config('lock_timeout', '5s', true);
    FOR v_t IN SELECT * FROM partition_private.tables() LOOP
        v_state := NULL;
        v_message := NULL;
        moved_rows := 0;
        created_partitions := 0;
        BEGIN
            v_e := partition_private.table_of(v_t.relation);
            IF v_t.backend = 'native' THEN
                v_r := partition_private.maintain_native(v_t.relation, v_e.ext);
                moved_rows := v_r.moved_rows;
                created_partitions := v_r.created_partitions;
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT;
            moved_rows := 0;
            created_partitions := 0;
        END;
        table_name := v_t.relation::text;
        backend := v_t.backend;
        sqlstate := v_state;
        message := v_message;
        RETURN NEXT;
    END LOOP;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
END
$$;
COMMENT ON FUNCTION api.partition_maintain() IS
    'Maintains every time-partitioned table, as silo work does every few minutes, and returns one row per table: table_name, backend, moved_rows (native: rows moved out of the default partition into partitions made for them), created_partitions (native: partitions made, for those rows and to keep premake partitions ahead of now; TimescaleDB makes chunks as rows arrive and needs nothing), and sqlstate and message when that table failed (NULL otherwise; the others go on, and the next run tries it again; a lock not granted within 5 s fails it with 55P03). Returns no rows while another maintenance runs. Raises STBKD when timescaledb is in the database but the server does not preload it (TimescaleDB would end the session at the first partition made); any other error is in its table''s row.';
