-- Profile store, asynchronous updater, the operators' side (the message path and the updater's
-- rules are in sql/profile/11_updater.sql): the state of the streams (api.profile_updater_status:
-- the backlog that scaling reads, the throttle the workers obey), the lanes blocked after
-- transient errors (api.profile_inbox_blocked_lanes: a deterministic error, by api.error_class,
-- dead-letters its message instead) and how to unblock one (api.profile_inbox_dead_letter).
-- The updater.* settings are checked by a trigger of silo.settings when a DBA writes them, not when
-- a worker reads them, so a bad value is refused at once instead of failing every step; a new
-- updater.lanes re-lanes the waiting messages in the same transaction, so every _id keeps one lane
-- and its order.

-- The throttle decision is taken here, in one place, so every worker of the low stream takes the
-- same one; the workers read this view again every check_interval_ms.
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
    'The state of the asynchronous updater, one row per stream: priority (high, low), backlog (messages in the inbox: the scaling signal), oldest (acceptance time of the oldest waiting message), blocked_lanes (lanes waiting after an unexpected error), throttled (low stream only: updater.throttle_enabled and the high backlog above updater.lag_barrier), wait_ms (updater.wait_time_ms: the pause per message while throttled), check_interval_ms (updater.check_interval_ms: how long workers keep the decision), long_running_ms (updater.long_running_ms: the warning threshold of a step).';

-- A lane applies in id order and stops at the failing message, so the message it waits at is its
-- oldest: the view reads the head of the lane rather than a recorded id.
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
    'Inbox lanes waiting after a transient unexpected error (api.error_class; with updater.unexpected_errors retry, the default): priority (high, low), lane, attempts, retry_at, last_failed, last_sqlstate, last_error, the message the lane waits at (message_id, correlation_id, message, accepted) and waiting (how many messages wait in the lane). api.profile_inbox_dead_letter(message_id) moves that message to the dead letter table.';

-- It locks the lane's row as a step does, so it waits for a step that holds the lane and never
-- races a worker; the message is deleted after the lock, so one that step applied is not found.
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
    'Moves inbox message p_id to profile.dead_letters instead of applying it: for a message that blocks its lane with an error that will not go away. Waits for a step that holds the message''s lane. The dead letter has SQLSTATE SPSKP and reason p_reason (default NULL: the lane''s last error when the message is the one its blocked lane waits at, else moved out of the inbox by an operator); when it was that message, the lane is ready again at once. Returns the dead letter''s id (replay it with api.profile_dead_letter_replay). Publishes the dead letter on change channel dead-letters (kind dead_letter, admins only). Raises SLNFD when no message p_id waits in the inbox (applied already, or never accepted).';

-- It first locks every lane (waiting for the steps in progress) and then profile.inbox against
-- writes (waiting for the enqueues in progress), the order in which a step takes its locks, so no
-- message is applied or accepted meanwhile, and the messages of one _id, all moved to one lane,
-- keep their order. Retry state is reset rather than moved: a failing message blocks its new lane
-- at its next attempt.
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
    'Re-lanes the inbox for p_lanes lanes (the new updater.lanes, 1 to 1024): waits for the steps and enqueues in progress, moves every waiting message to its lane among p_lanes (profile_private.inbox_lane), adds and removes rows of profile.inbox_lanes to match, and resets the retry state of every lane; does nothing more when the lanes already match. Called by the trigger of silo.settings when updater.lanes is written. Raises SLINV when p_lanes is NULL or not between 1 and 1024.';

-- Apart from the trigger, so that the rules of every updater.* value are in one place and can be
-- tried from psql.
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
    'Whether p_value is a valid value of updater setting p_key: NULL when it is (or p_key is not one of the updater''s settings), else what the value must be (such as an integer from 1 to 1024), for the error message. Raises nothing.';

-- BEFORE, so a refused value never reaches the table, and the re-laning runs in the transaction
-- that writes the setting: the new lane count and the moved messages commit together.
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
    'BEFORE INSERT, UPDATE or DELETE row trigger of silo.settings (trigger settings_updater): refuses an invalid value of an updater.* setting (profile_private.updater_setting_error) and re-lanes the inbox (profile_private.inbox_relane) when updater.lanes is written, or for the default 64 when it is deleted or renamed. Raises SLINV for an invalid updater.* value.';

CREATE TRIGGER settings_updater BEFORE INSERT OR UPDATE OR DELETE ON silo.settings
    FOR EACH ROW EXECUTE FUNCTION profile_private.tg_settings__updater();
