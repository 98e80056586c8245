-- profile_private.dead_letter_add: internal. Records a rejected message and returns its id. The
-- filter columns take the message's _id, _profile_type (default _d) and _operation (default _set)
-- when they are strings, cut to 256 characters; the message is kept whole.
-- Raises: nothing.
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
    'Internal: records a rejected profile update message in profile.dead_letters and returns its id.';

-- api.profile_dead_letter_list: dead letters in id order, after p_after_id (keyset paging), at
-- most p_limit (default 100, capped at 1000). NULL filters are ignored; p_resolved true lists the
-- resolved ones, false the unresolved ones.
-- Raises: nothing.
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
    'Lists dead letters by ascending id after p_after_id (keyset paging), at most p_limit (default 100, at most 1000); NULL filters are ignored.';

-- api.profile_dead_letter_replay: applies a dead letter's message again. On ok or noop the dead
-- letter is marked resolved. On failure no new dead letter is written: the existing one gets the
-- new reason, sqlstate and context, replay_count + 1 and last_replayed.
-- Raises: SLNFD when there is no dead letter p_id, SLCNF when it is already resolved.
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
    'Applies a dead letter''s message again: on ok or noop marks it resolved; on failure updates its reason, sqlstate, context, replay_count and last_replayed (no new dead letter). Raises SLNFD for an unknown id, SLCNF when already resolved.';

-- api.profile_dead_letter_trim: deletes dead letters that a replay resolved longer than
-- p_retention ago, and returns how many. Unresolved dead letters are never trimmed: they are data
-- waiting for a replay.
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
    'Deletes dead letters resolved (successfully replayed) more than p_retention ago; returns the count. Unresolved dead letters are kept until replayed.';
