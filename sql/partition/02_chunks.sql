-- Introspection for DBAs: each time-partitioned table, its backend and chunk interval, and its
-- partitions (native) or chunks (TimescaleDB) with their ranges and sizes, in one shape for both.
-- Native ranges are read from PostgreSQL's catalog (the partition bound), so they hold whatever
-- made the partition; TimescaleDB's come from timescaledb_information.chunks, sizes from
-- chunks_detailed_size (compressed chunks included).

-- A native partition bound as PostgreSQL prints it: FOR VALUES FROM ('…') TO ('…'), MINVALUE and
-- MAXVALUE as infinities, or DEFAULT. The literals are printed in the session's TimeZone and
-- DateStyle and read back in the same session.
CREATE FUNCTION partition_private.bounds(p_bound text, OUT range_start timestamptz, OUT range_end timestamptz, OUT is_default boolean)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_m text[];
BEGIN
    is_default := p_bound = 'DEFAULT';
    IF is_default THEN
        RETURN;
    END IF;
    v_m := regexp_match(p_bound, '^FOR VALUES FROM \((.*)\) TO \((.*)\)$');
    IF v_m IS NULL THEN
        RETURN;
    END IF;
    range_start := CASE v_m[1] WHEN 'MINVALUE' THEN '-infinity'::timestamptz
                   ELSE replace(btrim(v_m[1], ''''), '''''', '''')::timestamptz END;
    range_end := CASE v_m[2] WHEN 'MAXVALUE' THEN 'infinity'::timestamptz
                 ELSE replace(btrim(v_m[2], ''''), '''''', '''')::timestamptz END;
END
$$;
COMMENT ON FUNCTION partition_private.bounds(text) IS
    'The range of a native partition from its bound as pg_get_expr prints it: range_start and range_end (MINVALUE and MAXVALUE as -infinity and infinity), or is_default for the default partition; NULLs for a bound of another shape. Raises nothing.';

CREATE FUNCTION partition_private.chunks(p_table regclass)
RETURNS TABLE (part text, range_start timestamptz, range_end timestamptz, is_default boolean, total_bytes bigint)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_t record;
BEGIN
    v_t := partition_private.table_of(p_table);
    IF v_t.backend = 'timescaledb' THEN
        RETURN QUERY EXECUTE format(
            'SELECT format(''%%I.%%I'', c.chunk_schema, c.chunk_name), c.range_start, c.range_end, false, s.total_bytes
               FROM timescaledb_information.chunks c
               JOIN pg_catalog.pg_class r ON r.oid = %s
               JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
               LEFT JOIN %I.chunks_detailed_size(r.oid) s ON s.chunk_schema = c.chunk_schema AND s.chunk_name = c.chunk_name
              WHERE c.hypertable_schema = n.nspname AND c.hypertable_name = r.relname
              ORDER BY c.range_start', p_table::oid, v_t.ext);
        RETURN;
    END IF;
    RETURN QUERY
        SELECT c.oid::regclass::text, b.range_start, b.range_end, b.is_default, pg_catalog.pg_total_relation_size(c.oid)
          FROM pg_catalog.pg_inherits i
          JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
          CROSS JOIN LATERAL partition_private.bounds(pg_catalog.pg_get_expr(c.relpartbound, c.oid)) b
         WHERE i.inhparent = p_table
         ORDER BY b.range_start NULLS LAST;
END
$$;
COMMENT ON FUNCTION partition_private.chunks(regclass) IS
    'The partitions (native, the default partition last) or chunks (TimescaleDB) of time-partitioned table p_table, oldest first: part (schema-qualified name), range_start (inclusive), range_end (exclusive), is_default, total_bytes (table, indexes and TOAST). Raises STNTP (p_table is not time-partitioned), STBKD (its backend is not usable: partition_private.table_of).';

CREATE FUNCTION api.partition_chunks(p_table regclass DEFAULT NULL)
RETURNS TABLE (table_name text, backend text, part text, range_start timestamptz, range_end timestamptz,
               is_default boolean, total_bytes bigint)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_t record;
BEGIN
    IF p_table IS NOT NULL THEN
        PERFORM partition_private.table_of(p_table);
    END IF;
    FOR v_t IN SELECT * FROM partition_private.tables() t WHERE p_table IS NULL OR t.relation = p_table LOOP
        RETURN QUERY SELECT v_t.relation::text, v_t.backend, c.part, c.range_start, c.range_end, c.is_default, c.total_bytes
                       FROM partition_private.chunks(v_t.relation) c;
    END LOOP;
END
$$;
COMMENT ON FUNCTION api.partition_chunks(regclass) IS
    'The partitions or chunks of every time-partitioned table, or of p_table only (default NULL: all), by table name and then oldest first: table_name, backend (timescaledb: chunks, made as rows arrive; native: partitions made ahead by silo work, and a default partition, is_default, holding rows outside them until the next maintenance moves them), part (the partition or chunk, schema-qualified), range_start (inclusive) and range_end (exclusive), total_bytes (table, indexes and TOAST, compressed chunks included). E.g. SELECT * FROM api.partition_chunks(''event.events''). Raises STNTP (p_table is not time-partitioned), STBKD (timescaledb is in the database but the server does not preload it; a native table without pg_partman).';

CREATE FUNCTION api.partition_tables()
RETURNS TABLE (table_name text, backend text, time_column text, chunk_interval interval, premake integer,
               partitions integer, range_start timestamptz, range_end timestamptz, default_rows bigint, total_bytes bigint)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_t        record;
    v_e        record;
    v_interval interval;
    v_premake  integer;
    v_default  regclass;
BEGIN
    FOR v_t IN SELECT * FROM partition_private.tables() LOOP
        v_e := partition_private.table_of(v_t.relation);
        v_premake := NULL;
        v_default := NULL;
        IF v_t.backend = 'timescaledb' THEN
            -- Dynamic, as every reference to TimescaleDB's objects: a database without the
            -- extension has no such view.
            EXECUTE format(
                'SELECT d.time_interval FROM timescaledb_information.dimensions d
                   JOIN pg_catalog.pg_class r ON r.oid = %s
                   JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace
                  WHERE d.hypertable_schema = n.nspname AND d.hypertable_name = r.relname AND d.dimension_number = 1',
                v_t.relation::oid) INTO v_interval;
        ELSE
            EXECUTE format('SELECT partition_interval::interval, premake FROM %I.part_config WHERE parent_table = %L',
                           v_e.ext, (SELECT format('%s.%s', n.nspname, r.relname) FROM pg_catalog.pg_class r
                                       JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace WHERE r.oid = v_t.relation))
                INTO v_interval, v_premake;
            SELECT c.oid INTO v_default
              FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = v_t.relation AND pg_catalog.pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT';
        END IF;
        table_name := v_t.relation::text;
        backend := v_t.backend;
        time_column := v_t.time_column;
        chunk_interval := v_interval;
        premake := v_premake;
        SELECT count(*) FILTER (WHERE NOT c.is_default), min(c.range_start), max(c.range_end), coalesce(sum(c.total_bytes), 0)
          INTO partitions, range_start, range_end, total_bytes
          FROM partition_private.chunks(v_t.relation) c;
        default_rows := NULL;
        IF v_default IS NOT NULL THEN
            EXECUTE format('SELECT count(*) FROM %s', v_default) INTO default_rows;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
COMMENT ON FUNCTION api.partition_tables() IS
    'Every time-partitioned table, by name: table_name, backend (timescaledb or native), time_column, chunk_interval (the range of one chunk or partition), premake (native: partitions silo work keeps ahead of now; NULL for TimescaleDB, which makes chunks as rows arrive), partitions (how many, the default partition not counted), range_start and range_end (the span they cover), default_rows (native: rows in the default partition, outside every partition, waiting for the next maintenance, counted exactly; NULL for TimescaleDB), total_bytes (all partitions or chunks). The partitions themselves: api.partition_chunks. Raises STBKD (timescaledb is in the database but the server does not preload it; a native table without pg_partman).';
