-- Belts, dead letters: the events a belt could not process (Granary's grnry_belt_dlq_<belt-id>, one
-- table for every belt, belt.dead_letters), read page by page, replayed after the callback is fixed,
-- and trimmed after belt.dead_letter_retention. A replay delivers the event to its belt again, at
-- the end of its lane (the lane of its correlation id's profile-link target now), with the dead
-- letter's copy of the event, so it can be replayed after the event left the store; the dead
-- letter stays, marked replayed, and a replay that fails again makes a new one.

CREATE FUNCTION belt_private.dead_letter_doc(d belt.dead_letters)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'id', d.id::text,
        'beltId', d.belt_id::text,
        'beltVersion', d.belt_version,
        'eventId', d.event_id,
        'eventTimestamp', (extract(epoch FROM d.event_at) * 1000)::bigint,
        'correlationId', d.correlation_id,
        'eventType', d.event_type,
        'event_headers', d.headers,
        'event_payload', d.payload,
        'error', d.error,
        'traceback', d.traceback,
        'sqlstate', d.sqlstate,
        'retries', d.retries,
        'created', (extract(epoch FROM d.created) * 1000)::bigint,
        'replayed', (extract(epoch FROM d.replayed) * 1000)::bigint);
$$;
COMMENT ON FUNCTION belt_private.dead_letter_doc(belt.dead_letters) IS
    'Dead letter d as the API answers it: id and beltId (strings), beltVersion, eventId, eventTimestamp, created and replayed (epoch milliseconds; replayed null until replayed), correlationId, eventType, event_headers, event_payload, error, traceback, sqlstate, retries. Raises nothing.';

CREATE FUNCTION api.belt_dead_letter_list(p_belt_id bigint, p_offset integer DEFAULT 0, p_pagesize integer DEFAULT 20,
                                          p_replayed boolean DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM belt.belts b WHERE b.id = p_belt_id) THEN
        RAISE EXCEPTION 'belt % not found', p_belt_id USING ERRCODE = 'SLNFD';
    END IF;
    IF coalesce(p_offset, -1) < 0 OR coalesce(p_pagesize, 0) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'offset must be at least 0 and pagesize between 1 and 1000' USING ERRCODE = 'SLINV',
            DETAIL = format('offset %s, pagesize %s', coalesce(p_offset::text, 'NULL'), coalesce(p_pagesize::text, 'NULL'));
    END IF;
    RETURN jsonb_build_object(
        'totalCount', (SELECT count(*) FROM belt.dead_letters d
                       WHERE d.belt_id = p_belt_id AND (p_replayed IS NULL OR (d.replayed IS NOT NULL) = p_replayed)),
        'items', coalesce((SELECT jsonb_agg(belt_private.dead_letter_doc(d) ORDER BY d.id)
                           FROM (SELECT * FROM belt.dead_letters d
                                 WHERE d.belt_id = p_belt_id AND (p_replayed IS NULL OR (d.replayed IS NOT NULL) = p_replayed)
                                 ORDER BY d.id OFFSET p_offset LIMIT p_pagesize) d), '[]'));
END
$$;
COMMENT ON FUNCTION api.belt_dead_letter_list(bigint, integer, integer, boolean) IS
    'The dead letters of belt p_belt_id, oldest first (HTTP GET /belts/{id}/dead-letters): {"totalCount", "items"}, each item as belt_private.dead_letter_doc (the event whole, the error, traceback, SQLSTATE, retries). p_offset (default 0), p_pagesize (default 20, at most 1000), p_replayed (default NULL: all; false: not replayed yet; true: replayed). Raises SLNFD when there is no belt p_belt_id, SLINV for an offset below 0 or a page size outside 1..1000.';

CREATE FUNCTION api.belt_dead_letter_replay(p_belt_id bigint, p_ids bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_belt belt.belts;
    v_n    integer;
BEGIN
    SELECT * INTO v_belt FROM belt.belts b WHERE b.id = p_belt_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'belt % not found', p_belt_id USING ERRCODE = 'SLNFD';
    END IF;
    WITH chosen AS (
        SELECT d.id, d.correlation_id, d.event_at, d.event_id,
               (SELECT ch[cardinality(ch)] FROM profile_private.link_chain(d.correlation_id) AS ch) AS target
        FROM belt.dead_letters d
        WHERE d.belt_id = p_belt_id
          AND CASE WHEN p_ids IS NULL THEN d.replayed IS NULL ELSE d.id = ANY (p_ids) END
        ORDER BY d.id
        FOR UPDATE OF d
    ), delivered AS (
        INSERT INTO event.deliveries (consumer_id, lane, correlation_id, event_cid, event_at, event_id, dead_letter_id)
        SELECT v_belt.consumer_id, event_private.lane_of(c.target, k.lanes), c.target, c.correlation_id, c.event_at, c.event_id, c.id
        FROM chosen c CROSS JOIN (SELECT lanes FROM event.consumers WHERE id = v_belt.consumer_id) k
        ORDER BY c.id
        RETURNING dead_letter_id
    )
    UPDATE belt.dead_letters d SET replayed = now()
    FROM delivered x WHERE d.id = x.dead_letter_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        PERFORM pg_notify('silo_belt', p_belt_id::text);
    END IF;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION api.belt_dead_letter_replay(bigint, bigint[]) IS
    'Replays dead letters of belt p_belt_id (HTTP POST /belts/{id}/dead-letters/replay): p_ids (default NULL: every dead letter not replayed yet; else these, replayed again if they were) are delivered to the belt again, in dead-letter order, at the end of the lane of their correlation id''s profile-link target, carrying the dead letter''s copy of the event; each is marked replayed (now). The belt processes them when it runs (a stopped belt keeps them waiting). Returns how many were replayed (ids of other belts or unknown ids are skipped). Notifies silo_belt (payload: the belt id) when it replayed any. Raises SLNFD when there is no belt p_belt_id.';

CREATE FUNCTION api.belt_dead_letter_trim(p_retention interval DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keep interval := coalesce(p_retention, settings_private.setting('belt.dead_letter_retention', '30 days')::interval);
    v_n    integer;
BEGIN
    IF v_keep < interval '0' THEN
        RAISE EXCEPTION 'retention must not be negative' USING ERRCODE = 'SLINV', DETAIL = format('got %s', v_keep);
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'SLINV';
    END IF;
    DELETE FROM belt.dead_letters d WHERE d.created < p_now - v_keep;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION api.belt_dead_letter_trim(interval, timestamptz) IS
    'Deletes the belt dead letters written more than p_retention (default NULL: the setting belt.dead_letter_retention, 30 days) before p_now (default now()) and returns how many; silo work''s retention job runs it (purge.retention_targets). A pending replay of a deleted dead letter still runs when its event is in the store. Raises SLINV for a negative retention or a NULL p_now.';
