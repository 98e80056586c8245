-- Checking and storing points given as typed columns (api.series_append_columns, 07_columns.sql).
--
-- Why it is shaped so: a point is checked (its time in range and not before its event's time, a
-- value in every required field, an integer in every integer field) by tests on whole arrays
-- first, which the usual body passes at once: array_position finds a null without unpacking an
-- array, and a body's extent gives its earliest and latest time. Only a body those tests cannot
-- clear is read point by point (series_private.column_check), to name the first point that breaks
-- a rule. A call in order (each body of its own series, its times ascending: a feed, sent in order)
-- whose series all go to one table (series_private.narrow) is inserted as it comes: no sort, no
-- join, no two points at one time; any other call goes through series_private.column_rows, which
-- sorts and keeps the last point of each series and time, into each table its rows.

-- Why a point of body p_body cannot be stored; called only for a point that breaks a rule.
CREATE FUNCTION series_private.column_failure(p_body series_private.body, p_ord bigint, p_tu bigint, p_x bigint[])
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_scale  smallint;
    v_reason text;
BEGIN
    IF p_tu IS NULL OR p_tu < 0 OR p_tu >= 100000000000000000 OR (p_body.abs AND p_tu < p_body.te) THEN
        v_reason := format('%s %s is out of range: a point may not come before its event''s time', p_body.tname,
                           coalesce(series_private.seconds_text(p_tu), 'null'));
    ELSE
        FOR v_p IN 1 .. 8 LOOP
            v_scale := p_body.scales[v_p];
            CONTINUE WHEN p_body.idx[v_p] IS NULL;
            IF p_x[v_p] IS NULL AND p_body.reqs[v_p] THEN
                v_reason := format('field %s is required and may not be null', p_body.fnames[v_p]);
            ELSIF p_body.kinds[v_p] = 'integer' AND p_x[v_p] % series_private.pow10_int(v_scale) <> 0 THEN
                v_reason := format('field %s must be an integer, not %s', p_body.fnames[v_p], series_private.decimal_text(p_x[v_p], v_scale));
            END IF;
            EXIT WHEN v_reason IS NOT NULL;
        END LOOP;
    END IF;
    RAISE EXCEPTION '%"points" matrix must contain correct data types according to series type: point %: %', p_body.prefix, p_ord,
        coalesce(v_reason, 'unreadable') USING ERRCODE = 'SASTR';
END
$$;
COMMENT ON FUNCTION series_private.column_failure(series_private.body, bigint, bigint, bigint[]) IS 'Raises SASTR (invalid-request-structure) for point p_ord of body p_body (as series_private.column_rows takes it), time p_tu, values p_x by position, naming the first rule it breaks: a time out of range or before the event''s time, a null in a required field, a fraction in an integer field. Returns nothing.';

CREATE FUNCTION series_private.column_scale(p_body series_private.body, p_position integer)
RETURNS smallint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_body.kinds[p_position] = 'integer' THEN 0::smallint ELSE p_body.scales[p_position] END;
$$;
COMMENT ON FUNCTION series_private.column_scale(series_private.body, integer) IS 'The stored scale of position p_position of a body as series_private.column_rows takes it: 0 for an integer field, the body''s scale for a number field, NULL when the body has no such field. Raises nothing.';

CREATE FUNCTION series_private.column_divisor(p_body series_private.body, p_position integer)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_body.kinds[p_position] = 'integer' THEN series_private.pow10_int(p_body.scales[p_position]) END;
$$;
COMMENT ON FUNCTION series_private.column_divisor(series_private.body, integer) IS 'For an integer field at position p_position of a body as series_private.column_rows takes it, 10^scale: its values divided by it are the integers (a remainder: not an integer); NULL for a number field or none. Raises nothing.';

-- The points of checked bodies one by one, for a call the whole-array tests could not clear.
CREATE FUNCTION series_private.column_check(p_bodies series_private.body[], p_body integer[], p_time bigint[],
                                            p_a1 bigint[], p_a2 bigint[], p_a3 bigint[], p_a4 bigint[],
                                            p_a5 bigint[], p_a6 bigint[], p_a7 bigint[], p_a8 bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET enable_nestloop = off
AS $$
DECLARE
    v_bad record;
BEGIN
    SELECT b.n, t.ord - b.first + 1 AS ord, t.tu, ARRAY[t.x1, t.x2, t.x3, t.x4, t.x5, t.x6, t.x7, t.x8] AS x INTO v_bad
    FROM (SELECT unnest(coalesce(p_body, array_fill(1, ARRAY[cardinality(p_time)]))) AS bn, unnest(p_time) AS tu,
                 generate_series(1, cardinality(p_time)) AS ord,
                 unnest(p_a1) AS x1, unnest(p_a2) AS x2, unnest(p_a3) AS x3, unnest(p_a4) AS x4,
                 unnest(p_a5) AS x5, unnest(p_a6) AS x6, unnest(p_a7) AS x7, unnest(p_a8) AS x8) t
    JOIN (SELECT u.n, u.te, u.abs, u.ti AS first,
                 series_private.column_divisor(u, 1) AS d1, series_private.column_divisor(u, 2) AS d2,
                 series_private.column_divisor(u, 3) AS d3, series_private.column_divisor(u, 4) AS d4,
                 series_private.column_divisor(u, 5) AS d5, series_private.column_divisor(u, 6) AS d6,
                 series_private.column_divisor(u, 7) AS d7, series_private.column_divisor(u, 8) AS d8,
                 -- Whether the field at each position is required and in the body.
                 u.reqs[1] AND u.idx[1] IS NOT NULL AS r1, u.reqs[2] AND u.idx[2] IS NOT NULL AS r2,
                 u.reqs[3] AND u.idx[3] IS NOT NULL AS r3, u.reqs[4] AND u.idx[4] IS NOT NULL AS r4,
                 u.reqs[5] AND u.idx[5] IS NOT NULL AS r5, u.reqs[6] AND u.idx[6] IS NOT NULL AS r6,
                 u.reqs[7] AND u.idx[7] IS NOT NULL AS r7, u.reqs[8] AND u.idx[8] IS NOT NULL AS r8
          FROM unnest(p_bodies) u OFFSET 0) b ON b.n = t.bn
    WHERE t.tu IS NULL OR t.tu < 0 OR t.tu >= 100000000000000000 OR (b.abs AND t.tu < b.te)
          OR (t.x1 IS NULL AND b.r1) OR t.x1 % b.d1 <> 0 OR (t.x2 IS NULL AND b.r2) OR t.x2 % b.d2 <> 0
          OR (t.x3 IS NULL AND b.r3) OR t.x3 % b.d3 <> 0 OR (t.x4 IS NULL AND b.r4) OR t.x4 % b.d4 <> 0
          OR (t.x5 IS NULL AND b.r5) OR t.x5 % b.d5 <> 0 OR (t.x6 IS NULL AND b.r6) OR t.x6 % b.d6 <> 0
          OR (t.x7 IS NULL AND b.r7) OR t.x7 % b.d7 <> 0 OR (t.x8 IS NULL AND b.r8) OR t.x8 % b.d8 <> 0
    ORDER BY t.ord
    LIMIT 1;
    IF FOUND THEN
        PERFORM series_private.column_failure(p_bodies[v_bad.n], v_bad.ord, v_bad.tu, v_bad.x);
    END IF;
END
$$;
COMMENT ON FUNCTION series_private.column_check(series_private.body[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'Checks the points of bodies p_bodies as series_private.write_columns takes them (p_body, p_time, p_a1 .. p_a8), one by one: raises SASTR (invalid-request-structure) for the first in the call''s order that breaks a rule (series_private.column_failure); returns when none does.';

-- The rows of checked bodies given as columns, one per series and time (the last point given
-- for it), each cell in its stored form. Inlined into the statements of series_private.write_columns.
CREATE FUNCTION series_private.column_rows(p_bodies series_private.body[], p_body integer[], p_time bigint[],
                                           p_a1 bigint[], p_a2 bigint[], p_a3 bigint[], p_a4 bigint[],
                                           p_a5 bigint[], p_a6 bigint[], p_a7 bigint[], p_a8 bigint[])
RETURNS TABLE (series_id bigint, at timestamptz, n1 bigint, s1 smallint, n2 bigint, s2 smallint, n3 bigint, s3 smallint,
               n4 bigint, s4 smallint, n5 bigint, s5 smallint, n6 bigint, s6 smallint, n7 bigint, s7 smallint, n8 bigint, s8 smallint)
LANGUAGE sql STABLE
AS $$
    SELECT z.series_id, z.at, z.n1, z.s1, z.n2, z.s2, z.n3, z.s3, z.n4, z.s4, z.n5, z.s5, z.n6, z.s6, z.n7, z.s7, z.n8, z.s8
    FROM (
        -- The sort keys lead the sorted rows: a key behind a NULL column is found by walking the
        -- row at every comparison.
        SELECT DISTINCT ON (c.series_id, c.at) c.series_id, c.at, c.n, c.ord,
               CASE WHEN c.d1 IS NULL THEN c.x1 ELSE c.x1 / c.d1 END AS n1, CASE WHEN c.x1 IS NOT NULL THEN c.c1 END AS s1,
               CASE WHEN c.d2 IS NULL THEN c.x2 ELSE c.x2 / c.d2 END AS n2, CASE WHEN c.x2 IS NOT NULL THEN c.c2 END AS s2,
               CASE WHEN c.d3 IS NULL THEN c.x3 ELSE c.x3 / c.d3 END AS n3, CASE WHEN c.x3 IS NOT NULL THEN c.c3 END AS s3,
               CASE WHEN c.d4 IS NULL THEN c.x4 ELSE c.x4 / c.d4 END AS n4, CASE WHEN c.x4 IS NOT NULL THEN c.c4 END AS s4,
               CASE WHEN c.d5 IS NULL THEN c.x5 ELSE c.x5 / c.d5 END AS n5, CASE WHEN c.x5 IS NOT NULL THEN c.c5 END AS s5,
               CASE WHEN c.d6 IS NULL THEN c.x6 ELSE c.x6 / c.d6 END AS n6, CASE WHEN c.x6 IS NOT NULL THEN c.c6 END AS s6,
               CASE WHEN c.d7 IS NULL THEN c.x7 ELSE c.x7 / c.d7 END AS n7, CASE WHEN c.x7 IS NOT NULL THEN c.c7 END AS s7,
               CASE WHEN c.d8 IS NULL THEN c.x8 ELSE c.x8 / c.d8 END AS n8, CASE WHEN c.x8 IS NOT NULL THEN c.c8 END AS s8
        FROM (
            SELECT b.n, b.series_id, t.ord, series_private.us_at(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END) AS at,
                   t.x1, t.x2, t.x3, t.x4, t.x5, t.x6, t.x7, t.x8, b.c1, b.c2, b.c3, b.c4, b.c5, b.c6, b.c7, b.c8,
                   b.d1, b.d2, b.d3, b.d4, b.d5, b.d6, b.d7, b.d8
            -- Set-returning functions in the select list run in step, streamed (in FROM each would
            -- be stored whole first).
            FROM (SELECT unnest(coalesce(p_body, array_fill(1, ARRAY[cardinality(p_time)]))) AS bn, unnest(p_time) AS tu,
                         generate_series(1, cardinality(p_time)) AS ord,
                         unnest(p_a1) AS x1, unnest(p_a2) AS x2, unnest(p_a3) AS x3, unnest(p_a4) AS x4,
                         unnest(p_a5) AS x5, unnest(p_a6) AS x6, unnest(p_a7) AS x7, unnest(p_a8) AS x8) t
            JOIN (SELECT u.n, u.series_id, u.te, u.abs,
                         -- Per position: the stored scale (c), the divisor of an integer field (d).
                         series_private.column_scale(u, 1) AS c1, series_private.column_scale(u, 2) AS c2,
                         series_private.column_scale(u, 3) AS c3, series_private.column_scale(u, 4) AS c4,
                         series_private.column_scale(u, 5) AS c5, series_private.column_scale(u, 6) AS c6,
                         series_private.column_scale(u, 7) AS c7, series_private.column_scale(u, 8) AS c8,
                         series_private.column_divisor(u, 1) AS d1, series_private.column_divisor(u, 2) AS d2,
                         series_private.column_divisor(u, 3) AS d3, series_private.column_divisor(u, 4) AS d4,
                         series_private.column_divisor(u, 5) AS d5, series_private.column_divisor(u, 6) AS d6,
                         series_private.column_divisor(u, 7) AS d7, series_private.column_divisor(u, 8) AS d8
                  FROM unnest(p_bodies) u OFFSET 0) b ON b.n = t.bn
        ) c
        ORDER BY c.series_id, c.at, c.n DESC, c.ord DESC
    ) z;
$$;
COMMENT ON FUNCTION series_private.column_rows(series_private.body[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'The rows series.points gets from bodies checked by api.series_append_columns (idx: the value column of each position; ti: the place of its first point; scales: the scale of each position) and their points: p_body, p_time, and p_a1 .. p_a8 the values by position of the type: each value at its body''s scale (integers at scale 0); of two points of one series at one time, the later (by body, then by place). The points must have passed series_private.column_check. Raises nothing.';

-- Writes the points of checked bodies given as columns, as series_private.store_rows stores rows
-- (08_store.sql), the rows streamed from the arrays into the insert rather than gathered first.
CREATE FUNCTION series_private.write_columns(p_bodies series_private.body[], p_body integer[], p_time bigint[], p_ascending boolean,
                                             p_a1 bigint[], p_a2 bigint[], p_a3 bigint[], p_a4 bigint[],
                                             p_a5 bigint[], p_a6 bigint[], p_a7 bigint[], p_a8 bigint[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
SET jit = off
-- One plan for every call: no planning per call, and an estimate of the insert's rows that does
-- not fall under the few rows for which TimescaleDB declines to compress directly (with a warning).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n        integer := cardinality(p_time);
    v_sorted   boolean := false;
    v_nulls    boolean[];
    v_check    boolean;
    v_bad      boolean;
    v_distinct boolean;
    v_all1     boolean;
    v_any1     boolean;
    v_series   bigint[];
    v_lo       bigint[];
    v_hi       bigint[];
    v_from     timestamptz[];
    v_to       timestamptz[];
    v_stored   bigint[];
    v_row_series bigint[];
    v_row_at   timestamptz[];
    v_direct   boolean;
    v_one      boolean;
    v_base     bigint;
    v_scale    smallint;
    v_div      bigint;
    -- Per body, in body order: its series, what its times count from, and per position the stored
    -- scale (c) and the divisor of an integer field (d).
    v_sids     bigint[];
    v_bases    bigint[];
    v_c1 smallint[]; v_c2 smallint[]; v_c3 smallint[]; v_c4 smallint[]; v_c5 smallint[]; v_c6 smallint[]; v_c7 smallint[]; v_c8 smallint[];
    v_d1 bigint[]; v_d2 bigint[]; v_d3 bigint[]; v_d4 bigint[]; v_d5 bigint[]; v_d6 bigint[]; v_d7 bigint[]; v_d8 bigint[];
BEGIN
    -- The whole-array tests: a null time, a null in a value column where a body requires a value,
    -- an integer field sent with decimals (its values must then be divided, and may not be).
    v_nulls := ARRAY[array_position(p_a1, NULL) IS NOT NULL, array_position(p_a2, NULL) IS NOT NULL,
                     array_position(p_a3, NULL) IS NOT NULL, array_position(p_a4, NULL) IS NOT NULL,
                     array_position(p_a5, NULL) IS NOT NULL, array_position(p_a6, NULL) IS NOT NULL,
                     array_position(p_a7, NULL) IS NOT NULL, array_position(p_a8, NULL) IS NOT NULL];
    v_check := array_position(p_time, NULL) IS NOT NULL
               OR EXISTS (SELECT FROM unnest(p_bodies) u, generate_series(1, 8) k
                          WHERE u.idx[k] IS NOT NULL AND ((u.reqs[k] AND v_nulls[k]) OR series_private.column_divisor(u, k) > 1));
    SELECT array_agg(b.series_id), array_agg(CASE WHEN b.abs THEN 0 ELSE b.te END),
           array_agg(series_private.column_scale(b, 1)), array_agg(series_private.column_scale(b, 2)),
           array_agg(series_private.column_scale(b, 3)), array_agg(series_private.column_scale(b, 4)),
           array_agg(series_private.column_scale(b, 5)), array_agg(series_private.column_scale(b, 6)),
           array_agg(series_private.column_scale(b, 7)), array_agg(series_private.column_scale(b, 8)),
           array_agg(series_private.column_divisor(b, 1)), array_agg(series_private.column_divisor(b, 2)),
           array_agg(series_private.column_divisor(b, 3)), array_agg(series_private.column_divisor(b, 4)),
           array_agg(series_private.column_divisor(b, 5)), array_agg(series_private.column_divisor(b, 6)),
           array_agg(series_private.column_divisor(b, 7)), array_agg(series_private.column_divisor(b, 8)),
           count(DISTINCT b.series_id) = count(*), bool_and(series_private.narrow(b)), bool_or(series_private.narrow(b))
    INTO v_sids, v_bases, v_c1, v_c2, v_c3, v_c4, v_c5, v_c6, v_c7, v_c8, v_d1, v_d2, v_d3, v_d4, v_d5, v_d6, v_d7, v_d8, v_distinct,
         v_all1, v_any1
    FROM (SELECT * FROM unnest(p_bodies) u ORDER BY u.n) b;
    -- In order (the usual call: a feed's bodies, each sent in time order, one series each): the
    -- bodies' points one after the other, each body's times ascending (p_ascending, as the caller
    -- found it). Such rows need no sort and hold no two points of a series at one time, and each
    -- body's extent is read off its ends. Such a call of series of one field each goes to
    -- series.points1, of series of more to series.points; one of both is split, sorted.
    v_sorted := p_ascending AND NOT v_check AND v_distinct AND (v_all1 OR NOT v_any1);
    IF v_sorted THEN
        -- A body's first point is its ti (api.series_append_columns), its last the one before the next body's first.
        SELECT array_agg(x.series_id ORDER BY x.series_id), array_agg(x.base + p_time[x.f] ORDER BY x.series_id),
               array_agg(x.base + p_time[x.l] ORDER BY x.series_id),
               bool_or(p_time[x.f] < 0 OR p_time[x.l] >= 100000000000000000 OR (x.abs AND p_time[x.f] < x.te))
        INTO v_series, v_lo, v_hi, v_bad
        FROM (SELECT b.series_id, b.abs, b.te, CASE WHEN b.abs THEN 0 ELSE b.te END AS base, b.ti AS f,
                     coalesce(lead(b.ti) OVER (ORDER BY b.n) - 1, v_n) AS l
              FROM unnest(p_bodies) b) x;
    ELSE
        SELECT array_agg(x.series_id ORDER BY x.series_id), array_agg(x.lo ORDER BY x.series_id), array_agg(x.hi ORDER BY x.series_id),
               bool_or(x.bad)
        INTO v_series, v_lo, v_hi, v_bad
        FROM (SELECT b.series_id, min(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END) AS lo, max(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END) AS hi,
                     bool_or(t.tu < 0 OR t.tu >= 100000000000000000 OR (b.abs AND t.tu < b.te)) AS bad
              FROM unnest(coalesce(p_body, array_fill(1, ARRAY[v_n])), p_time) t(bn, tu)
              JOIN unnest(p_bodies) b ON b.n = t.bn
              GROUP BY b.series_id) x;
    END IF;
    IF v_check OR v_bad THEN
        PERFORM series_private.column_check(p_bodies, p_body, p_time, p_a1, p_a2, p_a3, p_a4, p_a5, p_a6, p_a7, p_a8);
    END IF;
    v_from := ARRAY(SELECT series_private.us_at(u) FROM unnest(v_lo) u);
    v_to := ARRAY(SELECT series_private.us_at(u) FROM unnest(v_hi) u);
    v_stored := series_private.claim(v_series, v_from, v_to);
    IF cardinality(v_stored) > 0 THEN
        SELECT array_agg(b.series_id), array_agg(series_private.us_at(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END))
        INTO v_row_series, v_row_at
        FROM unnest(coalesce(p_body, array_fill(1, ARRAY[v_n])), p_time) t(bn, tu)
        JOIN unnest(p_bodies) b ON b.n = t.bn;
        PERFORM series_private.clear_stored(v_stored, v_series, v_from, v_to, v_row_series, v_row_at);
    END IF;
    v_direct := series_private.compress_on_write(v_n, cardinality(v_series));
    v_base := v_bases[1];
    v_scale := v_c1[1];
    v_div := v_d1[1];
    v_one := v_sorted AND v_all1;
    IF v_one AND p_body IS NULL THEN
        -- One body of a type of one field (the usual feed: mass/kg, count/steps, ...): its
        -- series, time base, scale and divisor are the statement's parameters, not looked up per point.
        INSERT INTO series.points1 (series_id, at, n1, s1)
        SELECT v_sids[1], series_private.us_at(v_base + t.tu), CASE WHEN v_div IS NULL THEN t.x1 ELSE t.x1 / v_div END,
               CASE WHEN t.x1 IS NOT NULL THEN v_scale END
        FROM (SELECT unnest(p_time) AS tu, unnest(p_a1) AS x1) t;
    ELSIF v_one THEN
        -- Bodies of types of one field.
        INSERT INTO series.points1 (series_id, at, n1, s1)
        SELECT v_sids[t.bn], series_private.us_at(v_bases[t.bn] + t.tu),
               CASE WHEN t.x1 IS NULL OR v_d1[t.bn] IS NULL THEN t.x1 ELSE t.x1 / v_d1[t.bn] END, CASE WHEN t.x1 IS NOT NULL THEN v_c1[t.bn] END
        FROM (SELECT unnest(coalesce(p_body, array_fill(1, ARRAY[v_n]))) AS bn, unnest(p_time) AS tu, unnest(p_a1) AS x1) t;
    ELSIF v_sorted THEN
        -- The rows as they come, in order (set-returning functions in the select list run in
        -- step, streamed); TimescaleDB's compressor makes batches of each series' run of points.
        INSERT INTO series.points (series_id, at, n1, s1, n2, s2, n3, s3, n4, s4, n5, s5, n6, s6, n7, s7, n8, s8)
        SELECT v_sids[t.bn], series_private.us_at(v_bases[t.bn] + t.tu),
               CASE WHEN t.x1 IS NULL OR v_d1[t.bn] IS NULL THEN t.x1 ELSE t.x1 / v_d1[t.bn] END, CASE WHEN t.x1 IS NOT NULL THEN v_c1[t.bn] END,
               CASE WHEN t.x2 IS NULL OR v_d2[t.bn] IS NULL THEN t.x2 ELSE t.x2 / v_d2[t.bn] END, CASE WHEN t.x2 IS NOT NULL THEN v_c2[t.bn] END,
               CASE WHEN t.x3 IS NULL OR v_d3[t.bn] IS NULL THEN t.x3 ELSE t.x3 / v_d3[t.bn] END, CASE WHEN t.x3 IS NOT NULL THEN v_c3[t.bn] END,
               CASE WHEN t.x4 IS NULL OR v_d4[t.bn] IS NULL THEN t.x4 ELSE t.x4 / v_d4[t.bn] END, CASE WHEN t.x4 IS NOT NULL THEN v_c4[t.bn] END,
               CASE WHEN t.x5 IS NULL OR v_d5[t.bn] IS NULL THEN t.x5 ELSE t.x5 / v_d5[t.bn] END, CASE WHEN t.x5 IS NOT NULL THEN v_c5[t.bn] END,
               CASE WHEN t.x6 IS NULL OR v_d6[t.bn] IS NULL THEN t.x6 ELSE t.x6 / v_d6[t.bn] END, CASE WHEN t.x6 IS NOT NULL THEN v_c6[t.bn] END,
               CASE WHEN t.x7 IS NULL OR v_d7[t.bn] IS NULL THEN t.x7 ELSE t.x7 / v_d7[t.bn] END, CASE WHEN t.x7 IS NOT NULL THEN v_c7[t.bn] END,
               CASE WHEN t.x8 IS NULL OR v_d8[t.bn] IS NULL THEN t.x8 ELSE t.x8 / v_d8[t.bn] END, CASE WHEN t.x8 IS NOT NULL THEN v_c8[t.bn] END
        FROM (SELECT unnest(coalesce(p_body, array_fill(1, ARRAY[v_n]))) AS bn, unnest(p_time) AS tu,
                     unnest(p_a1) AS x1, unnest(p_a2) AS x2, unnest(p_a3) AS x3, unnest(p_a4) AS x4,
                     unnest(p_a5) AS x5, unnest(p_a6) AS x6, unnest(p_a7) AS x7, unnest(p_a8) AS x8) t;
    ELSE
        IF v_any1 THEN
            INSERT INTO series.points1 (series_id, at, n1, s1)
            SELECT r.series_id, r.at, r.n1, r.s1
            FROM series_private.column_rows(p_bodies, p_body, p_time, p_a1, p_a2, p_a3, p_a4, p_a5, p_a6, p_a7, p_a8) r
            WHERE v_all1 OR r.series_id IN (SELECT b.series_id FROM unnest(p_bodies) b WHERE series_private.narrow(b));
        END IF;
        IF NOT v_all1 THEN
            INSERT INTO series.points (series_id, at, n1, s1, n2, s2, n3, s3, n4, s4, n5, s5, n6, s6, n7, s7, n8, s8)
            SELECT * FROM series_private.column_rows(p_bodies, p_body, p_time, p_a1, p_a2, p_a3, p_a4, p_a5, p_a6, p_a7, p_a8) r
            WHERE NOT v_any1 OR r.series_id NOT IN (SELECT b.series_id FROM unnest(p_bodies) b WHERE series_private.narrow(b));
        END IF;
    END IF;
    PERFORM series_private.written(v_direct, p_bodies, v_series, v_from, v_to);
END
$$;
COMMENT ON FUNCTION series_private.write_columns(series_private.body[], integer[], bigint[], boolean, bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'Checks (whole arrays first, point by point only when those tests cannot clear them: series_private.column_check) and writes the points of checked bodies p_bodies given as columns (p_body, p_time, p_a1 .. p_a8 as api.series_append_columns passes them on; p_ascending: the caller found each body''s points together, the bodies in order and each body''s times strictly ascending) into series.points1 or series.points (series_private.narrow) as series_private.store_rows does (the series'' turns taken, stored points at the same times replaced, straight into compressed batches when series_private.compress_on_write says so), and merges the metadata updates (series_private.written). Raises SASTR (invalid-request-structure) for the first point that breaks a rule.';
