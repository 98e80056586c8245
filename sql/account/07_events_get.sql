-- Listing events (Pryv's events.get): the events the access may read, filtered by streams (with
-- their descendants), types, a time range and state, newest first unless sortAscending, paged by
-- skip and limit. Series holders stay out unless includeSeries or a types pattern names them:
-- code that lists events is rarely ready for series (seed 001, GET /events).

CREATE FUNCTION account_private.type_matches(p_type text, p_patterns text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT EXISTS (SELECT FROM unnest(p_patterns) p
                   WHERE CASE WHEN p LIKE '%*' THEN starts_with(p_type, left(p, -1)) ELSE p_type = p END);
$$;
COMMENT ON FUNCTION account_private.type_matches(text, text[]) IS 'Whether event type p_type matches one of p_patterns: a pattern is a type (mass/kg, series:mass/kg), a class with * (mass/*, series:mass/*) or series:* (every series type). Raises nothing.';

CREATE FUNCTION api.account_events_get(
    p_access_id text,
    p_streams text[] DEFAULT NULL,
    p_types text[] DEFAULT NULL,
    p_from_time double precision DEFAULT NULL,
    p_to_time double precision DEFAULT NULL,
    p_limit integer DEFAULT NULL,
    p_skip integer DEFAULT 0,
    p_sort_ascending boolean DEFAULT false,
    p_state text DEFAULT 'default',
    p_include_series boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_readable text[];
    v_streams text[];
    v_bad text;
    v_limit integer := p_limit;
    v_result jsonb;
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('default', 'trashed', 'all') THEN
        RAISE EXCEPTION 'state must be default, trashed or all, not %', coalesce(p_state, 'NULL') USING ERRCODE = 'SAINV';
    END IF;
    SELECT t INTO v_bad FROM unnest(p_types) t WHERE t !~ '^(series:\*|(series:)?[a-z0-9-]+/(\*|[a-z0-9-]+))$' LIMIT 1;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'invalid type pattern "%"', v_bad USING ERRCODE = 'SAINV',
            HINT = 'A type pattern is {class}/{format}, {class}/*, or the same after series:, or series:*.';
    END IF;
    IF p_limit IS NOT NULL AND p_limit < 0 OR coalesce(p_skip, 0) < 0 THEN
        RAISE EXCEPTION 'limit and skip must not be negative' USING ERRCODE = 'SAINV';
    END IF;
    IF v_limit IS NULL AND p_from_time IS NULL AND p_to_time IS NULL THEN
        v_limit := settings_private.setting('account.events_default_limit', '20')::integer;
    END IF;
    SELECT array_agg(l.stream_id) INTO v_readable FROM account_private.stream_levels(v_by) l WHERE account_private.can(l.level, 'read');
    v_readable := coalesce(v_readable, '{}');
    IF p_streams IS NOT NULL THEN
        SELECT i INTO v_bad FROM unnest(p_streams) i
        WHERE NOT EXISTS (SELECT FROM account.streams s WHERE s.user_id = v_by.user_id AND s.id = i) LIMIT 1;
        IF v_bad IS NOT NULL THEN
            RAISE EXCEPTION 'unknown stream "%"', v_bad USING ERRCODE = 'SAREF', DETAIL = format('streams %s', v_bad);
        END IF;
        WITH RECURSIVE sub AS (
            SELECT s.id FROM account.streams s WHERE s.user_id = v_by.user_id AND s.id = ANY (p_streams)
            UNION
            SELECT c.id FROM account.streams c JOIN sub ON c.user_id = v_by.user_id AND c.parent_id = sub.id
        )
        SELECT array_agg(sub.id) INTO v_streams FROM sub WHERE sub.id = ANY (v_readable);
        v_readable := coalesce(v_streams, '{}');
    END IF;
    SELECT coalesce(jsonb_agg(account_private.event_json(e) ORDER BY
                CASE WHEN p_sort_ascending THEN e.time END, CASE WHEN NOT p_sort_ascending THEN e.time END DESC, e.id), '[]')
    INTO v_result
    FROM (SELECT e.* FROM account.events e
          WHERE e.user_id = v_by.user_id
            AND e.stream_ids && v_readable
            AND CASE p_state WHEN 'default' THEN NOT e.trashed WHEN 'trashed' THEN e.trashed ELSE true END
            AND (p_to_time IS NULL OR e.time <= p_to_time)
            AND (p_from_time IS NULL OR e.time + coalesce(e.duration, 0) >= p_from_time)
            AND CASE
                WHEN p_types IS NOT NULL THEN account_private.type_matches(e.type, p_types)
                    OR (p_include_series AND e.series_id IS NOT NULL AND account_private.type_matches(substr(e.type, 8), p_types))
                ELSE e.series_id IS NULL OR p_include_series END
          ORDER BY CASE WHEN p_sort_ascending THEN e.time END, CASE WHEN NOT p_sort_ascending THEN e.time END DESC, e.id
          OFFSET coalesce(p_skip, 0) LIMIT v_limit) e;
    RETURN jsonb_build_object('events', v_result);
END
$$;
COMMENT ON FUNCTION api.account_events_get(text, text[], text[], double precision, double precision, integer, integer, boolean, text, boolean) IS 'The events access p_access_id may read (read, contribute or manage on one of their streams), in Pryv''s shape {"events": [...]}. Filters, all optional: p_streams, stream ids, each with its descendants; p_types, type patterns (mass/kg, mass/*, series:mass/kg, series:mass/*, series:*); p_from_time and p_to_time, seconds since the epoch: events that overlap the range (time <= p_to_time, time + duration >= p_from_time); p_state, default (not trashed), trashed or all; p_include_series (default false): series events are left out unless it is true or a pattern of p_types names them (with it, mass/kg also matches series:mass/kg). Ordered by time, newest first unless p_sort_ascending; p_skip events skipped (default 0), at most p_limit returned (default: all when a time bound is given, else silo.settings account.events_default_limit, 20). Raises SAAUT when p_access_id is unknown or deleted; SAINV for another state, a malformed type pattern, a negative limit or skip; SAREF for an unknown stream in p_streams.';
