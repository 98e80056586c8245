-- Event store, reads: Granary's Event Store API. Events of a correlation id (index
-- events_correlation_at_idx: correlation_id, at, event_id) or of a type (index
-- events_type_at_idx), in a half-open time range [from, to), ascending by time (then event id),
-- paged with offset and page size. One event by correlation id and event id: event.event_ids
-- tells its time, so the read is one index probe per table.
-- Reads see event.events alone: a correlation id is the one the event was sent with, links aside.

CREATE VIEW api.event_rows AS
SELECT NULL::text AS event_id, NULL::text AS correlation_id, NULL::text AS event_type, NULL::timestamptz AS at,
       NULL::timestamptz AS received, NULL::jsonb AS headers, NULL::jsonb AS payload, NULL::bigint AS total_count
WHERE false;
COMMENT ON VIEW api.event_rows IS
    'Always empty: the row type of api.event_list and api.event_get. event_id, correlation_id, event_type: the headers grnry-event-id, grnry-correlation-id, grnry-event-type; at: the event time; received: when it was stored; headers, payload: the event as sent; total_count: the number of events in the range read (api.event_list with p_total; NULL otherwise).';

CREATE FUNCTION api.event_list(
    p_correlation_id text DEFAULT NULL,
    p_event_type     text DEFAULT NULL,
    p_from           timestamptz DEFAULT '1970-01-01T00:00:00Z',
    p_to             timestamptz DEFAULT '2038-01-01T00:00:00Z',
    p_offset         integer DEFAULT 0,
    p_pagesize       integer DEFAULT 20,
    p_total          boolean DEFAULT false)
RETURNS SETOF api.event_rows
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_from  timestamptz := coalesce(p_from, '1970-01-01T00:00:00Z');
    v_to    timestamptz := coalesce(p_to, '2038-01-01T00:00:00Z');
    v_total bigint;
BEGIN
    IF p_correlation_id IS NULL AND p_event_type IS NULL THEN
        RAISE EXCEPTION 'a correlation id or an event type is required' USING ERRCODE = 'SLINV';
    END IF;
    IF p_pagesize IS NULL OR p_pagesize NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'pagesize must be between 1 and 1000, got %', coalesce(p_pagesize::text, 'NULL')
            USING ERRCODE = 'SLINV';
    END IF;
    IF p_offset IS NULL OR p_offset < 0 THEN
        RAISE EXCEPTION 'offset must be 0 or more, got %', coalesce(p_offset::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF p_total THEN
        SELECT count(*) INTO v_total
        FROM event.events e
        WHERE (p_correlation_id IS NULL OR e.correlation_id = p_correlation_id)
          AND (p_event_type IS NULL OR e.event_type = p_event_type)
          AND e.at >= v_from AND e.at < v_to;
    END IF;
    IF p_correlation_id IS NOT NULL THEN
        RETURN QUERY
        SELECT e.event_id, e.correlation_id, e.event_type, e.at, e.received, e.headers, e.payload, v_total
        FROM event.events e
        WHERE e.correlation_id = p_correlation_id
          AND (p_event_type IS NULL OR e.event_type = p_event_type)
          AND e.at >= v_from AND e.at < v_to
        ORDER BY e.at, e.event_id
        OFFSET p_offset LIMIT p_pagesize;
    ELSE
        RETURN QUERY
        SELECT e.event_id, e.correlation_id, e.event_type, e.at, e.received, e.headers, e.payload, v_total
        FROM event.events e
        WHERE e.event_type = p_event_type
          AND e.at >= v_from AND e.at < v_to
        ORDER BY e.at, e.event_id
        OFFSET p_offset LIMIT p_pagesize;
    END IF;
END
$$;
COMMENT ON FUNCTION api.event_list(text, text, timestamptz, timestamptz, integer, integer, boolean) IS
    'Stored events, ascending by time (then event id), as HTTP''s GET /events/{correlationId} and GET /events?eventType= read them. p_correlation_id (default NULL): the events sent with this correlation id; p_event_type (default NULL): of this type; at least one is required, both filter together. p_from (default and NULL: 1970-01-01T00:00:00Z, included) and p_to (default and NULL: 2038-01-01T00:00:00Z, excluded): the range of the event time (grnry-event-timestamp). p_offset (default 0) events skipped, p_pagesize (default 20, 1 to 1000) at most returned. p_total (default false): fill total_count with the number of events in the range (NULL otherwise; one more scan of the range). Returns api.event_rows rows: event_id, correlation_id, event_type, at (the event time), received (when stored), headers, payload, total_count; no rows when nothing matches. Raises SLINV when neither p_correlation_id nor p_event_type is given, p_pagesize is outside 1..1000 or NULL, or p_offset is negative or NULL.';

CREATE FUNCTION api.event_get(p_correlation_id text, p_event_id text)
RETURNS SETOF api.event_rows
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
    SELECT e.event_id, e.correlation_id, e.event_type, e.at, e.received, e.headers, e.payload, NULL::bigint
    FROM event.event_ids i
    JOIN event.events e ON e.correlation_id = i.correlation_id AND e.at = i.at AND e.event_id = i.event_id
    WHERE i.event_id = p_event_id AND i.correlation_id = p_correlation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no event % of correlation id %', p_event_id, p_correlation_id USING ERRCODE = 'SLNFD';
    END IF;
END
$$;
COMMENT ON FUNCTION api.event_get(text, text) IS
    'The stored event p_event_id (grnry-event-id, required) sent with correlation id p_correlation_id (required), as HTTP''s GET /events/{correlationId}/{eventId} reads it: one api.event_rows row: event_id, correlation_id, event_type, at (the event time), received (when stored), headers, payload (total_count NULL). Raises SLNFD when there is no such event (never stored, dropped by retention, or stored with another correlation id).';
