-- Change notifications, publishing: how a change enters the change log that the websocket hub of
-- each Silo process serves to its subscribers (GET /ws). This file holds the specification of
-- change notifications (how a change travels, the channels, who sees what, the settings that
-- control it) and the only ways in; sql/change/02_sequence.sql numbers the changes,
-- sql/change/03_read.sql reads and trims the log.
--
-- Public functions: api.change_publish (here); api.change_sequence, api.change_announce,
-- api.changes_pending, api.change_sequencer_wake, api.change_sequencer_sleep
-- (sql/change/02_sequence.sql); api.changes_after, api.changes_since,
-- api.change_channels_check, api.change_resume, api.change_status, api.change_trim
-- (sql/change/03_read.sql).
--
-- How a change travels:
-- 1. The transaction that makes a change publishes it (see "How other domains publish" below): a row
--    of silo.change_pending. Profile updates record their own changes in their write path
--    (profile_private.apply_direct and profile_private.apply_general, sql/profile/05_direct.sql
--    and sql/profile/06_general.sql); the triggers of profile.profilestore record every other
--    writer, and the trigger of profile.dead_letters every dead letter (sql/profile/13_change.sql);
--    api.profile_reap publishes on channel reaper (sql/profile/10_reaper.sql).
--    The statement trigger of silo.change_pending (below) calls pg_notify('silo_change_pending', '')
--    (identical notifications of one transaction collapse into one, delivered at commit) when no
--    websocket hub is awake, unless the setting silo.change_notify is off. While a hub is awake
--    (it heard writers close together, and has numbered changes within the last 20 ms) writers do
--    not notify: PostgreSQL makes notifying commits wait for each other. The protocol, and why no
--    change waits for it: sql/change/02_sequence.sql.
-- 2. api.change_sequence, called by the websocket hub of every Silo process when it hears
--    silo_change_pending, every few milliseconds while the hub is awake, and once a second as a
--    safety net, moves the committed pending rows into silo.changes under an advisory lock and
--    numbers them from silo.change_id_seq: the order of silo.changes.id is the order in which
--    changes became visible. The highest id is notified on 'silo_changes' at the run's commit.
-- 3. Each process reads the new rows once (api.changes_after) and fans them out in memory to its
--    websocket subscribers. A subscriber that (re)connects with the last id it saw first receives
--    every later change from the log (api.changes_since), then live ones.
-- 4. api.change_trim, run by the River periodic job change_trim (queue maintenance), deletes
--    changes older than the retention in silo.settings (change_retention, default 24 hours).
--
-- Channels and kinds:
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
-- * reaper: kinds ttl (a grain deleted) and ttn (a grain due for notification); payload the reaper
--   event (its id, the grain's coordinates and metadata, never the value); readers {the grain's
--   reader} (sql/profile/10_reaper.sql).
-- * belts: kind state, a belt created, updated, started, stopped, failed or deleted (payload
--   {"belt_id", "status"}: RUNNING, STOPPED, FAILED, or DELETED), published by the belt registry
--   (sql/belt/02_registry.sql); kind dead_letter, an event a belt dead-lettered (payload its ids);
--   readers {} (admins only).
-- * purge: the purge of the operational data store (sql/purge/): kind config (the configuration
--   changed; payload {"updated"}), started (a day's report created), progress (batches deleted units
--   of work; at most once a second per report), finished (the day's report closed), ttl (a TTL run
--   dropped or deleted something); payload {"executionDate", "unitOfWorksToDelete",
--   "unitOfWorksDeleted"} (counts, never unit-of-work data); readers {} (admins only).
-- * account:{username}:events: kinds created, updated, trashed (a first DELETE) and deleted (the
--   second); payload {"id"}, the event id; readers {account:{username}}, the reader role of that
--   user's accesses (sql/account/08_change.sql). account:{username}:streams: kind created, payload
--   {"id"}, the stream id, same readers.
-- * jobs:{topic}: the job service's state changes (sql/job/), one change per topic, kind and
--   statement: kinds scheduled, superseded, expired, deduplicated, done, failed and retry (a failed
--   dispatch that will be tried again); payload {"ids": [...]}, the job ids; readers {} (admins
--   only: a job carries its event's payload). jobs:config: kind loaded, payload {"version"}, when
--   a configuration is loaded.
-- * Any other channel a domain or a DBA publishes with api.change_publish or change_private.outbox,
--   named {namespace}:{name} (ops:deploy, reports:daily).
--
-- Channel names (one rule, change_private.channel_problem: api.change_publish refuses the names it
-- calls invalid, api.changes_since and api.change_channels_check the patterns, and the websocket
-- hub asks api.change_channels_check before it subscribes anyone): a channel is one of the names of
-- their own in change_private.named_channels (dead-letters, reaper, belts), or {namespace}:{name}, where
-- the namespace is a lowercase letter followed by lowercase letters, digits, - and _ (the domain,
-- such as profile, or any other word that is not a name of its own) and the name is anything
-- non-empty; no channel has a *, none is longer than 1000 characters. A subscription pattern is a
-- channel, * alone, or the beginning of some channel followed by * (profile:customer:*, profile:*,
-- ops:*). Anything else (bogus, an empty name, a * before the end) is refused as invalid.
--
-- Channels for admins only: change_private.named_channels says which (today dead-letters and belts). Their
-- changes have no readers, so no other subscriber could ever receive one: api.change_publish
-- refuses readers for them, and api.change_channels_check refuses a subscription to one from a
-- subscriber that is not an admin (SLFRB) instead of letting it wait for changes it never gets.
--
-- Who sees a change (the one rule; the websocket hub mirrors it for live changes): an admin sees every
-- change; any other subscriber sees a change when its readers (_all, _auth and its roles, from
-- api.token_authenticate; the anonymous identity has only _all) overlap the change's readers. A
-- change whose readers are empty is for admins only.
--
-- silo.change_notify (a PostgreSQL setting; default on): PostgreSQL serializes the commits of
-- transactions that notify (each holds a database-wide lock from its pre-commit to the end of its
-- commit, including the WAL flush), so concurrent small write transactions that notify lose group
-- commit. By default only a writer that finds no hub awake notifies (sql/change/02_sequence.sql),
-- so under load writers do not. Off for the database (ALTER DATABASE silo SET silo.change_notify =
-- off, then restart the Silo processes), writers never notify and do not look at the hubs' state,
-- and the processes, which read the setting when they connect, poll api.change_sequence every
-- 10 ms instead, awake or not: for a database whose writers must not notify at all.
--
-- Which channels a subscription matches: a pattern matches a channel equal to it; a pattern ending
-- in * matches every channel that starts with what comes before the *, so profile:customer:*
-- matches every customer profile, profile:* every profile and * every channel. A * anywhere but
-- at the end is refused. (A profile type containing ':' makes profile:{type}:* match more than one
-- type; the payload's profile_type tells them apart.)
--
-- Profile changes are recorded cheaply, as compact pending rows: channel profile:*, column grains
-- the grain rows touched as a text array of four aligned rows: correlation ids, profile types,
-- readers, paths (change_private.publish_grains). api.change_sequence expands them
-- (change_private.expand) into one change per profile and reader, as described above, off the write
-- path: the grouping and the payloads cost the writer nothing. api.changes_pending() shows what is
-- pending as the changes it will become.
--
-- Who records them:
-- * The write path of every profile update (profile_private.apply_direct and
--   profile_private.apply_general) records the grains its statements wrote from their RETURNING
--   rows, one compact row per statement and kind, and runs with silo.change_triggers = off. That
--   costs a fraction of what transition tables and trigger calls cost.
-- * Every other write (the reaper's TTL deletes, a DBA's INSERT, UPDATE or DELETE in psql) is
--   recorded by the statement triggers of profile.profilestore (sql/profile/13_change.sql).
-- * A grain's reader that changes is recorded by a row trigger of profile.profilestore (same file),
--   whoever writes, Silo's write path included: the old reader learns that the grain changed (it can
--   no longer read it). It fires only for such rows.
--
-- Two PostgreSQL settings control this:
-- * silo.change_capture (default on): a session that sets it off writes profile changes nobody
--   hears of: neither the write path nor the triggers record them (a bulk load, a repair). Dead
--   letters and reaper events are still recorded. Subscribers who resume later miss those changes.
-- * silo.change_triggers (default on) is for Silo's own writers: off, the statement triggers stay
--   idle because the writer records its changes itself (profile_private.apply_direct and
--   profile_private.apply_general set it off for their own run) or has none to record
--   (api.profile_reap while it marks grains notified: notify_at alone is no change of the profile,
--   the reaper's own channel carries it).
--
-- How other domains publish (the only ways in; none writes silo.change_pending itself):
-- * api.change_publish(channel, kind, payload, readers): one change, from SQL or psql.
-- * INSERT INTO change_private.outbox (channel, kind, payload, readers) SELECT ...: many changes
--   in one statement, set-based (the notification trigger then runs once for the statement).
-- * change_private.publish_grains(kind, correlation ids, profile types, readers, paths): the
--   compact form for a statement that touched many profile grains; api.change_sequence expands it.

CREATE SCHEMA change_private;
COMMENT ON SCHEMA change_private IS 'Internals of change notifications (sql/change/): not a public contract. Rebuilt with schema api.';

-- A function rather than a table: the names of their own are code, changed with the publishers that
-- use them, never by a DBA at run time.
CREATE FUNCTION change_private.named_channels()
RETURNS TABLE (channel text, admin_only boolean, description text)
LANGUAGE sql IMMUTABLE
AS $$
    VALUES ('dead-letters', true, 'Dead letters of profile updates (sql/profile/13_change.sql): kind dead_letter, readers {}.'),
           ('reaper', false, 'Reaper events (sql/profile/10_reaper.sql): kinds ttl and ttn, readers {the grain''s reader}.'),
           ('belts', true, 'Belts (sql/belt/): kind state (a belt created, updated, started, stopped, failed or deleted; payload {"belt_id", "status"}: RUNNING, STOPPED, FAILED or DELETED) and kind dead_letter (an event a belt dead-lettered; payload its ids), readers {}.'),
           ('purge', true, 'Purge of the operational data store (sql/purge/): kinds config, started, progress, finished and ttl; payload {"executionDate", "unitOfWorksToDelete", "unitOfWorksDeleted"} (config: {"updated"}), readers {}.');
$$;
COMMENT ON FUNCTION change_private.named_channels() IS
    'The channels that are a name of their own rather than {namespace}:{name}, one row each: channel (the name, also reserved as a namespace), admin_only (true: its changes have no readers, so only admins can receive them; api.change_publish refuses readers for it and api.change_channels_check refuses a subscription from anyone else), description (who publishes what on it). Raises nothing.';

CREATE FUNCTION change_private.channel_hint()
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT 'A channel is ' || string_agg(n.channel, ', ' ORDER BY n.channel)
           || ' or {namespace}:{name}, at most 1000 characters and without *: the namespace a lowercase letter followed by lowercase letters, digits, - or _, the name anything non-empty (profile:customer:0815, ops:deploy). A subscription pattern may end in * (profile:customer:*, ops:*, or * for every channel).'
    FROM change_private.named_channels() n;
$$;
COMMENT ON FUNCTION change_private.channel_hint() IS
    'The rule of channel names in one sentence, for the HINT of errors about them (api.change_publish, api.changes_since, api.change_channels_check). Raises nothing.';

-- The namespace pattern allows a - or _ anywhere after the first letter, as in dead-letters. A
-- prefix pattern is accepted when some channel could start with its prefix, so that a pattern that
-- can never match anything (Bogus*, :x*) is refused like a misspelt name.
CREATE FUNCTION change_private.channel_problem(p_name text, p_pattern boolean DEFAULT false)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_name IS NULL THEN 'a channel must not be NULL'
        WHEN p_name = '' THEN 'a channel must not be empty'
        WHEN length(p_name) > 1000 THEN 'a channel has at most 1000 characters'
        WHEN p_pattern AND p_name = '*' THEN NULL
        WHEN NOT p_pattern AND strpos(p_name, '*') > 0 THEN 'a channel has no *'
        WHEN strpos(left(p_name, -1), '*') > 0 THEN 'a * is allowed only at the end of a pattern'
        WHEN right(p_name, 1) = '*' THEN
            CASE WHEN EXISTS (SELECT FROM change_private.named_channels() n WHERE starts_with(n.channel, left(p_name, -1)))
                      OR left(p_name, -1) ~ '^[a-z][a-z0-9_-]*$'
                      OR (left(p_name, -1) ~ '^[a-z][a-z0-9_-]*:'
                          AND NOT EXISTS (SELECT FROM change_private.named_channels() n
                                          WHERE n.channel = split_part(p_name, ':', 1)))
                 THEN NULL
                 ELSE 'no channel starts with ' || left(p_name, -1) END
        WHEN EXISTS (SELECT FROM change_private.named_channels() n WHERE n.channel = p_name) THEN NULL
        WHEN p_name !~ '^[a-z][a-z0-9_-]*:.' THEN 'not a channel name'
        WHEN EXISTS (SELECT FROM change_private.named_channels() n WHERE n.channel = split_part(p_name, ':', 1))
            THEN split_part(p_name, ':', 1) || ' is a channel of its own, not a namespace'
    END;
$$;
COMMENT ON FUNCTION change_private.channel_problem(text, boolean) IS
    'Why p_name is not a channel name (p_pattern false, the default: what api.change_publish accepts) or not a subscription pattern (p_pattern true: what api.changes_since and api.change_channels_check accept); NULL when it is one. The rule is specified in sql/change/01_publish.sql ("Channel names"); change_private.channel_hint says it in one sentence. Raises nothing.';

CREATE FUNCTION change_private.channel_admin_only(p_channel text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT FROM change_private.named_channels() n WHERE n.channel = p_channel AND n.admin_only);
$$;
COMMENT ON FUNCTION change_private.channel_admin_only(text) IS
    'Whether p_channel is a channel for admins only (column admin_only of change_private.named_channels): its changes have no readers. False for NULL and for patterns. Raises nothing.';

-- A setting nobody set reads as NULL (current_setting(..., true)), hence on: capture needs no
-- configuration.
CREATE FUNCTION change_private.capture_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT current_setting('silo.change_capture', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION change_private.capture_on() IS
    'Whether profile changes are recorded: true unless the PostgreSQL setting silo.change_capture is off (off is for bulk loads and repairs nobody must hear of). Raises nothing.';

CREATE FUNCTION change_private.triggers_on()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT change_private.capture_on() AND current_setting('silo.change_triggers', true) IS DISTINCT FROM 'off';
$$;
COMMENT ON FUNCTION change_private.triggers_on() IS
    'Whether the statement triggers of profile.profilestore record changes: true unless the PostgreSQL setting silo.change_capture or silo.change_triggers is off (Silo''s profile write path turns silo.change_triggers off and records its own changes; api.profile_reap turns it off while it marks grains notified). Raises nothing.';

-- An updatable view, so that a statement publishing many changes is one set-based INSERT without
-- knowing the pending table's other columns.
CREATE VIEW change_private.outbox AS
    SELECT p.channel, p.kind, p.payload, p.readers FROM silo.change_pending p;
COMMENT ON VIEW change_private.outbox IS
    'Where SQL publishes many changes in one statement: INSERT INTO change_private.outbox (channel, kind, payload, readers) SELECT ... Columns: channel (a name without *), kind (what happened), payload (a JSON object of ids, never the data; default {}), readers (who may see it; default {}: admins only). Unlike api.change_publish it checks nothing beyond the NOT NULL columns of silo.change_pending (23502 for a NULL). The rows are numbered into silo.changes after commit; the statement notifies silo_change_pending once when no websocket hub is awake (the trigger of silo.change_pending), unless silo.change_notify is off. Reading it shows the plain pending rows (compact rows of profile changes unexpanded).';

CREATE FUNCTION api.change_publish(p_channel text, p_kind text, p_payload jsonb DEFAULT '{}',
                                   p_readers text[] DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_problem text := change_private.channel_problem(p_channel);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid channel %: %', coalesce(p_channel, 'NULL'), v_problem USING ERRCODE = 'SLINV',
            HINT = change_private.channel_hint();
    END IF;
    IF change_private.channel_admin_only(p_channel) AND cardinality(p_readers) > 0 THEN
        RAISE EXCEPTION 'channel % is for admins only: its changes have no readers', p_channel USING ERRCODE = 'SLINV',
            DETAIL = format('got readers %s', p_readers), HINT = 'Publish with readers {} (the default).';
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
    'Publishes one change in the caller''s transaction. p_channel: the channel, a name of its own (change_private.named_channels: dead-letters, reaper, belts, purge) or {namespace}:{name} (e.g. reports:daily), without *, at most 1000 characters (change_private.channel_problem); p_kind: what happened, non-empty; p_payload (default {}; NULL counts as {}): a small JSON object of ids, never the data; p_readers (default {}: admins only; NULL counts as {}): who may see it, e.g. {_all} everyone, {_auth} every token, or reader roles. Returns nothing. After commit the change is numbered in commit order into silo.changes, and websocket subscribers of a matching channel whose readers overlap p_readers (and admins) receive it; notifies silo_change_pending at commit when no websocket hub is awake (the trigger of silo.change_pending), unless silo.change_notify is off. Raises SLINV for a NULL or invalid channel (empty, with *, over 1000 characters, or neither a name of its own nor {namespace}:{name}: bogus), readers for a channel for admins only (dead-letters, belts, purge), a NULL or empty kind, or a payload that is not a JSON object.';

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
    'Publishes that profile grains changed or were deleted, in compact form: p_kind (changed or deleted) and four aligned arrays with one element per grain row: p_correlation_id, p_profile_type, p_reader, p_path. Writes one pending row on channel profile:* that api.change_sequence expands into one change per profile and reader on channel profile:{type}:{id}. Returns the pending rows written: 0 when p_correlation_id is NULL or empty or silo.change_capture is off, else 1. Raises 2202E (array_subscript_error) when the arrays differ in length; notifies silo_change_pending at commit when no websocket hub is awake (the trigger of silo.change_pending), unless silo.change_notify is off.';

-- The payload is empty on purpose: PostgreSQL delivers identical notifications of one transaction
-- once, so a transaction that publishes many times costs the listeners one wake-up. A statement
-- trigger fires for an INSERT of no rows too, hence the look at new_rows. The lock and the look at
-- the state are W1 and W2 of the protocol in sql/change/02_sequence.sql: a writer notifies only
-- when no hub is awake, because notifying commits wait for each other.
CREATE FUNCTION change_private.tg_change_pending__notify()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF current_setting('silo.change_notify', true) IS DISTINCT FROM 'off' AND EXISTS (SELECT FROM new_rows) THEN
        PERFORM pg_advisory_xact_lock_shared(8316297411675845986);  -- 0x73696c6f2d707562, "silo-pub" in ASCII
        -- change_private.sequencer_awake(), written out: a call of an SQL function that is not
        -- inlined is planned anew each time, which cost the writer some 30 microseconds.
        IF coalesce(pg_sequence_last_value('silo.change_sequencer_awake'), 0) / 1000000
           <= (date_part('epoch', clock_timestamp()) * 1000)::bigint THEN
            PERFORM pg_notify('silo_change_pending', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION change_private.tg_change_pending__notify() IS
    'AFTER INSERT statement trigger of silo.change_pending: when the statement inserted rows, takes the advisory lock "silo-pub" in shared mode to the end of the transaction (a hub going to sleep waits for it) and, unless a websocket hub is awake (change_private.sequencer_awake), notifies silo_change_pending (empty payload; delivered once per transaction, at commit) so that listening Silo processes run api.change_sequence. Does nothing while the PostgreSQL setting silo.change_notify is off. Returns NULL; raises nothing.';

CREATE TRIGGER change_pending_notify AFTER INSERT ON silo.change_pending
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION change_private.tg_change_pending__notify();
