-- Downsampled reads: the points of a range in buckets of a fixed number of seconds, one
-- aggregate (avg, min, max, sum, count, first, last) of each numeric field per bucket, for charts
-- of long ranges. Buckets start at the holder's time (deltaTime) or at the epoch (timestamp), and
-- are computed by date_bin on both backends. Only number and integer fields are aggregated: a
-- string or boolean field is left out of the answer.

CREATE FUNCTION series_private.value_numeric(p_n bigint, p_s smallint)
RETURNS numeric
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_n IS NULL THEN NULL
                WHEN p_s BETWEEN 0 AND 18 THEN p_n::numeric / series_private.pow10(p_s)
                ELSE (p_n::text || 'e' || (-p_s)::text)::numeric END;
$$;
COMMENT ON FUNCTION series_private.value_numeric(bigint, smallint) IS 'The stored number n / 10^s as numeric, exact. NULL for NULL. Raises nothing.';

CREATE FUNCTION api.series_downsample(p_access_id text, p_event_id text, p_interval double precision,
                                      p_aggregate text DEFAULT 'avg', p_from double precision DEFAULT NULL,
                                      p_to double precision DEFAULT NULL, p_relative boolean DEFAULT true,
                                      p_fields text[] DEFAULT NULL, p_time_field text DEFAULT 'deltaTime')
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan
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
    v_origin timestamptz;
    v_names  text[];
    v_points jsonb;
BEGIN
    IF p_interval IS NULL OR p_interval = 'NaN' OR p_interval < 0.001 OR p_interval > 1e9 THEN
        RAISE EXCEPTION 'interval must be a number of seconds from 0.001 to 1e9, not %', p_interval USING ERRCODE = 'SAINV';
    END IF;
    IF p_aggregate IS NULL OR p_aggregate NOT IN ('avg', 'min', 'max', 'sum', 'count', 'first', 'last') THEN
        RAISE EXCEPTION 'aggregate must be avg, min, max, sum, count, first or last, not %', p_aggregate USING ERRCODE = 'SAINV';
    END IF;
    v_origin := CASE WHEN v_rel THEN series_private.us_at(v_te) ELSE timestamptz 'epoch' END;
    -- The answer's fields: the time column and the numeric fields chosen.
    v_names := ARRAY[v_cols.time_field] || ARRAY(
        SELECT f.field FROM series_private.type_fields(v_holder) f
        WHERE v_sel[f.field_position] AND f.kind IN ('number', 'integer') ORDER BY f.field_position);
    SELECT coalesce(jsonb_agg(b.line::jsonb ORDER BY b.bucket), '[]') INTO v_points
    FROM (
        SELECT date_bin(p_interval * interval '1 second', p.at, v_origin) AS bucket,
               '[' || concat_ws(',',
                   series_private.seconds_text(series_private.at_us(date_bin(p_interval * interval '1 second', p.at, v_origin))
                                               - CASE WHEN v_rel THEN v_te ELSE 0 END),
                   CASE WHEN v_sel[1] AND v_k[1] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n1, p.s1))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n1, p.s1))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n1, p.s1))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n1, p.s1))
                       WHEN 'count' THEN count(p.n1)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n1, p.s1) ORDER BY p.at) FILTER (WHERE p.n1 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n1, p.s1) ORDER BY p.at DESC) FILTER (WHERE p.n1 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[2] AND v_k[2] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n2, p.s2))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n2, p.s2))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n2, p.s2))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n2, p.s2))
                       WHEN 'count' THEN count(p.n2)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n2, p.s2) ORDER BY p.at) FILTER (WHERE p.n2 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n2, p.s2) ORDER BY p.at DESC) FILTER (WHERE p.n2 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[3] AND v_k[3] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n3, p.s3))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n3, p.s3))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n3, p.s3))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n3, p.s3))
                       WHEN 'count' THEN count(p.n3)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n3, p.s3) ORDER BY p.at) FILTER (WHERE p.n3 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n3, p.s3) ORDER BY p.at DESC) FILTER (WHERE p.n3 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[4] AND v_k[4] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n4, p.s4))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n4, p.s4))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n4, p.s4))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n4, p.s4))
                       WHEN 'count' THEN count(p.n4)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n4, p.s4) ORDER BY p.at) FILTER (WHERE p.n4 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n4, p.s4) ORDER BY p.at DESC) FILTER (WHERE p.n4 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[5] AND v_k[5] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n5, p.s5))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n5, p.s5))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n5, p.s5))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n5, p.s5))
                       WHEN 'count' THEN count(p.n5)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n5, p.s5) ORDER BY p.at) FILTER (WHERE p.n5 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n5, p.s5) ORDER BY p.at DESC) FILTER (WHERE p.n5 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[6] AND v_k[6] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n6, p.s6))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n6, p.s6))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n6, p.s6))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n6, p.s6))
                       WHEN 'count' THEN count(p.n6)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n6, p.s6) ORDER BY p.at) FILTER (WHERE p.n6 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n6, p.s6) ORDER BY p.at DESC) FILTER (WHERE p.n6 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[7] AND v_k[7] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n7, p.s7))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n7, p.s7))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n7, p.s7))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n7, p.s7))
                       WHEN 'count' THEN count(p.n7)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n7, p.s7) ORDER BY p.at) FILTER (WHERE p.n7 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n7, p.s7) ORDER BY p.at DESC) FILTER (WHERE p.n7 IS NOT NULL))[1]
                   END)::text, 'null') END,
                   CASE WHEN v_sel[8] AND v_k[8] IN ('number', 'integer') THEN coalesce(trim_scale(CASE p_aggregate
                       WHEN 'avg' THEN avg(series_private.value_numeric(p.n8, p.s8))
                       WHEN 'min' THEN min(series_private.value_numeric(p.n8, p.s8))
                       WHEN 'max' THEN max(series_private.value_numeric(p.n8, p.s8))
                       WHEN 'sum' THEN sum(series_private.value_numeric(p.n8, p.s8))
                       WHEN 'count' THEN count(p.n8)
                       WHEN 'first' THEN (array_agg(series_private.value_numeric(p.n8, p.s8) ORDER BY p.at) FILTER (WHERE p.n8 IS NOT NULL))[1]
                       WHEN 'last' THEN (array_agg(series_private.value_numeric(p.n8, p.s8) ORDER BY p.at DESC) FILTER (WHERE p.n8 IS NOT NULL))[1]
                   END)::text, 'null') END) || ']' AS line
        FROM series.points_all p
        WHERE p.series_id = v_holder.series_id
          AND (v_from IS NULL OR p.at >= v_from) AND (v_to IS NULL OR p.at < v_to)
        GROUP BY 1
    ) b;
    RETURN jsonb_build_object('format', 'flatJSON', 'fields', to_jsonb(v_names), 'points', v_points);
END
$$;
COMMENT ON FUNCTION api.series_downsample(text, text, double precision, text, double precision, double precision, boolean, text[], text) IS 'The points of a range of the series of event p_event_id, read by access p_access_id (read on one of its streams), downsampled: one point per bucket of p_interval seconds (0.001 to 1e9; buckets start at the event''s time for deltaTime, at the epoch for timestamp) that holds points, its time the bucket''s start, each numeric field chosen by p_fields (all when none) reduced by p_aggregate: avg (default), min, max, sum, count, first or last (null when the bucket has no value for it); string and boolean fields are left out. Range and time column as api.series_read. Returns flatJSON {"format", "fields", "points"}, points in time order (GET /{username}/events/{id}/series?interval=&aggregate=). Raises SAAUT, SANFD, SAFRB, SAOPR as account_private.series_holder does for read; SAINV for an interval or aggregate outside those, an unknown field, or a bound out of range.';
