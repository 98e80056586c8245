-- Profile store, dead letters: profile update messages that could not be applied, kept whole in
-- profile.dead_letters with why (SQLSTATE, reason, context), and what operators do with them: list,
-- replay, trim. A rejected update never stops its batch, so this table is where bad input waits for
-- a person: a replay that fails again updates its dead letter instead of adding one, and only
-- resolved dead letters are ever trimmed.

-- The filter columns are cut to 256 characters so that recording a rejection never fails on an
-- oversized field (correlation_id and profile_type are indexed); the message is kept whole.
CREATE FUNCTION profile_private.dead_letter_add(p_message jsonb, p_sqlstate text, p_reason text, p_context text)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO profile.dead_letters (message, reason, sqlstate, context, correlation_id, profile_type, operation)
    VALUES (
        p_message, p_reason, p_sqlstate, p_context,
        CASE WHEN jsonb_typeof(p_message -> '_id') = 'string' THEN left(p_message ->> '_id', 256) END,
        CASE WHEN jsonb_typeof(p_message) <> 'object' THEN NULL
             WHEN coalesce(p_message -> '_profile_type', 'null') = 'null' THEN '_d'
             WHEN jsonb_typeof(p_message -> '_profile_type') = 'string' THEN left(p_message ->> '_profile_type', 256) END,
        CASE WHEN jsonb_typeof(p_message) <> 'object' THEN NULL
             WHEN coalesce(p_message -> '_operation', 'null') = 'null' THEN '_set'
             WHEN jsonb_typeof(p_message -> '_operation') = 'string' THEN left(p_message ->> '_operation', 256) END)
    RETURNING id;
$$;
COMMENT ON FUNCTION profile_private.dead_letter_add(jsonb, text, text, text) IS
    'Records a rejected profile update message in profile.dead_letters and returns the new id. p_message: the message as received, kept whole whatever its JSON type; p_sqlstate, p_reason, p_context: why it was rejected (the SQLSTATE and the reason must not be NULL). The filter columns correlation_id, profile_type and operation take the message''s _id, _profile_type (default _d) and _operation (default _set) when they are strings, cut to 256 characters. The insert publishes a change on channel dead-letters (trigger of profile.dead_letters). Raises nothing of its own.';

-- Keyset paging by id rather than OFFSET: a page costs the same however deep it is, and pages do not
-- shift while new dead letters arrive.
CREATE FUNCTION api.profile_dead_letter_list(
    p_correlation_id text DEFAULT NULL,
    p_profile_type text DEFAULT NULL,
    p_operation text DEFAULT NULL,
    p_sqlstate text DEFAULT NULL,
    p_resolved boolean DEFAULT NULL,
    p_after_id bigint DEFAULT 0,
    p_limit integer DEFAULT 100)
RETURNS SETOF profile.dead_letters
LANGUAGE sql STABLE
AS $$
    SELECT d.*
    FROM profile.dead_letters d
    WHERE d.id > coalesce(p_after_id, 0)
      AND (p_correlation_id IS NULL OR d.correlation_id = p_correlation_id)
      AND (p_profile_type IS NULL OR d.profile_type = p_profile_type)
      AND (p_operation IS NULL OR d.operation = p_operation)
      AND (p_sqlstate IS NULL OR d.sqlstate = p_sqlstate)
      AND (p_resolved IS NULL OR (d.resolved IS NOT NULL) = p_resolved)
    ORDER BY d.id
    LIMIT least(greatest(coalesce(p_limit, 100), 0), 1000);
$$;
COMMENT ON FUNCTION api.profile_dead_letter_list(text, text, text, text, boolean, bigint, integer) IS
    'Lists dead letters, rows of profile.dead_letters, by ascending id. Every argument has a default, so psql users name only the filters they need. p_correlation_id, p_profile_type, p_operation, p_sqlstate (default NULL: any): keep exact matches only. p_resolved (default NULL: both): true lists the resolved dead letters only, false the unresolved ones only. p_after_id (default 0; NULL counts as 0): list ids after it, for keyset paging (pass the last id of the previous page). p_limit (default 100; NULL counts as 100, below 0 as 0): at most that many rows, never more than 1000. Raises nothing.';

-- The dead letter is locked (FOR UPDATE) before its message is applied, so two concurrent replays
-- of one message cannot both apply it: the second finds it resolved. A failure updates the dead
-- letter instead of adding one, so a message keeps one dead letter however often it is replayed.
CREATE FUNCTION api.profile_dead_letter_replay(
    p_id bigint,
    OUT status text,
    OUT operation text,
    OUT correlation_id text,
    OUT sqlstate text,
    OUT reason text,
    OUT dead_letter_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_dl     profile.dead_letters;
    v_r      profile_private.apply_result;
    v_detail text;
BEGIN
    SELECT d.* INTO v_dl FROM profile.dead_letters d WHERE d.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter not found' USING ERRCODE = 'SLNFD',
            DETAIL = format('There is no dead letter with id %s.', p_id);
    END IF;
    IF v_dl.resolved IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter already resolved' USING ERRCODE = 'SLCNF',
            DETAIL = format('Dead letter %s was resolved at %s.', p_id, v_dl.resolved);
    END IF;
    BEGIN
        SELECT * INTO STRICT v_r FROM profile_private.apply_core(jsonb_build_array(v_dl.message), 0, false);
    EXCEPTION WHEN OTHERS THEN
        v_r.status := 'dead_letter';
        GET STACKED DIAGNOSTICS v_r.sqlstate = RETURNED_SQLSTATE, v_r.reason = MESSAGE_TEXT,
                                v_detail = PG_EXCEPTION_DETAIL, v_r.context = PG_EXCEPTION_CONTEXT;
        v_r.reason := v_r.reason || coalesce(nullif(': ' || v_detail, ': '), '');
        v_r.operation := v_dl.operation;
        v_r.correlation_id := v_dl.correlation_id;
    END;
    IF v_r.status = 'dead_letter' THEN
        UPDATE profile.dead_letters d
        SET reason = v_r.reason, sqlstate = v_r.sqlstate, context = v_r.context,
            replay_count = d.replay_count + 1, last_replayed = now()
        WHERE d.id = p_id;
    ELSE
        UPDATE profile.dead_letters d SET resolved = now(), last_replayed = now() WHERE d.id = p_id;
    END IF;
    status := v_r.status;
    operation := v_r.operation;
    correlation_id := v_r.correlation_id;
    sqlstate := v_r.sqlstate;
    reason := v_r.reason;
    dead_letter_id := p_id;
END
$$;
COMMENT ON FUNCTION api.profile_dead_letter_replay(bigint) IS
    'Applies a dead letter''s message again, as a batch of one (a message without _in takes the time of the replay). p_id (no default): the dead letter''s id. On ok or noop the dead letter is marked resolved (resolved and last_replayed set). When the message is rejected again, or applying it raises an unexpected error (caught, its writes rolled back), no new dead letter is written: the existing one gets the new reason, sqlstate and context, replay_count + 1 and last_replayed. Returns one row: status (ok, noop, dead_letter), operation, correlation_id (the profile the update addresses, after profile links), sqlstate and reason of a rejection, dead_letter_id (p_id). Publishes the grains it writes and deletes, like api.profile_apply_batch, but no dead-letters change. Raises SLNFD when there is no dead letter p_id (p_id NULL included), SLCNF when it is already resolved.';

-- Unresolved dead letters are never trimmed: they are data waiting for a replay.
CREATE FUNCTION api.profile_dead_letter_trim(p_retention interval)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (
        DELETE FROM profile.dead_letters d
        WHERE d.resolved IS NOT NULL AND d.resolved < now() - p_retention
        RETURNING 1
    )
    SELECT count(*) FROM gone;
$$;
COMMENT ON FUNCTION api.profile_dead_letter_trim(interval) IS
    'Deletes the dead letters resolved (replayed with success) more than p_retention ago and returns how many it deleted. p_retention (no default): how long resolved dead letters are kept; NULL deletes none, a negative interval every resolved one. Unresolved dead letters are never deleted. The periodic job profile_dead_letter_trim (worker/profile_dead_letter.go) calls it with the configured retention. Raises nothing.';
