-- Profile store, asynchronous updater: update messages accepted into profile.inbox and applied by
-- workers, in order per correlation id (the Kafka profile updater of Granary, in PostgreSQL).
--
-- Public functions: api.profile_enqueue, api.profile_inbox_process, api.profile_updater_status.
--
-- Rules where the specification leaves room:
-- * Two streams, high and low priority (the two topics of the original). Every message goes to a
--   lane: hashtext(_id) modulo updater.lanes (64), lane 0 when _id is not a string (such a message
--   is dead-lettered when applied). A step (api.profile_inbox_process) locks up to
--   updater.lanes_per_step ready lanes FOR UPDATE SKIP LOCKED and applies their oldest messages, up
--   to updater.batch_size, in id order, then deletes them, all in one transaction: updates of one
--   correlation id are applied in the order they were accepted within their stream; a crash or a
--   lost connection leaves the messages in the inbox (nothing lost, nothing applied twice).
-- * Order is per _id as given. An update for a linked _id is applied to the link's target like any
--   other update; updates sent under two linked ids are ordered per id, not across them (as with
--   a topic keyed by _id).
-- * Expected rejections (validation, grain type, link cycles) are dead-lettered as in
--   api.profile_apply_batch and the lane goes on. Unexpected errors, per updater.unexpected_errors:
--   retry (default): the messages of the lane before the failing one are applied, the failing one
--   and those after it stay, and the lane waits updater.retry_base_ms * 2^attempts (at most
--   updater.retry_max_ms) before it is tried again, forever, as a Kafka partition blocks;
--   dead_letter: the message that raised it goes to the dead letter table (api.profile_apply_batch's
--   safe mode) and the lane goes on.
-- * Throttling: while the high stream's backlog is above updater.lag_barrier (and
--   updater.throttle_enabled), api.profile_updater_status reports the low stream throttled with a
--   wait of updater.wait_time_ms per message; workers of the low stream then apply one message per
--   step and wait, and check again every updater.check_interval_ms.
-- * A step runs in READ COMMITTED only: each statement must see the deletes of the step that held
--   the lane before.

-- api.profile_priority: internal. 0 for 'high', 1 for 'low'.
-- Raises: SLINV for anything else.
CREATE FUNCTION api.profile_priority(p_priority text)
RETURNS smallint
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN CASE p_priority WHEN 'high' THEN 0 WHEN 'low' THEN 1 END;
END
$$;
-- (a CASE cannot raise: the callers check for NULL)
COMMENT ON FUNCTION api.profile_priority(text) IS
    'Internal: the inbox priority of a stream name: high 0, low 1, NULL for anything else.';

-- api.profile_enqueue: accepts profile update messages (one object or an array) into the inbox of
-- the asynchronous updater, in order; returns how many, and the first and last inbox id.
-- Raises: SLINV when p_updates is neither an object nor an array, or p_priority is not high or low.
CREATE FUNCTION api.profile_enqueue(
    p_updates jsonb,
    p_priority text DEFAULT 'high',
    OUT accepted integer,
    OUT first_id bigint,
    OUT last_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_prio  smallint := api.profile_priority(p_priority);
    v_lanes integer := api.setting('updater.lanes', '64')::integer;
BEGIN
    IF v_prio IS NULL THEN
        RAISE EXCEPTION 'priority must be high or low' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(p_priority, 'NULL'));
    END IF;
    IF p_updates IS NULL OR jsonb_typeof(p_updates) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'updates must be a JSON object or array' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_updates), 'NULL')),
            HINT = 'Send one update message as an object or several as an array of objects.';
    END IF;
    WITH ins AS (
        INSERT INTO profile.inbox (priority, lane, message)
        SELECT v_prio,
               CASE WHEN jsonb_typeof(e.m -> '_id') = 'string'
                    THEN (hashtext(e.m ->> '_id')::bigint & 2147483647)::integer % v_lanes ELSE 0 END,
               e.m
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_updates) = 'object'
                                       THEN jsonb_build_array(p_updates) ELSE p_updates END)
             WITH ORDINALITY AS e(m, ord)
        ORDER BY e.ord
        RETURNING id
    )
    SELECT count(*)::integer, min(id), max(id) INTO accepted, first_id, last_id FROM ins;
END
$$;
COMMENT ON FUNCTION api.profile_enqueue(jsonb, text) IS
    'Accepts profile update messages (an array, or one object) into profile.inbox for the asynchronous updater, stream high (default) or low; returns accepted, first_id, last_id. Updates of one _id are applied in this order. Raises SLINV for a body that is neither object nor array, or a priority other than high/low.';

-- api.profile_inbox_lane_failed: internal. Records an unexpected error of a lane and sets its
-- back-off: updater.retry_base_ms * 2^attempts, at most updater.retry_max_ms.
-- Raises: nothing.
CREATE FUNCTION api.profile_inbox_lane_failed(p_priority smallint, p_lane integer, p_sqlstate text, p_error text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    UPDATE profile.inbox_lanes l
    SET attempts = l.attempts + 1,
        retry_at = clock_timestamp() + least(api.setting('updater.retry_base_ms', '100')::numeric * power(2::numeric, least(l.attempts, 30)),
                                             api.setting('updater.retry_max_ms', '60000')::numeric) * interval '1 millisecond',
        last_error = p_error, last_sqlstate = p_sqlstate, last_failed = clock_timestamp()
    WHERE l.priority = p_priority AND l.lane = p_lane;
$$;
COMMENT ON FUNCTION api.profile_inbox_lane_failed(smallint, integer, text, text) IS
    'Internal: records an unexpected error of an inbox lane and blocks it with exponential back-off (updater.retry_base_ms doubled per attempt, at most updater.retry_max_ms).';

-- api.profile_inbox_process: one step of an updater worker: claims up to updater.lanes_per_step
-- ready lanes of the stream, applies their oldest messages (at most p_max_updates, default
-- updater.batch_size) in id order and deletes them, in the caller's transaction. Returns what it
-- did: taken (messages applied and removed), ok, noop, dead_letter, operations (a JSON object:
-- count per operation), lanes claimed, failed_lanes (lanes now waiting after an unexpected error),
-- error (the first such error), apply_ms (time spent applying) and more (call again at once).
-- Raises: SLINV for a priority other than high/low, p_max_updates below 1, or a transaction that
-- is not READ COMMITTED.
CREATE FUNCTION api.profile_inbox_process(
    p_priority text DEFAULT 'high',
    p_max_updates integer DEFAULT NULL,
    OUT taken integer,
    OUT ok integer,
    OUT noop integer,
    OUT dead_letter integer,
    OUT operations jsonb,
    OUT lanes integer,
    OUT failed_lanes integer,
    OUT error text,
    OUT apply_ms double precision,
    OUT more boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_prio      smallint := api.profile_priority(p_priority);
    v_max       integer := coalesce(p_max_updates, api.setting('updater.batch_size', '500')::integer);
    v_max_lanes integer := greatest(api.setting('updater.lanes_per_step', '8')::integer, 1);
    v_mode      text := api.setting('updater.unexpected_errors', 'retry');
    v_lanes     integer[];
    v_ids       bigint[];
    v_lane_of   integer[];
    v_msgs      jsonb;
    v_done      bigint[] := '{}';
    v_status    text[] := '{}';
    v_ops       text[] := '{}';
    v_failed    integer[] := '{}';
    v_lane      integer;
    v_l_ids     bigint[];
    v_l_msgs    jsonb;
    v_r_status  text[];
    v_r_ops     text[];
    v_state     text;
    v_msg       text;
    v_t0        timestamptz;
BEGIN
    IF v_prio IS NULL THEN
        RAISE EXCEPTION 'priority must be high or low' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(p_priority, 'NULL'));
    END IF;
    IF v_max < 1 THEN
        RAISE EXCEPTION 'p_max_updates must be at least 1' USING ERRCODE = 'SLINV';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'api.profile_inbox_process needs READ COMMITTED' USING ERRCODE = 'SLINV',
            DETAIL = format('the transaction is %s', current_setting('transaction_isolation')),
            HINT = 'Each statement of a step must see what the step before it committed.';
    END IF;
    taken := 0; ok := 0; noop := 0; dead_letter := 0; operations := '{}'; failed_lanes := 0;
    apply_ms := 0; more := false;

    -- Ready lanes with messages, the oldest first; locked until commit.
    SELECT array_agg(c.lane) INTO v_lanes
    FROM (SELECT l.lane
          FROM profile.inbox_lanes l
          WHERE l.priority = v_prio AND (l.retry_at IS NULL OR l.retry_at <= clock_timestamp())
            AND EXISTS (SELECT 1 FROM profile.inbox i WHERE i.priority = v_prio AND i.lane = l.lane)
          ORDER BY (SELECT min(i.id) FROM profile.inbox i WHERE i.priority = v_prio AND i.lane = l.lane)
          LIMIT v_max_lanes
          FOR UPDATE OF l SKIP LOCKED) c;
    lanes := coalesce(cardinality(v_lanes), 0);
    IF lanes = 0 THEN
        RETURN;
    END IF;

    -- Their oldest messages: a prefix of each lane (an equal share of the limit, read in index
    -- order), in id order (a new snapshot: after the lock).
    SELECT array_agg(s.id ORDER BY s.id), array_agg(s.lane ORDER BY s.id), jsonb_agg(s.message ORDER BY s.id)
    INTO v_ids, v_lane_of, v_msgs
    FROM unnest(v_lanes) AS ln(lane)
    CROSS JOIN LATERAL (
        SELECT i.id, i.lane, i.message FROM profile.inbox i
        WHERE i.priority = v_prio AND i.lane = ln.lane
        ORDER BY i.priority, i.lane, i.id -- the index's order: no sort, only the prefix is read
        LIMIT greatest(v_max / lanes, 1)) s;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    v_t0 := clock_timestamp();
    IF v_mode = 'dead_letter' THEN
        SELECT array_agg(b.status ORDER BY b.ord), array_agg(coalesce(b.operation, 'invalid') ORDER BY b.ord)
        INTO v_status, v_ops
        FROM api.profile_apply_batch(v_msgs) b;
        v_done := v_ids;
    ELSE
        BEGIN
            SELECT array_agg(c.status ORDER BY c.ord), array_agg(coalesce(c.operation, 'invalid') ORDER BY c.ord)
            INTO v_status, v_ops
            FROM api.profile_apply_core(v_msgs, 0, true) c;
            v_done := v_ids;
        EXCEPTION WHEN OTHERS THEN
            -- Lane by lane, message by message: what precedes the failing message applies, the lane
            -- waits at the failing message.
            v_status := '{}'; v_ops := '{}'; v_done := '{}';
            FOREACH v_lane IN ARRAY v_lanes LOOP
                SELECT array_agg(x.id ORDER BY x.n), jsonb_agg(v_msgs -> (x.n - 1)::integer ORDER BY x.n)
                INTO v_l_ids, v_l_msgs
                FROM unnest(v_ids, v_lane_of) WITH ORDINALITY AS x(id, lane, n)
                WHERE x.lane = v_lane;
                CONTINUE WHEN v_l_ids IS NULL;
                BEGIN
                    SELECT array_agg(c.status ORDER BY c.ord), array_agg(coalesce(c.operation, 'invalid') ORDER BY c.ord)
                    INTO v_r_status, v_r_ops
                    FROM api.profile_apply_core(v_l_msgs, 0, true) c;
                    v_status := v_status || v_r_status; v_ops := v_ops || v_r_ops; v_done := v_done || v_l_ids;
                EXCEPTION WHEN OTHERS THEN
                    FOR v_i IN 1 .. cardinality(v_l_ids) LOOP
                        BEGIN
                            SELECT array_agg(c.status), array_agg(coalesce(c.operation, 'invalid'))
                            INTO v_r_status, v_r_ops
                            FROM api.profile_apply_core(jsonb_build_array(v_l_msgs -> (v_i - 1)), 0, true) c;
                            v_status := v_status || v_r_status; v_ops := v_ops || v_r_ops;
                            v_done := v_done || v_l_ids[v_i];
                        EXCEPTION WHEN OTHERS THEN
                            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
                            PERFORM api.profile_inbox_lane_failed(v_prio, v_lane, v_state,
                                format('inbox message %s: %s', v_l_ids[v_i], v_msg));
                            v_failed := v_failed || v_lane;
                            error := coalesce(error, format('lane %s, inbox message %s: %s (%s)', v_lane, v_l_ids[v_i], v_msg, v_state));
                            EXIT;
                        END;
                    END LOOP;
                END;
            END LOOP;
        END;
    END IF;
    apply_ms := extract(epoch FROM clock_timestamp() - v_t0) * 1000;

    DELETE FROM profile.inbox i WHERE i.id = ANY (v_done);
    UPDATE profile.inbox_lanes l SET attempts = 0, retry_at = NULL
    WHERE l.priority = v_prio AND l.lane = ANY (v_lanes) AND l.attempts > 0 AND NOT (l.lane = ANY (v_failed));

    taken := cardinality(v_done);
    SELECT count(*) FILTER (WHERE s = 'ok'), count(*) FILTER (WHERE s = 'noop'), count(*) FILTER (WHERE s = 'dead_letter')
    INTO ok, noop, dead_letter
    FROM unnest(v_status) AS s;
    SELECT coalesce(jsonb_object_agg(o.op, o.n), '{}') INTO operations
    FROM (SELECT op, count(*) AS n FROM unnest(v_ops) AS op GROUP BY op) o;
    failed_lanes := cardinality(v_failed);
    more := cardinality(v_ids) >= greatest(v_max / lanes, 1) * lanes OR lanes >= v_max_lanes;
END
$$;
COMMENT ON FUNCTION api.profile_inbox_process(text, integer) IS
    'One step of the asynchronous updater: locks up to updater.lanes_per_step ready lanes of the stream (high/low), applies their oldest messages in id order (at most p_max_updates, default updater.batch_size) and deletes them, in the caller''s transaction. Returns taken, ok, noop, dead_letter, operations (count per operation), lanes, failed_lanes, error, apply_ms, more. Unexpected errors follow updater.unexpected_errors (retry with back-off, or dead_letter). Raises SLINV for a bad priority or limit, or outside READ COMMITTED.';

-- api.profile_updater_status: per stream (high, low): backlog (messages in the inbox), the oldest
-- message's acceptance time, lanes blocked after unexpected errors, and the throttle decision for
-- the stream: throttled (low only: updater.throttle_enabled and the high backlog above
-- updater.lag_barrier), wait_ms per message while throttled, check_interval_ms until the next
-- check, long_running_ms (the warning threshold of a step).
CREATE VIEW api.profile_updater_status AS
SELECT p.name AS priority,
       (SELECT count(*) FROM profile.inbox i WHERE i.priority = p.prio) AS backlog,
       (SELECT min(i.accepted) FROM profile.inbox i WHERE i.priority = p.prio) AS oldest,
       (SELECT count(*) FROM profile.inbox_lanes l WHERE l.priority = p.prio AND l.attempts > 0) AS blocked_lanes,
       p.prio = 1 AND api.setting('updater.throttle_enabled', 'true')::boolean
           AND (SELECT count(*) FROM profile.inbox i WHERE i.priority = 0) > api.setting('updater.lag_barrier', '100')::bigint
           AS throttled,
       api.setting('updater.wait_time_ms', '1000')::integer AS wait_ms,
       api.setting('updater.check_interval_ms', '60000')::integer AS check_interval_ms,
       api.setting('updater.long_running_ms', '1000')::integer AS long_running_ms
FROM (SELECT 0::smallint AS prio, 'high'::text AS name UNION ALL SELECT 1::smallint, 'low'::text) AS p
ORDER BY 1;
COMMENT ON VIEW api.profile_updater_status IS
    'Per stream (high, low): backlog (inbox depth, the scaling signal), oldest acceptance time, blocked lanes, whether the low stream is throttled (high backlog above updater.lag_barrier), the wait per message, the check interval and the long-running warning threshold.';
