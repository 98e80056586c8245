-- Change notifications, reading and trimming the log: the websocket hub's feed
-- (api.changes_after), a resuming subscriber's replay (api.changes_since, api.change_resume), the
-- check of a subscription (api.change_channels_check), the state for DBAs (api.change_status) and
-- the periodic trim (api.change_trim). Every read is by id range, because ids are the resume
-- positions; the trim horizon (silo.change_horizon) tells a resuming subscriber whether the changes
-- after its id are all still there.

-- Unfiltered on purpose: each process reads a change once and filters it in memory for all its
-- subscribers.
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
    'Every change after id p_after (NULL counts as 0), oldest first, at most p_limit (default 1000, 1..10000), without filtering: rows of silo.changes (id, channel, kind, payload, readers, created, sequenced). The feed of the websocket hub, which filters it per subscriber with the rule of api.changes_since (specified in sql/change/01_publish.sql). Raises SLINV when p_limit is NULL or outside 1..10000.';

-- This is the rule the websocket hub applies to live changes, which it mirrors in memory. The
-- patterns are split once into exact names (= ANY) and prefixes (LIKE ANY, with \, % and _ escaped
-- so that they match only themselves), so that one query serves every pattern.
CREATE FUNCTION api.changes_since(p_after bigint, p_channels text[], p_readers text[], p_is_admin boolean,
                                  p_limit integer DEFAULT 1000)
RETURNS SETOF silo.changes
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_exact   text[];
    v_like    text[];
    v_horizon bigint;
    v_bad     text;
    v_problem text;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, got %', p_limit USING ERRCODE = 'SLINV';
    END IF;
    IF cardinality(p_channels) > 1000 THEN
        RAISE EXCEPTION 'at most 1000 channels, got %', cardinality(p_channels) USING ERRCODE = 'SLINV';
    END IF;
    SELECT coalesce(c.c, 'NULL'), c.problem INTO v_bad, v_problem
    FROM (SELECT x AS c, change_private.channel_problem(x, true) AS problem FROM unnest(p_channels) AS x) c
    WHERE c.problem IS NOT NULL
    LIMIT 1;
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid channel %: %', v_bad, v_problem USING ERRCODE = 'SLINV', HINT = change_private.channel_hint();
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
    'The changes after id p_after (NULL counts as 0) that a subscriber receives, oldest first, at most p_limit (default 1000, 1..10000): rows of silo.changes (id, channel, kind, payload, readers, created, sequenced). p_channels: up to 1000 patterns, each a channel name or a prefix ending in * (* alone: every channel); NULL or empty: no rows. p_readers: the subscriber''s readers (_all, _auth and its roles, as api.token_authenticate returns them); a change is visible when they overlap its readers. p_is_admin (NULL counts as false): sees every change. The replay of a resuming websocket subscriber, which pages through it with the id of the last row. Raises SLINV when p_limit is NULL or outside 1..10000, for more than 1000 patterns, or for a pattern that is no subscription pattern (change_private.channel_problem: NULL, empty, longer than 1000 characters, a * before its end, or matching no possible channel, such as bogus); SCEXP when the log has been trimmed past p_after (changes after it may be gone: api.change_resume says where to go on from).';

-- The websocket hub asks this before it subscribes anyone, so that a client hears at once what it
-- will never receive instead of waiting for it; api.changes_since applies the same rule of names.
-- One row per refused pattern, in the order given: the hub answers each with an error of its own.
CREATE FUNCTION api.change_channels_check(p_channels text[], p_is_admin boolean DEFAULT false)
RETURNS TABLE (channel text, sqlstate text, message text, hint text)
LANGUAGE sql STABLE
AS $$
    SELECT v.c,
           CASE WHEN v.problem IS NOT NULL THEN 'SLINV' ELSE 'SLFRB' END,
           CASE WHEN v.problem IS NOT NULL
                THEN format('invalid channel %s: %s',
                            CASE WHEN length(v.c) > 100 THEN left(v.c, 100) || '...' ELSE coalesce(v.c, 'NULL') END,
                            v.problem)
                ELSE format('channel %s is for admins only: its changes have no readers', v.c) END,
           CASE WHEN v.problem IS NOT NULL THEN change_private.channel_hint() END
    FROM (SELECT x.c, x.ord, change_private.channel_problem(x.c, true) AS problem
          FROM unnest(p_channels) WITH ORDINALITY AS x(c, ord)) v
    WHERE v.problem IS NOT NULL
       OR (NOT coalesce(p_is_admin, false) AND change_private.channel_admin_only(v.c))
    ORDER BY v.ord;
$$;
COMMENT ON FUNCTION api.change_channels_check(text[], boolean) IS
    'The subscription patterns of p_channels a subscriber may not have, one row per refused pattern in the order given (none: all are fine): channel (the pattern), sqlstate (SLINV: not a subscription pattern, by the rule of change_private.channel_problem: NULL, empty, over 1000 characters, a * before its end, or matching no possible channel, such as bogus; SLFRB: a channel for admins only, change_private.named_channels, such as dead-letters, and p_is_admin is false), message (what is wrong, naming the pattern), hint (the rule of names for SLINV, NULL for SLFRB). p_is_admin (default false; NULL counts as false): the subscriber is an admin. The websocket hub calls it before it subscribes anyone; api.changes_since refuses the same invalid patterns (SLINV) and filters out what a subscriber may not see. Raises nothing.';

-- ahead is judged against the sequence as well as the log: every id a run has drawn counts as
-- handed out, even one whose rows this snapshot does not show.
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
    'Where a subscriber that last saw change p_after (NULL counts as 0) goes on from. One row: status ok (every change after p_after is still in the log; resume_after = p_after), expired (the log was trimmed past p_after, changes may have been missed; the kept ones follow resume_after, the trim horizon) or ahead (p_after is beyond every id this log has handed out: the database was restored or replaced; resume_after is the highest change id); trimmed_through, the trim horizon; last_id, the highest change id (the trim horizon when the log is empty). Raises nothing.';

CREATE FUNCTION api.change_status(
    OUT last_id bigint,
    OUT oldest_id bigint,
    OUT trimmed_through bigint,
    OUT pending bigint,
    OUT retention text,
    OUT sequencer_awake_until timestamptz)
LANGUAGE sql VOLATILE
AS $$
    SELECT greatest(coalesce((SELECT max(c.id) FROM silo.changes c), 0), h.trimmed_through),
           (SELECT min(c.id) FROM silo.changes c),
           h.trimmed_through,
           (SELECT count(*) FROM silo.change_pending),
           settings_private.setting('change_retention', '24 hours'),
           (SELECT to_timestamp((s.last_value / 1000000) / 1000.0) FROM silo.change_sequencer_awake s
            WHERE change_private.sequencer_awake())
    FROM silo.change_horizon h;
$$;
COMMENT ON FUNCTION api.change_status() IS
    'The state of the change log, for DBAs and for a starting Silo process (whose websocket hub starts its feed at last_id). One row: last_id, the highest change id (0: none yet; the trim horizon when the log is empty); oldest_id, the lowest id kept (NULL: the log is empty); trimmed_through, the trim horizon; pending, the rows of silo.change_pending waiting for api.change_sequence; retention, the silo.settings value change_retention as written (default 24 hours); sequencer_awake_until, until when a websocket hub is awake and sequences by itself, so that writers do not notify silo_change_pending (NULL: every hub is asleep; sql/change/02_sequence.sql). No arguments; raises nothing.';

-- Deletes by id, up to the newest expired change, so that the log stays every change after the
-- horizon and the horizon is exact. It does not take the sequencer's lock, so sequencing goes on
-- while it runs: new ids are all higher than the ones it deletes. Pending changes past the cutoff
-- were left because no Silo process sequenced them; numbered now, they would be past the retention
-- already.
CREATE FUNCTION api.change_trim(p_retention interval DEFAULT NULL, p_now timestamptz DEFAULT now())
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
    DELETE FROM silo.change_pending p WHERE p.created < p_now - v_retention;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    SELECT max(c.id) INTO v_upto FROM silo.changes c WHERE c.sequenced < p_now - v_retention;
    IF v_upto IS NULL THEN
        RETURN v_n;
    END IF;
    DELETE FROM silo.changes c WHERE c.id <= v_upto;
    GET DIAGNOSTICS v_m = ROW_COUNT;
    UPDATE silo.change_horizon h SET trimmed_through = greatest(h.trimmed_through, v_upto);
    RETURN v_n + v_m;
END
$$;
COMMENT ON FUNCTION api.change_trim(interval, timestamptz) IS
    'Trims the change log: deletes the changes sequenced more than p_retention before p_now (default now()) (default NULL: silo.settings change_retention, default 24 hours) and every change with a lower id, moves the trim horizon (silo.change_horizon) to the highest id deleted, and deletes the pending changes created before the same cutoff. Returns the rows deleted from both tables. Subscribers resuming from below the new horizon get SCEXP from api.changes_since. Raises SLINV when the retention (argument or setting) is negative or the setting is not an interval. Run by silo work''s retention job (api.retention_run, target change).';
