-- Appending points: flatJSON ({format: "flatJSON", fields, points}) into one series, seriesBatch
-- ({format: "seriesBatch", data: [{eventId, data: flatJSON}, ...]}) into many, all or nothing.
-- The checks are Pryv's HF server's, in its order: the body's shape, the fields (a time column,
-- timestamp or deltaTime; the type's required fields; no unknown or repeated one), the rows (arrays
-- of as many cells as fields), then each cell's value by its field's kind.
--
-- Why it is shaped so: series_private.prepare checks each body as far as it can without its
-- points; then one statement (series_private.write) reads, checks and writes all the points of the
-- call, a seriesBatch's bodies together, so that a hundred small bodies cost what one large one
-- costs (a statement of this size takes about a millisecond to set up, whatever it writes). A
-- point that breaks a rule stops the statement as it is met (series_private.fail in the WHERE
-- clause), so a valid body is read once. Numbers of a field are stored at one scale per body, the
-- largest any of its numbers needs (20.1 and 20.15 as 2010 and 2015, scale 2), so a feed's digits
-- change by small steps from point to point, which is what compression encodes in few bits; a
-- number that does not fit that scale in 18 digits keeps its own. Two points of a call at one time
-- in one series: the later one is written (DISTINCT ON, last write wins, as against the stored
-- point: series_private.store_rows). Points and pending updates are written in series order, so two
-- calls that write the same series lock alike. The metadata update of each holder is merged into
-- series.pending_updates, never written to the event here (seed 001: the event is updated later,
-- off the ingest path).

CREATE TYPE series_private.body AS (
    n         integer,
    series_id bigint,
    user_id   bigint,
    event_id  text,
    author    text,
    te        bigint,
    abs       boolean,
    tname     text,
    nf        integer,
    ti        integer,
    idx       integer[],
    kinds     text[],
    reqs      boolean[],
    fnames    text[],
    prefix    text,
    points    jsonb,
    scales    smallint[]
);
COMMENT ON TYPE series_private.body IS 'A flatJSON body checked by series_private.prepare, ready for series_private.write: n (its place in the call), the holder''s series, user and event, author (the access id), te (the holder''s time in microseconds), abs (timestamp column) and tname (the time column''s name), nf (number of fields), ti (the time column''s index), by position 1 to 8 the body''s column index (idx), kind, requiredness and name of the type''s fields, prefix (of messages), and the points; for a body given as typed columns (api.series_append_columns), scales: the decimal scale of each position''s values.';

-- Checks a flatJSON body for the series of event p_event_id, as far as it can be checked without
-- reading its points, and says where each field's values are.
CREATE FUNCTION series_private.prepare(p_by account.accesses, p_event_id text, p_data jsonb, p_where text, p_n integer)
RETURNS series_private.body
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_holder account.events;
    v_body   series_private.body;
BEGIN
    v_holder := account_private.series_holder(p_by, p_event_id, 'create');
    IF p_data IS NULL OR jsonb_typeof(p_data) <> 'object' THEN
        RAISE EXCEPTION '%flatJSON structure must be an object.', p_where USING ERRCODE = 'SASTR';
    END IF;
    IF p_data -> 'format' IS DISTINCT FROM '"flatJSON"' THEN
        RAISE EXCEPTION '%"format" field must contain the string "flatJSON".', p_where USING ERRCODE = 'SASTR';
    END IF;
    IF jsonb_typeof(p_data -> 'fields') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION '%Field names must be a list.', p_where USING ERRCODE = 'SASTR';
    END IF;
    IF EXISTS (SELECT FROM jsonb_array_elements(p_data -> 'fields') f WHERE jsonb_typeof(f) <> 'string') THEN
        RAISE EXCEPTION '%Field names must be strings.', p_where USING ERRCODE = 'SASTR';
    END IF;
    IF jsonb_typeof(p_data -> 'points') IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION '%"points" field must be a list of data points.', p_where USING ERRCODE = 'SASTR';
    END IF;
    v_body := series_private.prepare_fields(p_by, v_holder, ARRAY(SELECT jsonb_array_elements_text(p_data -> 'fields')), p_where, p_n);
    IF jsonb_array_length(p_data -> 'points') = 0 THEN
        RAISE EXCEPTION '%"points" must hold at least one data point.', p_where USING ERRCODE = 'SASTR';
    END IF;
    v_body.points := p_data -> 'points';
    RETURN v_body;
END
$$;
COMMENT ON FUNCTION series_private.prepare(account.accesses, text, jsonb, text, integer) IS 'Checks flatJSON p_data for the series of event p_event_id on behalf of access p_by (create on one of its streams) up to its points: its shape, its fields (series_private.prepare_fields) and that it has points; returns it as a series_private.body (n p_n, messages prefixed by p_where) for series_private.write. Raises what account_private.series_holder raises (SANFD, SAFRB, SAOPR), what series_private.prepare_fields raises, SASTR (invalid-request-structure) for a body that breaks a flatJSON rule, with Pryv''s message.';

-- The fields of a body, whatever form its points take (flatJSON here, typed columns in
-- 07_columns.sql): a time column, the type's required fields, no unknown or repeated one.
CREATE FUNCTION series_private.prepare_fields(p_by account.accesses, p_holder account.events, p_names text[], p_where text, p_n integer,
                                             p_layout_names text[] DEFAULT NULL, p_layout_kinds text[] DEFAULT NULL,
                                             p_layout_required boolean[] DEFAULT NULL)
RETURNS series_private.body
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_idx    integer[] := '{NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL}';
    v_kind   text[];
    v_req    boolean[];
    v_fname  text[];
    v_ti     integer;
    v_tname  text;
    v_pos    integer;
    v_nf     integer := coalesce(cardinality(p_names), 0);
BEGIN
    IF p_layout_kinds IS NULL THEN
        SELECT l.names, l.kinds, l.required INTO v_fname, v_kind, v_req FROM series_private.type_layout(p_holder) l;
    ELSE
        v_fname := p_layout_names;
        v_kind := p_layout_kinds;
        v_req := p_layout_required;
    END IF;
    FOR v_i IN 1 .. v_nf LOOP
        IF p_names[v_i] IN ('deltaTime', 'timestamp') THEN
            IF v_ti IS NOT NULL THEN
                RAISE EXCEPTION '%"fields" field must contain valid field names for the series type.', p_where USING ERRCODE = 'SASTR',
                    DETAIL = format('two time columns: %s and %s', v_tname, p_names[v_i]);
            END IF;
            v_ti := v_i - 1;
            v_tname := p_names[v_i];
        ELSE
            v_pos := array_position(v_fname, p_names[v_i]);
            IF v_pos IS NULL THEN
                RAISE EXCEPTION '%"fields" field must contain valid field names for the series type.', p_where USING ERRCODE = 'SASTR',
                    DETAIL = format('%s is not a field of %s', p_names[v_i], p_holder.type),
                    HINT = format('The fields of %s are %s (and a time column, deltaTime or timestamp).', p_holder.type,
                                  array_to_string(v_fname, ', '));
            END IF;
            IF v_idx[v_pos] IS NOT NULL THEN
                RAISE EXCEPTION '%"fields" field must contain valid field names for the series type.', p_where USING ERRCODE = 'SASTR',
                    DETAIL = format('field %s is given twice', p_names[v_i]);
            END IF;
            v_idx[v_pos] := v_i - 1;
        END IF;
    END LOOP;
    IF v_ti IS NULL THEN
        RAISE EXCEPTION '%"fields" field must contain valid field names for the series type.', p_where USING ERRCODE = 'SASTR',
            DETAIL = 'a time column is required: deltaTime (seconds after the event''s time) or timestamp (seconds since the epoch)';
    END IF;
    FOR v_i IN 1 .. 8 LOOP
        IF v_req[v_i] AND v_idx[v_i] IS NULL THEN
            RAISE EXCEPTION '%"fields" field must contain valid field names for the series type.', p_where USING ERRCODE = 'SASTR',
                DETAIL = format('field %s is required by %s', v_fname[v_i], p_holder.type);
        END IF;
    END LOOP;
    RETURN ROW(p_n, p_holder.series_id, p_holder.user_id, p_holder.id, p_by.id, series_private.holder_us(p_holder.time),
               v_tname = 'timestamp', v_tname, v_nf, v_ti, v_idx, v_kind, v_req, v_fname, p_where, NULL, NULL)::series_private.body;
END
$$;
COMMENT ON FUNCTION series_private.prepare_fields(account.accesses, account.events, text[], text, integer, text[], text[], boolean[]) IS 'Checks the field names p_names of a body for series holder p_holder (account_private.series_holder) written by access p_by, against its type''s fields (p_layout_*: series_private.type_layout of the holder, given by a caller that checks many bodies of one type; NULL: read here): one time column (timestamp or deltaTime), every required field of the type, no unknown or repeated one; returns the body (n p_n, messages prefixed by p_where) without points. Raises SAOPR for a type of more than 8 fields, SASTR (invalid-request-structure) with Pryv''s message for fields that break a rule.';

-- The metadata update of each series written, merged into series.pending_updates in series order
-- (so two calls that write the same series lock alike), whatever form the points came in.
-- PL/pgSQL, so that its plan is kept from call to call (a SQL function is planned at every call).
CREATE FUNCTION series_private.schedule(p_bodies series_private.body[], p_series bigint[], p_min timestamptz[], p_max timestamptz[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now      double precision := account_private.now_s();
    v_deadline timestamptz := now() + settings_private.setting_interval('series.stale_limit', '300 seconds');
    v_idle     timestamptz := now() + settings_private.setting_interval('series.cooldown', '10 seconds');
BEGIN
    INSERT INTO series.pending_updates AS u (series_id, user_id, event_id, author, updated, data_min, data_max, deadline, flush_idle)
    SELECT x.series_id, h.user_id, h.event_id, h.author, v_now, x.data_min, x.data_max, v_deadline, v_idle
    FROM unnest(p_series, p_min, p_max) AS x(series_id, data_min, data_max)
    -- Each series' last body, in one pass over the bodies (not one per series).
    JOIN (SELECT DISTINCT ON (b.series_id) b.series_id, b.user_id, b.event_id, b.author
          FROM unnest(p_bodies) b ORDER BY b.series_id, b.n DESC) h ON h.series_id = x.series_id
    ORDER BY x.series_id
    ON CONFLICT (series_id) DO UPDATE
    SET author = excluded.author, updated = greatest(u.updated, excluded.updated),
        data_min = least(u.data_min, excluded.data_min), data_max = greatest(u.data_max, excluded.data_max),
        deadline = least(u.deadline, excluded.deadline), flush_idle = greatest(u.flush_idle, excluded.flush_idle);
END
$$;
COMMENT ON FUNCTION series_private.schedule(series_private.body[], bigint[], timestamptz[], timestamptz[]) IS 'Schedules the metadata update of each series p_series[i] written from p_min[i] to p_max[i] (series ids ascending, each once): merged into series.pending_updates (author, user and event of its last body in p_bodies; deadline series.stale_limit, flush after series.cooldown). Raises SLINV when a setting is not an interval.';

-- Reads the points of checked bodies, all in one statement, and stores them (08_store.sql): a
-- seriesBatch's bodies as one, so that a batch of many small bodies costs what one large body costs.
CREATE FUNCTION series_private.write(p_bodies series_private.body[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_struct CONSTANT text := '"points" matrix must contain correct data types according to series type';
    -- The bodies' field kinds when they all share them (one body, or a batch of series of one
    -- type): then a large call gets a plan of its own, in which the kinds are constants and the
    -- positions no body uses fold away.
    v_kinds  text[] := (SELECT min(u.kinds::text)::text[] FROM unnest(p_bodies) u HAVING count(DISTINCT u.kinds) = 1);
    v_shared boolean := v_kinds IS NOT NULL;
    v_rows   series.points[];
BEGIN
    IF v_shared AND (SELECT sum(jsonb_array_length(u.points)) FROM unnest(p_bodies) u) > 2000 THEN
        -- The function's SET restores the generic plan when it returns.
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    END IF;
    SELECT array_agg(ROW(z.*)::series.points) INTO v_rows FROM (
        SELECT DISTINCT ON (c.series_id, c.us) c.series_id, series_private.us_at(c.us),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[1] ELSE c.k1 END) = 'number' THEN series_private.scaled_n(c.x1, c.t1, c.sc1, c.m1) ELSE series_private.cell_n(c.c1, (CASE WHEN v_shared THEN v_kinds[1] ELSE c.k1 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[1] ELSE c.k1 END) = 'number' THEN series_private.scaled_s(c.x1, c.t1, c.sc1, c.m1) ELSE series_private.cell_s(c.c1, (CASE WHEN v_shared THEN v_kinds[1] ELSE c.k1 END)) END,
               series_private.cell_t(c.c1, (CASE WHEN v_shared THEN v_kinds[1] ELSE c.k1 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[2] ELSE c.k2 END) = 'number' THEN series_private.scaled_n(c.x2, c.t2, c.sc2, c.m2) ELSE series_private.cell_n(c.c2, (CASE WHEN v_shared THEN v_kinds[2] ELSE c.k2 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[2] ELSE c.k2 END) = 'number' THEN series_private.scaled_s(c.x2, c.t2, c.sc2, c.m2) ELSE series_private.cell_s(c.c2, (CASE WHEN v_shared THEN v_kinds[2] ELSE c.k2 END)) END,
               series_private.cell_t(c.c2, (CASE WHEN v_shared THEN v_kinds[2] ELSE c.k2 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[3] ELSE c.k3 END) = 'number' THEN series_private.scaled_n(c.x3, c.t3, c.sc3, c.m3) ELSE series_private.cell_n(c.c3, (CASE WHEN v_shared THEN v_kinds[3] ELSE c.k3 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[3] ELSE c.k3 END) = 'number' THEN series_private.scaled_s(c.x3, c.t3, c.sc3, c.m3) ELSE series_private.cell_s(c.c3, (CASE WHEN v_shared THEN v_kinds[3] ELSE c.k3 END)) END,
               series_private.cell_t(c.c3, (CASE WHEN v_shared THEN v_kinds[3] ELSE c.k3 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[4] ELSE c.k4 END) = 'number' THEN series_private.scaled_n(c.x4, c.t4, c.sc4, c.m4) ELSE series_private.cell_n(c.c4, (CASE WHEN v_shared THEN v_kinds[4] ELSE c.k4 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[4] ELSE c.k4 END) = 'number' THEN series_private.scaled_s(c.x4, c.t4, c.sc4, c.m4) ELSE series_private.cell_s(c.c4, (CASE WHEN v_shared THEN v_kinds[4] ELSE c.k4 END)) END,
               series_private.cell_t(c.c4, (CASE WHEN v_shared THEN v_kinds[4] ELSE c.k4 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[5] ELSE c.k5 END) = 'number' THEN series_private.scaled_n(c.x5, c.t5, c.sc5, c.m5) ELSE series_private.cell_n(c.c5, (CASE WHEN v_shared THEN v_kinds[5] ELSE c.k5 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[5] ELSE c.k5 END) = 'number' THEN series_private.scaled_s(c.x5, c.t5, c.sc5, c.m5) ELSE series_private.cell_s(c.c5, (CASE WHEN v_shared THEN v_kinds[5] ELSE c.k5 END)) END,
               series_private.cell_t(c.c5, (CASE WHEN v_shared THEN v_kinds[5] ELSE c.k5 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[6] ELSE c.k6 END) = 'number' THEN series_private.scaled_n(c.x6, c.t6, c.sc6, c.m6) ELSE series_private.cell_n(c.c6, (CASE WHEN v_shared THEN v_kinds[6] ELSE c.k6 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[6] ELSE c.k6 END) = 'number' THEN series_private.scaled_s(c.x6, c.t6, c.sc6, c.m6) ELSE series_private.cell_s(c.c6, (CASE WHEN v_shared THEN v_kinds[6] ELSE c.k6 END)) END,
               series_private.cell_t(c.c6, (CASE WHEN v_shared THEN v_kinds[6] ELSE c.k6 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[7] ELSE c.k7 END) = 'number' THEN series_private.scaled_n(c.x7, c.t7, c.sc7, c.m7) ELSE series_private.cell_n(c.c7, (CASE WHEN v_shared THEN v_kinds[7] ELSE c.k7 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[7] ELSE c.k7 END) = 'number' THEN series_private.scaled_s(c.x7, c.t7, c.sc7, c.m7) ELSE series_private.cell_s(c.c7, (CASE WHEN v_shared THEN v_kinds[7] ELSE c.k7 END)) END,
               series_private.cell_t(c.c7, (CASE WHEN v_shared THEN v_kinds[7] ELSE c.k7 END)),
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[8] ELSE c.k8 END) = 'number' THEN series_private.scaled_n(c.x8, c.t8, c.sc8, c.m8) ELSE series_private.cell_n(c.c8, (CASE WHEN v_shared THEN v_kinds[8] ELSE c.k8 END)) END,
               CASE WHEN (CASE WHEN v_shared THEN v_kinds[8] ELSE c.k8 END) = 'number' THEN series_private.scaled_s(c.x8, c.t8, c.sc8, c.m8) ELSE series_private.cell_s(c.c8, (CASE WHEN v_shared THEN v_kinds[8] ELSE c.k8 END)) END,
               series_private.cell_t(c.c8, (CASE WHEN v_shared THEN v_kinds[8] ELSE c.k8 END))
        FROM (
            SELECT w.*, max(w.sc1) OVER (PARTITION BY w.n) AS m1, max(w.sc2) OVER (PARTITION BY w.n) AS m2, max(w.sc3) OVER (PARTITION BY w.n) AS m3, max(w.sc4) OVER (PARTITION BY w.n) AS m4, max(w.sc5) OVER (PARTITION BY w.n) AS m5, max(w.sc6) OVER (PARTITION BY w.n) AS m6, max(w.sc7) OVER (PARTITION BY w.n) AS m7, max(w.sc8) OVER (PARTITION BY w.n) AS m8
            FROM (
                SELECT y.*, series_private.plain_scale(y.t1) AS sc1, series_private.plain_scale(y.t2) AS sc2, series_private.plain_scale(y.t3) AS sc3, series_private.plain_scale(y.t4) AS sc4, series_private.plain_scale(y.t5) AS sc5, series_private.plain_scale(y.t6) AS sc6, series_private.plain_scale(y.t7) AS sc7, series_private.plain_scale(y.t8) AS sc8
                FROM (
                    SELECT x.*, trim_scale(x.x1) AS t1, trim_scale(x.x2) AS t2, trim_scale(x.x3) AS t3, trim_scale(x.x4) AS t4, trim_scale(x.x5) AS t5, trim_scale(x.x6) AS t6, trim_scale(x.x7) AS t7, trim_scale(x.x8) AS t8,
                           CASE WHEN x.tn IS NULL OR x.tn < 0 OR x.tn >= 100000000000 THEN NULL
                                WHEN x.abs THEN round(x.tn * 1000000)::bigint
                                ELSE x.te + round(x.tn * 1000000)::bigint END AS us,
                           CASE WHEN x.bad IS NOT NULL THEN x.bad
                                WHEN x.tn IS NULL THEN format('%s must be a number of seconds, not %s', x.tname, left(x.tc::text, 40))
                                WHEN x.tn < 0 OR x.tn >= 100000000000 OR (x.abs AND round(x.tn * 1000000) < x.te)
                                    THEN format('%s %s is out of range: a point may not come before its event''s time', x.tname, left(x.tc::text, 40))
                                ELSE coalesce(
                                                  series_private.cell_problem(x.c1, x.x1, (CASE WHEN v_shared THEN v_kinds[1] ELSE x.k1 END), x.reqs[1], x.fnames[1]),
                                                  series_private.cell_problem(x.c2, x.x2, (CASE WHEN v_shared THEN v_kinds[2] ELSE x.k2 END), x.reqs[2], x.fnames[2]),
                                                  series_private.cell_problem(x.c3, x.x3, (CASE WHEN v_shared THEN v_kinds[3] ELSE x.k3 END), x.reqs[3], x.fnames[3]),
                                                  series_private.cell_problem(x.c4, x.x4, (CASE WHEN v_shared THEN v_kinds[4] ELSE x.k4 END), x.reqs[4], x.fnames[4]),
                                                  series_private.cell_problem(x.c5, x.x5, (CASE WHEN v_shared THEN v_kinds[5] ELSE x.k5 END), x.reqs[5], x.fnames[5]),
                                                  series_private.cell_problem(x.c6, x.x6, (CASE WHEN v_shared THEN v_kinds[6] ELSE x.k6 END), x.reqs[6], x.fnames[6]),
                                                  series_private.cell_problem(x.c7, x.x7, (CASE WHEN v_shared THEN v_kinds[7] ELSE x.k7 END), x.reqs[7], x.fnames[7]),
                                                  series_private.cell_problem(x.c8, x.x8, (CASE WHEN v_shared THEN v_kinds[8] ELSE x.k8 END), x.reqs[8], x.fnames[8]))
                           END AS problem
                    FROM (
                        SELECT e.*, series_private.cell_number(e.tc) AS tn,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[1] ELSE e.k1 END) IN ('number', 'integer') THEN series_private.cell_number(e.c1) END AS x1,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[2] ELSE e.k2 END) IN ('number', 'integer') THEN series_private.cell_number(e.c2) END AS x2,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[3] ELSE e.k3 END) IN ('number', 'integer') THEN series_private.cell_number(e.c3) END AS x3,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[4] ELSE e.k4 END) IN ('number', 'integer') THEN series_private.cell_number(e.c4) END AS x4,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[5] ELSE e.k5 END) IN ('number', 'integer') THEN series_private.cell_number(e.c5) END AS x5,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[6] ELSE e.k6 END) IN ('number', 'integer') THEN series_private.cell_number(e.c6) END AS x6,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[7] ELSE e.k7 END) IN ('number', 'integer') THEN series_private.cell_number(e.c7) END AS x7,
                               CASE WHEN (CASE WHEN v_shared THEN v_kinds[8] ELSE e.k8 END) IN ('number', 'integer') THEN series_private.cell_number(e.c8) END AS x8
                        FROM (
                            SELECT b.n, b.series_id, b.te, b.abs, b.tname, b.reqs, b.fnames, b.prefix, r.ord,
                                   b.k1, b.k2, b.k3, b.k4, b.k5, b.k6, b.k7, b.k8,
                                   r.row -> b.ti AS tc,
                                   r.row -> b.i1 AS c1,
                                   r.row -> b.i2 AS c2,
                                   r.row -> b.i3 AS c3,
                                   r.row -> b.i4 AS c4,
                                   r.row -> b.i5 AS c5,
                                   r.row -> b.i6 AS c6,
                                   r.row -> b.i7 AS c7,
                                   r.row -> b.i8 AS c8,
                                   CASE WHEN jsonb_typeof(r.row) <> 'array' THEN format('a point must be an array, not %s', jsonb_typeof(r.row))
                                        WHEN jsonb_array_length(r.row) <> b.nf
                                            THEN format('a point must have %s values (one per field), not %s', b.nf, jsonb_array_length(r.row))
                                   END AS bad
                            -- Each body's kinds and column indexes as plain columns, read once per body
                            -- rather than subscripted at every use in every point.
                            FROM (SELECT u.*, u.kinds[1] AS k1, u.kinds[2] AS k2, u.kinds[3] AS k3, u.kinds[4] AS k4,
                                         u.kinds[5] AS k5, u.kinds[6] AS k6, u.kinds[7] AS k7, u.kinds[8] AS k8,
                                         u.idx[1] AS i1, u.idx[2] AS i2, u.idx[3] AS i3, u.idx[4] AS i4,
                                         u.idx[5] AS i5, u.idx[6] AS i6, u.idx[7] AS i7, u.idx[8] AS i8
                                  FROM unnest(p_bodies) AS u OFFSET 0) AS b
                            CROSS JOIN LATERAL jsonb_array_elements(b.points) WITH ORDINALITY AS r(row, ord)
                            OFFSET 0
                        ) e
                        OFFSET 0
                    ) x
                    OFFSET 0
                ) y
                WHERE CASE WHEN y.problem IS NULL THEN true
                           ELSE series_private.fail(format('%s%s: point %s: %s', y.prefix, v_struct, y.ord, y.problem)) END
                OFFSET 0
            ) w
        ) c
        ORDER BY c.series_id, c.us, c.n DESC, c.ord DESC
    ) z;
    PERFORM series_private.store_rows(p_bodies, v_rows);
    RETURN 1;
END
$$;
COMMENT ON FUNCTION series_private.write(series_private.body[]) IS 'Writes the points of the checked bodies p_bodies (series_private.prepare), all or none: read in one statement, stored by series_private.store_rows; each cell typed by its field''s kind, numbers at one scale per body and field, times to the microsecond; a point at the time of a stored one replaces it, and of two points of the call at one time in one series the later (by body, then by place) is written. Merges each series'' metadata update (author: the access id of its last body) into series.pending_updates (series_private.schedule). Returns 1 (the metadata updates are merged in one call). Raises SASTR (invalid-request-structure) for the first point that breaks a rule, with Pryv''s message and the body''s prefix.';

-- One notification per call and user, thrown at most once per series.notify_interval; later ones
-- wait in series.notify_throttle for api.series_metadata_flush, or for the next call after the
-- interval, which throws them with its own. The user's throttle row is locked first, so that calls
-- of many processes take turns on it.
CREATE FUNCTION series_private.notify(p_user_id bigint, p_event_ids text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_interval  interval := settings_private.setting_interval('series.notify_interval', '200 milliseconds');
    v_published timestamptz;
    v_pending   text[];
BEGIN
    SELECT t.published, t.pending INTO v_published, v_pending FROM series.notify_throttle t WHERE t.user_id = p_user_id FOR UPDATE;
    IF v_published IS NULL THEN
        INSERT INTO series.notify_throttle AS t (user_id, published, pending) VALUES (p_user_id, now(), '{}')
        ON CONFLICT (user_id) DO NOTHING;
        IF FOUND THEN
            PERFORM account_private.publish(p_user_id, 'events', 'series',
                jsonb_build_object('ids', (SELECT jsonb_agg(DISTINCT i ORDER BY i) FROM unnest(p_event_ids) i)));
            RETURN;
        END IF;
        -- A call of another process made the row meanwhile: take turns on it.
        SELECT t.published, t.pending INTO v_published, v_pending FROM series.notify_throttle t WHERE t.user_id = p_user_id FOR UPDATE;
    END IF;
    v_pending := ARRAY(SELECT DISTINCT i FROM unnest(v_pending || p_event_ids) i ORDER BY i);
    IF v_published > now() - v_interval THEN
        UPDATE series.notify_throttle t SET pending = v_pending WHERE t.user_id = p_user_id;
    ELSE
        UPDATE series.notify_throttle t SET published = now(), pending = '{}' WHERE t.user_id = p_user_id;
        PERFORM account_private.publish(p_user_id, 'events', 'series', jsonb_build_object('ids', to_jsonb(v_pending)));
    END IF;
END
$$;
COMMENT ON FUNCTION series_private.notify(bigint, text[]) IS 'Notifies the user p_user_id that the series of events p_event_ids changed: publishes kind series, payload {"ids": [...]}, on channel account:<username>:events (readers {account:<username>}) with the ids held back before, when the user''s last series notification is older than series.notify_interval (default 200 ms); otherwise records the ids in series.notify_throttle, for api.series_metadata_flush (or the next call after the interval) to publish once the interval has passed. Raises SLINV when the setting is not an interval.';

-- One request: {"access": id, "event": id, "data": flatJSON} or {"access": id, "batch": seriesBatch}.
CREATE FUNCTION series_private.apply(p_request jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by    account.accesses := account_private.access(p_request ->> 'access');
    v_batch jsonb := p_request -> 'batch';
    v_op    record;
    v_ids   text[] := '{}';
    v_bodies series_private.body[] := '{}';
BEGIN
    IF p_request ? 'event' THEN
        v_bodies := ARRAY[series_private.prepare(v_by, p_request ->> 'event', p_request -> 'data', '', 1)];
        v_ids := ARRAY[p_request ->> 'event'];
    ELSE
        IF v_batch IS NULL OR jsonb_typeof(v_batch) <> 'object' THEN
            RAISE EXCEPTION 'seriesBatch structure must be an object.' USING ERRCODE = 'SASTR';
        END IF;
        IF v_batch -> 'format' IS DISTINCT FROM '"seriesBatch"' THEN
            RAISE EXCEPTION '"format" field must contain the string "seriesBatch".' USING ERRCODE = 'SASTR';
        END IF;
        IF jsonb_typeof(v_batch -> 'data') IS DISTINCT FROM 'array' THEN
            RAISE EXCEPTION '"data" field must be a list of series store operations.' USING ERRCODE = 'SASTR';
        END IF;
        FOR v_op IN SELECT e.op, e.n FROM jsonb_array_elements(v_batch -> 'data') WITH ORDINALITY AS e(op, n) LOOP
            IF jsonb_typeof(v_op.op) <> 'object' OR jsonb_typeof(v_op.op -> 'eventId') IS DISTINCT FROM 'string' THEN
                RAISE EXCEPTION 'data[%]: a series store operation must be an object {"eventId": string, "data": flatJSON}.', v_op.n - 1
                    USING ERRCODE = 'SASTR';
            END IF;
            v_bodies := v_bodies || series_private.prepare(v_by, v_op.op ->> 'eventId', v_op.op -> 'data',
                                                           series_private.batch_prefix(v_op.n::integer), v_op.n::integer);
            v_ids := v_ids || (v_op.op ->> 'eventId');
        END LOOP;
    END IF;
    IF cardinality(v_bodies) > 0 THEN
        PERFORM series_private.write(v_bodies);
    END IF;
    IF cardinality(v_ids) > 0 THEN
        PERFORM series_private.notify(v_by.user_id, v_ids);
    END IF;
    RETURN '{"status": "ok"}';
END
$$;
COMMENT ON FUNCTION series_private.apply(jsonb) IS 'Applies one series write request p_request: {"access": access id, "event": event id, "data": flatJSON} appends to one series; {"access": access id, "batch": seriesBatch} to every series of the batch, all or nothing. Notifies the user once (series_private.notify). Returns {"status": "ok"}. Raises SAAUT (unknown access), SASTR for a malformed batch, and what series_private.prepare and series_private.write raise.';

CREATE FUNCTION api.series_append(p_access_id text, p_event_id text, p_data jsonb)
RETURNS jsonb
LANGUAGE sql VOLATILE
AS $$
    SELECT series_private.apply(jsonb_build_object('access', p_access_id, 'event', p_event_id, 'data', p_data));
$$;
COMMENT ON FUNCTION api.series_append(text, text, jsonb) IS 'Appends points to the series of event p_event_id on behalf of access p_access_id (create on one of the event''s streams: contribute, manage or create-only), all or none. p_data: flatJSON {"format": "flatJSON", "fields": [...], "points": [[...], ...]}: fields name a time column, timestamp (seconds since the epoch) or deltaTime (seconds after the event''s time), and fields of the event''s type (every required one, none twice); each point is an array of one value per field, typed by the field (numbers as JSON numbers or strings of numbers, booleans, strings), null only in optional fields, never before the event''s time. A point at the time of a stored one replaces it (the later one in p_data too). Stored to the microsecond; numbers exactly as given (up to 18 significant digits, else as the nearest double). Schedules the holder''s metadata update (duration, modified, modifiedBy: api.series_metadata_flush). Publishes kind series, payload {"ids": [event id]}, on channel account:<username>:events (readers {account:<username>}), at most once per series.notify_interval per user. Returns {"status": "ok"}. Raises SAAUT when the access is unknown or deleted; SANFD when there is no such event; SAFRB without the right; SAOPR when the event is not a series event or is trashed; SASTR (invalid-request-structure) for a body that breaks a rule, with Pryv''s message.';

CREATE FUNCTION api.series_append_batch(p_access_id text, p_batch jsonb)
RETURNS jsonb
LANGUAGE sql VOLATILE
AS $$
    SELECT series_private.apply(jsonb_build_object('access', p_access_id, 'batch', p_batch));
$$;
COMMENT ON FUNCTION api.series_append_batch(text, jsonb) IS 'Appends points to many series at once, all or nothing, on behalf of access p_access_id. p_batch: seriesBatch {"format": "seriesBatch", "data": [{"eventId": ..., "data": flatJSON}, ...]}, each operation as api.series_append takes it (an empty data list does nothing). Publishes one notification for the batch (kind series, payload {"ids": [...]}, as api.series_append). Returns {"status": "ok"}. Raises SAAUT when the access is unknown or deleted; SASTR (invalid-request-structure) for a malformed batch or flatJSON body, the operation named (data[i]); SANFD, SAFRB, SAOPR as api.series_append for the first operation that meets them.';
