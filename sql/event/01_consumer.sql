-- Event store, consumers: who receives events. A consumer (a belt, sql/belt/) names the event types
-- it wants; every event of those types stored after it exists is delivered to it as a row of
-- event.deliveries in one of its lanes (event_private.lane_of its correlation id), and it deletes
-- the row in the transaction that processes the event. The lanes' rows (event.consumer_lanes) are
-- made with the consumer: a processing step locks them FOR UPDATE SKIP LOCKED to own a lane.
CREATE SCHEMA event_private;
COMMENT ON SCHEMA event_private IS 'Event store internals: consumers, delivery, parsing of ingested events (sql/event/).';

-- The updater's lane rule (profile_private.inbox_lane): hashtext without its sign bit.
CREATE FUNCTION event_private.lane_of(p_correlation_id text, p_lanes smallint)
RETURNS smallint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ((hashtext(p_correlation_id) & 2147483647) % p_lanes)::smallint;
$$;
COMMENT ON FUNCTION event_private.lane_of(text, smallint) IS
    'The lane of correlation id p_correlation_id among p_lanes lanes (at least 1): hashtext without its sign bit, modulo p_lanes. Raises nothing (division_by_zero for p_lanes 0).';

CREATE FUNCTION event_private.types_problem(p_event_types text[])
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN p_event_types IS NULL OR cardinality(p_event_types) = 0 THEN 'at least one event type is required'
        WHEN array_position(p_event_types, NULL) IS NOT NULL THEN 'an event type is null'
        WHEN EXISTS (SELECT FROM unnest(p_event_types) AS t WHERE length(t) NOT BETWEEN 1 AND 255)
            THEN 'an event type must have 1 to 255 characters'
    END;
$$;
COMMENT ON FUNCTION event_private.types_problem(text[]) IS
    'Why p_event_types is no valid list of event types for a consumer (empty, a NULL, an empty or longer than 255 characters), NULL when it is. Raises nothing.';

CREATE FUNCTION event_private.consumer_create(p_name text, p_event_types text[], p_lanes smallint DEFAULT 64)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_problem text := event_private.types_problem(p_event_types);
    v_id      bigint;
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid event types: %', v_problem USING ERRCODE = 'SLINV';
    END IF;
    INSERT INTO event.consumers (name, event_types, lanes)
    VALUES (p_name, ARRAY(SELECT DISTINCT t FROM unnest(p_event_types) AS t ORDER BY t), p_lanes)
    RETURNING id INTO v_id;
    INSERT INTO event.consumer_lanes (consumer_id, lane)
    SELECT v_id, l FROM generate_series(0, p_lanes - 1) AS l;
    RETURN v_id;
END
$$;
COMMENT ON FUNCTION event_private.consumer_create(text, text[], smallint) IS
    'Creates event consumer p_name (unique) of the event types p_event_types, with p_lanes lanes (default 64) and their event.consumer_lanes rows, and returns its id. Events stored from then on whose type is one of p_event_types are delivered to it. Raises SLINV for an invalid list of types, unique_violation 23505 for a name in use.';

CREATE FUNCTION event_private.consumer_set_types(p_consumer_id bigint, p_event_types text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_problem text := event_private.types_problem(p_event_types);
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid event types: %', v_problem USING ERRCODE = 'SLINV';
    END IF;
    UPDATE event.consumers
    SET event_types = ARRAY(SELECT DISTINCT t FROM unnest(p_event_types) AS t ORDER BY t)
    WHERE id = p_consumer_id;
END
$$;
COMMENT ON FUNCTION event_private.consumer_set_types(bigint, text[]) IS
    'Changes the event types consumer p_consumer_id receives, for events stored from then on: deliveries already made stay. Raises SLINV for an invalid list of types.';

-- The consumer's row first: that waits for the ingests delivering to it (they lock it FOR KEY
-- SHARE), and later ingests no longer see it; then, in a new snapshot, its deliveries, theirs
-- included.
CREATE FUNCTION event_private.consumer_drop(p_consumer_id bigint)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM event.consumers WHERE id = p_consumer_id;
    DELETE FROM event.deliveries WHERE consumer_id = p_consumer_id;
$$;
COMMENT ON FUNCTION event_private.consumer_drop(bigint) IS
    'Deletes consumer p_consumer_id with its lanes and its pending deliveries (the events stay in the store). Raises foreign_key_violation 23503 while a belt still names it.';
