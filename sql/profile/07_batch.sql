-- Profile store, batches: the public entry points api.profile_apply_batch and api.profile_apply,
-- and the stages behind them. profile_private.apply_core validates a batch
-- (profile_private.validate_plain for the usual shapes, profile_private.validate_full for the
-- others: sql/profile/04_validate.sql) and applies it in rounds of updates of distinct grains;
-- profile_private.apply_round hands each round to the direct statement (profile_private.apply_direct,
-- sql/profile/05_direct.sql) and, when it holds other operations, to the general one
-- (profile_private.apply_general, sql/profile/06_general.sql). Set-based throughout: one statement
-- per stage over a whole round costs far less than one per update. profile_private.apply_core
-- handles no exception, so the usual batch pays for no subtransaction; only when an unexpected
-- error interrupts it is the batch redone one update per subtransaction
-- (profile_private.apply_safe), so that the error costs only the update that raised it.

-- Updates of distinct grains do not affect each other, so applying a round set-based gives what
-- applying its updates one by one gives. The split lets a round of direct updates alone, the usual
-- one, skip the general statement and its fixed cost; the counts come from validation when it made
-- them, so the round is not read once more.
CREATE FUNCTION profile_private.apply_round(p_round profile_private.validated_update[], p_ok boolean,
                                            p_direct bigint DEFAULT NULL, p_history boolean DEFAULT NULL,
                                            p_now bigint DEFAULT NULL)
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
        v_res := profile_private.apply_direct(p_round, p_ok, v_sent, v_history, p_now);
    END IF;
    IF v_sent = cardinality(p_round) THEN
        RETURN v_res;
    END IF;
    RETURN coalesce(v_res, '{}') || profile_private.apply_general(p_round, p_ok, p_now);
END
$$;
COMMENT ON FUNCTION profile_private.apply_round(profile_private.validated_update[], boolean, bigint, boolean, bigint) IS
    'Applies one round and returns its results. p_round: validated profile updates of distinct grains whose targets are resolved; the direct operations (profile_private.op_direct) go to profile_private.apply_direct, the others, if any, to profile_private.apply_general. p_ok: return every result (true) or only those that are not ok (false; NULL or empty when there are none). p_direct (default NULL) and p_history (default NULL): how many updates of p_round are direct and whether one of them archives, when the caller knows them; when either is NULL they are counted here. Rejections found while applying (SPTYP, SPLNK) come back as dead_letter results without a dead letter id (the caller records them). Records the grains written and deleted for change notifications (through the two statements). Raises nothing of its own. p_now (default NULL): the batch''s default _in (epoch ms), passed on to both statements.';

-- A final pass over the results that are not ok, after the dead letters kept their full reasons:
-- only a noop, a grain type clash (SPTYP) and a profile link cycle (SPLNK) can tell something of
-- what a grain holds, and each is checked against what the caller may read. A noop carries the
-- reader of the _latest pit its decision read (profile_private.apply_general), so it is judged as
-- the grain was when it was decided; the rarer rejections look up the grain and the links.
CREATE FUNCTION profile_private.results_for_readers(p_results profile_private.apply_result[],
                                                    p_updates profile_private.validated_update[],
                                                    p_readers text[])
RETURNS profile_private.apply_result[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY(
        SELECT CASE
               WHEN r.status = 'noop' AND r.reader IS NOT NULL AND NOT coalesce(r.reader = ANY (p_readers), false) THEN
                   ROW(r.ord, 'ok', r.operation, r.correlation_id, NULL, NULL, NULL, r.dead_letter_id,
                       r.reader)::profile_private.apply_result
               WHEN r.status = 'dead_letter' AND r.sqlstate = 'SPTYP'
                    AND NOT EXISTS (SELECT 1 FROM profile.profilestore p
                                    WHERE p.correlation_id = r.correlation_id AND p.profile_type = u.profile_type
                                      AND p.path = u.path AND p.reader = ANY (p_readers)) THEN
                   ROW(r.ord, r.status, r.operation, r.correlation_id, r.sqlstate,
                       (profile_private.type_clash(u.operation, u.grain_type, u.path, NULL))[2], r.context,
                       r.dead_letter_id, r.reader)::profile_private.apply_result
               WHEN r.status = 'dead_letter' AND r.sqlstate = 'SPLNK'
                    AND NOT coalesce(u.correlation_id = ANY (profile_private.link_chain(u.v #>> '{}', p_readers)), false) THEN
                   ROW(r.ord, r.status, r.operation, r.correlation_id, r.sqlstate,
                       format('Profile link would create a cycle: the links of %s lead back to %s', u.v #>> '{}', u.correlation_id),
                       r.context, r.dead_letter_id, r.reader)::profile_private.apply_result
               ELSE r
               END
        FROM unnest(p_results) AS r
        LEFT JOIN unnest(p_updates) AS u ON u.ord = r.ord);
$$;
COMMENT ON FUNCTION profile_private.results_for_readers(profile_private.apply_result[], profile_private.validated_update[], text[]) IS
    'The results p_results of a batch as a caller with readers p_readers may be told them. p_updates: the batch''s validated updates (joined by ord). A noop whose decision read a _latest pit whose reader is not in p_readers becomes ok (the caller learns nothing of the grain''s value: that it existed, equalled, beat or lost); an SPTYP rejection keeps its reason only when the caller may read some pit of the grain, otherwise the reason says the grain has another grain type without naming it; an SPLNK rejection keeps its chain of links only when the caller may read every link of the cycle, otherwise it says the links of the new target lead back to the id. Every other result is returned unchanged. Raises nothing.';

-- No exception handling here, so that each caller chooses how to recover: api.profile_apply_batch
-- redoes the batch one update per subtransaction (profile_private.apply_safe),
-- api.profile_inbox_process falls back to lane by lane, then message by message, and
-- api.profile_dead_letter_replay records the error on the dead letter. Two validation functions because most updates are plain:
-- profile_private.validate_plain checks them with a short query, profile_private.validate_full
-- applies every rule to the others; both make the same rows (they share the helpers of
-- sql/profile/01_types.sql and sql/profile/02_parse.sql). The usual batch (no update changes
-- profile links, no grain comes twice) is one round, applied set-based by one
-- profile_private.apply_round. Otherwise a second query splits the batch into segments (an update
-- that changes profile links is a segment of its own, so every other segment sees fixed link
-- targets) and rounds (the n-th update of each grain within a segment), applied segment by
-- segment, round by round: updates of distinct grains do not affect each other and the updates of
-- one grain run in batch order, so the result is what applying the updates one by one gives.
-- Generic plans, like the statements it calls: PL/pgSQL re-planned its large queries for every
-- small batch.
CREATE FUNCTION profile_private.apply_core(p_updates jsonb, p_ord_offset integer, p_record boolean,
                                           p_readers text[] DEFAULT NULL, p_origin text DEFAULT NULL,
                                           p_messages jsonb[] DEFAULT NULL)
RETURNS SETOF profile_private.apply_result
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    -- The default _in: the time the batch is applied, not the transaction's start. A transaction
    -- that began before another one's write of the same grain committed, and writes after it
    -- (an updater step that found the lane locked, then took it), must not give the later value
    -- the earlier time: history would list it as older than the value it replaced.
    v_now       bigint := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    v_updates   profile_private.validated_update[];
    v_rows      profile_private.validated_update[];
    v_links     boolean;
    v_twice     boolean;
    v_direct    bigint;
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
    -- Validation: the plain updates by profile_private.validate_plain, the others by
    -- profile_private.validate_full. Both treat the batch as one segment of one round; when some
    -- update changes profile links or some grain may come twice, segments and rounds are worked
    -- out below.
    SELECT v.plain_updates, v.rest_ords, v.direct_count, v.archives, v.twice
    INTO v_updates, v_rest, v_direct, v_history, v_twice
    FROM profile_private.validate_plain(p_updates, v_now, p_origin, p_messages) AS v;
    v_all_valid := true;
    v_links := false;
    IF v_rest IS NOT NULL THEN
        SELECT f.checked_updates, f.all_valid, f.changes_links
        INTO v_more, v_all_valid, v_links
        FROM profile_private.validate_full(p_updates, v_rest, v_now, p_origin, p_messages) AS f;
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
        -- Segments (seg still holds what validation set: 1 when the update changes profile links,
        -- else 0) and rounds. After a link change, updates write where the links point by then:
        -- their targets are worked out segment by segment below.
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
            SELECT ROW(u.ord, 'dead_letter', u.operation, u.correlation_id, u.sqlstate, u.reason, u.context, NULL, NULL)::profile_private.apply_result
            FROM unnest(v_updates) AS u
            WHERE u.sqlstate IS NOT NULL);
    END IF;

    IF v_simple THEN
        -- profile_private.validate_plain's counts hold when it validated them all; else the round
        -- counts.
        v_res := profile_private.apply_round(v_updates, false, CASE WHEN v_rest IS NULL THEN v_direct END, v_history, v_now);
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
                         ELSE ARRAY(SELECT u FROM unnest(v_rows) AS u WHERE u.round = v_round) END,
                    true, NULL, NULL, v_now);
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
            v_dl_ids[v_dead.ord] := profile_private.dead_letter_add(coalesce(p_updates -> (v_dead.ord - 1), p_messages[v_dead.ord]), v_dead.sqlstate,
                                                                v_dead.reason, v_dead.context);
        END LOOP;
    END IF;

    -- What the caller may be told, after the dead letters kept the full reasons. Only results that
    -- are not ok can tell something (v_res holds only those in the usual batch, none when all are
    -- ok), so the usual batch pays for nothing here.
    IF p_readers IS NOT NULL AND cardinality(v_res) > 0 THEN
        v_res := profile_private.results_for_readers(v_res, v_updates, p_readers);
    END IF;

    -- An update without a result is ok and wrote its target (the usual batch's rounds return only
    -- the other results). profile_private.validate_plain leaves v_updates in batch order: when it
    -- validated them all and every one is ok, they need no sort.
    IF coalesce(cardinality(v_res), 0) = 0 AND v_rest IS NULL THEN
        RETURN QUERY
        SELECT u.ord + p_ord_offset, 'ok'::text, u.operation,
               CASE WHEN p_readers IS NULL OR u.target = u.correlation_id THEN u.target
                    ELSE profile_private.link_target_for(u.correlation_id, u.target, p_readers) END,
               NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::text
        FROM unnest(v_updates) AS u;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.ord + p_ord_offset, coalesce(r.status, 'ok'), u.operation,
           CASE WHEN p_readers IS NULL OR coalesce(r.correlation_id, u.target) = u.correlation_id
                THEN coalesce(r.correlation_id, u.target)
                ELSE profile_private.link_target_for(u.correlation_id, coalesce(r.correlation_id, u.target), p_readers) END,
           r.sqlstate, r.reason, r.context, v_dl_ids[u.ord], r.reader
    FROM unnest(v_updates) AS u
    LEFT JOIN unnest(v_res) AS r ON r.ord = u.ord
    ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION profile_private.apply_core(jsonb, integer, boolean, text[], text, jsonb[]) IS
    'Validates and applies a JSON array of profile update messages in batch order and returns one row per message, in batch order (an empty array: none). p_updates: the messages; p_ord_offset: added to each ord (position in p_updates, from 1), so a caller applying a batch piece by piece numbers the rows as in the whole batch; p_record: record rejected messages in profile.dead_letters (each insert publishes a dead-letters change) and return their ids (replays pass false); p_readers (default NULL: the caller may read everything): the caller''s readers, after the dead letters are recorded with their full reasons the results are told as such a caller may see them (profile_private.results_for_readers, and correlation_id only as far as its links are readable: profile_private.link_target_for). Row: ord, status (ok, noop, dead_letter), operation, correlation_id (the profile the update addresses, after profile links; for a message that failed validation its _id, NULL when not a string), sqlstate, reason and context of a rejection, dead_letter_id, reader (of the _latest pit a noop depended on). Records the grains written and deleted for change notifications. p_origin (default NULL): the _origin of the updates that give none (a belt''s /belts/{id}), set in validation so that such updates keep the plain, fast path. p_messages (default NULL): the messages as an array instead, p_updates NULL then. Raises nothing of its own, but handles no exception: an unexpected error propagates, and the caller decides what to do.';

-- Used only after profile_private.apply_core failed: a subtransaction per update costs more than the
-- whole set-based batch, so the usual batch never pays for it. Only a deterministic error is set
-- aside as the update's own fault: a transient one (api.error_class: a deadlock, a lock timeout, a
-- lost resource) says nothing of the update, and dead-lettering it would lose a good update.
-- It is raised, so the caller's transaction fails whole and can be retried, unless the caller asks
-- for it to be dead-lettered too (the updater's dead_letter mode).
CREATE FUNCTION profile_private.apply_safe(p_updates jsonb, p_readers text[] DEFAULT NULL,
                                           p_transient_to_dead_letter boolean DEFAULT false, p_origin text DEFAULT NULL)
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
            SELECT * INTO STRICT v_r FROM profile_private.apply_core(jsonb_build_array(v_m), v_i, true, p_readers, p_origin);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_ctx = PG_EXCEPTION_CONTEXT;
            IF NOT p_transient_to_dead_letter AND api.error_class(v_state) = 'transient' THEN
                RAISE;
            END IF;
            v_msg := v_msg || coalesce(nullif(': ' || v_detail, ': '), '');
            v_r := ROW(v_i + 1, 'dead_letter',
                       CASE WHEN jsonb_typeof(v_m) <> 'object' THEN NULL
                            WHEN coalesce(v_m -> '_operation', 'null') = 'null' THEN '_set'
                            WHEN jsonb_typeof(v_m -> '_operation') = 'string' THEN v_m ->> '_operation' END,
                       CASE WHEN jsonb_typeof(v_m -> '_id') = 'string' THEN v_m ->> '_id' END,
                       v_state, v_msg, v_ctx,
                       profile_private.dead_letter_add(v_m, v_state, v_msg, v_ctx), NULL)::profile_private.apply_result;
        END;
        v_out := array_append(v_out, v_r);
    END LOOP;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION profile_private.apply_safe(jsonb, text[], boolean, text) IS
    'Applies a JSON array of profile update messages (p_updates) one by one, in order, each by profile_private.apply_core in its own subtransaction (with the caller''s readers p_readers, default NULL: everything, and the default _origin p_origin, default NULL), and returns one result per message (ord from 1). An unexpected deterministic error (api.error_class) rolls back only the update that raised it, which goes to profile.dead_letters with PostgreSQL''s SQLSTATE, its message (and detail) as the reason and the PL/pgSQL error context; its operation and correlation_id are taken from the message as sent. A transient error is raised again (the caller''s transaction fails and can be retried) unless p_transient_to_dead_letter (default false) is true: then it is dead-lettered like a deterministic one. Raises the transient errors it does not dead-letter; a cancel (57014) is never caught (PL/pgSQL''s WHEN OTHERS does not catch it).';

-- A view rather than a composite type: sqlc turns SETOF a view into a typed Go struct, and psql's
-- \d+ shows its columns. WHERE false: only its row type is used.
CREATE VIEW api.profile_apply_results AS
SELECT NULL::integer AS ord, NULL::text AS status, NULL::text AS operation, NULL::text AS correlation_id,
       NULL::text AS sqlstate, NULL::text AS reason, NULL::bigint AS dead_letter_id
WHERE false;
COMMENT ON VIEW api.profile_apply_results IS
    'Always empty: the row type of api.profile_apply_batch. ord: position of the message in the batch, from 1; status: ok (written), noop (nothing to change) or dead_letter (rejected); operation: the _operation (default _set; NULL when not a string); correlation_id: the profile the update addresses, after profile links (for a message rejected by validation or by an unexpected error its _id as sent, NULL when not a string); sqlstate and reason: why a message was rejected; dead_letter_id: its row in profile.dead_letters.';

-- The fast path, profile_private.apply_core, runs without exception handling, so the usual batch
-- pays for no subtransaction per update. When it fails, its subtransaction rolls back everything it
-- did, and profile_private.apply_safe redoes the whole batch update by update: nothing is applied
-- twice. A transient error (api.error_class) is not the batch's fault: it fails the call, to be
-- retried as a whole, unless p_transient_to_dead_letter.
CREATE FUNCTION profile_private.apply_batch(p_updates jsonb, p_readers text[] DEFAULT NULL,
                                            p_transient_to_dead_letter boolean DEFAULT false, p_origin text DEFAULT NULL,
                                            p_messages jsonb[] DEFAULT NULL)
RETURNS SETOF api.profile_apply_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_state text;
BEGIN
    BEGIN
        -- profile_private.apply_core runs to completion before this query sees its first row, so when it
        -- fails, no row has been returned yet. It returns its rows in batch order.
        RETURN QUERY
        SELECT c.ord, c.status, c.operation, c.correlation_id, c.sqlstate, c.reason, c.dead_letter_id
        FROM profile_private.apply_core(p_updates, 0, true, p_readers, p_origin, p_messages) AS c;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE;
        IF NOT p_transient_to_dead_letter AND api.error_class(v_state) = 'transient' THEN
            RAISE;
        END IF;
        RETURN QUERY
        SELECT r.ord, r.status, r.operation, r.correlation_id, r.sqlstate, r.reason, r.dead_letter_id
        FROM unnest(profile_private.apply_safe(coalesce(p_updates, to_jsonb(p_messages)), p_readers, p_transient_to_dead_letter, p_origin)) AS r
        ORDER BY r.ord;
    END;
END
$$;
COMMENT ON FUNCTION profile_private.apply_batch(jsonb, text[], boolean, text, jsonb[]) IS
    'Applies a JSON array of profile update messages p_updates as api.profile_apply_batch does (p_readers: the same; p_origin, default NULL: the _origin of updates that give none; p_messages, default NULL: the messages as an array instead, p_updates NULL then), and returns its rows. An unexpected error makes it redo the batch one update per subtransaction (profile_private.apply_safe), so that only the update that raised it is dead-lettered; a transient one (api.error_class) is raised instead, unless p_transient_to_dead_letter (default false) is true. Raises the transient errors it does not dead-letter.';

CREATE FUNCTION api.profile_apply_batch(p_updates jsonb, p_readers text[] DEFAULT NULL)
RETURNS SETOF api.profile_apply_results
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_updates IS NULL OR jsonb_typeof(p_updates) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'updates must be a JSON object or array' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_updates), 'NULL')),
            HINT = 'Send one update message as an object or several as an array of objects.';
    END IF;
    RETURN QUERY
    SELECT * FROM profile_private.apply_batch(
        CASE WHEN jsonb_typeof(p_updates) = 'object' THEN jsonb_build_array(p_updates) ELSE p_updates END, p_readers);
END
$$;
COMMENT ON FUNCTION api.profile_apply_batch(jsonb, text[]) IS
    'Applies profile update messages in batch order. p_updates (no default): a JSON array of update messages, or one message as an object. p_readers (default NULL: the caller may read everything, as a psql user): the readers of the caller (the HTTP layer passes its token''s): every update is applied alike, but the results tell nothing of a grain the caller may not read: a noop that depended on such a grain''s _latest pit is reported as ok, an SPTYP reason does not name the existing grain type, an SPLNK reason does not list links the caller may not read, and correlation_id follows only links it may read; the dead letter keeps the full reason. Returns one row per message, in batch order (an empty array: none), as api.profile_apply_results: ord (from 1), status (ok: written; noop: nothing to change; dead_letter: rejected), operation, correlation_id (the profile the update addresses, after profile links; for a message rejected by validation or by an unexpected error its _id as sent, NULL when not a string), sqlstate and reason of a rejection, dead_letter_id. A rejected message never stops or undoes the others: it goes to profile.dead_letters with its SQLSTATE, which is not raised: a validation code (SPMSG, SPOPR, SPIDX, SPPTH, SPVAL, SPCRT, SPINS, SPDUR, SPRSV), SPTYP for a grain type mismatch, SPLNK for a profile link cycle, or PostgreSQL''s own for an unexpected deterministic error (api.error_class: such as 22xxx, 23xxx, 54xxx): the batch is then redone one update per subtransaction, so only the update that raised it is rejected. A transient error (api.error_class: such as a deadlock 40P01, a serialization failure 40001, a lock timeout 55P03, a lost resource 53xxx) is raised: the batch fails whole and can be retried. Publishes, in the caller''s transaction: the grains written and deleted (channels profile:{profile_type}:{correlation_id} once api.change_sequence expands them; nothing while silo.change_capture is off) and one change on channel dead-letters per dead letter; the commit notifies silo_change_pending while no hub is the awake sequencer, unless silo.change_notify is off (change_private.tg_change_pending__notify). Raises SLINV when p_updates is NULL or neither an object nor an array, and the transient errors (such as 40P01, 40001, 55P03, 57014, 53xxx, 08xxx) that interrupt it.';

-- A batch of one through api.profile_apply_batch, so that a single update takes the same path as a
-- batch (validation, rounds, dead letters, changes, the redo after an unexpected error).
CREATE FUNCTION api.profile_apply(
    p_update jsonb,
    p_readers text[] DEFAULT NULL,
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
    FROM api.profile_apply_batch(jsonb_build_array(p_update), p_readers) AS b;
END
$$;
COMMENT ON FUNCTION api.profile_apply(jsonb, text[]) IS
    'Applies one profile update message, as api.profile_apply_batch does a batch of one. p_update (no default): the message, a JSON object; any other JSON value is rejected as a dead letter (SPMSG). p_readers (default NULL: the caller may read everything): the caller''s readers, which limit what the result tells as in api.profile_apply_batch. Returns one row: status (ok: written; noop: nothing to change; dead_letter: rejected), operation, correlation_id (the profile the update addresses, after profile links; for a message rejected by validation or by an unexpected error its _id as sent, NULL when not a string), sqlstate and reason of a rejection, dead_letter_id. A rejected message goes to profile.dead_letters with its SQLSTATE, which is not raised (the codes of api.profile_apply_batch). Publishes what api.profile_apply_batch publishes. Raises SLINV when p_update is NULL.';
