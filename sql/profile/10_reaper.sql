-- Profile store, reaper: grains whose time to live has passed are deleted, grains whose time to
-- notify has passed are notified once. Run by a River periodic job (worker/profile_reaper.go) and by
-- hand from psql (SELECT * FROM api.profile_reap(); or CALL api.profile_reap_all();). The work is
-- cut into batches, each its own transaction, so a large backlog never holds locks or a snapshot
-- for long; consumers follow what it did through profile.reaper_events (api.profile_reaper_events)
-- or the change channel reaper.
--
-- Public functions: api.profile_reap, api.profile_reap_all (procedure), api.profile_reaper_events,
-- api.profile_reaper_event_trim.
--
-- Rules where the specification leaves room:
-- * Due times count from inserted: a grain is due for deletion when expires_at = inserted + ttl has
--   passed, for notification when notify_at = inserted + ttn has passed (both kept by the write
--   path, NULL for the default P100Y). Every pit is its own grain: history pits expire and are
--   notified by their own inserted, ttl and ttn.
-- * One notification per TTN value: the reaper sets notify_at to NULL when it notifies. Every write
--   of the grain (a new value or _in, a new _ttn, _set_ttn) sets notify_at again, so a rewritten
--   grain is due again; a grain that is not rewritten is never notified twice.
-- * A grain due for both is notified first, then deleted: in the same batch, or, when the batch's
--   notifications are full before they reach it, in a later batch (the deletion waits for the
--   notification, so no due notification is lost to a deletion).
-- * Batches: each call of api.profile_reap is one batch in the caller's transaction: at most
--   batch-size grains deleted and batch-size grains notified, oldest due first. Due grains are
--   locked FOR UPDATE SKIP LOCKED: a grain a writer (or another reaper run) holds is left for the
--   next batch, nothing waits and nothing is done twice.
-- * Every deletion and notification becomes a row of profile.reaper_events, a change on channel
--   'reaper' (change_private.outbox, kind ttl or ttn, readers the grain's reader), and an event of
--   the event store (type ttl-<profile type> or ttn-<profile type>, sql/event/), in the batch's
--   transaction. The events carry coordinates and metadata, never the value. Event ids are drawn
--   under a transaction-scoped advisory lock, so their order is commit order and a consumer that
--   reads "after id N" misses nothing.
-- * Settings (silo.settings): reaper.batch_size (default batch size), reaper.event_retention (how
--   long events are kept). The schedule is the worker's (SILO_REAPER_INTERVAL).

-- api.profile_reap carries the grains of a batch from the statement that locks and changes them
-- to the one that records the events in arrays of this type: a CTE's rows do not outlive their
-- statement.
CREATE TYPE profile_private.reaped_grain AS (
    correlation_id  varchar,
    profile_type    varchar,
    path            varchar,
    pit             varchar,
    grain_type      character(1),
    inserted        bigint,
    ttl             varchar,
    ttn             varchar,
    reader          varchar,
    origin          varchar,
    certainty       real,
    due             timestamptz
);
COMMENT ON TYPE profile_private.reaped_grain IS
    'A grain deleted (ttl) or notified (ttn) by api.profile_reap: its key and metadata, without its value; due is expires_at for a deletion, notify_at for a notification.';

-- The change triggers are off only around the notify_at update (no change of the profile) and on
-- again for the deletions, which reach the profiles' channels through them
-- (sql/profile/13_change.sql). more can be true for a last call that then finds nothing: a full
-- batch cannot tell whether anything is left.
CREATE FUNCTION api.profile_reap(p_batch_size integer DEFAULT NULL,
                                 OUT ttl_deleted bigint, OUT ttn_notified bigint, OUT more boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_batch   integer := p_batch_size;
    v_setting text;
    v_ttn     profile_private.reaped_grain[];
    v_ttl     profile_private.reaped_grain[];
    v_triggers text;
    v_events  jsonb;
BEGIN
    IF v_batch IS NULL THEN
        v_setting := btrim(settings_private.setting('reaper.batch_size', '1000'));
        IF v_setting !~ '^\d{1,9}$' THEN
            RAISE EXCEPTION 'setting reaper.batch_size is not a positive integer: %', v_setting
                USING ERRCODE = 'SLINV', HINT = 'UPDATE silo.settings SET value = ''1000'' WHERE key = ''reaper.batch_size''';
        END IF;
        v_batch := v_setting::integer;
    END IF;
    IF v_batch < 1 THEN
        RAISE EXCEPTION 'reaper batch size must be a positive integer, got %', v_batch
            USING ERRCODE = 'SLINV';
    END IF;

    -- Time to notify: lock the oldest due grains nobody else holds, mark them notified. Changing
    -- notify_at alone is no change of the profile: the change triggers stay idle meanwhile.
    v_triggers := current_setting('silo.change_triggers', true);
    PERFORM set_config('silo.change_triggers', 'off', true);
    WITH due AS (
        SELECT p.correlation_id, p.profile_type, p.path, p.pit, p.grain_type, p.inserted, p.ttl, p.ttn,
               p.reader, p.origin, p.certainty, p.notify_at
        FROM profile.profilestore p
        WHERE p.notify_at <= now()
        ORDER BY p.notify_at
        LIMIT v_batch
        FOR UPDATE SKIP LOCKED
    ), done AS (
        UPDATE profile.profilestore p
        SET notify_at = NULL
        FROM due d
        WHERE p.correlation_id = d.correlation_id AND p.profile_type = d.profile_type
          AND p.path = d.path AND p.pit = d.pit
        RETURNING d.*
    )
    SELECT array_agg(ROW(d.correlation_id, d.profile_type, d.path, d.pit, d.grain_type, d.inserted, d.ttl,
                         d.ttn, d.reader, d.origin, d.certainty, d.notify_at)::profile_private.reaped_grain
                     ORDER BY d.notify_at, d.correlation_id, d.profile_type, d.path, d.pit)
    INTO v_ttn
    FROM done d;
    PERFORM set_config('silo.change_triggers', coalesce(v_triggers, ''), true);

    -- Time to live: lock the oldest expired grains nobody else holds, delete them. A grain whose
    -- notification is due and not yet sent (the notifications above were full before they reached
    -- it) waits for a later batch: it is notified first, then deleted.
    WITH due AS (
        SELECT p.correlation_id, p.profile_type, p.path, p.pit
        FROM profile.profilestore p
        WHERE p.expires_at <= now()
          AND (p.notify_at IS NULL OR p.notify_at > now())
        ORDER BY p.expires_at
        LIMIT v_batch
        FOR UPDATE SKIP LOCKED
    ), done AS (
        DELETE FROM profile.profilestore p
        USING due d
        WHERE p.correlation_id = d.correlation_id AND p.profile_type = d.profile_type
          AND p.path = d.path AND p.pit = d.pit
        RETURNING p.correlation_id, p.profile_type, p.path, p.pit, p.grain_type, p.inserted, p.ttl, p.ttn,
                  p.reader, p.origin, p.certainty, p.expires_at
    )
    SELECT array_agg(ROW(d.correlation_id, d.profile_type, d.path, d.pit, d.grain_type, d.inserted, d.ttl,
                         d.ttn, d.reader, d.origin, d.certainty, d.expires_at)::profile_private.reaped_grain
                     ORDER BY d.expires_at, d.correlation_id, d.profile_type, d.path, d.pit)
    INTO v_ttl
    FROM done d;

    ttn_notified := COALESCE(cardinality(v_ttn), 0);
    ttl_deleted := COALESCE(cardinality(v_ttl), 0);
    more := ttn_notified >= v_batch OR ttl_deleted >= v_batch;
    IF ttn_notified = 0 AND ttl_deleted = 0 THEN
        RETURN;
    END IF;

    -- Events: ids drawn under a lock held until commit, so that id order is commit order.
    PERFORM pg_advisory_xact_lock(8316297411675975794);  -- 0x73696c6f2d727072, "silo-rpr" in ASCII
    WITH g AS (
        SELECT 1 AS ord, 'ttn' AS kind, t.* FROM unnest(v_ttn) WITH ORDINALITY AS t
        UNION ALL
        SELECT 2, 'ttl', t.* FROM unnest(v_ttl) WITH ORDINALITY AS t
    ), ev AS (
        INSERT INTO profile.reaper_events (kind, correlation_id, profile_type, path, pit, grain_type, inserted,
                                           ttl, ttn, reader, origin, certainty, due)
        SELECT g.kind, g.correlation_id, g.profile_type, g.path, g.pit, g.grain_type, g.inserted,
               g.ttl, g.ttn, g.reader, g.origin, g.certainty, g.due
        FROM g
        ORDER BY g.ord, g.ordinality
        RETURNING *
    ), ob AS (
        INSERT INTO change_private.outbox (channel, kind, payload, readers)
        SELECT 'reaper', ev.kind, profile_private.reaper_event_payload(ev), ARRAY[ev.reader::text]
        FROM ev
        ORDER BY ev.id
    )
    SELECT jsonb_agg(jsonb_build_object(
               'event_headers', jsonb_build_object(
                   'grnry-event-id', gen_random_uuid()::text,
                   'grnry-event-type', ev.kind || '-' || ev.profile_type,
                   'grnry-correlation-id', ev.correlation_id,
                   'grnry-event-timestamp', floor(extract(epoch FROM now()) * 1000)::bigint::text,
                   'grnry-harvester-name', 'silo-reaper'),
               'event_payload', profile_private.reaper_event_payload(ev)) ORDER BY ev.id)
    INTO v_events
    FROM ev;

    -- The same notifications as events of the event store (types ttl-<profile type> and
    -- ttn-<profile type>), through its ingest, so that its consumers (belts) receive them as
    -- Granary's belts received the reaper's messages. An event the store refuses (a profile type
    -- too long for an event type) is not stored; the reaper goes on.
    PERFORM FROM event_private.ingest(v_events);
END;
$$;
COMMENT ON FUNCTION api.profile_reap(integer) IS
    'One reaper batch, in the caller''s transaction. p_batch_size (default NULL: silo.settings reaper.batch_size, 1000 when unset): at most this many grains notified and this many deleted. Notifies the grains whose notify_at (inserted + ttn) has passed and sets their notify_at to NULL (one notification per TTN value); deletes the grains whose expires_at (inserted + ttl) has passed, a due notification first; oldest due first, skipping grains that other transactions hold. Returns one row: ttl_deleted, ttn_notified, more (a batch was full: call again). Records each grain in profile.reaper_events and publishes it on change channel reaper (kind ttn or ttl, payload profile_private.reaper_event_payload, readers the grain''s reader); the deletions are also published on the profiles'' channels profile:{type}:{id} (kind deleted). Ingests each into the event store too (event_private.ingest, so its consumers receive it): type ttl-{profile type} or ttn-{profile type}, headers grnry-event-id (a new UUID), grnry-correlation-id (the grain''s), grnry-event-timestamp (now, epoch milliseconds), grnry-harvester-name silo-reaper, payload as on channel reaper (no value). Raises SLINV when the batch size (argument or setting) is not a positive integer.';

-- The field names are those of Granary's reaper messages, so consumers written for them read
-- Silo's events unchanged. The value stays out: payloads carry ids and metadata, never data.
CREATE FUNCTION profile_private.reaper_event_payload(p_event profile.reaper_events)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'id', p_event.id,
        'correlationId', p_event.correlation_id,
        'profileType', p_event.profile_type,
        'path', p_event.path,
        'pit', p_event.pit,
        'grain_type', p_event.grain_type,
        'inserted', p_event.inserted,
        'ttl', p_event.ttl,
        'ttn', p_event.ttn,
        'reader', p_event.reader,
        'origin', p_event.origin,
        'certainty', p_event.certainty,
        'due', to_char(p_event.due AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'));
$$;
COMMENT ON FUNCTION profile_private.reaper_event_payload(profile.reaper_events) IS
    'The change payload of reaper event p_event: {"id", "correlationId", "profileType", "path", "pit", "grain_type", "inserted", "ttl", "ttn", "reader", "origin", "certainty", "due" (ISO 8601, UTC, milliseconds)}; never the grain''s value. Raises nothing.';

-- A procedure because it commits after every batch: what a run has done survives its
-- interruption, and writers wait at most for the locks of one batch, never of the whole run.
CREATE PROCEDURE api.profile_reap_all(p_batch_size integer DEFAULT NULL, p_budget interval DEFAULT '1 minute',
                                      INOUT ttl_deleted bigint DEFAULT 0, INOUT ttn_notified bigint DEFAULT 0,
                                      INOUT events_trimmed bigint DEFAULT 0)
LANGUAGE plpgsql
AS $$
DECLARE
    v_deadline timestamptz := clock_timestamp() + COALESCE(p_budget, interval '1 minute');
    v_r        record;
BEGIN
    ttl_deleted := 0;
    ttn_notified := 0;
    LOOP
        SELECT * INTO v_r FROM api.profile_reap(p_batch_size);
        ttl_deleted := ttl_deleted + v_r.ttl_deleted;
        ttn_notified := ttn_notified + v_r.ttn_notified;
        COMMIT;
        EXIT WHEN NOT v_r.more OR clock_timestamp() >= v_deadline;
    END LOOP;
    events_trimmed := api.profile_reaper_event_trim(NULL);
    COMMIT;
END;
$$;
COMMENT ON PROCEDURE api.profile_reap_all(integer, interval, bigint, bigint, bigint) IS
    'A whole reaper run from psql: CALL api.profile_reap_all(); runs api.profile_reap(p_batch_size) batches (default NULL: silo.settings reaper.batch_size), committing after each, until a batch is not full or p_budget (default and NULL: 1 minute) has passed, then trims old events with api.profile_reaper_event_trim(NULL) and commits. Returns the totals in its INOUT parameters ttl_deleted, ttn_notified and events_trimmed (defaults 0; what is passed in is ignored). Records and publishes what api.profile_reap does. Raises SLINV when the batch size (argument or setting reaper.batch_size) is not a positive integer or the setting reaper.event_retention is not a non-negative interval; 2D000 (invalid transaction termination) when called inside a transaction block.';

-- The readers filter is the change channel's rule for reaper events (their readers are the grain's
-- reader), so a consumer that polls sees what a websocket subscriber with the same readers sees.
CREATE FUNCTION api.profile_reaper_events(p_after bigint DEFAULT 0, p_limit integer DEFAULT 100,
                                          p_readers text[] DEFAULT NULL)
RETURNS SETOF profile.reaper_events
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = 'SLINV';
    END IF;
    RETURN QUERY
        SELECT e.*
        FROM profile.reaper_events e
        WHERE e.id > COALESCE(p_after, 0)
          AND (p_readers IS NULL OR e.reader = ANY (p_readers))
        ORDER BY e.id
        LIMIT p_limit;
END;
$$;
COMMENT ON FUNCTION api.profile_reaper_events(bigint, integer, text[]) IS
    'Reaper events, rows of profile.reaper_events (id, kind ttl for a deletion or ttn for a notification, the grain''s correlation_id, profile_type, path, pit, grain_type, inserted, ttl, ttn, reader, origin, certainty, due, and created), oldest first. p_after (default 0; NULL as 0): only events with a higher id. p_limit (default 100): at most this many, 1 to 10000. p_readers (default NULL: every event, for admins and psql): only events whose grain reader is one of these (a caller''s _all, _auth and roles). Ids follow commit order: resume after the last id seen. Raises SLINV when p_limit is NULL or outside 1..10000.';

CREATE FUNCTION api.profile_reaper_event_trim(p_retention interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_retention interval := p_retention;
    v_n         bigint;
BEGIN
    IF v_retention IS NULL THEN
        v_retention := settings_private.setting_interval('reaper.event_retention', '7 days');
    ELSIF v_retention < interval '0' THEN
        RAISE EXCEPTION 'reaper event retention must not be negative, got %', v_retention USING ERRCODE = 'SLINV';
    END IF;
    DELETE FROM profile.reaper_events e WHERE e.created < now() - v_retention;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;
COMMENT ON FUNCTION api.profile_reaper_event_trim(interval) IS
    'Deletes the reaper events created more than p_retention ago (default NULL: silo.settings reaper.event_retention, 7 days when unset) and returns how many. Run after every reaper run. Raises SLINV when p_retention is negative, or the setting is not an interval or is negative.';
