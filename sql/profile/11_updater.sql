-- Profile store, asynchronous updater: update messages accepted into profile.inbox and applied by
-- workers (worker/profile_updater.go), in order per correlation id (the Kafka profile updater of
-- Granary, in PostgreSQL). This file holds the message path, api.profile_enqueue and
-- api.profile_inbox_process, and the rules below, which both it and the operators' side
-- (sql/profile/12_updater_admin.sql: api.profile_updater_status, api.profile_inbox_blocked_lanes,
-- api.profile_inbox_dead_letter, the check of the updater.* settings) follow.
-- Settings: the updater.* rows of silo.settings (checked by a trigger when they change).
--
-- Rules where the specification leaves room:
-- * Two streams, high and low priority (the two topics of the original). Every message goes to a
--   lane: hashtext(_id) modulo updater.lanes (64), lane 0 when _id is not a string (such a message
--   is dead-lettered when applied). A step (api.profile_inbox_process) locks up to
--   updater.lanes_per_step ready lanes FOR UPDATE SKIP LOCKED and applies their oldest messages, up
--   to updater.batch_size, in id order, then deletes them, all in one transaction: updates of one
--   correlation id are applied in the order they were accepted within their stream; a crash or a
--   lost connection leaves the messages in the inbox (nothing lost, nothing applied twice).
-- * Acceptance order is commit order: a request that was answered before another was sent has the
--   smaller ids (the identity is not cached per session), and a worker sees committed messages
--   only. Requests in flight at the same time have no order between them.
-- * Order is per _id as given. An update for a linked _id is applied to the link's target like any
--   other update; updates sent under two linked ids are ordered per id, not across them (as with
--   a topic keyed by _id).
-- * Changing updater.lanes re-lanes the waiting messages in the same transaction
--   (profile_private.inbox_relane): it waits for the steps and enqueues in progress and keeps the
--   order of every _id. Enqueue computes the lane in the statement that inserts, so it sees the
--   lane count of the last committed change.
-- * Idle workers poll with back-off (up to a second) and are woken by NOTIFY silo_inbox, which
--   api.profile_enqueue sends only when it starts a lane's backlog: behind waiting messages the
--   workers are busy already, and a notifying commit takes a database-wide lock that would
--   serialise concurrent enqueues.
-- * Expected rejections (validation, grain type, link cycles) are dead-lettered as in
--   api.profile_apply_batch and the lane goes on. Unexpected errors are classified by
--   api.error_class (sql/error/01_class.sql), the rule every domain's workers share. A
--   deterministic one (a data exception 22xxx, an integrity violation 23xxx, a program limit 54xxx
--   such as an index row too large, raise_exception P0001, ...) fails again however often it is
--   tried: the message goes to the dead letter table with its SQLSTATE and reason and the lane goes
--   on, in both modes, so one bad message never blocks the correlation ids that share its lane. A
--   transient one (08xxx, 40001, 40P01, 53xxx, 55P03, 57xxx of operator intervention, 58xxx)
--   follows updater.unexpected_errors: retry (default): the messages of the lane before the
--   failing one are applied, the failing one and those after it stay, and the lane waits
--   updater.retry_base_ms * 2^attempts (at most updater.retry_max_ms) before it is tried again,
--   forever, as a Kafka partition blocks (an operator can move the message to the dead letter
--   table: api.profile_inbox_dead_letter); dead_letter: the message that raised it goes to the
--   dead letter table (profile_private.apply_safe, told to dead-letter transient errors too) and the lane goes on. The class is
--   only looked up in the exception handlers: the usual step pays nothing for it. An error that
--   aborts the whole step (the database going away, a statement timeout, a cancel, which PL/pgSQL
--   does not catch) rolls the step back: the worker tries again after a pause.
-- * Throttling: while the high stream's backlog is above updater.lag_barrier (and
--   updater.throttle_enabled), api.profile_updater_status reports the low stream throttled with a
--   wait of updater.wait_time_ms per message; workers of the low stream then apply one message per
--   step and wait, and check again every updater.check_interval_ms.
-- * A step runs in READ COMMITTED only: each statement must see the deletes of the step that held
--   the lane before.

-- NULL rather than an error for an unknown name: each caller raises SLINV with its own detail.
CREATE FUNCTION profile_private.priority(p_priority text)
RETURNS smallint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_priority WHEN 'high' THEN 0::smallint WHEN 'low' THEN 1::smallint END;
$$;
COMMENT ON FUNCTION profile_private.priority(text) IS
    'The inbox priority (profile.inbox.priority) of stream name p_priority: 0 for high, 1 for low, NULL for anything else. Raises nothing.';

-- One function for api.profile_enqueue and profile_private.inbox_relane, so that every message of
-- an _id gets the same lane and keeps its order. The sign bit is cleared: hashtext is negative for
-- half of the ids.
CREATE FUNCTION profile_private.inbox_lane(p_message jsonb, p_lanes integer)
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN jsonb_typeof(p_message -> '_id') = 'string'
                THEN (hashtext(p_message ->> '_id') & 2147483647) % p_lanes ELSE 0 END;
$$;
COMMENT ON FUNCTION profile_private.inbox_lane(jsonb, integer) IS
    'The inbox lane of update message p_message among p_lanes lanes (at least 1): hashtext(_id) without its sign bit, modulo p_lanes, when _id is a string; 0 otherwise. Raises nothing (division_by_zero for p_lanes 0).';

-- The messages are not validated here: enqueueing stays one INSERT, and a bad message is
-- dead-lettered when applied, with the same reasons as a synchronous update. The ids are drawn
-- first and handed out in message order, so that a caller that enqueues the messages of several
-- requests at once knows which ids each request got.
CREATE FUNCTION profile_private.inbox_add(p_messages jsonb, p_prio smallint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids   bigint[];
    v_lanes integer[];
BEGIN
    v_ids := ARRAY(SELECT nextval('profile.inbox_id_seq') FROM generate_series(1, jsonb_array_length(p_messages)) ORDER BY 1);
    IF cardinality(v_ids) = 0 THEN
        RETURN v_ids;
    END IF;
    -- The lane count is read in the inserting statement: its snapshot is taken after the lock on
    -- profile.inbox, so a concurrent change of updater.lanes (which locks the table) is seen whole.
    WITH ins AS (
        INSERT INTO profile.inbox (id, priority, lane, message) OVERRIDING SYSTEM VALUE
        SELECT v_ids[e.ord], p_prio, profile_private.inbox_lane(e.m, n.lanes), e.m
        FROM (SELECT settings_private.setting('updater.lanes', '64')::integer AS lanes) n,
             jsonb_array_elements(p_messages) WITH ORDINALITY AS e(m, ord)
        ORDER BY e.ord
        RETURNING lane
    )
    SELECT array_agg(DISTINCT lane) INTO v_lanes FROM ins;
    -- Wake idle workers when a lane had nothing waiting: behind waiting messages, the workers are
    -- busy with the lane already. (A notifying commit takes a database-wide lock: notifying every
    -- time would serialise concurrent enqueues and their WAL flushes.)
    IF EXISTS (SELECT FROM unnest(v_lanes) AS ln(lane)
               WHERE NOT EXISTS (SELECT FROM profile.inbox i
                                 WHERE i.priority = p_prio AND i.lane = ln.lane AND i.id < v_ids[1])) THEN
        PERFORM pg_notify('silo_inbox', CASE p_prio WHEN 0 THEN 'high' ELSE 'low' END);
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION profile_private.inbox_add(jsonb, smallint) IS
    'Inserts the messages of JSON array p_messages into profile.inbox, stream p_prio (0 high, 1 low), each in the lane of its _id (profile_private.inbox_lane, updater.lanes), and returns their ids, aligned with p_messages and increasing. Notifies silo_inbox (payload: high or low) when a lane it wrote to had no message waiting. Raises nothing of its own.';

CREATE FUNCTION api.profile_enqueue(
    p_updates jsonb,
    p_priority text DEFAULT 'high',
    OUT accepted integer,
    OUT first_id bigint,
    OUT last_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_prio smallint := profile_private.priority(p_priority);
    v_ids  bigint[];
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
    v_ids := profile_private.inbox_add(CASE WHEN jsonb_typeof(p_updates) = 'object'
                                            THEN jsonb_build_array(p_updates) ELSE p_updates END, v_prio);
    accepted := cardinality(v_ids);
    first_id := v_ids[1];
    last_id := v_ids[cardinality(v_ids)];
END
$$;
COMMENT ON FUNCTION api.profile_enqueue(jsonb, text) IS
    'Accepts profile update messages into profile.inbox for the asynchronous updater, in order; they are checked when applied (a bad one goes to profile.dead_letters then). p_updates: one message (a JSON object) or several (an array). p_priority (default high): the stream, high or low. Returns one row: accepted (how many), first_id and last_id (their inbox ids; NULL for an empty array). Updates of one _id are applied in the order they were accepted. Notifies silo_inbox (payload: the priority) when a lane it wrote to had no message waiting (identical notifications of a transaction are delivered once). Raises SLINV when p_priority is not high or low, or p_updates is NULL or neither an object nor an array.';

-- The exponent stops at 30, so the power stays a small number however often the lane failed;
-- least() then caps the wait.
CREATE FUNCTION profile_private.inbox_lane_failed(p_priority smallint, p_lane integer, p_sqlstate text, p_error text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    UPDATE profile.inbox_lanes l
    SET attempts = l.attempts + 1,
        retry_at = clock_timestamp() + least(settings_private.setting('updater.retry_base_ms', '100')::numeric * power(2::numeric, least(l.attempts, 30)),
                                             settings_private.setting('updater.retry_max_ms', '60000')::numeric) * interval '1 millisecond',
        last_error = p_error, last_sqlstate = p_sqlstate, last_failed = clock_timestamp()
    WHERE l.priority = p_priority AND l.lane = p_lane;
$$;
COMMENT ON FUNCTION profile_private.inbox_lane_failed(smallint, integer, text, text) IS
    'Records an unexpected error of lane p_lane of stream p_priority (0 high, 1 low) in profile.inbox_lanes: attempts + 1, last_sqlstate p_sqlstate, last_error p_error, last_failed now, and blocks the lane until retry_at = now + updater.retry_base_ms (default 100) * 2^(attempts before this one), at most updater.retry_max_ms (default 60000). Returns nothing; raises nothing.';

-- Bitmap and sequential scans are off so that each lane's prefix is read in index order and the
-- scan stops there, whatever the planner's statistics say: the inbox fills and empties faster
-- than ANALYZE follows, and with stale statistics a bitmap scan would read every waiting message
-- of the lanes to sort them.
CREATE FUNCTION profile_private.inbox_take(
    p_priority smallint,
    p_lanes integer[],
    p_share integer,
    OUT ids bigint[],
    OUT lanes integer[],
    OUT messages jsonb)
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
AS $$
BEGIN
    SELECT array_agg(s.id ORDER BY s.id), array_agg(s.lane ORDER BY s.id), jsonb_agg(s.message ORDER BY s.id)
    INTO ids, lanes, messages
    FROM unnest(p_lanes) AS ln(lane)
    CROSS JOIN LATERAL (
        SELECT i.id, i.lane, i.message FROM profile.inbox i
        WHERE i.priority = p_priority AND i.lane = ln.lane
        ORDER BY i.priority, i.lane, i.id -- the index's order: no sort, only the prefix is read
        LIMIT p_share) s;
END
$$;
COMMENT ON FUNCTION profile_private.inbox_take(smallint, integer[], integer) IS
    'The oldest p_share messages of each lane in p_lanes of stream p_priority (0 high, 1 low), read in the order of the index on (priority, lane, id). Returns one row: ids, lanes and messages (a JSON array), aligned and in id order; NULLs when the lanes are empty. Raises nothing.';

-- The whole step is applied at once first; only when an unexpected error interrupts it is it
-- redone lane by lane, and a failing lane message by message, so the usual step costs one apply
-- and a failure costs only its own lane. A message whose error is deterministic is dead-lettered
-- where it fails and the lane's later messages are still applied in this step, one by one (the
-- lane has shown it holds a bad message; one subtransaction each keeps any further one to itself). The lane rows are locked SKIP LOCKED, so workers never
-- wait for each other and never share a lane.
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
    v_prio      smallint := profile_private.priority(p_priority);
    v_max       integer := coalesce(p_max_updates, settings_private.setting('updater.batch_size', '500')::integer);
    v_max_lanes integer := greatest(settings_private.setting('updater.lanes_per_step', '8')::integer, 1);
    v_mode      text := settings_private.setting('updater.unexpected_errors', 'retry');
    v_share     integer;
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
    v_detail    text;
    v_ctx       text;
    v_m         jsonb;
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
    v_max_lanes := least(v_max_lanes, v_max); -- at least one message per claimed lane

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
    v_share := v_max / lanes;

    -- Their oldest messages: a prefix of each lane, in id order (a new snapshot: after the lock).
    SELECT t.ids, t.lanes, t.messages INTO v_ids, v_lane_of, v_msgs
    FROM profile_private.inbox_take(v_prio, v_lanes, v_share) t;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;

    v_t0 := clock_timestamp();
    IF v_mode = 'dead_letter' THEN
        SELECT array_agg(b.status ORDER BY b.ord), array_agg(coalesce(b.operation, 'invalid') ORDER BY b.ord)
        INTO v_status, v_ops
        FROM profile_private.apply_batch(v_msgs, NULL, true) b;
        v_done := v_ids;
    ELSE
        BEGIN
            SELECT array_agg(c.status ORDER BY c.ord), array_agg(coalesce(c.operation, 'invalid') ORDER BY c.ord)
            INTO v_status, v_ops
            FROM profile_private.apply_core(v_msgs, 0, true) c;
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
                    FROM profile_private.apply_core(v_l_msgs, 0, true) c;
                    v_status := v_status || v_r_status; v_ops := v_ops || v_r_ops; v_done := v_done || v_l_ids;
                EXCEPTION WHEN OTHERS THEN
                    FOR v_i IN 1 .. cardinality(v_l_ids) LOOP
                        BEGIN
                            SELECT array_agg(c.status), array_agg(coalesce(c.operation, 'invalid'))
                            INTO v_r_status, v_r_ops
                            FROM profile_private.apply_core(jsonb_build_array(v_l_msgs -> (v_i - 1)), 0, true) c;
                            v_status := v_status || v_r_status; v_ops := v_ops || v_r_ops;
                            v_done := v_done || v_l_ids[v_i];
                        EXCEPTION WHEN OTHERS THEN
                            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                                    v_detail = PG_EXCEPTION_DETAIL, v_ctx = PG_EXCEPTION_CONTEXT;
                            IF api.error_class(v_state) = 'deterministic' THEN
                                -- It would fail again: set it aside as api.profile_apply_batch's
                                -- safe mode does, and go on with the lane.
                                v_m := v_l_msgs -> (v_i - 1);
                                PERFORM profile_private.dead_letter_add(v_m, v_state,
                                    v_msg || coalesce(nullif(': ' || v_detail, ': '), ''), v_ctx);
                                v_status := v_status || 'dead_letter'::text;
                                v_ops := v_ops || coalesce(CASE WHEN jsonb_typeof(v_m) <> 'object' THEN NULL
                                                                WHEN coalesce(v_m -> '_operation', 'null') = 'null' THEN '_set'
                                                                WHEN jsonb_typeof(v_m -> '_operation') = 'string' THEN v_m ->> '_operation' END,
                                                           'invalid');
                                v_done := v_done || v_l_ids[v_i];
                                CONTINUE;
                            END IF;
                            PERFORM profile_private.inbox_lane_failed(v_prio, v_lane, v_state,
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
    -- Counted by a closed set of names (the 21 operations, or invalid): they become metric labels,
    -- which a client must not be able to multiply.
    SELECT coalesce(jsonb_object_agg(o.op, o.n), '{}') INTO operations
    FROM (SELECT CASE WHEN profile_private.op_class(op) IS NOT NULL THEN op ELSE 'invalid' END AS op, count(*) AS n
          FROM unnest(v_ops) AS op GROUP BY 1) o;
    failed_lanes := cardinality(v_failed);
    -- A full share in every lane, or as many lanes as a step takes: there may be more.
    more := cardinality(v_ids) >= v_share * lanes OR lanes >= v_max_lanes;
END
$$;
COMMENT ON FUNCTION api.profile_inbox_process(text, integer) IS
    'One step of an asynchronous updater worker, in the caller''s transaction (READ COMMITTED). p_priority (default high): the stream, high or low. p_max_updates (default NULL: updater.batch_size, 500 when unset): at most this many messages. Claims up to updater.lanes_per_step ready lanes of the stream that hold messages (never more than p_max_updates), oldest first, skipping lanes another step holds and lanes waiting for a retry; applies their oldest messages in id order, p_max_updates shared evenly among the lanes, and deletes them from profile.inbox. Rejected messages go to profile.dead_letters as in api.profile_apply_batch. An unexpected error is classified by api.error_class: a deterministic one (such as 22xxx, 23xxx, 54xxx, P0001) sends the message that raised it to profile.dead_letters with its SQLSTATE, message (and detail) as the reason and the error context, and its lane goes on, in both modes; a transient one (such as 08xxx, 40001, 40P01, 53xxx, 55P03, 58xxx) follows updater.unexpected_errors: retry (default) applies what precedes the failing message in its lane and blocks the lane with back-off (profile.inbox_lanes); dead_letter dead-letters the message that raised it. Returns one row: taken (messages applied and removed), ok, noop, dead_letter (counts by status), operations (a JSON object: count per _operation, one of the 21 operations or invalid for any other value), lanes (claimed), failed_lanes (blocked by this step), error (the first unexpected error that blocked a lane, NULL when none; a dead-lettered one is counted in dead_letter), apply_ms (milliseconds spent applying), more (there may be more: call again at once). Publishes what applying the updates publishes: profile changes and dead letters. Raises SLINV when p_priority is not high or low, p_max_updates is below 1, or the transaction is not READ COMMITTED.';
