-- Retention: the one way a domain (the purge domain first) drops old time-partitioned data. It
-- drops whole partitions or chunks, never deletes rows one by one: a chunk whose range ends at or
-- before the cutoff goes; one that straddles it stays until a later call. Both backends cut at the
-- same place: TimescaleDB's drop_chunks(older_than) and, natively, pg_partman's retention
-- (drop_partition_time) of the partitions whose upper bound is at or before the cutoff. A native table's default partition holds rows outside every
-- partition until maintenance moves them; those that belong to partitions ending by the cutoff
-- (before the start of the partition that holds the cutoff) are deleted as if they had moved.

CREATE FUNCTION partition_private.drop_older(p_table regclass, p_before timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    v_t       record;
    v_parent  text;
    v_default regclass;
    v_cut     timestamptz;
    v_parts   text[];
BEGIN
    IF p_before IS NULL THEN
        RAISE EXCEPTION 'a cutoff time is required' USING ERRCODE = 'SLINV';
    END IF;
    v_t := partition_private.table_of(p_table);
    IF v_t.backend = 'timescaledb' THEN
        RETURN QUERY EXECUTE format('SELECT %I.drop_chunks(%s::oid::regclass, older_than => %L::timestamptz)::text',
                                    v_t.ext, p_table::oid, p_before);
        RETURN;
    END IF;

    SELECT format('%s.%s', n.nspname, c.relname) INTO v_parent
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = p_table;
    SELECT c.oid INTO v_default
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = p_table AND pg_catalog.pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT';
    IF v_default IS NOT NULL THEN
        EXECUTE format('SELECT suffix_timestamp FROM %I.show_partition_name(%L, %L)', v_t.ext, v_parent, p_before::text)
            INTO v_cut;
        EXECUTE format('DELETE FROM %s WHERE %I < %L::timestamptz', v_default, v_t.time_column, v_cut);
    END IF;
    SELECT array_agg(c.part ORDER BY c.range_start) INTO v_parts
      FROM partition_private.chunks(p_table) c
     WHERE NOT c.is_default AND c.range_end <= p_before;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    -- pg_partman's retention drops the partitions whose end is before reference - retention: with
    -- no retention and the cutoff one microsecond on, those ending at or before the cutoff.
    EXECUTE format('SELECT %I.drop_partition_time(%L, p_retention => %L::interval, p_keep_table => false, p_reference_timestamp => %L::timestamptz)',
                   v_t.ext, v_parent, '0 seconds', p_before + interval '1 microsecond');
    RETURN QUERY SELECT p FROM unnest(v_parts) AS p WHERE to_regclass(p) IS NULL;
END
$$;
COMMENT ON FUNCTION partition_private.drop_older(regclass, timestamptz) IS
    'Drops every partition or chunk of time-partitioned table p_table whose range ends at or before p_before, and returns their names (schema-qualified); a partition straddling p_before stays whole. Native: rows waiting in the default partition that belong before the partition holding p_before are deleted too. TimescaleDB: drop_chunks(p_table, older_than => p_before); native: pg_partman''s drop_partition_time (which never drops the last partition of a set). Dropping a native partition takes a brief ACCESS EXCLUSIVE lock on the table. Raises SLINV (p_before NULL), STNTP (p_table is not time-partitioned), STBKD (its backend is not usable).';
