-- Reading and deleting points. A read names a time range, absolute (fromTime/toTime, seconds since
-- the epoch: the seed) or relative to the holder's time (fromDeltaTime/toDeltaTime: Pryv as
-- shipped), from inclusive, to exclusive, and the fields it wants. The time column is deltaTime
-- (Pryv as shipped) or timestamp (the seed). Fields come in the type's order.
--
-- A page is planned for its own columns (a custom plan: the positions the type does not use fold
-- away), which costs far less than formatting its ten thousand points. It reads the primary key in
-- time order, never sorts: points written since the chunk was last analyzed look like a handful
-- to the planner, which then sorts all that follow for each page (a fresh million-point series
-- read at a few tens of thousands of points a second).
--
-- Why lines of text: a large range is sent as it is read (HTTP streams it page by page with
-- api.series_read, never holding it whole), and the values are written as the exact decimals they
-- were given in; PostgreSQL builds each point's line, so the Go shell only joins them.

-- The columns of a read: the time column and the chosen fields, checked.
CREATE FUNCTION series_private.columns(p_holder account.events, p_fields text[], p_time_field text,
                                       OUT time_field text, OUT selected boolean[], OUT kinds text[], OUT names text[])
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_f    record;
    v_bad  text;
BEGIN
    time_field := coalesce(p_time_field, 'deltaTime');
    IF 'timestamp' = ANY (p_fields) AND 'deltaTime' = ANY (p_fields) THEN
        RAISE EXCEPTION 'fields may name one time column, deltaTime or timestamp, not both' USING ERRCODE = 'SAINV';
    ELSIF 'timestamp' = ANY (p_fields) THEN
        time_field := 'timestamp';
    ELSIF 'deltaTime' = ANY (p_fields) THEN
        time_field := 'deltaTime';
    END IF;
    IF time_field NOT IN ('deltaTime', 'timestamp') THEN
        RAISE EXCEPTION 'the time column is deltaTime or timestamp, not %', time_field USING ERRCODE = 'SAINV';
    END IF;
    SELECT f INTO v_bad FROM unnest(p_fields) f
    WHERE f NOT IN ('deltaTime', 'timestamp') AND f NOT IN (SELECT t.field FROM series_private.type_fields(p_holder) t) LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown field "%" for %', v_bad, p_holder.type USING ERRCODE = 'SAINV',
            HINT = format('The fields of %s are %s.', p_holder.type, (SELECT string_agg(t.field, ', ') FROM series_private.type_fields(p_holder) t));
    END IF;
    selected := '{f,f,f,f,f,f,f,f}';
    kinds := '{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}';
    names := ARRAY[time_field];
    FOR v_f IN SELECT * FROM series_private.type_fields(p_holder) LOOP
        kinds[v_f.field_position] := v_f.kind;
        IF p_fields IS NULL OR cardinality(array_remove(array_remove(p_fields, 'deltaTime'), 'timestamp')) = 0
           OR v_f.field = ANY (p_fields) THEN
            selected[v_f.field_position] := true;
            names := names || v_f.field;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION series_private.columns(account.events, text[], text, OUT text, OUT boolean[], OUT text[], OUT text[]) IS 'The columns of a read of holder p_holder: the time column (timestamp or deltaTime when p_fields names one, else p_time_field, default deltaTime), which positions are selected (the fields p_fields names; all when it names none), their kinds, and the output names (time column first, then the fields in the type''s order). Raises SAINV for an unknown field, both time columns, or a time column other than deltaTime or timestamp.';

-- A range in microseconds: NULL bounds are open.
CREATE FUNCTION series_private.bound_us(p_holder account.events, p_bound double precision, p_relative boolean)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_bound IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_bound = 'NaN' OR abs(p_bound) > 1e11 THEN
        RAISE EXCEPTION 'time bound % is out of range', p_bound USING ERRCODE = 'SAINV';
    END IF;
    RETURN CASE WHEN p_relative THEN series_private.holder_us(p_holder.time) ELSE 0 END
           + round(p_bound * 1000000::double precision)::bigint;
END
$$;
COMMENT ON FUNCTION series_private.bound_us(account.events, double precision, boolean) IS 'A time bound of a read or delete in microseconds since the epoch: p_bound seconds after holder p_holder''s time (p_relative) or after the epoch; NULL for NULL (open). Raises SAINV for NaN or a bound beyond 1e11 seconds.';

CREATE FUNCTION api.series_columns(p_access_id text, p_event_id text, p_fields text[] DEFAULT NULL, p_time_field text DEFAULT 'deltaTime')
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT (series_private.columns(account_private.series_holder(account_private.access(p_access_id), p_event_id, 'read'),
                                   p_fields, p_time_field)).names;
$$;
COMMENT ON FUNCTION api.series_columns(text, text, text[], text) IS 'The columns (flatJSON fields, CSV header) of a read of the series of event p_event_id by access p_access_id (read on one of its streams) that api.series_read returns: the time column (timestamp or deltaTime when p_fields names one, else p_time_field, default deltaTime), then the fields p_fields names (all the type''s when it names none) in the type''s order. Raises SAAUT, SANFD, SAFRB, SAOPR as account_private.series_holder does for read; SAINV for an unknown field or time column.';

CREATE FUNCTION api.series_read(p_access_id text, p_event_id text, p_from double precision DEFAULT NULL,
                                p_to double precision DEFAULT NULL, p_relative boolean DEFAULT true,
                                p_fields text[] DEFAULT NULL, p_time_field text DEFAULT 'deltaTime',
                                p_format text DEFAULT 'json', p_after timestamptz DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS TABLE (at timestamptz, line text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_holder account.events := account_private.series_holder(account_private.access(p_access_id), p_event_id, 'read');
    v_cols   record := series_private.columns(v_holder, p_fields, p_time_field);
    v_te     bigint := series_private.holder_us(v_holder.time);
    v_from   timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_from, p_relative));
    v_to     timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_to, p_relative));
    v_rel    boolean := v_cols.time_field = 'deltaTime';
    v_sel    boolean[] := v_cols.selected;
    v_k      text[] := v_cols.kinds;
BEGIN
    IF p_format NOT IN ('json', 'csv') THEN
        RAISE EXCEPTION 'format is json or csv, not %', p_format USING ERRCODE = 'SAINV';
    END IF;
    IF p_limit IS NOT NULL AND p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, not %', p_limit USING ERRCODE = 'SAINV';
    END IF;
    IF p_format = 'json' THEN
        RETURN QUERY
        SELECT p.at, '[' || concat_ws(',',
                   series_private.seconds_text(series_private.at_us(p.at) - CASE WHEN v_rel THEN v_te ELSE 0 END),
                   CASE WHEN v_sel[1] THEN series_private.value_json(p.n1, p.s1, p.t1, v_k[1]) END,
                   CASE WHEN v_sel[2] THEN series_private.value_json(p.n2, p.s2, p.t2, v_k[2]) END,
                   CASE WHEN v_sel[3] THEN series_private.value_json(p.n3, p.s3, p.t3, v_k[3]) END,
                   CASE WHEN v_sel[4] THEN series_private.value_json(p.n4, p.s4, p.t4, v_k[4]) END,
                   CASE WHEN v_sel[5] THEN series_private.value_json(p.n5, p.s5, p.t5, v_k[5]) END,
                   CASE WHEN v_sel[6] THEN series_private.value_json(p.n6, p.s6, p.t6, v_k[6]) END,
                   CASE WHEN v_sel[7] THEN series_private.value_json(p.n7, p.s7, p.t7, v_k[7]) END,
                   CASE WHEN v_sel[8] THEN series_private.value_json(p.n8, p.s8, p.t8, v_k[8]) END) || ']'
        FROM series.points_all p
        WHERE p.series_id = v_holder.series_id
          AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to)
          AND (p_after IS NULL OR p.at > p_after)
        ORDER BY p.at
        LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT p.at, concat_ws(',',
                   series_private.seconds_text(series_private.at_us(p.at) - CASE WHEN v_rel THEN v_te ELSE 0 END),
                   CASE WHEN v_sel[1] THEN series_private.value_csv(p.n1, p.s1, p.t1, v_k[1]) END,
                   CASE WHEN v_sel[2] THEN series_private.value_csv(p.n2, p.s2, p.t2, v_k[2]) END,
                   CASE WHEN v_sel[3] THEN series_private.value_csv(p.n3, p.s3, p.t3, v_k[3]) END,
                   CASE WHEN v_sel[4] THEN series_private.value_csv(p.n4, p.s4, p.t4, v_k[4]) END,
                   CASE WHEN v_sel[5] THEN series_private.value_csv(p.n5, p.s5, p.t5, v_k[5]) END,
                   CASE WHEN v_sel[6] THEN series_private.value_csv(p.n6, p.s6, p.t6, v_k[6]) END,
                   CASE WHEN v_sel[7] THEN series_private.value_csv(p.n7, p.s7, p.t7, v_k[7]) END,
                   CASE WHEN v_sel[8] THEN series_private.value_csv(p.n8, p.s8, p.t8, v_k[8]) END)
        FROM series.points_all p
        WHERE p.series_id = v_holder.series_id
          AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to)
          AND (p_after IS NULL OR p.at > p_after)
        ORDER BY p.at
        LIMIT p_limit;
    END IF;
END
$$;
COMMENT ON FUNCTION api.series_read(text, text, double precision, double precision, boolean, text[], text, text, timestamptz, integer) IS 'The points of the series of event p_event_id, read by access p_access_id (read on one of its streams), in time order, one row each: at (its time, for paging) and line, the point as a flatJSON array (p_format json, default) or a CSV line (csv) of the columns api.series_columns gives for p_fields and p_time_field (deltaTime: seconds after the event''s time; timestamp: seconds since the epoch; numbers exactly as given). Range: from p_from inclusive to p_to exclusive (NULL: open), seconds after the event''s time when p_relative (default) or since the epoch. Paging: only points after p_after, at most p_limit (NULL: all). Raises SAAUT, SANFD, SAFRB, SAOPR as account_private.series_holder does for read; SAINV for an unknown field, format, a bound out of range or a limit below 1.';

-- The points of a page as typed columns, for the Go shell to format (HTTP's reads): binary on the
-- wire, one array per column, where text lines cost PostgreSQL several times more than reading the
-- points (integer-to-text, concatenation, a row per point).
CREATE FUNCTION api.series_read_columns(p_access_id text, p_event_id text, p_from double precision DEFAULT NULL,
                                        p_to double precision DEFAULT NULL, p_relative boolean DEFAULT true,
                                        p_fields text[] DEFAULT NULL, p_time_field text DEFAULT 'deltaTime',
                                        p_after timestamptz DEFAULT NULL, p_limit integer DEFAULT NULL)
RETURNS TABLE (kinds text[], positions integer[], points integer, last_at timestamptz, time_us bigint[],
               n1 bigint[], s1 smallint[], t1 text[],
               n2 bigint[], s2 smallint[], t2 text[],
               n3 bigint[], s3 smallint[], t3 text[],
               n4 bigint[], s4 smallint[], t4 text[],
               n5 bigint[], s5 smallint[], t5 text[],
               n6 bigint[], s6 smallint[], t6 text[],
               n7 bigint[], s7 smallint[], t7 text[],
               n8 bigint[], s8 smallint[], t8 text[])
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
SET enable_sort = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_holder account.events := account_private.series_holder(account_private.access(p_access_id), p_event_id, 'read');
    v_cols   record := series_private.columns(v_holder, p_fields, p_time_field);
    v_off    bigint := CASE WHEN v_cols.time_field = 'deltaTime' THEN series_private.holder_us(v_holder.time) ELSE 0 END;
    v_from   timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_from, p_relative));
    v_to     timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_to, p_relative));
    v_pos    integer[] := ARRAY(SELECT p FROM generate_series(1, 8) p WHERE v_cols.selected[p] ORDER BY p);
    v_kinds  text[] := ARRAY(SELECT v_cols.kinds[p] FROM unnest(v_pos) WITH ORDINALITY AS u(p, k) ORDER BY k);
BEGIN
    IF p_limit IS NOT NULL AND p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, not %', p_limit USING ERRCODE = 'SAINV';
    END IF;
    -- Per stored position: its digits (not for strings), its scale (a stored number's own; 0 for
    -- the other kinds, which store none; -32768 where the point has no value) and its strings.
    RETURN QUERY
    SELECT v_kinds, v_pos, count(*)::integer, coalesce(max(q.at), timestamptz 'epoch'),
           array_agg(series_private.at_us(q.at) - v_off),
               CASE WHEN v_cols.selected[1] AND v_cols.kinds[1] <> 'string' THEN array_agg(coalesce(q.n1, 0)) END,
               CASE WHEN v_cols.selected[1] THEN array_agg(CASE WHEN q.n1 IS NULL AND q.t1 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s1, 0::smallint) END) END,
               CASE WHEN v_cols.selected[1] AND v_cols.kinds[1] = 'string' THEN array_agg(coalesce(q.t1, '')) END,
               CASE WHEN v_cols.selected[2] AND v_cols.kinds[2] <> 'string' THEN array_agg(coalesce(q.n2, 0)) END,
               CASE WHEN v_cols.selected[2] THEN array_agg(CASE WHEN q.n2 IS NULL AND q.t2 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s2, 0::smallint) END) END,
               CASE WHEN v_cols.selected[2] AND v_cols.kinds[2] = 'string' THEN array_agg(coalesce(q.t2, '')) END,
               CASE WHEN v_cols.selected[3] AND v_cols.kinds[3] <> 'string' THEN array_agg(coalesce(q.n3, 0)) END,
               CASE WHEN v_cols.selected[3] THEN array_agg(CASE WHEN q.n3 IS NULL AND q.t3 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s3, 0::smallint) END) END,
               CASE WHEN v_cols.selected[3] AND v_cols.kinds[3] = 'string' THEN array_agg(coalesce(q.t3, '')) END,
               CASE WHEN v_cols.selected[4] AND v_cols.kinds[4] <> 'string' THEN array_agg(coalesce(q.n4, 0)) END,
               CASE WHEN v_cols.selected[4] THEN array_agg(CASE WHEN q.n4 IS NULL AND q.t4 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s4, 0::smallint) END) END,
               CASE WHEN v_cols.selected[4] AND v_cols.kinds[4] = 'string' THEN array_agg(coalesce(q.t4, '')) END,
               CASE WHEN v_cols.selected[5] AND v_cols.kinds[5] <> 'string' THEN array_agg(coalesce(q.n5, 0)) END,
               CASE WHEN v_cols.selected[5] THEN array_agg(CASE WHEN q.n5 IS NULL AND q.t5 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s5, 0::smallint) END) END,
               CASE WHEN v_cols.selected[5] AND v_cols.kinds[5] = 'string' THEN array_agg(coalesce(q.t5, '')) END,
               CASE WHEN v_cols.selected[6] AND v_cols.kinds[6] <> 'string' THEN array_agg(coalesce(q.n6, 0)) END,
               CASE WHEN v_cols.selected[6] THEN array_agg(CASE WHEN q.n6 IS NULL AND q.t6 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s6, 0::smallint) END) END,
               CASE WHEN v_cols.selected[6] AND v_cols.kinds[6] = 'string' THEN array_agg(coalesce(q.t6, '')) END,
               CASE WHEN v_cols.selected[7] AND v_cols.kinds[7] <> 'string' THEN array_agg(coalesce(q.n7, 0)) END,
               CASE WHEN v_cols.selected[7] THEN array_agg(CASE WHEN q.n7 IS NULL AND q.t7 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s7, 0::smallint) END) END,
               CASE WHEN v_cols.selected[7] AND v_cols.kinds[7] = 'string' THEN array_agg(coalesce(q.t7, '')) END,
               CASE WHEN v_cols.selected[8] AND v_cols.kinds[8] <> 'string' THEN array_agg(coalesce(q.n8, 0)) END,
               CASE WHEN v_cols.selected[8] THEN array_agg(CASE WHEN q.n8 IS NULL AND q.t8 IS NULL THEN (-32768)::smallint ELSE coalesce(q.s8, 0::smallint) END) END,
               CASE WHEN v_cols.selected[8] AND v_cols.kinds[8] = 'string' THEN array_agg(coalesce(q.t8, '')) END
    FROM (SELECT p.* FROM series.points_all p
          WHERE p.series_id = v_holder.series_id
            AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to)
            AND (p_after IS NULL OR p.at > p_after)
          ORDER BY p.at
          LIMIT p_limit) q;
END
$$;
COMMENT ON FUNCTION api.series_read_columns(text, text, double precision, double precision, boolean, text[], text, timestamptz, integer) IS 'The points api.series_read returns (same arguments but p_format), as one row of typed columns: kinds (of the fields api.series_columns names after the time column: number, integer, boolean, string), positions (the stored position, 1 to 8, of each of those fields, in the same order), points (their number), last_at (the time of the last, for the next page''s p_after; the epoch when none), time_us (each point''s time column in microseconds: after the event''s time for deltaTime, since the epoch for timestamp), and per stored position p: n<p> (digits of a number, an integer, a boolean as 1 or 0), s<p> (a number''s scale, value = n / 10^s; 0 for other kinds; -32768: the value is null), t<p> (a string, for string fields); the arrays of positions the read does not select, and n of string fields, t of others, are NULL. Raises SAAUT, SANFD, SAFRB, SAOPR as account_private.series_holder does for read; SAINV for an unknown field, a bound out of range or a limit below 1.';

CREATE FUNCTION api.series_get(p_access_id text, p_event_id text, p_from double precision DEFAULT NULL,
                               p_to double precision DEFAULT NULL, p_relative boolean DEFAULT true,
                               p_fields text[] DEFAULT NULL, p_time_field text DEFAULT 'deltaTime')
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('format', 'flatJSON',
               'fields', to_jsonb(api.series_columns(p_access_id, p_event_id, p_fields, p_time_field)),
               'points', coalesce((SELECT jsonb_agg(r.line::jsonb ORDER BY r.at)
                                   FROM api.series_read(p_access_id, p_event_id, p_from, p_to, p_relative, p_fields, p_time_field) r), '[]'));
$$;
COMMENT ON FUNCTION api.series_get(text, text, double precision, double precision, boolean, text[], text) IS 'The points of a range of the series of event p_event_id as one flatJSON object {"format": "flatJSON", "fields": [...], "points": [[...], ...]}: psql''s counterpart of GET /{username}/events/{id}/series, arguments as api.series_read (whole ranges: HTTP streams large ones with api.series_read). Raises what api.series_read raises.';

CREATE FUNCTION api.series_delete(p_access_id text, p_event_id text, p_from double precision DEFAULT NULL,
                                  p_to double precision DEFAULT NULL, p_relative boolean DEFAULT true)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
-- A range delete decompresses the batches it cuts, however many, and only those: planned for its
-- values at each call (see series_private.clear).
SET timescaledb.max_tuples_decompressed_per_dml_transaction = 0
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_holder account.events := account_private.series_holder(account_private.access(p_access_id), p_event_id, 'write');
    v_from   timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_from, p_relative));
    v_to     timestamptz := series_private.us_at(series_private.bound_us(v_holder, p_to, p_relative));
    v_n      bigint;
    v_n1     bigint;
BEGIN
    DELETE FROM series.points p
    WHERE p.series_id = v_holder.series_id
      AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    DELETE FROM series.points1 p
    WHERE p.series_id = v_holder.series_id
      AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to);
    GET DIAGNOSTICS v_n1 = ROW_COUNT;
    v_n := v_n + v_n1;
    IF v_n > 0 THEN
        PERFORM series_private.notify(v_holder.user_id, ARRAY[p_event_id]);
    END IF;
    RETURN jsonb_build_object('status', 'ok', 'deleted', v_n);
END
$$;
COMMENT ON FUNCTION api.series_delete(text, text, double precision, double precision, boolean) IS 'Deletes the points of the series of event p_event_id from p_from inclusive to p_to exclusive (NULL: open; both NULL: every point), seconds after the event''s time when p_relative (default) or since the epoch, on behalf of access p_access_id (contribute or manage on one of the event''s streams). The event stays (its duration is not shortened). Publishes kind series, payload {"ids": [p_event_id]}, as api.series_append does when points were deleted. Returns {"status": "ok", "deleted": <points deleted>}. Raises SAAUT, SANFD, SAFRB, SAOPR as account_private.series_holder does for write; SAINV for a bound out of range.';
