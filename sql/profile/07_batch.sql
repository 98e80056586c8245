-- Profile store, batches: the public entry points (api.profile_apply_batch, api.profile_apply) and
-- the core that validates a batch (sql/profile/04_validate.sql) and applies it in rounds of updates
-- of distinct grains (the direct and the general statement, 05_direct.sql and 06_general.sql). An
-- unexpected error redoes the batch one update per subtransaction, so it costs only the update
-- that raised it.

-- Updates of distinct grains do not affect each other, so applying a round set-based gives what
-- applying its updates one by one gives.
CREATE FUNCTION profile_private.apply_round(p_round profile_private.validated_update[], p_ok boolean,
                                            p_direct integer DEFAULT NULL, p_history boolean DEFAULT NULL)
RETURNS profile_private.apply_result[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_res     profile_private.apply_result[];
    v_sent    bigint;
    v_history boolean;
BEGIN
    IF p_direct IS NOT NULL AND p_history IS NOT NULL THEN
        v_sent := p_direct;
        v_history := p_history;
    ELSE
        SELECT count(*) FILTER (WHERE profile_private.op_direct(u.operation)),
               coalesce(bool_or(profile_private.op_archives(u.operation)), false)
        INTO v_sent, v_history
        FROM unnest(p_round) AS u;
    END IF;
    IF v_sent > 0 THEN
        v_res := profile_private.apply_direct(p_round, p_ok, v_sent, v_history);
    END IF;
    IF v_sent = cardinality(p_round) THEN
        RETURN v_res;
    END IF;
    RETURN coalesce(v_res, '{}') || profile_private.apply_general(p_round, p_ok);
END
$$;
COMMENT ON FUNCTION profile_private.apply_round(profile_private.validated_update[], boolean, integer, boolean) IS
    'Internal: applies one round, validated profile updates of distinct grains whose targets are resolved: the direct operations by profile_private.apply_direct, the others by profile_private.apply_general. p_direct and p_history: the number of direct updates and whether one archives, when the caller knows them (else counted here). Returns the results, or with p_ok false only those that are not ok; expected rejections (SPTYP, SPLNK) come back as dead_letter results without a dead letter id.';

-- profile_private.apply_core: internal. Validates and applies a JSON array of update messages in
-- order, without any exception handling (api.profile_apply_batch guards it). Numbers the results
-- from p_ord_offset + 1. Records dead letters when p_record (replays do not).
--
-- Shape: a short query validates the plain updates (the usual shapes, see below) and a full one,
-- which applies every rule, the others; both make the same rows (they share the helpers
-- profile_private.op_class, profile_private.grain_type, profile_private.certainty, profile_private.certainty_value,
-- profile_private.counter and profile_private.path_is_plain).
-- The usual batch (no update changes profile links, no grain comes twice) is one round: profile_private.apply_round applies all its valid updates
-- set-based. Otherwise a second query splits the batch into segments (an update that changes
-- profile links is a segment of its own, so every other segment sees fixed link targets) and
-- rounds (the n-th update of each grain within a segment), and segment by segment, round by
-- round, profile_private.apply_round applies the updates of a round. Updates of distinct grains do
-- not affect each other and the updates of one grain run in batch order, so the result is what
-- applying the updates one by one gives.
-- Raises: nothing of its own; an unexpected error propagates (api.profile_apply_batch handles it).
CREATE FUNCTION profile_private.apply_core(p_updates jsonb, p_ord_offset integer, p_record boolean)
RETURNS SETOF profile_private.apply_result
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now       bigint := floor(extract(epoch FROM now()) * 1000)::bigint;
    v_updates   profile_private.validated_update[];
    v_rows      profile_private.validated_update[];
    v_links     boolean;
    v_twice     boolean;
    v_direct    integer;
    v_history   boolean;
    v_max_seg   integer := 0;
    v_max_round integer := 1;
    v_all_valid boolean;
    v_simple    boolean;
    v_res       profile_private.apply_result[];
    v_dl_ids    bigint[];
    v_dead      record;
    v_rest      integer[];
    v_more      profile_private.validated_update[];
BEGIN
    -- Validation: the plain updates by the short query, the others by the full one. The full one
    -- treats the batch as one segment of one round; when some update changes profile links or some
    -- grain may come twice, segments and rounds are worked out below.
    SELECT v.plain_updates, v.rest_ords, v.direct_count, v.archives, v.twice
    INTO v_updates, v_rest, v_direct, v_history, v_twice
    FROM profile_private.validate_plain(p_updates, v_now) AS v;
    v_all_valid := true;
    v_links := false;
    IF v_rest IS NOT NULL THEN
        SELECT f.checked_updates, f.all_valid, f.changes_links
        INTO v_more, v_all_valid, v_links
        FROM profile_private.validate_full(p_updates, v_rest, v_now) AS f;
        v_updates := coalesce(v_updates, '{}') || v_more;
        -- A grain written twice, among all of them.
        SELECT count(u.target) > count(DISTINCT profile_private.grain_hash(u.target, u.profile_type, u.path))
        INTO v_twice
        FROM unnest(v_updates) AS u;
    END IF;

    IF v_updates IS NULL THEN
        RETURN;
    END IF;

    IF v_links OR v_twice THEN
        -- Segments (seg still holds lc: whether the update changes profile links) and rounds. After a
        -- link change, updates write where the links point by then: their targets are worked out
        -- segment by segment below.
        SELECT array_agg(ROW(
                   t.ord, t.operation, t.correlation_id, t.profile_type, t.path, t.v, t.certainty, t.inserted, t.ttl,
                   t.ttn, t.origin, t.reader, t.grain_type, t.inc, t.seg, t.target, t.round,
                   t.sqlstate, t.reason, t.context)::profile_private.validated_update ORDER BY t.ord),
               max(t.seg), max(t.round)
        INTO v_updates, v_max_seg, v_max_round
        FROM (
            SELECT g.*,
                   CASE WHEN g.target IS NOT NULL
                        THEN row_number() OVER (PARTITION BY g.seg, g.target, g.profile_type, g.path ORDER BY g.ord)::integer
                   END AS round
            FROM (
                SELECT q.ord, q.operation, q.correlation_id, q.profile_type, q.path, q.v, q.certainty, q.inserted,
                       q.ttl, q.ttn, q.origin, q.reader, q.grain_type, q.inc, q.seg2 AS seg,
                       CASE WHEN q.seg2 > 0 AND NOT (q.operation IN ('_delete', '_delete_with_history', '_profile_link')
                                                     OR q.profile_type = 'profile_link')
                            THEN NULL ELSE q.target END AS target,
                       q.sqlstate, q.reason, q.context
                FROM (
                    SELECT u.*,
                           2 * coalesce(sum(u.seg) OVER (ORDER BY u.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::integer
                           + u.seg AS seg2
                    FROM unnest(v_updates) AS u
                ) q
            ) g
        ) t;
    END IF;

    -- The common case: every update valid, no link changes, no grain twice: one round of all.
    v_simple := v_max_seg = 0 AND v_all_valid AND v_max_round = 1;

    -- Updates that failed validation.
    IF NOT v_all_valid THEN
        v_res := ARRAY(
            SELECT ROW(u.ord, 'dead_letter', u.operation, u.correlation_id, u.sqlstate, u.reason, u.context, NULL)::profile_private.apply_result
            FROM unnest(v_updates) AS u
            WHERE u.sqlstate IS NOT NULL);
    END IF;

    IF v_simple THEN
        -- The short query's counts hold when it validated them all; else the round counts.
        v_res := profile_private.apply_round(v_updates, false, CASE WHEN v_rest IS NULL THEN v_direct END, v_history);
    ELSE
        FOR v_seg IN 0 .. v_max_seg LOOP
            IF v_seg % 2 = 0 AND v_seg > 0 THEN
                -- After a profile link changed: where this segment's updates write now.
                v_rows := ARRAY(
                    SELECT ROW(t.ord, t.operation, t.correlation_id, t.profile_type, t.path, t.v, t.certainty,
                               t.inserted, t.ttl, t.ttn, t.origin, t.reader, t.grain_type, t.inc, t.seg, t.tgt,
                               row_number() OVER (PARTITION BY t.tgt, t.profile_type, t.path ORDER BY t.ord)::integer,
                               t.sqlstate, t.reason, t.context)::profile_private.validated_update
                    FROM (SELECT u.*,
                                 CASE WHEN u.operation IN ('_delete', '_delete_with_history') OR u.profile_type = 'profile_link'
                                      THEN u.correlation_id ELSE api.profile_link_resolve(u.correlation_id) END AS tgt
                          FROM unnest(v_updates) AS u
                          WHERE u.seg = v_seg AND u.sqlstate IS NULL) t);
            ELSE
                v_rows := ARRAY(SELECT u FROM unnest(v_updates) AS u WHERE u.seg = v_seg AND u.sqlstate IS NULL);
            END IF;
            CONTINUE WHEN cardinality(v_rows) = 0;
            SELECT max(u.round) INTO v_max_round FROM unnest(v_rows) AS u;
            FOR v_round IN 1 .. v_max_round LOOP
                v_res := v_res || profile_private.apply_round(
                    CASE WHEN v_max_round = 1 THEN v_rows
                         ELSE ARRAY(SELECT u FROM unnest(v_rows) AS u WHERE u.round = v_round) END, true);
            END LOOP;
        END LOOP;
    END IF;

    -- Rejected updates to the dead letter table, in batch order.
    IF p_record THEN
        v_dl_ids := array_fill(NULL::bigint, ARRAY[cardinality(v_updates)]);
        FOR v_dead IN
            SELECT r.ord, r.sqlstate, r.reason, r.context FROM unnest(v_res) AS r
            WHERE r.status = 'dead_letter' ORDER BY r.ord
        LOOP
            v_dl_ids[v_dead.ord] := profile_private.dead_letter_add(p_updates -> (v_dead.ord - 1), v_dead.sqlstate,
                                                                v_dead.reason, v_dead.context);
        END LOOP;
    END IF;

    -- An update without a result is ok and wrote its target (the usual batch's rounds return only
    -- the other results). The short validation query leaves v_updates in batch order: when it
    -- validated them all and every one is ok, they need no sort.
    IF coalesce(cardinality(v_res), 0) = 0 AND v_rest IS NULL THEN
        RETURN QUERY
        SELECT u.ord + p_ord_offset, 'ok'::text, u.operation, u.target, NULL::text, NULL::text, NULL::text, NULL::bigint
        FROM unnest(v_updates) AS u;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.ord + p_ord_offset, coalesce(r.status, 'ok'), u.operation, coalesce(r.correlation_id, u.target),
           r.sqlstate, r.reason, r.context, v_dl_ids[u.ord]
    FROM unnest(v_updates) AS u
    LEFT JOIN unnest(v_res) AS r ON r.ord = u.ord
    ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION profile_private.apply_core(jsonb, integer, boolean) IS
    'Internal: validates and applies a JSON array of profile updates in batch order (set-based: a short query for plain updates, the full one for the others; the usual batch is one round, otherwise segments and set-based rounds of updates of distinct grains); no exception handling; records dead letters when p_record.';

-- profile_private.apply_safe: internal. The batch again, each update in its own subtransaction, so an
-- unexpected error rejects only the update that raised it: it goes to the dead letter table with
-- its SQLSTATE, message and PL/pgSQL context. Used only after profile_private.apply_core failed.
-- Raises: nothing: every error is caught and dead-lettered.
CREATE FUNCTION profile_private.apply_safe(p_updates jsonb)
RETURNS profile_private.apply_result[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_out    profile_private.apply_result[] := '{}';
    v_r      profile_private.apply_result;
    v_m      jsonb;
    v_state  text;
    v_msg    text;
    v_detail text;
    v_ctx    text;
BEGIN
    FOR v_i IN 0 .. jsonb_array_length(p_updates) - 1 LOOP
        v_m := p_updates -> v_i;
        BEGIN
            SELECT * INTO STRICT v_r FROM profile_private.apply_core(jsonb_build_array(v_m), v_i, true);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_ctx = PG_EXCEPTION_CONTEXT;
            v_msg := v_msg || coalesce(nullif(': ' || v_detail, ': '), '');
            v_r := ROW(v_i + 1, 'dead_letter',
                       CASE WHEN jsonb_typeof(v_m) <> 'object' THEN NULL
                            WHEN coalesce(v_m -> '_operation', 'null') = 'null' THEN '_set'
                            WHEN jsonb_typeof(v_m -> '_operation') = 'string' THEN v_m ->> '_operation' END,
                       CASE WHEN jsonb_typeof(v_m -> '_id') = 'string' THEN v_m ->> '_id' END,
                       v_state, v_msg, v_ctx,
                       profile_private.dead_letter_add(v_m, v_state, v_msg, v_ctx))::profile_private.apply_result;
        END;
        v_out := array_append(v_out, v_r);
    END LOOP;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION profile_private.apply_safe(jsonb) IS
    'Internal: applies a JSON array of profile updates each in its own subtransaction; an unexpected error dead-letters only the update that raised it, with its SQLSTATE and PL/pgSQL context.';

-- The rows api.profile_apply_batch returns. An empty view: it names the row type, so that psql's
-- \d+ and sqlc see the columns.
CREATE VIEW api.profile_apply_results AS
SELECT NULL::integer AS ord, NULL::text AS status, NULL::text AS operation, NULL::text AS correlation_id,
       NULL::text AS sqlstate, NULL::text AS reason, NULL::bigint AS dead_letter_id
WHERE false;
COMMENT ON VIEW api.profile_apply_results IS
    'Always empty: the row type of api.profile_apply_batch (ord, status ok|noop|dead_letter, operation, correlation_id written, sqlstate, reason, dead_letter_id).';

-- api.profile_apply_batch: applies profile update messages in order and returns one row per
-- update: ord (from 1), status ok | noop | dead_letter, operation, correlation_id (the profile
-- written, after profile links; the _id as given for a dead letter), sqlstate, reason and
-- dead_letter_id of a rejected update. A rejected update goes to profile.dead_letters and never
-- stops the others or undoes them. If an unexpected error interrupts the batch, the batch is
-- redone with each update in its own subtransaction, so only the update that raised it is
-- dead-lettered (with PostgreSQL's SQLSTATE and error context).
-- Raises: SLINV when p_updates is not a JSON object (one update) or array (a batch).
CREATE FUNCTION api.profile_apply_batch(p_updates jsonb)
RETURNS SETOF api.profile_apply_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_updates jsonb;
BEGIN
    IF p_updates IS NULL OR jsonb_typeof(p_updates) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'updates must be a JSON object or array' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_updates), 'NULL')),
            HINT = 'Send one update message as an object or several as an array of objects.';
    END IF;
    v_updates := CASE WHEN jsonb_typeof(p_updates) = 'object' THEN jsonb_build_array(p_updates) ELSE p_updates END;
    BEGIN
        -- profile_private.apply_core runs to completion before this query sees its first row, so when it
        -- fails, no row has been returned yet. It returns its rows in batch order.
        RETURN QUERY
        SELECT c.ord, c.status, c.operation, c.correlation_id, c.sqlstate, c.reason, c.dead_letter_id
        FROM profile_private.apply_core(v_updates, 0, true) AS c;
    EXCEPTION WHEN OTHERS THEN
        RETURN QUERY
        SELECT r.ord, r.status, r.operation, r.correlation_id, r.sqlstate, r.reason, r.dead_letter_id
        FROM unnest(profile_private.apply_safe(v_updates)) AS r
        ORDER BY r.ord;
    END;
END
$$;
COMMENT ON FUNCTION api.profile_apply_batch(jsonb) IS
    'Applies profile update messages (an array, or one object) in order; one row per update: ord, status (ok, noop, dead_letter), operation, correlation_id written, sqlstate, reason, dead_letter_id. Rejected updates go to profile.dead_letters; the others apply. Raises SLINV when p_updates is neither an object nor an array.';

-- api.profile_apply: applies one profile update message and returns its result (as one row of
-- api.profile_apply_batch, without ord). Anything but a JSON object is dead-lettered.
-- Raises: SLINV when p_update is NULL.
CREATE FUNCTION api.profile_apply(
    p_update jsonb,
    OUT status text,
    OUT operation text,
    OUT correlation_id text,
    OUT sqlstate text,
    OUT reason text,
    OUT dead_letter_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_update IS NULL THEN
        RAISE EXCEPTION 'update can not be null' USING ERRCODE = 'SLINV',
            HINT = 'Send one update message as a JSON object.';
    END IF;
    SELECT b.status, b.operation, b.correlation_id, b.sqlstate, b.reason, b.dead_letter_id
    INTO status, operation, correlation_id, sqlstate, reason, dead_letter_id
    FROM api.profile_apply_batch(jsonb_build_array(p_update)) AS b;
END
$$;
COMMENT ON FUNCTION api.profile_apply(jsonb) IS
    'Applies one profile update message; returns status (ok, noop, dead_letter), operation, correlation_id written, sqlstate, reason, dead_letter_id. A rejected message goes to profile.dead_letters. Raises SLINV when p_update is NULL.';
