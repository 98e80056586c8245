-- Change notifications: the change log behind the websocket hub (server/hub.go, GET /ws).
--
-- Public functions: api.change_sequence, api.change_announce, api.changes_after, api.changes_since,
-- api.change_resume, api.change_status, api.change_trim, api.changes_pending. The trigger functions and
-- api.change_expand are internal.
--
-- How a change travels:
-- 1. The transaction that makes a change inserts rows into silo.change_pending: the write path of
--    profile updates (api.profile_apply_round) and the triggers of profile.profilestore (every
--    other writer) and profile.dead_letters below, api.profile_reap for channel reaper.
--    The statement trigger of silo.change_pending calls pg_notify('silo_change_pending', '')
--    (identical notifications of one transaction collapse into one, delivered at commit), unless
--    the setting silo.change_notify is off.
-- 2. api.change_sequence, called by every Silo process that serves websockets when it hears
--    silo_change_pending (and once a second as a safety net), moves the committed pending rows into
--    silo.changes under an advisory lock and numbers them from silo.change_id_seq: the order of
--    silo.changes.id is the order in which changes became visible. The highest id is notified on
--    'silo_changes' (by the process, api.change_announce, right after the run).
-- 3. Each process reads the new rows once (api.changes_after) and fans them out in memory to its
--    websocket subscribers. A subscriber that (re)connects with the last id it saw first receives
--    every later change from the log (api.changes_since), then live ones.
-- 4. api.change_trim, a River periodic job (worker/changes.go), deletes changes older than the
--    retention in silo.settings (change_retention).
--
-- Channels and kinds written here:
-- * profile:{profile_type}:{correlation_id}: kind changed (grains inserted or updated) or deleted
--   (grain pits deleted); payload {"profile_type", "correlation_id", "paths": [...]}, the distinct
--   grain paths the statement touched, sorted. One change per (profile, grain reader) and
--   statement, readers {that reader}, so a subscriber never learns a path it may not read. An update that
--   changes a grain's reader is announced to the old reader and to the new one. An update that
--   changes nothing but notify_at (the reaper marking a grain notified) is not a change of the
--   profile. Profile links are rows of profile type profile_link (path /new): their channel is
--   profile:profile_link:{correlation_id}.
-- * dead-letters: kind dead_letter; payload {"id", "correlation_id", "profile_type", "operation",
--   "sqlstate", "reason"}; readers {} (admins only).
-- * reaper: kinds ttl and ttn (sql/025_profile_reaper.sql).
--
-- Who sees a change (the one rule; server/hub.go mirrors it for live changes): an admin sees every
-- change; any other subscriber sees a change when its readers (_all, _auth and its roles, from
-- api.token_authenticate; the anonymous identity has only _all) overlap the change's readers. A
-- change whose readers are empty is for admins only.
--
-- silo.change_notify (a PostgreSQL setting; default on): PostgreSQL serializes the commits of
-- transactions that notify (each holds a database-wide lock from its pre-commit to the end of its
-- commit, including the WAL flush), so concurrent small write transactions that notify lose group
-- commit. Where write throughput matters more than a few milliseconds of latency, turn it off for
-- the database (ALTER DATABASE silo SET silo.change_notify = off) and restart the Silo processes:
-- writers then do not notify, and the processes, which read the setting when they connect, poll
-- api.change_sequence every 10 ms instead.
--
-- Which channels a subscription matches: a pattern matches a channel equal to it; a pattern ending
-- in * matches every channel that starts with what comes before the *, so profile:customer:*
-- matches every customer profile, profile:* every profile and * every channel. A * anywhere but
-- at the end is refused. (A profile type containing ':' makes profile:{type}:* match more than one
-- type; the payload's profile_type tells them apart.)

-- Profile changes are recorded cheaply, as compact pending rows: channel profile:*, column grains
-- the grain rows touched as a text array of four aligned rows: correlation ids, profile types,
-- readers, paths (api.change_grains). api.change_sequence expands them
-- (api.change_expand) into one change per profile and reader, as described above, off the write
-- path: the grouping and the payloads cost the writer nothing. api.changes_pending() shows what is
-- pending as the changes it will become.
--
-- Who records them:
-- * api.profile_apply_round, the write path of every profile update, records the grains its
--   statements wrote from their RETURNING rows, one compact row per statement and kind, and runs
--   with silo.change_triggers = off. That costs a fraction of what transition tables and trigger
--   calls cost.
-- * Every other write (the reaper's TTL deletes, a DBA's INSERT, UPDATE or DELETE in psql) is
--   recorded by the statement triggers below.
-- * A grain's reader that changes is recorded by a row trigger, whoever writes: the old reader
--   learns that the grain changed (it can no longer read it). It fires only for such rows.
--
-- Two PostgreSQL settings control this:
-- * silo.change_capture (default on): a session that sets it off writes profile changes nobody
--   hears of: neither the write path nor the triggers record them (a bulk load, a repair). Dead
--   letters and reaper events are still recorded. Subscribers who resume later miss those changes.
-- * silo.change_triggers (default on) is for Silo's own writers: off, the statement triggers stay
--   idle because the writer records its changes itself (api.profile_apply_round) or has none to
--   record (the reaper marking grains notified: notify_at alone is no change of the profile, the
--   reaper's own channel carries it).

-- api.change_grains: internal. The grains of a compact pending row of profile changes: their
-- correlation ids, profile types, readers and paths (aligned arrays of one length) as the four
-- rows of a text array.
-- Raises: nothing.
CREATE FUNCTION api.change_grains(p_correlation_id text[], p_profile_type text[], p_reader text[], p_path text[])
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY[p_correlation_id, p_profile_type, p_reader, p_path];
$$;
COMMENT ON FUNCTION api.change_grains(text[], text[], text[], text[]) IS
    'Internal: the grains of a compact pending row of profile changes (channel profile:*, column grains): correlation ids, profile types, readers and paths of the grains touched, as the four rows of a text array.';

-- api.change_capture_on: internal. Whether profile changes are recorded: the setting
-- silo.change_capture is not off.
-- Raises: nothing.
CREATE FUNCTION api.change_capture_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT current_setting('silo.change_capture', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION api.change_capture_on() IS
    'Internal: whether profile changes are recorded (the setting silo.change_capture is not off; off is for bulk loads nobody must hear of).';

-- api.change_triggers_on: internal. Whether the statement triggers of profile.profilestore record
-- changes: profile changes are recorded and the setting silo.change_triggers is not off.
-- Raises: nothing.
CREATE FUNCTION api.change_triggers_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT api.change_capture_on() AND current_setting('silo.change_triggers', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION api.change_triggers_on() IS
    'Internal: whether the statement triggers of profile.profilestore record changes (silo.change_capture and silo.change_triggers are not off; Silo''s update path turns the triggers off and records its own changes).';

-- api.tg_profilestore__change: internal. AFTER INSERT, UPDATE and DELETE statement trigger of
-- profile.profilestore: one compact pending row with the grain rows the statement wrote (kind
-- changed; updated rows under their new reader, the old one being recorded by the row trigger
-- below) or deleted (kind deleted), unless api.change_triggers_on() says otherwise. Each of its
-- triggers names its transition table grains.
-- Raises: nothing.
CREATE FUNCTION api.tg_profilestore__change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF api.change_triggers_on() THEN
        INSERT INTO silo.change_pending (channel, kind, grains)
        SELECT 'profile:*', CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'changed' END,
               api.change_grains(array_agg(g.correlation_id), array_agg(g.profile_type), array_agg(g.reader), array_agg(g.path))
        FROM grains g
        HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION api.tg_profilestore__change() IS
    'Internal: AFTER INSERT, UPDATE and DELETE statement trigger of profile.profilestore; records the grains written (kind changed, under their new reader) or deleted (kind deleted) as one compact pending change (channel profile:*), which api.change_sequence expands into one change per profile and grain reader. Does nothing while silo.change_capture or silo.change_triggers is off.';

-- api.tg_profilestore__reader_change: internal. AFTER UPDATE row trigger of profile.profilestore
-- for rows whose reader changed (whoever writes them): one compact pending row (kind changed) for
-- the grain under its old reader, so that subscribers who could read it learn that it changed,
-- unless silo.change_capture is off.
-- Raises: nothing.
CREATE FUNCTION api.tg_profilestore__reader_change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF api.change_capture_on() THEN
        INSERT INTO silo.change_pending (channel, kind, grains)
        VALUES ('profile:*', 'changed',
                api.change_grains(ARRAY[OLD.correlation_id], ARRAY[OLD.profile_type], ARRAY[OLD.reader], ARRAY[OLD.path]));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION api.tg_profilestore__reader_change() IS
    'Internal: AFTER UPDATE row trigger of profile.profilestore, for rows whose reader changed; records the grain under its old reader (channel profile:*, kind changed) so that subscribers who could read it learn that it changed. Does nothing while silo.change_capture is off.';

-- Multi-event triggers may not have transition tables: one trigger per event, one function.
CREATE TRIGGER profilestore_change_insert AFTER INSERT ON profile.profilestore
    REFERENCING NEW TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_profilestore__change();
CREATE TRIGGER profilestore_change_update AFTER UPDATE ON profile.profilestore
    REFERENCING NEW TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_profilestore__change();
CREATE TRIGGER profilestore_change_delete AFTER DELETE ON profile.profilestore
    REFERENCING OLD TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_profilestore__change();
CREATE TRIGGER profilestore_reader_change AFTER UPDATE OF reader ON profile.profilestore
    FOR EACH ROW WHEN (OLD.reader IS DISTINCT FROM NEW.reader)
    EXECUTE FUNCTION api.tg_profilestore__reader_change();

-- api.change_expand: internal. The changes a pending row stands for: itself, or, for a compact row
-- of profile changes (channel profile:*), one change per profile and reader (ordered by
-- correlation id, profile type, reader) with channel profile:{type}:{id}, payload {"profile_type",
-- "correlation_id", "paths": [the distinct paths, sorted]} and readers {reader}, from its grains.
-- Raises: nothing.
CREATE FUNCTION api.change_expand(p_channel text, p_kind text, p_payload jsonb, p_readers text[], p_grains text[])
RETURNS TABLE (ord bigint, channel text, kind text, payload jsonb, readers text[])
LANGUAGE sql STABLE
AS $$
    SELECT 1::bigint, p_channel, p_kind, p_payload, p_readers
    WHERE p_channel <> 'profile:*'
    UNION ALL
    SELECT row_number() OVER (ORDER BY g.c, g.t, g.r), 'profile:' || g.t || ':' || g.c, p_kind,
           jsonb_build_object('profile_type', g.t, 'correlation_id', g.c, 'paths', to_jsonb(g.paths)),
           ARRAY[g.r]
    FROM (
        SELECT x.c, x.t, x.r, array_agg(DISTINCT x.p) AS paths
        FROM unnest(p_grains[1:1], p_grains[2:2], p_grains[3:3], p_grains[4:4]) AS x(c, t, r, p)
        WHERE p_channel = 'profile:*'
        GROUP BY x.c, x.t, x.r
    ) g;
$$;
COMMENT ON FUNCTION api.change_expand(text, text, jsonb, text[], text[]) IS
    'Internal: the changes a pending row stands for, in order: the row itself, or for a compact row of profile changes (channel profile:*) one change per profile and grain reader (channel profile:{type}:{id}, payload profile_type, correlation_id, paths; readers {reader}).';

-- api.changes_pending: what is pending, as the changes api.change_sequence will make of it, in
-- the order it will number them.
-- Raises: nothing.
CREATE FUNCTION api.changes_pending()
RETURNS TABLE (pending_id bigint, channel text, kind text, payload jsonb, readers text[], created timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT p.pending_id, e.channel, e.kind, e.payload, e.readers, p.created
    FROM silo.change_pending p
    CROSS JOIN LATERAL api.change_expand(p.channel, p.kind, p.payload, p.readers, p.grains) e
    ORDER BY p.pending_id, e.ord;
$$;
COMMENT ON FUNCTION api.changes_pending() IS
    'The pending changes (silo.change_pending, compact rows expanded) as api.change_sequence will number them: pending_id, channel, kind, payload, readers, created.';

-- api.tg_dead_letters__change: internal. AFTER INSERT statement trigger of profile.dead_letters: one
-- pending change per dead letter on channel dead-letters (kind dead_letter, admins only).
-- Raises: nothing.
CREATE FUNCTION api.tg_dead_letters__change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    INSERT INTO silo.change_pending (channel, kind, payload, readers)
    SELECT 'dead-letters', 'dead_letter',
           jsonb_build_object('id', n.id, 'correlation_id', n.correlation_id, 'profile_type', n.profile_type,
                              'operation', n.operation, 'sqlstate', n.sqlstate, 'reason', n.reason),
           '{}'
    FROM new_rows n
    ORDER BY n.id;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION api.tg_dead_letters__change() IS
    'Internal: AFTER INSERT statement trigger of profile.dead_letters; records one change per dead letter (channel dead-letters, kind dead_letter, payload id, correlation_id, profile_type, operation, sqlstate, reason; readers empty: admins only).';

CREATE TRIGGER dead_letters_change AFTER INSERT ON profile.dead_letters
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_dead_letters__change();

-- api.tg_change_pending__notify: internal. AFTER INSERT statement trigger of silo.change_pending:
-- when the statement inserted rows, notifies silo_change_pending (empty payload) so that a
-- listening Silo process runs api.change_sequence after the commit; not when the setting
-- silo.change_notify is off. Identical notifications of one transaction are delivered once.
-- Raises: nothing. Notifies: silo_change_pending.
CREATE FUNCTION api.tg_change_pending__notify()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF current_setting('silo.change_notify', true) IS DISTINCT FROM 'off' AND EXISTS (SELECT FROM new_rows) THEN
        PERFORM pg_notify('silo_change_pending', '');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION api.tg_change_pending__notify() IS
    'Internal: AFTER INSERT statement trigger of silo.change_pending; notifies silo_change_pending (empty payload, once per transaction) when rows were inserted, unless the setting silo.change_notify is off.';

CREATE TRIGGER change_pending_notify AFTER INSERT ON silo.change_pending
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION api.tg_change_pending__notify();

-- api.change_sequence: moves the committed rows of silo.change_pending into silo.changes (a compact
-- row of profile changes becomes one change per profile and reader, api.change_expand), numbered
-- in pending_id order from silo.change_id_seq, and returns the highest change id (0 when there has
-- never been one). Runs under a transaction advisory lock, so runs are one at a time: a run starts
-- after the previous one committed, its statements see every change committed before, and its ids
-- are all higher than the previous run's. The order of ids is therefore the order in which changes
-- became visible, and a reader of "every change after id N" misses none. The ids of a run are drawn
-- as one block (setval under the lock), so they follow pending_id order exactly.
-- Commits synchronously, on purpose: with synchronous_commit = off, a crash could lose the run
-- (its rows would be sequenced again, which is harmless) together with the advance of the sequence,
-- which is not: the lost ids could be handed out again to other changes after subscribers had been
-- told of them, and a subscriber resuming from such an id would miss changes.
-- Called by every Silo process that serves websockets (on silo_change_pending and once a second),
-- and from psql at will (SELECT api.change_sequence();).
-- p_notify false: no notification; the caller notifies with api.change_announce in a transaction
-- of its own, so that the notification lock PostgreSQL takes at commit (which serializes the
-- commits of every notifying transaction) is not held through this run's WAL flush. Silo
-- processes do that.
-- Raises: nothing. Notifies: silo_changes with the highest id, when it moved rows and p_notify.
CREATE FUNCTION api.change_sequence(p_notify boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_last   bigint;
    v_called boolean;
    v_n      bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(8316297411674990695);  -- 0x73696c6f2d636867, "silo-chg" in ASCII
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM silo.change_id_seq s;
    IF NOT v_called THEN
        v_last := v_last - 1;  -- a sequence never used: its first value is still to come
    END IF;
    WITH moved AS (
        DELETE FROM silo.change_pending p
        RETURNING p.pending_id, p.channel, p.kind, p.payload, p.readers, p.grains, p.created
    )
    INSERT INTO silo.changes (id, channel, kind, payload, readers, created, sequenced)
    SELECT v_last + row_number() OVER (ORDER BY m.pending_id, e.ord), e.channel, e.kind, e.payload, e.readers,
           m.created, clock_timestamp()
    FROM moved m
    CROSS JOIN LATERAL api.change_expand(m.channel, m.kind, m.payload, m.readers, m.grains) e;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n = 0 THEN
        RETURN v_last;
    END IF;
    PERFORM setval('silo.change_id_seq', v_last + v_n);
    IF coalesce(p_notify, true) THEN
        PERFORM pg_notify('silo_changes', (v_last + v_n)::text);
    END IF;
    RETURN v_last + v_n;
END
$$;
COMMENT ON FUNCTION api.change_sequence(boolean) IS
    'Moves committed pending changes (silo.change_pending) into the change log silo.changes, numbered in commit order, one run at a time; returns the highest id (0: no change yet) and, unless p_notify is false, notifies silo_changes with it. Commits synchronously so that ids are never reused after a crash.';

-- api.change_announce: notifies silo_changes with p_last_id, in a transaction that commits
-- asynchronously (a lost notification costs at most a poll interval: every process also reads the
-- log once a second). Silo processes call it after api.change_sequence(false) moved changes.
-- Raises: nothing. Notifies: silo_changes.
CREATE FUNCTION api.change_announce(p_last_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify('silo_changes', p_last_id::text);
END
$$;
COMMENT ON FUNCTION api.change_announce(bigint) IS
    'Notifies silo_changes with p_last_id (the highest change id), committing asynchronously: what Silo processes call after api.change_sequence(false).';

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
           api.setting('change_retention', '24 hours')
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
        v_retention := api.setting_interval('change_retention', '24 hours');
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
