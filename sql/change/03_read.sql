-- Change notifications, reading and trimming the log: the hub's feed (api.changes_after), a
-- resuming subscriber's replay (api.changes_since, api.change_resume), the state for DBAs
-- (api.change_status) and the periodic trim (api.change_trim).

-- api.changes_after: every change after id p_after, oldest first, at most p_limit (1..10000),
-- unfiltered. What each Silo process reads after a silo_changes notification to fan changes out to
-- its subscribers (which it filters with the rule at the top of this file).
-- Raises: SLINV when p_limit is outside 1..10000.
CREATE FUNCTION api.changes_after(p_after bigint, p_limit integer DEFAULT 1000)
RETURNS SETOF silo.changes
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, got %', p_limit USING ERRCODE = 'SLINV';
    END IF;
    RETURN QUERY
        SELECT c.* FROM silo.changes c
        WHERE c.id > coalesce(p_after, 0)
        ORDER BY c.id
        LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION api.changes_after(bigint, integer) IS
    'Every change after id p_after, oldest first, at most p_limit (1..10000), without filtering: the feed of the websocket hub. Raises SLINV for a bad limit.';

-- api.changes_since: the changes after id p_after that a subscriber receives: on one of the
-- channels p_channels (patterns: exact, or ending in * for a prefix) and visible to it (p_is_admin,
-- or its readers p_readers overlap the change's readers), oldest first, at most p_limit (1..10000).
-- This is the rule the websocket hub applies to live changes (server/hub.go mirrors it). Resuming
-- subscribers page through it with the id of the last row.
-- Raises: SLINV for a bad limit, more than 1000 patterns, or a pattern that is NULL, empty, longer
-- than 1000 characters or has a * before its end; SCEXP when the log has been trimmed past
-- p_after (changes after it may be gone: api.change_resume says where to go on from).
CREATE FUNCTION api.changes_since(p_after bigint, p_channels text[], p_readers text[], p_is_admin boolean,
                                  p_limit integer DEFAULT 1000)
RETURNS SETOF silo.changes
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_exact   text[];
    v_like    text[];
    v_horizon bigint;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, got %', p_limit USING ERRCODE = 'SLINV';
    END IF;
    IF cardinality(p_channels) > 1000 THEN
        RAISE EXCEPTION 'at most 1000 channels, got %', cardinality(p_channels) USING ERRCODE = 'SLINV';
    END IF;
    IF EXISTS (SELECT FROM unnest(p_channels) AS c
               WHERE c IS NULL OR c = '' OR length(c) > 1000 OR strpos(left(c, -1), '*') > 0) THEN
        RAISE EXCEPTION 'invalid channel: %', (SELECT coalesce(c, 'NULL') FROM unnest(p_channels) AS c
                                               WHERE c IS NULL OR c = '' OR length(c) > 1000 OR strpos(left(c, -1), '*') > 0
                                               LIMIT 1)
            USING ERRCODE = 'SLINV',
                  HINT = 'A channel is a non-empty name such as profile:customer:0815, dead-letters or reaper, at most 1000 characters; a * is allowed only at the end (profile:customer:*).';
    END IF;
    -- One snapshot for the whole function (STABLE): the horizon and the rows agree.
    SELECT h.trimmed_through INTO v_horizon FROM silo.change_horizon h;
    IF coalesce(p_after, 0) < coalesce(v_horizon, 0) THEN
        RAISE EXCEPTION 'the change log has been trimmed past %', coalesce(p_after, 0) USING ERRCODE = 'SCEXP',
            DETAIL = format('Changes up to id %s are no longer kept (silo.settings change_retention).', v_horizon),
            HINT = 'Reload the state you follow, then resume after the id api.change_resume returns.';
    END IF;
    SELECT array_agg(c) FILTER (WHERE right(c, 1) <> '*'),
           array_agg(replace(replace(replace(left(c, -1), '\', '\\'), '%', '\%'), '_', '\_') || '%')
               FILTER (WHERE right(c, 1) = '*')
    INTO v_exact, v_like
    FROM unnest(p_channels) AS c;
    RETURN QUERY
        SELECT c.*
        FROM silo.changes c
        WHERE c.id > coalesce(p_after, 0)
          AND (c.channel = ANY (v_exact) OR c.channel LIKE ANY (v_like))
          AND (coalesce(p_is_admin, false) OR c.readers && p_readers)
        ORDER BY c.id
        LIMIT p_limit;
END
$$;
COMMENT ON FUNCTION api.changes_since(bigint, text[], text[], boolean, integer) IS
    'Changes after id p_after on channels p_channels (exact names, or prefixes ending in *) that a subscriber with readers p_readers (or an admin) may see, oldest first, at most p_limit (1..10000): the replay of a resuming websocket subscriber. Raises SLINV for bad arguments, SCEXP when the log was trimmed past p_after.';

-- api.change_resume: where a subscriber that last saw change p_after goes on from. status ok:
-- every change after p_after is still in the log (resume_after = p_after). expired: the log was
-- trimmed past p_after, changes may have been missed; the kept ones follow resume_after (the trim
-- horizon). ahead: p_after is beyond every id this log has handed out (the database was restored or
-- replaced); resume_after is the highest change id. Also returns the trim horizon and the highest
-- change id.
-- Raises: nothing.
CREATE FUNCTION api.change_resume(
    p_after bigint,
    OUT status text,
    OUT resume_after bigint,
    OUT trimmed_through bigint,
    OUT last_id bigint)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_seq    bigint;
    v_called boolean;
BEGIN
    SELECT h.trimmed_through INTO trimmed_through FROM silo.change_horizon h;
    trimmed_through := coalesce(trimmed_through, 0);
    last_id := greatest(coalesce((SELECT max(c.id) FROM silo.changes c), 0), trimmed_through);
    SELECT s.last_value, s.is_called INTO v_seq, v_called FROM silo.change_id_seq s;
    IF NOT v_called THEN
        v_seq := v_seq - 1;
    END IF;
    IF coalesce(p_after, 0) < trimmed_through THEN
        status := 'expired';
        resume_after := trimmed_through;
    ELSIF coalesce(p_after, 0) > greatest(v_seq, last_id) THEN
        status := 'ahead';
        resume_after := last_id;
    ELSE
        status := 'ok';
        resume_after := coalesce(p_after, 0);
    END IF;
END
$$;
COMMENT ON FUNCTION api.change_resume(bigint) IS
    'Where a subscriber that last saw change p_after goes on from: status ok (nothing lost, resume_after = p_after), expired (the log was trimmed past p_after; resume_after is the trim horizon) or ahead (p_after was never handed out by this log; resume_after is the highest id); with the trim horizon and the highest change id.';

-- api.change_status: the state of the change log for DBAs and for a starting Silo process:
-- last_id the highest change id (0: none; the trim horizon when the log is empty), oldest_id the
-- lowest id kept (NULL: none), trimmed_through the trim horizon, pending the rows waiting for
-- api.change_sequence, retention the change_retention setting.
-- Raises: nothing.
CREATE FUNCTION api.change_status(
    OUT last_id bigint,
    OUT oldest_id bigint,
    OUT trimmed_through bigint,
    OUT pending bigint,
    OUT retention text)
LANGUAGE sql STABLE
AS $$
    SELECT greatest(coalesce((SELECT max(c.id) FROM silo.changes c), 0), h.trimmed_through),
           (SELECT min(c.id) FROM silo.changes c),
           h.trimmed_through,
           (SELECT count(*) FROM silo.change_pending),
           settings_private.setting('change_retention', '24 hours')
    FROM silo.change_horizon h;
$$;
COMMENT ON FUNCTION api.change_status() IS
    'State of the change log: last_id (highest change id), oldest_id (lowest kept), trimmed_through (trim horizon), pending (rows waiting for api.change_sequence), retention (silo.settings change_retention).';

-- api.change_trim: deletes the changes sequenced more than p_retention ago (NULL: silo.settings
-- change_retention, default 24 hours) and every change with a lower id, moves the trim horizon,
-- and deletes pending changes written before the same cutoff (left pending because no Silo process
-- listened: they would be past the retention once sequenced). Returns how many rows it deleted
-- from both tables. It does not take the sequencer's lock, so sequencing goes on while it runs.
-- Run by a River periodic job (queue maintenance).
-- Raises: SLINV when the retention (argument or setting) is negative or not an interval.
CREATE FUNCTION api.change_trim(p_retention interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_retention interval := p_retention;
    v_upto      bigint;
    v_n         bigint;
    v_m         bigint;
BEGIN
    IF v_retention IS NULL THEN
        v_retention := settings_private.setting_interval('change_retention', '24 hours');
    ELSIF v_retention < interval '0' THEN
        RAISE EXCEPTION 'change retention must not be negative, got %', v_retention USING ERRCODE = 'SLINV';
    END IF;
    DELETE FROM silo.change_pending p WHERE p.created < now() - v_retention;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT max(c.id) INTO v_upto FROM silo.changes c WHERE c.sequenced < now() - v_retention;
    IF v_upto IS NULL THEN
        RETURN v_n;
    END IF;
    DELETE FROM silo.changes c WHERE c.id <= v_upto;
    GET DIAGNOSTICS v_m = ROW_COUNT;
    UPDATE silo.change_horizon h SET trimmed_through = greatest(h.trimmed_through, v_upto);
    RETURN v_n + v_m;
END
$$;
COMMENT ON FUNCTION api.change_trim(interval) IS
    'Deletes changes sequenced more than p_retention ago (NULL: silo.settings change_retention) with every lower id, moves the trim horizon (silo.change_horizon), and deletes pending changes older than the same cutoff; returns the rows deleted. Raises SLINV for a negative or unreadable retention.';
