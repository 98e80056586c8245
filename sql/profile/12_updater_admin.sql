-- Profile store, asynchronous updater, for operators: the state of the streams
-- (api.profile_updater_status), the lanes blocked after unexpected errors
-- (api.profile_inbox_blocked_lanes) and how to unblock one (api.profile_inbox_dead_letter), and the
-- updater.* settings, checked when they change; a new updater.lanes re-lanes the inbox.

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
       p.prio = 1 AND settings_private.setting('updater.throttle_enabled', 'true')::boolean
           AND (SELECT count(*) FROM profile.inbox i WHERE i.priority = 0) > settings_private.setting('updater.lag_barrier', '100')::bigint
           AS throttled,
       settings_private.setting('updater.wait_time_ms', '1000')::integer AS wait_ms,
       settings_private.setting('updater.check_interval_ms', '60000')::integer AS check_interval_ms,
       settings_private.setting('updater.long_running_ms', '1000')::integer AS long_running_ms
FROM (SELECT 0::smallint AS prio, 'high'::text AS name UNION ALL SELECT 1::smallint, 'low'::text) AS p
ORDER BY 1;
COMMENT ON VIEW api.profile_updater_status IS
    'Per stream (high, low): backlog (inbox depth, the scaling signal), oldest acceptance time, blocked lanes, whether the low stream is throttled (high backlog above updater.lag_barrier), the wait per message, the check interval and the long-running warning threshold.';

-- api.profile_inbox_blocked_lanes: the lanes waiting after an unexpected error (retry mode), with
-- the message they wait at (the oldest of the lane: the one that failed).
CREATE VIEW api.profile_inbox_blocked_lanes AS
SELECT CASE l.priority WHEN 0 THEN 'high' ELSE 'low' END AS priority, l.lane, l.attempts, l.retry_at,
       l.last_failed, l.last_sqlstate, l.last_error,
       h.id AS message_id, (h.message ->> '_id')::text AS correlation_id, h.message, h.accepted,
       (SELECT count(*) FROM profile.inbox i WHERE i.priority = l.priority AND i.lane = l.lane) AS waiting
FROM profile.inbox_lanes l
LEFT JOIN LATERAL (
    SELECT i.id, i.message, i.accepted FROM profile.inbox i
    WHERE i.priority = l.priority AND i.lane = l.lane
    ORDER BY i.priority, i.lane, i.id
    LIMIT 1) h ON true
WHERE l.attempts > 0
ORDER BY l.priority, l.lane;
COMMENT ON VIEW api.profile_inbox_blocked_lanes IS
    'Inbox lanes waiting after an unexpected error: priority, lane, attempts, retry_at, last error (time, SQLSTATE, message), the message the lane waits at (message_id, correlation_id, message, accepted) and how many messages wait in the lane. api.profile_inbox_dead_letter(message_id) moves that message to the dead letter table.';

-- api.profile_inbox_dead_letter: moves a waiting inbox message to the dead letter table instead of
-- applying it, for a message that blocks its lane with an error that will not go away. Waits for a
-- step that holds the message's lane, so it never races a worker. The dead letter takes the lane's
-- last error when the message is the one the lane waits at, else p_reason. The lane is ready again
-- at once. Returns the dead letter's id (replay it with api.profile_dead_letter_replay).
-- Raises: SLNFD when no message with this id waits in the inbox (applied already, or never there).
CREATE FUNCTION api.profile_inbox_dead_letter(p_id bigint, p_reason text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_prio    smallint;
    v_lane    integer;
    v_head    bigint;
    v_msg     jsonb;
    v_blocked profile.inbox_lanes;
BEGIN
    SELECT i.priority, i.lane INTO v_prio, v_lane FROM profile.inbox i WHERE i.id = p_id;
    IF FOUND THEN
        SELECT * INTO v_blocked FROM profile.inbox_lanes l WHERE l.priority = v_prio AND l.lane = v_lane FOR UPDATE;
        SELECT min(i.id) INTO v_head FROM profile.inbox i WHERE i.priority = v_prio AND i.lane = v_lane;
        DELETE FROM profile.inbox i WHERE i.id = p_id RETURNING i.message INTO v_msg;
    END IF;
    IF v_msg IS NULL THEN
        RAISE EXCEPTION 'no inbox message %', p_id USING ERRCODE = 'SLNFD',
            HINT = 'It was applied already, or never accepted: see SELECT * FROM api.profile_inbox_blocked_lanes.';
    END IF;
    UPDATE profile.inbox_lanes l SET attempts = 0, retry_at = NULL
    WHERE l.priority = v_prio AND l.lane = v_lane AND l.attempts > 0 AND v_head = p_id;
    RETURN profile_private.dead_letter_add(v_msg, 'SPSKP',
        coalesce(p_reason,
                 CASE WHEN v_blocked.attempts > 0 AND v_head = p_id
                      THEN format('moved out of the inbox after %s failed attempts: %s', v_blocked.attempts, v_blocked.last_error) END,
                 'moved out of the inbox by an operator'),
        CASE WHEN v_blocked.attempts > 0 AND v_head = p_id
             THEN format('inbox message %s, %s lane %s, last SQLSTATE %s', p_id,
                         CASE v_prio WHEN 0 THEN 'high' ELSE 'low' END, v_lane, v_blocked.last_sqlstate)
             ELSE format('inbox message %s', p_id) END);
END
$$;
COMMENT ON FUNCTION api.profile_inbox_dead_letter(bigint, text) IS
    'Moves a waiting inbox message to profile.dead_letters (SQLSTATE SPSKP, reason p_reason or the lane''s last error) instead of applying it, and unblocks its lane when it was the message the lane waited at; returns the dead letter id. Waits for a step holding the lane. Raises SLNFD when the message is not in the inbox.';

-- profile_private.inbox_relane: internal (called when the updater.lanes setting changes). Moves every
-- waiting message to its lane among p_lanes lanes and makes the lane rows match. It first locks
-- every lane (waiting for the steps in progress) and then profile.inbox against writes (waiting for
-- the enqueues in progress), so no message is applied or accepted meanwhile, and the messages of
-- one _id, all moved to one lane, keep their order. Retry state is reset: a failing message
-- blocks its new lane at its next attempt.
-- Raises: SLINV when p_lanes is not between 1 and 1024.
CREATE FUNCTION profile_private.inbox_relane(p_lanes integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_lanes IS NULL OR p_lanes NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'updater.lanes must be between 1 and 1024' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(p_lanes::text, 'NULL'));
    END IF;
    PERFORM 1 FROM profile.inbox_lanes l ORDER BY l.priority, l.lane FOR UPDATE;
    LOCK TABLE profile.inbox IN EXCLUSIVE MODE;
    IF (SELECT count(*) FILTER (WHERE l.lane < p_lanes) = 2 * p_lanes AND count(*) = 2 * p_lanes
        FROM profile.inbox_lanes l) THEN
        RETURN;
    END IF;
    UPDATE profile.inbox i SET lane = profile_private.inbox_lane(i.message, p_lanes)
    WHERE i.lane <> profile_private.inbox_lane(i.message, p_lanes);
    DELETE FROM profile.inbox_lanes l WHERE l.lane >= p_lanes;
    INSERT INTO profile.inbox_lanes (priority, lane)
    SELECT p, l FROM generate_series(0, 1) AS p, generate_series(0, p_lanes - 1) AS l
    ON CONFLICT DO NOTHING;
    UPDATE profile.inbox_lanes l SET attempts = 0, retry_at = NULL WHERE l.attempts > 0;
END
$$;
COMMENT ON FUNCTION profile_private.inbox_relane(integer) IS
    'Internal: re-lanes the inbox for a new updater.lanes (1 to 1024): waits for steps and enqueues in progress, moves every waiting message to hashtext(_id) modulo p_lanes, adds or removes lane rows, resets retry state. Raises SLINV for a lane count out of range.';

-- profile_private.updater_setting_error: internal. Why value p_value is not valid for updater setting
-- p_key; NULL when it is (or the key is not one of the updater's).
-- Raises: nothing.
CREATE FUNCTION profile_private.updater_setting_error(p_key text, p_value text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_key = 'updater.lanes' AND NOT (p_value ~ '^\s*\d{1,4}\s*$' AND p_value::integer BETWEEN 1 AND 1024)
            THEN 'an integer from 1 to 1024'
        WHEN p_key IN ('updater.batch_size', 'updater.lanes_per_step', 'updater.retry_base_ms')
             AND NOT (p_value ~ '^\s*\d{1,9}\s*$' AND p_value::integer >= 1)
            THEN 'a positive integer'
        WHEN p_key IN ('updater.retry_max_ms', 'updater.lag_barrier', 'updater.check_interval_ms',
                       'updater.wait_time_ms', 'updater.long_running_ms')
             AND p_value !~ '^\s*\d{1,9}\s*$'
            THEN 'an integer of at least 0'
        WHEN p_key = 'updater.throttle_enabled' AND p_value IS DISTINCT FROM 'true' AND p_value IS DISTINCT FROM 'false'
            THEN 'true or false'
        WHEN p_key = 'updater.unexpected_errors' AND p_value IS DISTINCT FROM 'retry' AND p_value IS DISTINCT FROM 'dead_letter'
            THEN 'retry or dead_letter'
    END;
$$;
COMMENT ON FUNCTION profile_private.updater_setting_error(text, text) IS
    'Internal: what an updater.* setting must be when p_value is not valid for p_key; NULL when it is valid.';

-- profile_private.tg_settings__updater: internal. BEFORE INSERT, UPDATE or DELETE trigger of silo.settings:
-- refuses an invalid value of an updater.* setting and re-lanes the inbox when updater.lanes
-- changes (a deleted updater.lanes means the default, 64).
-- Raises: SLINV for an invalid updater.* value.
CREATE FUNCTION profile_private.tg_settings__updater()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_error text;
BEGIN
    IF TG_OP <> 'DELETE' AND NEW.key LIKE 'updater.%' THEN
        v_error := profile_private.updater_setting_error(NEW.key, NEW.value);
        IF v_error IS NOT NULL THEN
            RAISE EXCEPTION 'setting % must be %', NEW.key, v_error USING ERRCODE = 'SLINV',
                DETAIL = format('got %s', coalesce(NEW.value, 'NULL'));
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.key = 'updater.lanes' THEN
        PERFORM profile_private.inbox_relane(NEW.value::integer);
    ELSIF TG_OP <> 'INSERT' AND OLD.key = 'updater.lanes' THEN
        PERFORM profile_private.inbox_relane(64);
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END
$$;
COMMENT ON FUNCTION profile_private.tg_settings__updater() IS
    'Internal: BEFORE trigger of silo.settings; checks updater.* values (SLINV when invalid) and re-lanes the inbox when updater.lanes changes.';

CREATE TRIGGER settings_updater BEFORE INSERT OR UPDATE OR DELETE ON silo.settings
    FOR EACH ROW EXECUTE FUNCTION profile_private.tg_settings__updater();
