-- Change notifications: the change log behind the websocket hub (server/hub.go, GET /ws).
--
-- Public functions: api.change_sequence, api.change_announce, api.changes_after, api.changes_since,
-- api.change_resume, api.change_status, api.change_trim, api.changes_pending. The trigger functions and
-- change_private.expand are internal.
--
-- How a change travels:
-- 1. The transaction that makes a change inserts rows into silo.change_pending: the write path of
--    profile updates (profile_private.apply_round) and the triggers of profile.profilestore (every
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
-- readers, paths (change_private.publish_grains). api.change_sequence expands them
-- (change_private.expand) into one change per profile and reader, as described above, off the write
-- path: the grouping and the payloads cost the writer nothing. api.changes_pending() shows what is
-- pending as the changes it will become.
--
-- Who records them:
-- * The write path of every profile update (profile_private.apply_direct and apply_general) records
--   the grains its statements wrote from their RETURNING rows, one compact row per statement and
--   kind, and runs with silo.change_triggers = off. That costs a fraction of what transition tables and trigger
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
--   idle because the writer records its changes itself (profile_private.apply_round) or has none to
--   record (the reaper marking grains notified: notify_at alone is no change of the profile, the
--   reaper's own channel carries it).

-- How other domains publish (the only way in; none writes silo.change_pending itself):
-- * api.change_publish(channel, kind, payload, readers): one change, from SQL or psql.
-- * INSERT INTO change_private.outbox (channel, kind, payload, readers) SELECT ...: many changes
--   in one statement, set-based (the notification trigger then runs once for the statement).
-- * change_private.publish_grains(kind, correlation ids, profile types, readers, paths): the
--   compact form for a statement that touched many profile grains; api.change_sequence expands it.

CREATE SCHEMA change_private;
COMMENT ON SCHEMA change_private IS 'Internals of change notifications (sql/change/): not a public contract. Rebuilt with schema api.';

-- change_private.capture_on: internal. Whether profile changes are recorded: the setting
-- silo.change_capture is not off.
-- Raises: nothing.
CREATE FUNCTION change_private.capture_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT current_setting('silo.change_capture', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION change_private.capture_on() IS
    'Internal: whether profile changes are recorded (the setting silo.change_capture is not off; off is for bulk loads nobody must hear of).';

-- change_private.triggers_on: internal. Whether the statement triggers of profile.profilestore record
-- changes: profile changes are recorded and the setting silo.change_triggers is not off.
-- Raises: nothing.
CREATE FUNCTION change_private.triggers_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT change_private.capture_on() AND current_setting('silo.change_triggers', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION change_private.triggers_on() IS
    'Internal: whether the statement triggers of profile.profilestore record changes (silo.change_capture and silo.change_triggers are not off; Silo''s update path turns the triggers off and records its own changes).';

-- An updatable view, so that a statement publishing many changes is one set-based INSERT without
-- knowing the pending table's other columns.
CREATE VIEW change_private.outbox AS
    SELECT p.channel, p.kind, p.payload, p.readers FROM silo.change_pending p;
COMMENT ON VIEW change_private.outbox IS
    'Internal: where SQL publishes changes set-based: INSERT INTO change_private.outbox (channel, kind, payload, readers) SELECT ... (payload: a JSON object, never the data itself; readers: who may see it, empty for admins only). The rows are sequenced into silo.changes after commit.';

CREATE FUNCTION api.change_publish(p_channel text, p_kind text, p_payload jsonb DEFAULT '{}',
                                   p_readers text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(p_channel, '') = '' OR length(p_channel) > 1000 OR strpos(p_channel, '*') > 0 THEN
        RAISE EXCEPTION 'invalid channel: %', coalesce(p_channel, 'NULL') USING ERRCODE = 'SLINV',
            HINT = 'A channel is a non-empty name without *, at most 1000 characters, such as reports:daily.';
    END IF;
    IF coalesce(p_kind, '') = '' THEN
        RAISE EXCEPTION 'kind must not be empty' USING ERRCODE = 'SLINV';
    END IF;
    IF p_payload IS NOT NULL AND jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'payload must be a JSON object' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', jsonb_typeof(p_payload));
    END IF;
    INSERT INTO change_private.outbox (channel, kind, payload, readers)
    VALUES (p_channel, p_kind, coalesce(p_payload, '{}'), coalesce(p_readers, '{}'));
END
$$;
COMMENT ON FUNCTION api.change_publish(text, text, jsonb, text[]) IS
    'Publishes one change in the caller''s transaction: websocket subscribers of p_channel whose readers overlap p_readers (default {}: admins only; {_all}: everyone) receive it after commit, in commit order. p_kind names what happened; p_payload (default {}) is a small JSON object of ids, never the data. Raises SLINV for an empty channel or kind, a channel with * or over 1000 characters, or a payload that is not an object.';

-- The compact form costs the writer one array per column instead of a JSON object per profile:
-- grouping and payloads are built off the write path, by api.change_sequence.
CREATE FUNCTION change_private.publish_grains(p_kind text, p_correlation_id text[], p_profile_type text[],
                                              p_reader text[], p_path text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(cardinality(p_correlation_id), 0) = 0 OR NOT change_private.capture_on() THEN
        RETURN 0;
    END IF;
    INSERT INTO silo.change_pending (channel, kind, grains)
    VALUES ('profile:*', p_kind, ARRAY[p_correlation_id, p_profile_type, p_reader, p_path]);
    RETURN 1;
END
$$;
COMMENT ON FUNCTION change_private.publish_grains(text, text[], text[], text[], text[]) IS
    'Internal: publishes that profile grains changed (p_kind changed) or were deleted (deleted), given as aligned arrays of correlation ids, profile types, readers and paths; api.change_sequence expands it into one change per profile and reader on channel profile:{type}:{id}. Does nothing for no grains or while silo.change_capture is off. Returns the pending rows written (0 or 1).';

-- change_private.tg_change_pending__notify: internal. AFTER INSERT statement trigger of silo.change_pending:
-- when the statement inserted rows, notifies silo_change_pending (empty payload) so that a
-- listening Silo process runs api.change_sequence after the commit; not when the setting
-- silo.change_notify is off. Identical notifications of one transaction are delivered once.
-- Raises: nothing. Notifies: silo_change_pending.
CREATE FUNCTION change_private.tg_change_pending__notify()
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
COMMENT ON FUNCTION change_private.tg_change_pending__notify() IS
    'Internal: AFTER INSERT statement trigger of silo.change_pending; notifies silo_change_pending (empty payload, once per transaction) when rows were inserted, unless the setting silo.change_notify is off.';

CREATE TRIGGER change_pending_notify AFTER INSERT ON silo.change_pending
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION change_private.tg_change_pending__notify();
