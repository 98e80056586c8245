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
-- The bodies' points come one body after the other, each body's count given: a body number per
-- point would be a third of the arrays PostgreSQL decodes from the wire (0.3 ms a 10,000-point
-- call) and would need checking, point by point, that the bodies come in order.

-- Body p_n of a call, alike p_first (a body of the same type and fields, checked): its own holder
-- p_holder, first point p_ti, message prefix p_prefix and scales p_scales.
CREATE FUNCTION series_private.body_like(p_first series_private.body, p_n integer, p_holder account.events, p_ti integer,
                                         p_prefix text, p_scales smallint[])
RETURNS series_private.body
LANGUAGE sql STABLE
AS $$
    SELECT ROW(p_n, p_holder.series_id, p_holder.user_id, p_holder.id, p_first.author, series_private.holder_us(p_holder.time),
               p_first.abs, p_first.tname, p_first.nf, p_ti, p_first.idx, p_first.kinds, p_first.reqs, p_first.fnames, p_prefix,
               NULL, p_scales)::series_private.body;
$$;
COMMENT ON FUNCTION series_private.body_like(series_private.body, integer, account.events, integer, text, smallint[]) IS 'Body p_n of a call of api.series_append_columns whose type and fields are those of the checked body p_first: p_first''s field layout, with its own holder p_holder (series, user, event, time), the place of its first point p_ti, message prefix p_prefix and scales p_scales. Raises nothing.';

CREATE FUNCTION api.series_append_columns(p_access_id text, p_event_ids text[], p_fields text[], p_field_counts integer[],
                                          p_scales smallint[], p_points integer[], p_time bigint[],
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
    v_holders account.events[] := account_private.series_holders(v_by, p_event_ids, 'create');
    v_holder account.events;
    v_type   text;
    v_lnames text[];
    v_lkinds text[];
    v_lreq   boolean[];
    v_names  text[];
    v_pnames text[];
    v_fidx   integer[];
    v_same   boolean;
    v_alike  boolean;
    v_others series_private.body[];
    v_body_of   integer[];
    v_prev      bigint[];
    v_ascending boolean := false;
    a1 bigint[]; a2 bigint[]; a3 bigint[]; a4 bigint[]; a5 bigint[]; a6 bigint[]; a7 bigint[]; a8 bigint[];
BEGIN
    IF coalesce(cardinality(p_field_counts), 0) <> v_nb OR coalesce(cardinality(p_fields), 0) <> coalesce(cardinality(p_scales), 0)
       OR (SELECT coalesce(sum(c), 0) FROM unnest(p_field_counts) c) <> coalesce(cardinality(p_fields), 0)
       OR (p_points IS NOT NULL AND (cardinality(p_points) <> v_nb OR array_position(p_points, NULL) IS NOT NULL
                                     OR (SELECT coalesce(sum(c), 0) FROM unnest(p_points) c) <> v_np
                                     OR EXISTS (SELECT FROM unnest(p_points) c WHERE c < 0))) THEN
        RAISE EXCEPTION 'series columns: one field count and one point count per event (the points in all), one scale per field'
            USING ERRCODE = 'SAINV';
    END IF;
    IF (p_v1 IS NOT NULL AND cardinality(p_v1) <> v_np) OR (p_v2 IS NOT NULL AND cardinality(p_v2) <> v_np)
       OR (p_v3 IS NOT NULL AND cardinality(p_v3) <> v_np) OR (p_v4 IS NOT NULL AND cardinality(p_v4) <> v_np)
       OR (p_v5 IS NOT NULL AND cardinality(p_v5) <> v_np) OR (p_v6 IS NOT NULL AND cardinality(p_v6) <> v_np)
       OR (p_v7 IS NOT NULL AND cardinality(p_v7) <> v_np) OR (p_v8 IS NOT NULL AND cardinality(p_v8) <> v_np) THEN
        RAISE EXCEPTION 'series columns: every value column has one value per point' USING ERRCODE = 'SAINV';
    END IF;
    -- Points per body (p_points NULL: every point is of body 1), where each starts, and whether the
    -- call is in order: each body's times ascending (what the Go shell sends for a feed). One pass
    -- over the times tells, each point compared with the one before it in its body (v_prev: the
    -- times one place later, the least bigint at each body's start).
    v_counts := coalesce(p_points, array_fill(0, ARRAY[v_nb]));
    IF p_points IS NULL AND v_nb > 0 THEN
        v_counts[1] := v_np;
    END IF;
    v_firsts := ARRAY(SELECT 1 + coalesce(sum(c.n) OVER (ORDER BY c.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                      FROM unnest(v_counts) WITH ORDINALITY c(n, i) ORDER BY c.i);
    IF v_np > 0 AND array_position(p_time, NULL) IS NULL THEN
        v_prev := (-9223372036854775808)::bigint || p_time[1 : v_np - 1];
        FOR v_i IN 2 .. v_nb LOOP
            IF v_counts[v_i] > 0 THEN
                v_prev[v_firsts[v_i]] := -9223372036854775808;
            END IF;
        END LOOP;
        SELECT bool_and(s.tp < s.tu) INTO v_ascending FROM (SELECT unnest(v_prev) AS tp, unnest(p_time) AS tu) s;
    END IF;
    -- The body of each point, which the insert looks its series, time base and scales up by: each
    -- body's run appended (cheap for the usual batch of up to a few hundred bodies), or, for more,
    -- generated in one statement (the appends copy what is built so far, each time).
    IF v_nb > 1 THEN
        IF v_nb <= 200 THEN
            v_body_of := '{}';
            FOR v_i IN 1 .. v_nb LOOP
                v_body_of := v_body_of || array_fill(v_i, ARRAY[v_counts[v_i]]);
            END LOOP;
        ELSE
            v_body_of := ARRAY(SELECT g.i FROM generate_series(1, v_nb) g(i) CROSS JOIN LATERAL generate_series(1, v_counts[g.i]) ORDER BY g.i);
        END IF;
    END IF;
    -- Whether the bodies are alike: every event a series holder of the first's type, every body
    -- with points and the first body's fields.
    v_alike := v_nb > 1 AND 0 < ALL (v_counts) AND p_field_counts = array_fill(p_field_counts[1], ARRAY[v_nb])
               AND (SELECT bool_and(h.id IS NOT NULL AND h.type = (v_holders[1]).type) FROM unnest(v_holders) h)
               AND NOT EXISTS (SELECT FROM unnest(p_fields) WITH ORDINALITY f(name, o)
                               WHERE f.name IS DISTINCT FROM p_fields[(f.o - 1) % nullif(p_field_counts[1], 0) + 1]);
    FOR v_i IN 1 .. v_nb LOOP
        v_where := CASE WHEN p_batch THEN series_private.batch_prefix(v_i) ELSE '' END;
        v_holder := v_holders[v_i];
        IF v_holder.id IS NULL THEN
            v_holder := account_private.series_holder(v_by, p_event_ids[v_i], 'create');  -- raises its error
        END IF;
        v_names := p_fields[v_off + 1 : v_off + p_field_counts[v_i]];
        -- A body with the type and fields of the body before (a seriesBatch's usually has): the
        -- checks of its fields hold, only its holder and its scales are its own.
        v_same := v_holder.type IS NOT DISTINCT FROM v_type AND v_names IS NOT DISTINCT FROM v_pnames AND v_counts[v_i] > 0;
        IF v_same THEN
            v_scales := series_private.body_scales(p_scales, v_off, v_fidx);
            v_same := v_scales IS NOT NULL;
        END IF;
        IF v_same THEN
            v_body := series_private.body_like(v_body, v_i, v_holder, v_firsts[v_i], v_where, v_scales);
        ELSE
            IF v_holder.type IS DISTINCT FROM v_type THEN
                -- The type's fields, read once for the bodies of one type (a seriesBatch's usually are).
                SELECT l.names, l.kinds, l.required INTO v_lnames, v_lkinds, v_lreq FROM series_private.type_layout(v_holder) l;
                v_type := v_holder.type;
            END IF;
            v_body := series_private.prepare_fields(v_by, v_holder, v_names, v_where, v_i,
                                                    v_lnames, v_lkinds, v_lreq);
            v_fidx := v_body.idx;
            v_pnames := v_names;
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
            -- position; in ti the place of its first point; in scales the scale of each position.
            v_body.idx := ARRAY(SELECT CASE WHEN v_body.idx[p] IS NULL THEN NULL
                                            WHEN v_body.idx[p] < v_body.ti THEN v_body.idx[p] + 1 ELSE v_body.idx[p] END
                                FROM generate_series(1, 8) p ORDER BY p);
            v_body.ti := v_firsts[v_i];
            v_body.scales := v_scales;
        END IF;
        v_shared := v_shared AND (v_i = 1 OR v_body.idx IS NOT DISTINCT FROM v_map);
        v_map := v_body.idx;
        v_bodies := v_bodies || v_body;
        v_off := v_off + p_field_counts[v_i];
        IF v_i = 1 AND v_alike THEN
            -- The other bodies of a batch of one type whose bodies name the same fields (the usual
            -- seriesBatch): each as the first branch above takes it, in one statement.
            SELECT array_agg(series_private.body_like(v_body, g.i, g.holder, v_firsts[g.i],
                                                      CASE WHEN p_batch THEN series_private.batch_prefix(g.i) ELSE '' END, g.scales)
                             ORDER BY g.i),
                   bool_and(g.scales IS NOT NULL)
            INTO v_others, v_same
            FROM (SELECT i, v_holders[i] AS holder, series_private.body_scales(p_scales, (i - 1) * p_field_counts[1], v_fidx) AS scales
                  FROM generate_series(2, v_nb) i OFFSET 0) g;  -- OFFSET 0: each holder taken out of the array once
            IF v_same THEN
                v_bodies := v_bodies || v_others;
                EXIT;
            END IF;
        END IF;
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
        FROM unnest(v_body_of, p_v1, p_v2, p_v3, p_v4, p_v5, p_v6, p_v7, p_v8) WITH ORDINALITY AS t(bn, v1, v2, v3, v4, v5, v6, v7, v8, ord)
        JOIN unnest(v_bodies) b ON b.n = t.bn;
    END IF;
    PERFORM series_private.write_columns(v_bodies, v_body_of, p_time, coalesce(v_ascending, false), a1, a2, a3, a4, a5, a6, a7, a8);
    PERFORM series_private.notify(v_by.user_id, p_event_ids);
    RETURN '{"status": "ok"}';
END
$$;
COMMENT ON FUNCTION api.series_append_columns(text, text[], text[], integer[], smallint[], integer[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], boolean) IS 'Appends points given as typed columns to the series of events p_event_ids on behalf of access p_access_id, all or none: what api.series_append (one event) and api.series_append_batch (p_batch: messages name data[i]) do for bodies whose values are all numbers, without JSON. Body i (from 1) has the field names p_fields[o+1 .. o+p_field_counts[i]] (o: the counts of the bodies before it; flatJSON''s fields, a time column among them) and the decimal scale of each field at the same places in p_scales (0 to 18; the time column''s is ignored). p_points[i] is the number of points of body i, the points of each body together and the bodies in order (body 1''s points first; NULL: every point is of body 1); p_time[j] is point j''s time in microseconds (since the epoch for a timestamp column, after the event''s time for deltaTime); p_v1[j] .. p_v8[j] its values in the body''s columns other than time, in order, as integers: value = p_vk[j] / 10^scale (NULL: null). Points of one series at one time: the last is written, and replaces a stored one. Schedules the metadata update and publishes as api.series_append does. Returns {"status": "ok"}. Raises SAAUT, SANFD, SAFRB, SAOPR as api.series_append; SASTR (invalid-request-structure) for fields or points that break a flatJSON rule, and for a field of the type that is neither a number nor an integer (such bodies go through api.series_append); SAINV for arrays of mismatched lengths, point counts that are negative or do not add up to the points, a scale out of range or more than 8 value columns.';

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

-- The scales of a body's fields by position, from api.series_append_columns' p_scales.
CREATE FUNCTION series_private.body_scales(p_scales smallint[], p_off integer, p_idx integer[])
RETURNS smallint[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN (p_idx[1] IS NULL OR p_scales[p_off + 1 + p_idx[1]] BETWEEN 0 AND 18)
                     AND (p_idx[2] IS NULL OR p_scales[p_off + 1 + p_idx[2]] BETWEEN 0 AND 18)
                     AND (p_idx[3] IS NULL OR p_scales[p_off + 1 + p_idx[3]] BETWEEN 0 AND 18)
                     AND (p_idx[4] IS NULL OR p_scales[p_off + 1 + p_idx[4]] BETWEEN 0 AND 18)
                     AND (p_idx[5] IS NULL OR p_scales[p_off + 1 + p_idx[5]] BETWEEN 0 AND 18)
                     AND (p_idx[6] IS NULL OR p_scales[p_off + 1 + p_idx[6]] BETWEEN 0 AND 18)
                     AND (p_idx[7] IS NULL OR p_scales[p_off + 1 + p_idx[7]] BETWEEN 0 AND 18)
                     AND (p_idx[8] IS NULL OR p_scales[p_off + 1 + p_idx[8]] BETWEEN 0 AND 18)
                THEN ARRAY[p_scales[p_off + 1 + p_idx[1]], p_scales[p_off + 1 + p_idx[2]], p_scales[p_off + 1 + p_idx[3]],
                           p_scales[p_off + 1 + p_idx[4]], p_scales[p_off + 1 + p_idx[5]], p_scales[p_off + 1 + p_idx[6]],
                           p_scales[p_off + 1 + p_idx[7]], p_scales[p_off + 1 + p_idx[8]]] END;
$$;
COMMENT ON FUNCTION series_private.body_scales(smallint[], integer, integer[]) IS 'The scales of a body''s fields by position 1 to 8 (NULL where the body has no such field): p_scales[p_off + 1 + p_idx[p]], p_idx[p] being the column (from 0, the time column counted) of position p in a body whose fields start after p_off in api.series_append_columns'' p_fields and p_scales. NULL when a field''s scale is not between 0 and 18. Raises nothing.';
