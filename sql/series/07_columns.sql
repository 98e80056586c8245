-- Appending points as typed columns: what HTTP's series routes send for a body whose cells are all
-- plain numbers (the usual sensor feed), read by the Go shell into arrays (bigint[], smallint[],
-- binary on the wire) rather than sent as jsonb. The rules are the flatJSON path's (02_append.sql):
-- the same holder and field checks (series_private.prepare_fields), the same stored form (numbers
-- at one scale per body and field, integers at scale 0, times to the microsecond), the same last
-- write wins, metadata update (series_private.schedule) and notification (series_private.notify).
--
-- Why: PostgreSQL spent most of a flatJSON write reading jsonb, splitting it into points and
-- converting every cell (numeric parsing, trimming, scaling); a number arriving as its digits at
-- its body's scale costs nothing of that, and the statement below does per point only a few integer
-- comparisons before the insert. A body that needs what only flatJSON can say (strings, booleans,
-- numbers of more than 18 digits) is sent as flatJSON; a body that breaks a rule here raises SASTR,
-- and HTTP then sends it as flatJSON, whose refusal names the cell as the client wrote it.

CREATE FUNCTION api.series_append_columns(p_access_id text, p_event_ids text[], p_fields text[], p_field_counts integer[],
                                          p_scales smallint[], p_body integer[], p_time bigint[],
                                          p_v1 bigint[] DEFAULT NULL, p_v2 bigint[] DEFAULT NULL, p_v3 bigint[] DEFAULT NULL,
                                          p_v4 bigint[] DEFAULT NULL, p_v5 bigint[] DEFAULT NULL, p_v6 bigint[] DEFAULT NULL,
                                          p_v7 bigint[] DEFAULT NULL, p_v8 bigint[] DEFAULT NULL, p_batch boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by     account.accesses := account_private.access(p_access_id);
    v_nb     integer := coalesce(cardinality(p_event_ids), 0);
    v_np     integer := coalesce(cardinality(p_time), 0);
    v_bodies series_private.body[] := '{}';
    v_body   series_private.body;
    v_scales smallint[];
    v_counts integer[];
    v_firsts integer[];
    v_where  text;
    v_off    integer := 0;
    v_map    integer[];
    v_shared boolean := true;
    v_holder account.events;
    v_type   text;
    v_lnames text[];
    v_lkinds text[];
    v_lreq   boolean[];
    a1 bigint[]; a2 bigint[]; a3 bigint[]; a4 bigint[]; a5 bigint[]; a6 bigint[]; a7 bigint[]; a8 bigint[];
BEGIN
    IF coalesce(cardinality(p_field_counts), 0) <> v_nb OR coalesce(cardinality(p_fields), 0) <> coalesce(cardinality(p_scales), 0)
       OR (SELECT coalesce(sum(c), 0) FROM unnest(p_field_counts) c) <> coalesce(cardinality(p_fields), 0)
       OR (p_body IS NOT NULL AND cardinality(p_body) <> v_np) THEN
        RAISE EXCEPTION 'series columns: one field count per event, one scale per field, one body number per point'
            USING ERRCODE = 'SAINV';
    END IF;
    IF (p_v1 IS NOT NULL AND cardinality(p_v1) <> v_np) OR (p_v2 IS NOT NULL AND cardinality(p_v2) <> v_np)
       OR (p_v3 IS NOT NULL AND cardinality(p_v3) <> v_np) OR (p_v4 IS NOT NULL AND cardinality(p_v4) <> v_np)
       OR (p_v5 IS NOT NULL AND cardinality(p_v5) <> v_np) OR (p_v6 IS NOT NULL AND cardinality(p_v6) <> v_np)
       OR (p_v7 IS NOT NULL AND cardinality(p_v7) <> v_np) OR (p_v8 IS NOT NULL AND cardinality(p_v8) <> v_np) THEN
        RAISE EXCEPTION 'series columns: every value column has one value per point' USING ERRCODE = 'SAINV';
    END IF;
    -- Points per body (bodies numbered from 1; p_body NULL: every point is of body 1).
    IF p_body IS NULL THEN
        v_counts := array_fill(0, ARRAY[v_nb]);
        v_counts[1] := v_np;
        v_firsts := ARRAY[CASE WHEN v_np > 0 THEN 1 END];
    ELSE
        SELECT array_agg(coalesce(c.points, 0) ORDER BY g.i), array_agg(c.first ORDER BY g.i) INTO v_counts, v_firsts
        FROM generate_series(1, v_nb) g(i)
        LEFT JOIN (SELECT t.bn, count(*)::integer AS points, min(t.ord)::integer AS first
                   FROM unnest(p_body) WITH ORDINALITY t(bn, ord) GROUP BY t.bn) c ON c.bn = g.i;
    END IF;
    IF v_np > 0 AND EXISTS (SELECT FROM unnest(coalesce(p_body, '{1}')) t(bn) WHERE t.bn IS NULL OR t.bn < 1 OR t.bn > v_nb) THEN
        RAISE EXCEPTION 'series columns: a body number is between 1 and %', v_nb USING ERRCODE = 'SAINV';
    END IF;
    FOR v_i IN 1 .. v_nb LOOP
        v_where := CASE WHEN p_batch THEN format('data[%s]: ', v_i - 1) ELSE '' END;
        v_holder := account_private.series_holder(v_by, p_event_ids[v_i], 'create');
        IF v_holder.type IS DISTINCT FROM v_type THEN
            -- The type's fields, read once for the bodies of one type (a seriesBatch's usually are).
            SELECT l.names, l.kinds, l.required INTO v_lnames, v_lkinds, v_lreq FROM series_private.type_layout(v_holder) l;
            v_type := v_holder.type;
        END IF;
        v_body := series_private.prepare_fields(v_by, v_holder, p_fields[v_off + 1 : v_off + p_field_counts[v_i]], v_where, v_i,
                                                v_lnames, v_lkinds, v_lreq);
        IF v_counts[v_i] = 0 THEN
            RAISE EXCEPTION '%"points" must hold at least one data point.', v_where USING ERRCODE = 'SASTR';
        END IF;
        IF v_body.nf > 9 THEN
            RAISE EXCEPTION '%series columns carry at most 8 value columns', v_where USING ERRCODE = 'SAINV';
        END IF;
        v_scales := '{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}';
        FOR v_p IN 1 .. 8 LOOP
            IF v_body.idx[v_p] IS NOT NULL THEN
                IF v_body.kinds[v_p] NOT IN ('number', 'integer') THEN
                    RAISE EXCEPTION '%field % is a %: send this body as flatJSON (api.series_append)', v_where,
                        v_body.fnames[v_p], v_body.kinds[v_p] USING ERRCODE = 'SASTR';
                END IF;
                v_scales[v_p] := p_scales[v_off + 1 + v_body.idx[v_p]];
                IF v_scales[v_p] IS NULL OR v_scales[v_p] NOT BETWEEN 0 AND 18 THEN
                    RAISE EXCEPTION '%the scale of field % is between 0 and 18', v_where, v_body.fnames[v_p] USING ERRCODE = 'SAINV';
                END IF;
            END IF;
        END LOOP;
        -- Carried in the body's idx: the value column (1 to 8, time column left out) of each
        -- position; in ti the place of its first point; in points the scale of each position.
        v_body.idx := ARRAY(SELECT CASE WHEN v_body.idx[p] IS NULL THEN NULL
                                        WHEN v_body.idx[p] < v_body.ti THEN v_body.idx[p] + 1 ELSE v_body.idx[p] END
                            FROM generate_series(1, 8) p ORDER BY p);
        v_body.ti := v_firsts[v_i];
        v_body.points := to_jsonb(v_scales);
        v_shared := v_shared AND (v_i = 1 OR v_body.idx IS NOT DISTINCT FROM v_map);
        v_map := v_body.idx;
        v_bodies := v_bodies || v_body;
        v_off := v_off + p_field_counts[v_i];
    END LOOP;
    IF v_nb = 0 THEN
        RETURN '{"status": "ok"}';
    END IF;
    -- The values by position of the type (series.points' columns): when every body has its fields
    -- in the same columns (one body, or a batch of one type and order), whole arrays change places.
    IF v_shared THEN
        a1 := series_private.pick(v_map[1], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a2 := series_private.pick(v_map[2], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a3 := series_private.pick(v_map[3], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a4 := series_private.pick(v_map[4], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a5 := series_private.pick(v_map[5], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a6 := series_private.pick(v_map[6], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a7 := series_private.pick(v_map[7], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
        a8 := series_private.pick(v_map[8], p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8);
    ELSE
        SELECT array_agg(series_private.pick_one(b.idx[1], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[2], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[3], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[4], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[5], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[6], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[7], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord),
               array_agg(series_private.pick_one(b.idx[8], t.v1, t.v2, t.v3, t.v4, t.v5, t.v6, t.v7, t.v8) ORDER BY t.ord)
        INTO a1, a2, a3, a4, a5, a6, a7, a8
        FROM unnest(p_body, p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8) WITH ORDINALITY AS t(bn, v1, v2, v3, v4, v5, v6, v7, v8, ord)
        JOIN unnest(v_bodies) b ON b.n = t.bn;
    END IF;
    PERFORM series_private.write_columns(v_bodies, p_body, p_time, a1, a2, a3, a4, a5, a6, a7, a8);
    PERFORM series_private.notify(v_by.user_id, p_event_ids);
    RETURN '{"status": "ok"}';
END
$$;
COMMENT ON FUNCTION api.series_append_columns(text, text[], text[], integer[], smallint[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean) IS 'Appends points given as typed columns to the series of events p_event_ids on behalf of access p_access_id, all or none: what api.series_append (one event) and api.series_append_batch (p_batch: messages name data[i]) do for bodies whose values are all numbers, without JSON. Body i (from 1) has the field names p_fields[o+1 .. o+p_field_counts[i]] (o: the counts of the bodies before it; flatJSON''s fields, a time column among them) and the decimal scale of each field at the same places in p_scales (0 to 18; the time column''s is ignored). Point j belongs to body p_body[j] (NULL: every point to body 1); p_time[j] is its time in microseconds (since the epoch for a timestamp column, after the event''s time for deltaTime); p_v1[j] .. p_v8[j] its values in the body''s columns other than time, in order, as integers: value = p_vk[j] / 10^scale (NULL: null). Points of one series at one time: the last is written, and replaces a stored one. Schedules the metadata update and publishes as api.series_append does. Returns {"status": "ok"}. Raises SAAUT, SANFD, SAFRB, SAOPR as api.series_append; SASTR (invalid-request-structure) for fields or points that break a flatJSON rule, and for a field of the type that is neither a number nor an integer (such bodies go through api.series_append); SAINV for arrays of mismatched lengths, a scale out of range or more than 8 value columns.';

-- Value column p_k (1 to 8; NULL: none) of a body.
CREATE FUNCTION series_private.pick(p_k integer, p_v1 bigint[], p_v2 bigint[], p_v3 bigint[], p_v4 bigint[],
                                    p_v5 bigint[], p_v6 bigint[], p_v7 bigint[], p_v8 bigint[])
RETURNS bigint[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_k WHEN 1 THEN p_v1 WHEN 2 THEN p_v2 WHEN 3 THEN p_v3 WHEN 4 THEN p_v4
                    WHEN 5 THEN p_v5 WHEN 6 THEN p_v6 WHEN 7 THEN p_v7 WHEN 8 THEN p_v8 END;
$$;
COMMENT ON FUNCTION series_private.pick(integer, bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'p_v<p_k>: the value column p_k of api.series_append_columns (NULL for p_k NULL or out of 1 to 8). Raises nothing.';

CREATE FUNCTION series_private.pick_one(p_k integer, p_v1 bigint, p_v2 bigint, p_v3 bigint, p_v4 bigint,
                                        p_v5 bigint, p_v6 bigint, p_v7 bigint, p_v8 bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_k WHEN 1 THEN p_v1 WHEN 2 THEN p_v2 WHEN 3 THEN p_v3 WHEN 4 THEN p_v4
                    WHEN 5 THEN p_v5 WHEN 6 THEN p_v6 WHEN 7 THEN p_v7 WHEN 8 THEN p_v8 END;
$$;
COMMENT ON FUNCTION series_private.pick_one(integer, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint) IS 'p_v<p_k>: a point''s value in column p_k (NULL for p_k NULL or out of 1 to 8). Raises nothing.';

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
            v_scale := (p_body.points ->> (v_p - 1))::smallint;
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
    SELECT CASE WHEN p_body.kinds[p_position] = 'integer' THEN 0::smallint ELSE (p_body.points ->> (p_position - 1))::smallint END;
$$;
COMMENT ON FUNCTION series_private.column_scale(series_private.body, integer) IS 'The stored scale of position p_position of a body as series_private.column_rows takes it: 0 for an integer field, the body''s scale for a number field, NULL when the body has no such field. Raises nothing.';

CREATE FUNCTION series_private.column_divisor(p_body series_private.body, p_position integer)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_body.kinds[p_position] = 'integer' THEN series_private.pow10_int((p_body.points ->> (p_position - 1))::integer) END;
$$;
COMMENT ON FUNCTION series_private.column_divisor(series_private.body, integer) IS 'For an integer field at position p_position of a body as series_private.column_rows takes it, 10^scale: its values divided by it are the integers (a remainder: not an integer); NULL for a number field or none. Raises nothing.';

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
            JOIN (SELECT u.n, u.series_id, u.te, u.abs, u.ti AS first,
                         -- Per position: the stored scale (c), the divisor of an integer field (d),
                         -- whether the field is required and in the body (r).
                         series_private.column_scale(u, 1) AS c1, series_private.column_scale(u, 2) AS c2,
                         series_private.column_scale(u, 3) AS c3, series_private.column_scale(u, 4) AS c4,
                         series_private.column_scale(u, 5) AS c5, series_private.column_scale(u, 6) AS c6,
                         series_private.column_scale(u, 7) AS c7, series_private.column_scale(u, 8) AS c8,
                         series_private.column_divisor(u, 1) AS d1, series_private.column_divisor(u, 2) AS d2,
                         series_private.column_divisor(u, 3) AS d3, series_private.column_divisor(u, 4) AS d4,
                         series_private.column_divisor(u, 5) AS d5, series_private.column_divisor(u, 6) AS d6,
                         series_private.column_divisor(u, 7) AS d7, series_private.column_divisor(u, 8) AS d8,
                         u.reqs[1] AND u.idx[1] IS NOT NULL AS r1, u.reqs[2] AND u.idx[2] IS NOT NULL AS r2,
                         u.reqs[3] AND u.idx[3] IS NOT NULL AS r3, u.reqs[4] AND u.idx[4] IS NOT NULL AS r4,
                         u.reqs[5] AND u.idx[5] IS NOT NULL AS r5, u.reqs[6] AND u.idx[6] IS NOT NULL AS r6,
                         u.reqs[7] AND u.idx[7] IS NOT NULL AS r7, u.reqs[8] AND u.idx[8] IS NOT NULL AS r8
                  FROM unnest(p_bodies) u OFFSET 0) b ON b.n = t.bn
            WHERE CASE WHEN t.tu IS NULL OR t.tu < 0 OR t.tu >= 100000000000000000 OR (b.abs AND t.tu < b.te)
                            OR (t.x1 IS NULL AND b.r1) OR t.x1 % b.d1 <> 0 OR (t.x2 IS NULL AND b.r2) OR t.x2 % b.d2 <> 0
                            OR (t.x3 IS NULL AND b.r3) OR t.x3 % b.d3 <> 0 OR (t.x4 IS NULL AND b.r4) OR t.x4 % b.d4 <> 0
                            OR (t.x5 IS NULL AND b.r5) OR t.x5 % b.d5 <> 0 OR (t.x6 IS NULL AND b.r6) OR t.x6 % b.d6 <> 0
                            OR (t.x7 IS NULL AND b.r7) OR t.x7 % b.d7 <> 0 OR (t.x8 IS NULL AND b.r8) OR t.x8 % b.d8 <> 0
                       THEN series_private.column_failure(p_bodies[b.n], t.ord - b.first + 1, t.tu, ARRAY[t.x1, t.x2, t.x3, t.x4, t.x5, t.x6, t.x7, t.x8])
                       ELSE true END
            OFFSET 0
        ) c
        ORDER BY c.series_id, c.at, c.n DESC, c.ord DESC
    ) z;
$$;
COMMENT ON FUNCTION series_private.column_rows(series_private.body[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'The rows series.points gets from bodies checked by api.series_append_columns (idx: the value column of each position; ti: the place of its first point; points: the scale of each position as a JSON array) and their points: p_body, p_time, and p_a1 .. p_a8 the values by position of the type: each value at its body''s scale (integers at scale 0); of two points of one series at one time, the later (by body, then by place). Raises SASTR (invalid-request-structure) for the first point that breaks a rule (series_private.column_failure).';

-- Writes the points of checked bodies given as columns, as series_private.store_rows stores rows
-- (08_store.sql), the rows streamed from the arrays into the insert rather than gathered first.
CREATE FUNCTION series_private.write_columns(p_bodies series_private.body[], p_body integer[], p_time bigint[],
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
    v_series bigint[];
    v_lo     timestamptz[];
    v_hi     timestamptz[];
    v_i      integer;
    v_direct boolean;
BEGIN
    IF p_body IS NULL THEN
        -- One body: its extent is that of its times.
        SELECT ARRAY[p_bodies[1].series_id], ARRAY[series_private.us_at(min(t.tu) + CASE WHEN p_bodies[1].abs THEN 0 ELSE p_bodies[1].te END)],
               ARRAY[series_private.us_at(max(t.tu) + CASE WHEN p_bodies[1].abs THEN 0 ELSE p_bodies[1].te END)]
        INTO v_series, v_lo, v_hi
        FROM unnest(p_time) t(tu);
    ELSE
        SELECT array_agg(x.series_id ORDER BY x.series_id), array_agg(series_private.us_at(x.lo) ORDER BY x.series_id),
               array_agg(series_private.us_at(x.hi) ORDER BY x.series_id)
        INTO v_series, v_lo, v_hi
        FROM (SELECT b.series_id, min(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END) AS lo, max(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END) AS hi
              FROM unnest(p_body, p_time) t(bn, tu)
              JOIN unnest(p_bodies) b ON b.n = t.bn
              GROUP BY b.series_id) x;
    END IF;
    FOR v_i IN SELECT array_position(v_series, s) FROM unnest(series_private.claim(v_series, v_lo, v_hi)) s LOOP
        PERFORM series_private.clear(v_series[v_i], v_lo[v_i], v_hi[v_i],
            ARRAY(SELECT series_private.us_at(CASE WHEN b.abs THEN t.tu ELSE b.te + t.tu END)
                  FROM unnest(coalesce(p_body, array_fill(1, ARRAY[cardinality(p_time)])), p_time) t(bn, tu)
                  JOIN unnest(p_bodies) b ON b.n = t.bn
                  WHERE b.series_id = v_series[v_i]));
    END LOOP;
    v_direct := series_private.compress_on_write(cardinality(p_time), cardinality(v_series));
    INSERT INTO series.points (series_id, at, n1, s1, n2, s2, n3, s3, n4, s4, n5, s5, n6, s6, n7, s7, n8, s8)
    SELECT * FROM series_private.column_rows(p_bodies, p_body, p_time, p_a1, p_a2, p_a3, p_a4, p_a5, p_a6, p_a7, p_a8);
    IF v_direct THEN
        PERFORM set_config('timescaledb.enable_direct_compress_insert', 'off', true);
    END IF;
    PERFORM series_private.schedule(p_bodies, v_series, v_lo, v_hi);
END
$$;
COMMENT ON FUNCTION series_private.write_columns(series_private.body[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[]) IS 'Writes the rows series_private.column_rows makes of checked bodies and their columns into series.points as series_private.store_rows does (the series'' turns taken, stored points at the same times replaced, straight into compressed batches when series_private.compress_on_write says so), and merges the metadata updates (series_private.schedule). Raises what series_private.column_rows raises.';
