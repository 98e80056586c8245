-- Belts, processing: a step (api.belt_process) takes a belt's oldest deliveries lane by lane, runs
-- its callback over them and applies the updates they return to the profile store, all in one
-- transaction, then deletes the deliveries it is done with.
--
-- Rules where the specification leaves room:
-- * Exactly once, in order. A step locks up to belt.lanes_per_step ready lanes of the belt's
--   consumer (event.consumer_lanes, FOR UPDATE SKIP LOCKED), so no two steps share a lane, and
--   takes the oldest deliveries of each (up to belt.batch_size in all), in delivery order. The
--   updates of every event it processes are applied in that order by one call of the profile
--   store, and the deliveries are deleted in the same transaction: a step that is killed or loses
--   its connection applies nothing and leaves its deliveries for the next one. A correlation id's
--   events share a lane (the lane of its profile-link target at ingest: Granary's partition
--   redirection), so they are processed in the order they were stored.
-- * A SQL callback runs set-based: one statement calls it over the whole step, with
--   clock_timestamp() read after each call, so each event's time is known (long-running). Only
--   when that statement fails is the step redone event by event, each in a subtransaction, to find
--   which event failed. A Python callback runs through belt_private.python_run, one call per event
--   inside PL/Python, which times each call and enforces CALLBACK_TIMEOUT_SEC itself.
-- * What a callback's outcome does to its event:
--   - updates (NULL, [] or updates; anything else among them is skipped, as Granary does): the
--     event is processed; its updates are applied (an invalid update goes to profile.dead_letters
--     with its reason, as every write of the store does; the event's other updates apply);
--   - a retry (Python's RetryException, SQL's api.belt_retry: SBRTY) or a timeout: the event and
--     the later events of its lane wait; the lane is tried again after the belt's back-off,
--     RETRY_BACK_OFF_INITIAL_INTERVAL_SEC * RETRY_BACK_OFF_MULTIPLIER^(retries so far), at most
--     RETRY_BACK_OFF_INTERVAL_MAX_SEC; when RETRY_MAX_RETRIES (not -1) retries have been made, the
--     event goes to belt.dead_letters with SBRTX and the lane goes on;
--   - a transient error (api.error_class: a deadlock, a lock timeout, ...) says nothing of the
--     event: it waits with the same back-off, never dead-lettered;
--   - any other error: the event goes to belt.dead_letters with the error and its traceback (SQL:
--     its SQLSTATE and context), is counted as failed, is not retried, and the lane goes on.
-- * A callback that no longer validates (its SQL function was dropped, a Python source that does
--   not load) fails the belt (status FAILED, with the reason) instead of dead-lettering its events:
--   they wait until the belt is fixed and started again.
-- * A SQL callback's timeout is the step's: the worker runs a SQL belt's step with
--   statement_timeout CALLBACK_TIMEOUT_SEC; a step that hits it is redone one event at a time per
--   lane, and the lane whose first event still times out is handed to api.belt_lane_timeout.
-- * FETCH_PROFILE TRUE passes {"correlationId", "type", "jsonPayload"} of the event's correlation id
--   (after profile links, as they are when the step runs), PROFILE_TYPE; a profile that does not
--   exist yet is passed empty ({"_id": id} as its jsonPayload), so a callback needs no special case
--   for an entity's first event.
-- * A step runs in READ COMMITTED only: each statement must see what the step before it committed.

CREATE TYPE belt_private.item AS (
    n             integer,
    delivery_id   bigint,
    lane          smallint,
    cid           text,
    event_id      text,
    event_at      timestamptz,
    event_type    text,
    headers       jsonb,
    payload       jsonb,
    profile       jsonb,
    dead_letter   bigint
);
COMMENT ON TYPE belt_private.item IS
    'One delivery a processing step took: n (its position in the step, in delivery order), delivery_id, lane, cid (the event''s correlation id), event_id, event_at, event_type, headers and payload (NULL when the event is neither in the store nor in the replayed dead letter: it is dropped), profile (FETCH_PROFILE TRUE), dead_letter (the replayed dead letter''s id).';

CREATE TYPE belt_private.outcome AS (
    n            integer,
    lane         smallint,
    delivery_id  bigint,
    status       text,
    skipped      integer,
    error        text,
    traceback    text,
    sqlstate     text,
    ms           double precision,
    long_running boolean
);
COMMENT ON TYPE belt_private.outcome IS
    'What a callback made of one item (its results, a JSON array, are in a jsonb[] beside the outcomes, in the same order): n, lane and delivery_id (the item''s), status (ok, retry, timeout, transient, error, missing: no event to process, waiting: not run, behind a retry of its lane; the step then settles retry, timeout and transient into blocked, or exhausted when the retries ran out, and what follows a blocked item into waiting), skipped (results the Python runtime skipped), error, traceback (Python''s, or the SQL context), sqlstate (of a SQL error), ms (the call''s time), long_running (longer than CALLBACK_LONGRUNNING_SEC).';

-- The lanes' order is their oldest delivery's, so a backlog drains oldest first. One probe of a
-- lane's deliveries finds both whether it has any and its oldest. PL/pgSQL, as the other per-step
-- functions here, so that a worker's connection plans these statements once, not at every step (a
-- SQL function that is not inlined is planned at each call).
CREATE FUNCTION belt_private.lock_lanes(p_consumer bigint, p_max integer, p_only smallint[])
RETURNS smallint[]
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    RETURN (SELECT array_agg(c.lane ORDER BY c.head)
            FROM (SELECT l.lane, h.head
                  FROM event.consumer_lanes l
                  CROSS JOIN LATERAL (SELECT d.id AS head FROM event.deliveries d
                                      WHERE d.consumer_id = l.consumer_id AND d.lane = l.lane
                                      ORDER BY d.consumer_id, d.lane, d.id
                                      LIMIT 1) h
                  WHERE l.consumer_id = p_consumer AND l.not_before <= clock_timestamp()
                    AND (p_only IS NULL OR l.lane = ANY (p_only))
                  ORDER BY h.head
                  LIMIT p_max
                  FOR UPDATE OF l SKIP LOCKED) c);
END
$$;
COMMENT ON FUNCTION belt_private.lock_lanes(bigint, integer, smallint[]) IS
    'Locks (FOR UPDATE SKIP LOCKED, until commit) up to p_max lanes of consumer p_consumer that are ready (not_before passed) and have deliveries, only lanes in p_only when it is not NULL, and returns them, the lane with the oldest delivery first; NULL when none. Raises nothing.';

-- Bitmap and sequential scans are off so that each lane's prefix is read in index order and the
-- scan stops there (profile_private.inbox_take says why); memoization too, as every delivery has
-- its own event (caching their lookups cost a fifth of the take and never hit); a separate
-- function, so that the settings do not reach the callbacks.
CREATE FUNCTION belt_private.take(p_consumer bigint, p_lanes smallint[], p_share integer)
RETURNS belt_private.item[]
LANGUAGE plpgsql STABLE
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_memoize = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_items belt_private.item[];
BEGIN
    -- In delivery order, the order the numbering sorted them in: no second sort.
    v_items := ARRAY(
    SELECT ROW(t.n, t.id, t.lane, t.event_cid, t.event_id, t.event_at, t.event_type,
               t.headers, t.payload, NULL, t.dead_letter_id)::belt_private.item
    FROM (SELECT row_number() OVER (ORDER BY d.id)::integer AS n, d.id, d.lane, d.event_cid, d.event_id,
                 d.event_at, d.dead_letter_id,
                 coalesce(e.event_type, x.event_type) AS event_type,
                 coalesce(e.headers, x.headers) AS headers,
                 coalesce(e.payload, x.payload) AS payload
          FROM unnest(p_lanes) AS ln(lane)
          CROSS JOIN LATERAL (
              SELECT d.* FROM event.deliveries d
              WHERE d.consumer_id = p_consumer AND d.lane = ln.lane
              ORDER BY d.consumer_id, d.lane, d.id
              LIMIT p_share) d
          LEFT JOIN event.events e
                 ON e.correlation_id = d.event_cid AND e.at = d.event_at AND e.event_id = d.event_id
          LEFT JOIN belt.dead_letters x ON x.id = d.dead_letter_id) t
    ORDER BY t.id);
    RETURN CASE WHEN cardinality(v_items) > 0 THEN v_items END;
END
$$;
COMMENT ON FUNCTION belt_private.take(bigint, smallint[], integer) IS
    'The oldest p_share deliveries of each lane in p_lanes of consumer p_consumer, with their events (from event.events, or from the replayed dead letter), as items numbered in delivery order. NULL when there are none. Raises nothing.';

CREATE FUNCTION belt_private.profile_doc(p_correlation_id text, p_profile_type text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_id  text := api.profile_link_resolve(p_correlation_id);
    v_doc jsonb;
BEGIN
    IF EXISTS (SELECT FROM profile.profilestore p WHERE p.correlation_id = v_id AND p.profile_type = p_profile_type) THEN
        SELECT jsonb_build_object('correlationId', g.correlation_id, 'type', g.profile_type, 'jsonPayload', g.json_payload::jsonb)
        INTO v_doc
        FROM api.profile_get(p_profile_type, v_id) g;
    END IF;
    RETURN coalesce(v_doc, jsonb_build_object('correlationId', v_id, 'type', p_profile_type,
                                              'jsonPayload', jsonb_build_object('_id', v_id)));
END
$$;
COMMENT ON FUNCTION belt_private.profile_doc(text, text) IS
    'The profile a callback with FETCH_PROFILE TRUE receives: {"correlationId", "type", "jsonPayload"} of profile type p_profile_type for correlation id p_correlation_id after its profile links (api.profile_link_resolve), read by api.profile_get with its history; a profile that does not exist is {"correlationId", "type", "jsonPayload": {"_id": id}}. Raises nothing of its own.';

CREATE FUNCTION belt_private.callback_call(p_belt belt.belts)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT to_regprocedure(p_belt.sql_callback)::regproc::text;
$$;
COMMENT ON FUNCTION belt_private.callback_call(belt.belts) IS
    'The name by which a SQL belt''s callback is called (schema-qualified where the search path needs it), NULL when the function of its signature no longer exists. Raises nothing.';

-- One statement over every item; only when it raises, one subtransaction per item. Granary's result
-- rule for a SQL callback's jsonb (NULL or [] no update, an object one update, an array's objects
-- updates and its other elements skipped, any other value skipped) is an expression written into
-- the statement, not a function call, and the step applies only the objects.
-- Each call is timed by the clock read before and after it in the same row (a target list is
-- computed in its order); the outcomes are aggregated in the order unnest() gives the items, which
-- is item order: no window and no sort over the results.
CREATE FUNCTION belt_private.run_sql(p_belt belt.belts, p_items belt_private.item[],
                                     OUT o_out belt_private.outcome[], OUT o_res jsonb[])
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_fn      text := belt_private.callback_call(p_belt);
    v_args    text := CASE WHEN p_belt.fetch_profile = 'TRUE' THEN 'i.headers, i.payload, i.profile' ELSE 'i.headers, i.payload' END;
    v_long    double precision := p_belt.callback_longrunning_sec * 1000;
    v_it      belt_private.item;
    v_blocked smallint[] := '{}';
    v_u       jsonb;
    v_t       timestamptz;
    v_ms      double precision;
    v_state   text;
    v_msg     text;
    v_detail  text;
    v_ctx     text;
BEGIN
    BEGIN
        EXECUTE format($q$
            SELECT array_agg(ROW(c.n, c.lane, c.delivery_id, CASE WHEN c.missing THEN 'missing' ELSE 'ok' END,
                                 0, NULL, NULL, NULL, c.ms, c.ms > $2)::belt_private.outcome),
                   array_agg(CASE jsonb_typeof(c.res) WHEN 'object' THEN jsonb_build_array(c.res) WHEN 'array' THEN c.res ELSE '[]' END)
            FROM (SELECT c.n, c.lane, c.delivery_id, c.missing, c.res, extract(epoch FROM c.t1 - c.t0) * 1000 AS ms
                  FROM (SELECT i.n, i.lane, i.delivery_id, i.headers IS NULL AS missing, clock_timestamp() AS t0,
                               CASE WHEN i.headers IS NOT NULL THEN %s(%s) END AS res,
                               clock_timestamp() AS t1
                        FROM unnest($1) AS i
                        OFFSET 0) c) c
        $q$, v_fn, v_args) INTO o_out, o_res USING p_items, v_long;
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        o_out := '{}';
        o_res := '{}';
    END;
    -- Event by event: the first retry (or transient error) of a lane stops its later events.
    v_args := replace(replace(replace(v_args, 'i.headers', '$1'), 'i.payload', '$2'), 'i.profile', '$3');
    FOREACH v_it IN ARRAY p_items LOOP
        IF v_it.headers IS NULL THEN
            o_out := o_out || ROW(v_it.n, v_it.lane, v_it.delivery_id, 'missing', 0, NULL, NULL, NULL, 0, false)::belt_private.outcome;
            o_res := o_res || '[]'::jsonb;
            CONTINUE;
        ELSIF v_it.lane = ANY (v_blocked) THEN
            o_out := o_out || ROW(v_it.n, v_it.lane, v_it.delivery_id, 'waiting', 0, NULL, NULL, NULL, 0, false)::belt_private.outcome;
            o_res := o_res || '[]'::jsonb;
            CONTINUE;
        END IF;
        v_t := clock_timestamp();
        BEGIN
            EXECUTE format('SELECT %s(%s)', v_fn, v_args) INTO v_u USING v_it.headers, v_it.payload, v_it.profile;
            v_ms := extract(epoch FROM clock_timestamp() - v_t) * 1000;
            o_out := o_out || ROW(v_it.n, v_it.lane, v_it.delivery_id, 'ok', 0, NULL, NULL, NULL, v_ms, v_ms > v_long)::belt_private.outcome;
            o_res := o_res || CASE jsonb_typeof(v_u) WHEN 'object' THEN jsonb_build_array(v_u) WHEN 'array' THEN v_u ELSE '[]' END;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_ctx = PG_EXCEPTION_CONTEXT;
            v_ms := extract(epoch FROM clock_timestamp() - v_t) * 1000;
            o_res := o_res || '[]'::jsonb;
            o_out := o_out || ROW(v_it.n, v_it.lane, v_it.delivery_id,
                                  CASE WHEN v_state = 'SBRTY' THEN 'retry'
                                       WHEN api.error_class(v_state) = 'transient' THEN 'transient' ELSE 'error' END,
                                  0, v_msg || coalesce(nullif(': ' || v_detail, ': '), ''), v_ctx, v_state,
                                  v_ms, v_ms > v_long)::belt_private.outcome;
            IF v_state = 'SBRTY' OR api.error_class(v_state) = 'transient' THEN
                v_blocked := v_blocked || v_it.lane;
            END IF;
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION belt_private.run_sql(belt.belts, belt_private.item[]) IS
    'Runs SQL belt p_belt''s callback over items p_items and returns o_out, their outcomes, in item order, and o_res, beside them, each one''s results as a JSON array (an object returned is an array of one, NULL and any other value []; [] for an item without results): first in one statement over all of them; when that raises, item by item, each in a subtransaction: SBRTY (api.belt_retry) is a retry, a transient error (api.error_class) transient, any other an error with its message, detail, SQLSTATE and context; after a lane''s first retry or transient error its later items get no outcome (they wait). Items without an event are missing. A cancel (statement_timeout) is not caught. Raises undefined_function 42883 when the callback no longer exists (the caller checks first).';

CREATE FUNCTION belt_private.python_settings(p_belt belt.belts)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'fetchProfile', p_belt.fetch_profile,
        'profileType', p_belt.profile_type,
        'callbackTimeoutSec', p_belt.callback_timeout_sec,
        'callbackLongrunningSec', p_belt.callback_longrunning_sec,
        'env', coalesce((SELECT jsonb_object_agg(e ->> 'name', coalesce(e ->> 'value', ''))
                         FROM jsonb_array_elements(p_belt.extra_env) e
                         WHERE jsonb_typeof(e -> 'name') = 'string'), '{}'));
$$;
COMMENT ON FUNCTION belt_private.python_settings(belt.belts) IS
    'The settings belt_private.python_run takes for Python belt p_belt: fetchProfile, profileType, callbackTimeoutSec, callbackLongrunningSec and env (every extraEnv name with its value, set in os.environ as Granary''s container had them). Raises nothing.';

-- The Python runtime is called by name: it exists only with plpython3u (sql/belt/07_python_4_install.sql).
CREATE FUNCTION belt_private.run_python(p_belt belt.belts, p_items belt_private.item[],
                                        OUT o_out belt_private.outcome[], OUT o_res jsonb[], OUT o_problem text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_run  regprocedure := to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)');
    v_res  jsonb;
BEGIN
    IF v_run IS NULL THEN
        o_problem := 'the Python runtime is not available: this database has no PL/Python (plpython3u)';
        RETURN;
    END IF;
    EXECUTE format('SELECT %s($1, $2, $3, $4, $5)', v_run::oid::regproc)
        INTO v_res
        USING p_belt.id, p_belt.version, p_belt.extractor_fn, belt_private.python_settings(p_belt),
              coalesce((SELECT jsonb_agg(jsonb_build_object('headers', i.headers, 'payload', i.payload, 'profile', i.profile) ORDER BY i.n)
                        FROM unnest(p_items) i WHERE i.headers IS NOT NULL), '[]');
    IF left(v_res -> 0 ->> 'error', 17) = 'InvalidCallback: ' THEN
        o_problem := substr(v_res -> 0 ->> 'error', 18);
        RETURN;
    END IF;
    SELECT array_agg(x.o ORDER BY (x.o).n), array_agg(x.res ORDER BY (x.o).n) INTO o_out, o_res
    FROM (SELECT ROW(i.n, i.lane, i.delivery_id,
                     CASE WHEN i.headers IS NULL THEN 'missing'
                          WHEN r.r ? 'updates' THEN 'ok' WHEN r.r ? 'retry' THEN 'retry'
                          WHEN r.r ? 'timeout' THEN 'timeout' ELSE 'error' END,
                     coalesce((r.r ->> 'skipped')::integer, 0),
                     coalesce(r.r ->> 'retry', r.r ->> 'timeout', r.r ->> 'error'), r.r ->> 'traceback',
                     CASE WHEN r.r ? 'timeout' THEN '57014' WHEN r.r ? 'retry' THEN 'SBRTY' END,
                     coalesce((r.r ->> 'ms')::double precision, 0), coalesce((r.r ->> 'longRunning')::boolean, false)
                 )::belt_private.outcome AS o,
                 coalesce(r.r -> 'updates', '[]') AS res
          FROM (SELECT i.*, count(*) FILTER (WHERE i.headers IS NOT NULL) OVER (ORDER BY i.n) AS k FROM unnest(p_items) i) i
          LEFT JOIN LATERAL (SELECT v_res -> (i.k - 1)::integer AS r) r ON i.headers IS NOT NULL) x;
END
$$;
COMMENT ON FUNCTION belt_private.run_python(belt.belts, belt_private.item[]) IS
    'Runs Python belt p_belt''s callback over items p_items through belt_private.python_run and returns o_out, their outcomes in item order, and o_res beside them, each one''s updates as a JSON array ([] when none) (updates: ok; RetryException: retry, SQLSTATE SBRTY; CALLBACK_TIMEOUT_SEC exceeded: timeout, 57014; another exception: error with its traceback; no event: missing), or o_problem when the callback cannot run at all (no Python runtime, a source that does not load or validate), o_out and o_res NULL then. Raises what the runtime raises.';
