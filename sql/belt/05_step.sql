-- Belts, the processing step (api.belt_process) and what a worker needs around it: which belts have
-- work (api.belt_ready), the lanes to try one by one after a SQL callback's timeout
-- (api.belt_lanes_ready) and the timeout's record (api.belt_lane_timeout). The rules are in the
-- header of sql/belt/04_process.sql.

-- The lanes' retry state after a step: each lane that met a retry, a timeout or a transient error
-- at item n_block waits (or, retries exhausted, gives up that item to the dead letters); the
-- others are ready again. p_first says whether the blocking item was the first the step took in
-- its lane, the item whose retries the lane counted.
CREATE TYPE belt_private.lane_result AS (
    lane       smallint,
    n_block    integer,
    status     text,
    error      text,
    sqlstate   text,
    block_long boolean,
    n_first    integer,
    prev       integer,
    attempts   integer,
    exhausted  boolean
);
COMMENT ON TYPE belt_private.lane_result IS
    'A lane''s outcome in a step: lane, n_block (the item that blocks it, NULL when none), status, error, sqlstate and block_long (ran long) of that item, n_first (the first item the step took in the lane), prev (the lane''s retries of its head before the step), attempts (retries of the blocking item, this one included), exhausted (RETRY_MAX_RETRIES reached: the blocking item is dead-lettered).';

CREATE FUNCTION belt_private.backoff(p_belt belt.belts, p_attempts integer)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(p_belt.retry_initial_sec * power(p_belt.retry_multiplier, least(greatest(p_attempts - 1, 0), 60)),
                 p_belt.retry_max_sec) * interval '1 second';
$$;
COMMENT ON FUNCTION belt_private.backoff(belt.belts, integer) IS
    'The wait of belt p_belt before retry number p_attempts (from 1): RETRY_BACK_OFF_INITIAL_INTERVAL_SEC * RETRY_BACK_OFF_MULTIPLIER^(p_attempts - 1), at most RETRY_BACK_OFF_INTERVAL_MAX_SEC. Raises nothing.';

CREATE FUNCTION belt_private.dead_letter_add(p_belt belt.belts, p_item belt_private.item, p_error text,
                                             p_traceback text, p_sqlstate text, p_retries integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id bigint;
BEGIN
    INSERT INTO belt.dead_letters (belt_id, belt_version, event_id, event_at, correlation_id, event_type,
                                   headers, payload, error, traceback, sqlstate, retries)
    VALUES (p_belt.id, p_belt.version, p_item.event_id, p_item.event_at, p_item.cid, p_item.event_type,
            p_item.headers, p_item.payload, coalesce(p_error, 'unknown error'), p_traceback, p_sqlstate, coalesce(p_retries, 0))
    RETURNING id INTO v_id;
    PERFORM api.change_publish('belts', 'dead_letter',
                               jsonb_build_object('belt_id', p_belt.id, 'dead_letter_id', v_id, 'event_id', p_item.event_id));
    RAISE WARNING 'belt %: event % dead-lettered (dead letter %): %', p_belt.id, p_item.event_id, v_id, left(p_error, 500);
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION belt_private.dead_letter_add(belt.belts, belt_private.item, text, text, text, integer) IS
    'Writes item p_item of belt p_belt to belt.dead_letters with p_error, p_traceback, p_sqlstate and p_retries, publishes kind dead_letter on channel belts (payload {"belt_id", "dead_letter_id", "event_id"}), logs a WARNING and returns the dead letter''s id. Raises nothing of its own.';

CREATE FUNCTION api.belt_process(
    p_belt_id bigint DEFAULT NULL,
    p_max_events integer DEFAULT NULL,
    p_lanes smallint[] DEFAULT NULL,
    OUT belt_id bigint,
    OUT lanes integer,
    OUT taken integer,
    OUT processed integer,
    OUT failed integer,
    OUT retried integer,
    OUT dead_lettered integer,
    OUT long_running integer,
    OUT updates integer,
    OUT updates_dead_lettered integer,
    OUT callback_ms double precision,
    OUT apply_ms double precision,
    OUT more boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_belt      belt.belts;
    v_max       integer := coalesce(p_max_events, settings_private.setting('belt.batch_size', '500')::integer);
    v_max_lanes integer := greatest(settings_private.setting('belt.lanes_per_step', '32')::integer, 1);
    v_lanes     smallint[];
    v_items     belt_private.item[];
    v_out       belt_private.outcome[];
    v_res       jsonb[];
    v_problem   text;
    v_updates   jsonb[];
    v_lres      belt_private.lane_result[];
    v_t0        timestamptz;
    v_clean     boolean;
    v_share     integer;
    v_full      boolean;
BEGIN
    IF v_max < 1 THEN
        RAISE EXCEPTION 'p_max_events must be at least 1' USING ERRCODE = 'SLINV';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'api.belt_process needs READ COMMITTED' USING ERRCODE = 'SLINV',
            DETAIL = format('the transaction is %s', current_setting('transaction_isolation')),
            HINT = 'Each statement of a step must see what the step before it committed.';
    END IF;
    lanes := 0; taken := 0; processed := 0; failed := 0; retried := 0; dead_lettered := 0; long_running := 0;
    updates := 0; updates_dead_lettered := 0; callback_ms := 0; apply_ms := 0; more := false;
    v_max_lanes := least(v_max_lanes, v_max);

    IF p_belt_id IS NULL THEN
        -- Any running belt with a ready lane, in random order so that no belt starves another.
        FOR v_belt IN SELECT * FROM belt.belts b WHERE b.status = 'RUNNING' ORDER BY random() LOOP
            v_lanes := belt_private.lock_lanes(v_belt.consumer_id, v_max_lanes, p_lanes);
            EXIT WHEN v_lanes IS NOT NULL;
        END LOOP;
    ELSE
        SELECT * INTO v_belt FROM belt.belts b WHERE b.id = p_belt_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'belt % not found', p_belt_id USING ERRCODE = 'SLNFD';
        END IF;
        IF v_belt.status = 'RUNNING' THEN
            v_lanes := belt_private.lock_lanes(v_belt.consumer_id, v_max_lanes, p_lanes);
        END IF;
    END IF;
    IF v_lanes IS NULL THEN
        belt_id := p_belt_id;
        RETURN;
    END IF;
    -- The belt as it is now that its lanes are held (a change committed meanwhile is seen).
    SELECT * INTO v_belt FROM belt.belts b WHERE b.id = v_belt.id;
    belt_id := v_belt.id;
    lanes := cardinality(v_lanes);
    IF v_belt.status IS DISTINCT FROM 'RUNNING' THEN
        RETURN;
    END IF;

    v_share := greatest(v_max / lanes, 1);
    v_items := belt_private.take(v_belt.consumer_id, v_lanes, v_share);
    IF v_items IS NULL THEN
        RETURN;
    END IF;
    taken := cardinality(v_items);
    IF v_belt.fetch_profile = 'TRUE' THEN
        v_items := ARRAY(SELECT ROW(i.n, i.delivery_id, i.lane, i.cid, i.event_id, i.event_at, i.event_type, i.headers, i.payload,
                                    CASE WHEN i.headers IS NOT NULL THEN belt_private.profile_doc(i.cid, v_belt.profile_type) END,
                                    i.dead_letter)::belt_private.item
                         FROM unnest(v_items) i ORDER BY i.n);
    END IF;

    -- The callback.
    v_t0 := clock_timestamp();
    IF v_belt.language = 'sql' THEN
        IF belt_private.callback_call(v_belt) IS NULL THEN
            v_problem := format('function %s does not exist', v_belt.sql_callback);
        ELSE
            SELECT r.o_out, r.o_res INTO v_out, v_res FROM belt_private.run_sql(v_belt, v_items) r;
        END IF;
    ELSE
        SELECT r.o_out, r.o_res, r.o_problem INTO v_out, v_res, v_problem FROM belt_private.run_python(v_belt, v_items) r;
    END IF;
    callback_ms := extract(epoch FROM clock_timestamp() - v_t0) * 1000;
    IF v_problem IS NOT NULL THEN
        -- Nothing is processed: the events wait for the belt to be fixed and started again.
        PERFORM belt_private.set_status(v_belt.id, 'FAILED', 'callback validation failed: ' || v_problem);
        RAISE WARNING 'belt % failed: %', v_belt.id, v_problem;
        taken := 0;
        RETURN;
    END IF;

    -- The usual step: every callback returned (or its event is gone). No lane waits and nothing
    -- is dead-lettered: the lanes' results are left out (v_lres NULL), the lanes' bookkeeping
    -- below is their counts alone.
    v_clean := NOT EXISTS (SELECT FROM unnest(v_out) o WHERE o.status NOT IN ('ok', 'missing'));
    IF NOT v_clean THEN
        -- Each lane: the first item that blocks it (retry, timeout, transient) and its retry count.
        -- Outcomes carry their item's lane and delivery: the statements below read v_out alone (an
        -- array of composites is read element by element from its start: subscripting it per row
        -- would cost the square of the step's size). The callbacks' results are not in the outcomes
        -- but beside them (v_res, in the same order): each statement that reads the outcomes copies
        -- them (unnest of a composite array: every field, the results too when they were in it),
        -- and only the one that hands the updates to the store needs the results. The blocking
        -- item's outcome is joined by its number (a hash join, not a lateral scan of the
        -- outcomes per lane).
        SELECT array_agg(ROW(l.lane, l.n_block, b.status, b.error, b.sqlstate, coalesce(b.long_running, false),
                             l.n_first, l.prev, l.attempts,
                             b.status IN ('retry', 'timeout') AND v_belt.retry_max_retries >= 0
                                 AND l.attempts > v_belt.retry_max_retries)::belt_private.lane_result)
        INTO v_lres
        FROM (SELECT g.*, CASE WHEN g.n_block = g.n_first THEN g.prev ELSE 0 END + 1 AS attempts
              FROM (SELECT o.lane, min(o.n) AS n_first,
                           min(o.n) FILTER (WHERE o.status IN ('retry', 'timeout', 'transient')) AS n_block,
                           (SELECT cl.attempts FROM event.consumer_lanes cl
                            WHERE cl.consumer_id = v_belt.consumer_id AND cl.lane = o.lane) AS prev
                    FROM unnest(v_out) o
                    GROUP BY o.lane) g) l
        LEFT JOIN unnest(v_out) b ON b.n = l.n_block;
        -- Settled: the blocking item is blocked, or exhausted when its retries ran out (it is
        -- dead-lettered); what follows it in its lane waits (Python ran them all; SQL did not run them).
        IF EXISTS (SELECT FROM unnest(v_lres) l WHERE l.n_block IS NOT NULL) THEN
            v_out := ARRAY(
                SELECT ROW(o.n, o.lane, o.delivery_id,
                           CASE WHEN l.n_block IS NULL OR o.n < l.n_block THEN o.status
                                WHEN o.n = l.n_block THEN CASE WHEN l.exhausted THEN 'exhausted' ELSE 'blocked' END
                                ELSE 'waiting' END,
                           o.skipped, o.error, o.traceback, o.sqlstate, o.ms,
                           o.long_running AND (l.n_block IS NULL OR o.n <= l.n_block))::belt_private.outcome
                FROM unnest(v_out) o
                JOIN unnest(v_lres) l ON l.lane = o.lane
                ORDER BY o.n);
        END IF;
    END IF;

    -- The updates of the processed events, in delivery order (the outcomes are in item order, and
    -- the lateral call lists each one's updates in order: no sort), handed to the store as an
    -- array of messages, not one JSON array that it would take apart again; the store gives those
    -- without an _origin the belt's (as a default of its validation, which keeps them on its fast
    -- path).
    v_updates := ARRAY(
        SELECT u.m
        FROM ROWS FROM (unnest(v_out), unnest(v_res))
             AS o(n, lane, delivery_id, status, skipped, error, traceback, sqlstate, ms, long_running, res)
        CROSS JOIN LATERAL jsonb_array_elements(o.res) AS u(m)
        WHERE o.status = 'ok' AND jsonb_typeof(u.m) = 'object');
    v_t0 := clock_timestamp();
    IF cardinality(v_updates) > 0 THEN
        SELECT count(*), count(*) FILTER (WHERE r.status = 'dead_letter')
        INTO updates, updates_dead_lettered
        FROM profile_private.apply_batch(NULL, NULL, false, '/belts/' || v_belt.id, v_updates) r;
    END IF;
    apply_ms := extract(epoch FROM clock_timestamp() - v_t0) * 1000;

    -- Dead letters: errors, and retries that ran out (the rare path: items are looked up by n).
    -- retries: how often the event was retried.
    IF NOT v_clean AND EXISTS (SELECT FROM unnest(v_out) o WHERE o.status IN ('error', 'exhausted')) THEN
        SELECT count(belt_private.dead_letter_add(
                   v_belt, v_items[o.n],
                   CASE WHEN o.status = 'error' THEN o.error
                        ELSE format('retries exhausted after %s retries: %s', l.attempts - 1, o.error) END,
                   o.traceback,
                   CASE WHEN o.status = 'error' THEN o.sqlstate ELSE 'SBRTX' END,
                   CASE WHEN o.status = 'exhausted' THEN l.attempts - 1 WHEN o.n = l.n_first THEN l.prev ELSE 0 END))::integer
        INTO dead_lettered
        FROM unnest(v_out) o
        JOIN unnest(v_lres) l ON l.lane = o.lane
        WHERE o.status IN ('error', 'exhausted');
    END IF;

    -- The deliveries it is done with.
    DELETE FROM event.deliveries d
    WHERE d.id = ANY (ARRAY(SELECT o.delivery_id FROM unnest(v_out) o WHERE o.status IN ('ok', 'error', 'missing', 'exhausted')));

    -- The lanes' state and counters (with their results, when the step has them); the step's
    -- counts are their sums (a lane waits for its one blocked item), so the outcomes are read
    -- once here. A lane that gave the step its whole share
    -- may hold more (another step will look); one that gave less held nothing more when the step
    -- took, and what was delivered since wakes the workers.
    WITH c AS (
        SELECT k.lane, l.attempts, l.error, l.sqlstate, coalesce(l.n_block IS NOT NULL AND NOT l.exhausted, false) AS waits,
               k.processed, k.failed, k.dead, k.long_count, k.n
        FROM (SELECT o.lane,
                     count(*) FILTER (WHERE o.status = 'ok') AS processed,
                     count(*) FILTER (WHERE o.status IN ('error', 'exhausted', 'blocked')) AS failed,
                     count(*) FILTER (WHERE o.status IN ('error', 'exhausted')) AS dead,
                     count(*) FILTER (WHERE o.long_running) AS long_count,
                     count(*) AS n
              FROM unnest(v_out) o
              GROUP BY o.lane) k
        LEFT JOIN unnest(v_lres) l ON l.lane = k.lane
    ), u AS (
        UPDATE event.consumer_lanes cl
        SET not_before = CASE WHEN c.waits THEN clock_timestamp() + belt_private.backoff(v_belt, c.attempts) ELSE '-infinity' END,
            attempts = CASE WHEN c.waits THEN c.attempts ELSE 0 END,
            last_error = CASE WHEN c.waits THEN c.error END,
            last_sqlstate = CASE WHEN c.waits THEN c.sqlstate END,
            processed = cl.processed + c.processed,
            failed = cl.failed + c.failed,
            retried = cl.retried + CASE WHEN c.waits THEN 1 ELSE 0 END,
            dead_lettered = cl.dead_lettered + c.dead,
            long_running = cl.long_running + c.long_count
        FROM c
        WHERE cl.consumer_id = v_belt.consumer_id AND cl.lane = c.lane
    )
    SELECT coalesce(sum(c.processed), 0), coalesce(sum(c.failed), 0), count(*) FILTER (WHERE c.waits),
           coalesce(sum(c.long_count), 0), coalesce(max(c.n) >= v_share, false)
    INTO processed, failed, retried, long_running, v_full
    FROM c;
    more := taken >= v_max OR v_full;
END
$$;
COMMENT ON FUNCTION api.belt_process(bigint, integer, smallint[]) IS
    'One processing step of a belt, in one transaction (READ COMMITTED): locks up to belt.lanes_per_step ready lanes of belt p_belt_id (default NULL: of any RUNNING belt with work, in random order; only lanes in p_lanes when given), takes their oldest deliveries (up to p_max_events, default belt.batch_size, shared among the lanes), runs the callback over them (FETCH_PROFILE TRUE: with each event''s profile), applies the updates of the events it processed in delivery order with the profile store (default _origin /belts/{id}; an invalid update goes to profile.dead_letters) and deletes their deliveries. An event whose callback raised an error goes to belt.dead_letters; a retry (SBRTY, RetryException), a timeout (Python) or a transient error (api.error_class) makes its lane wait with the belt''s back-off, and dead-letters the event with SBRTX once RETRY_MAX_RETRIES retries were made; a callback that no longer validates makes the belt FAILED and processes nothing. The rules: sql/belt/04_process.sql. Returns one row: belt_id (NULL when no belt had work), lanes, taken (deliveries taken; 0 when there was nothing to do), processed (events whose callback returned), failed (events whose callback raised or timed out), retried (lanes that wait for a retry), dead_lettered, long_running (callbacks longer than CALLBACK_LONGRUNNING_SEC), updates (applied, all statuses), updates_dead_lettered (of those, rejected by the store), callback_ms, apply_ms, more (the step took as many as it could, or one of its lanes gave it its whole share of them: another step may find work; deliveries made since the step took its own wake the workers). Publishes kind dead_letter on channel belts per dead letter, kind state when it fails a belt, and the profile changes of the updates. Raises SLINV for p_max_events below 1 or outside READ COMMITTED, SLNFD when there is no belt p_belt_id, and the transient errors of the profile store (the step fails whole and is retried).';

-- A view rather than RETURNS TABLE, so that sqlc reads its row type.
CREATE VIEW api.belt_work AS
SELECT b.id AS belt_id, b.language, b.callback_timeout_sec::double precision AS callback_timeout_sec,
       (SELECT count(*) FROM event.consumer_lanes l
        WHERE l.consumer_id = b.consumer_id AND l.not_before <= clock_timestamp()
          AND EXISTS (SELECT FROM event.deliveries d WHERE d.consumer_id = l.consumer_id AND d.lane = l.lane))::integer AS ready_lanes,
       (SELECT count(*) FROM event.consumer_lanes l
        WHERE l.consumer_id = b.consumer_id AND l.not_before > clock_timestamp())::integer AS waiting_lanes
FROM belt.belts b
WHERE b.status = 'RUNNING';
COMMENT ON VIEW api.belt_work IS
    'The running belts and their work, as workers poll it: belt_id, language (sql or python), callback_timeout_sec (CALLBACK_TIMEOUT_SEC: a worker runs a SQL belt''s steps with it as statement_timeout), ready_lanes (lanes with deliveries whose back-off has passed), waiting_lanes (lanes waiting for a retry''s back-off).';

CREATE FUNCTION api.belt_lanes_ready(p_belt_id bigint)
RETURNS smallint[]
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(array_agg(l.lane ORDER BY l.lane), '{}')
    FROM belt.belts b
    JOIN event.consumer_lanes l ON l.consumer_id = b.consumer_id
    WHERE b.id = p_belt_id AND l.not_before <= clock_timestamp()
      AND EXISTS (SELECT FROM event.deliveries d WHERE d.consumer_id = l.consumer_id AND d.lane = l.lane);
$$;
COMMENT ON FUNCTION api.belt_lanes_ready(bigint) IS
    'The lanes of belt p_belt_id that hold deliveries and are ready (no retry''s back-off pending), in lane order; empty when none or no such belt. A worker whose step of a SQL belt hit statement_timeout tries these one at a time with api.belt_process(p_belt_id, 1, ARRAY[lane]) to find the event that times out. Raises nothing.';

-- The same bookkeeping as a step's retry, for the one event a worker found to time out: a SQL
-- callback's timeout cancels the step's statement, so no step can record it itself.
CREATE FUNCTION api.belt_lane_timeout(p_belt_id bigint, p_lane smallint, p_seconds double precision DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_belt  belt.belts;
    v_lane  event.consumer_lanes;
    v_items belt_private.item[];
    v_msg   text;
    v_n     integer;
BEGIN
    SELECT * INTO v_belt FROM belt.belts b WHERE b.id = p_belt_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'belt % not found', p_belt_id USING ERRCODE = 'SLNFD';
    END IF;
    SELECT * INTO v_lane FROM event.consumer_lanes l
    WHERE l.consumer_id = v_belt.consumer_id AND l.lane = p_lane FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'belt % has no lane %', p_belt_id, p_lane USING ERRCODE = 'SLNFD';
    END IF;
    v_items := belt_private.take(v_belt.consumer_id, ARRAY[p_lane], 1);
    IF v_items IS NULL THEN
        RETURN 'empty';
    END IF;
    v_msg := format('the callback ran longer than CALLBACK_TIMEOUT_SEC (%s s)', coalesce(p_seconds, v_belt.callback_timeout_sec));
    v_n := v_lane.attempts + 1;
    IF v_belt.retry_max_retries >= 0 AND v_n > v_belt.retry_max_retries THEN
        PERFORM belt_private.dead_letter_add(v_belt, v_items[1],
                                             format('retries exhausted after %s retries: %s', v_n - 1, v_msg), NULL, 'SBRTX', v_n - 1);
        DELETE FROM event.deliveries d WHERE d.id = v_items[1].delivery_id;
        UPDATE event.consumer_lanes l
        SET not_before = '-infinity', attempts = 0, last_error = NULL, last_sqlstate = NULL,
            failed = l.failed + 1, dead_lettered = l.dead_lettered + 1, long_running = l.long_running + 1
        WHERE l.consumer_id = v_belt.consumer_id AND l.lane = p_lane;
        RETURN 'dead_letter';
    END IF;
    UPDATE event.consumer_lanes l
    SET not_before = clock_timestamp() + belt_private.backoff(v_belt, v_n), attempts = v_n,
        last_error = v_msg, last_sqlstate = '57014',
        failed = l.failed + 1, retried = l.retried + 1, long_running = l.long_running + 1
    WHERE l.consumer_id = v_belt.consumer_id AND l.lane = p_lane;
    RAISE WARNING 'belt %: event % timed out (%), retry % of lane %', p_belt_id, v_items[1].event_id, v_msg, v_n, p_lane;
    RETURN 'retry';
END
$$;
COMMENT ON FUNCTION api.belt_lane_timeout(bigint, smallint, double precision) IS
    'Records that the callback of belt p_belt_id timed out on the first event of lane p_lane (after p_seconds, default the belt''s CALLBACK_TIMEOUT_SEC, for the message): as a step records a retry, the lane waits the belt''s back-off (returns retry), or, RETRY_MAX_RETRIES retries made, the event goes to belt.dead_letters with SBRTX and the lane goes on (returns dead_letter); the counters failed, retried or dead_lettered, and long_running, go up. Returns empty when the lane holds no delivery. Waits for a step holding the lane. Raises SLNFD when there is no belt p_belt_id or no lane p_lane.';
