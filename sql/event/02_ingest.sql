-- Event store, ingest: events in Granary's two parts ({"event_headers": {...}, "event_payload":
-- ...}) are checked, deduplicated by grnry-event-id, stored, and delivered to the consumers of
-- their types, all in the caller's transaction. psql calls api.event_ingest with one event or an
-- array; HTTP's POST /events calls api.event_ingest_requests with the requests it joined (each its
-- own caller and idempotency key, sql/idempotency/).
--
-- Why it is shaped so:
-- * Set-based: a call carries up to thousands of events, and a statement per event would cost
--   more than the events. One statement parses and checks them all, inserts their ids (the
--   deduplication), their rows and their deliveries; a second one looks up when the duplicates
--   were first stored, only when there are duplicates.
-- * Bad events cost the others nothing: a rule broken is a refused row (SQLSTATE and reason), not
--   an error.
-- * Deduplication by event.event_ids' primary key, ON CONFLICT DO NOTHING: of two concurrent
--   ingests of one id, one stores it and the other waits for it and answers duplicate. Ids are
--   inserted in id order, so two calls that share ids wait for each other and never deadlock.
--   Within a call, the first valid event with an id is stored, the later ones answer duplicate.
-- * Fan-out in the same statement: a delivery per consumer whose types hold the event's type, in
--   the lane of the correlation id the profile store's links lead to (the lane of the id its
--   updates are applied to, so old and new ids keep one order). The usual event is not linked:
--   one index probe tells (none when the store holds no link at all), and link_chain runs only for
--   ids that have a link. No consumer at all: the step does not run.

CREATE TYPE event_private.ingested AS (
    ord          integer,
    status       text,
    event_id     text,
    first_stored timestamptz,
    sqlstate     text,
    reason       text
);
COMMENT ON TYPE event_private.ingested IS
    'The answer for one event of an ingest: ord (its position, from 1), status (stored, duplicate or refused), event_id (its grnry-event-id when it has a valid one), first_stored (when an event with its id was first stored: now for stored), sqlstate and reason (why it was refused).';

-- The reason a key-like header is invalid: the profile store's rules for ids (a non-empty
-- string) with a length limit, in characters or bytes.
CREATE FUNCTION event_private.header_problem(p_name text, p_value jsonb, p_max integer, p_bytes boolean)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_value IS NULL OR p_value = 'null' THEN p_name || ' is required'
        WHEN jsonb_typeof(p_value) <> 'string' THEN p_name || ' must be a string, got ' || jsonb_typeof(p_value)
        WHEN p_value = '""' THEN p_name || ' must not be empty'
        WHEN p_bytes AND octet_length(p_value #>> '{}') > p_max
            THEN format('%s must be at most %s bytes, got %s', p_name, p_max, octet_length(p_value #>> '{}'))
        WHEN NOT p_bytes AND length(p_value #>> '{}') > p_max
            THEN format('%s must be at most %s characters, got %s', p_name, p_max, length(p_value #>> '{}'))
    END;
$$;
COMMENT ON FUNCTION event_private.header_problem(text, jsonb, integer, boolean) IS
    'Why p_value (the JSON value of header p_name, NULL when absent) is not a valid key-like header: absent or null, not a string, empty, or longer than p_max characters (p_bytes false) or bytes (p_bytes true); NULL when it is valid. Raises nothing.';

-- Epoch milliseconds as a JSON number or a string of digits, or an ISO 8601 date or date-time
-- (profile_private.in_parse, as _in of a profile update), from 1970 to 9999.
CREATE FUNCTION event_private.timestamp_of(p_value jsonb)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN ms.v IS NOT NULL AND ms.v BETWEEN 0 AND 253402300799999
            THEN timestamptz 'epoch' + ms.v * interval '1 millisecond'
    END
    FROM (SELECT CASE WHEN jsonb_typeof(p_value) IN ('number', 'string') AND (p_value #>> '{}') ~ '^\d{1,15}$'
                      THEN (p_value #>> '{}')::bigint
                      WHEN jsonb_typeof(p_value) = 'string' AND length(p_value #>> '{}') <= 64
                      THEN profile_private.in_parse(p_value #>> '{}')
                 END AS v) ms;
$$;
COMMENT ON FUNCTION event_private.timestamp_of(jsonb) IS
    'The time header grnry-event-timestamp p_value gives: epoch milliseconds (a JSON number or a string of up to 15 digits), or an ISO 8601 date or date-time as profile_private.in_parse reads it (UTC when it has no offset); NULL when it is none of these or outside 1970-01-01 to 9999-12-31. Raises nothing.';

-- p_bad: an object {"<ord>": "<reason>"} of events that could not be read (an NDJSON line that is
-- no JSON): their elements of p_events are placeholders, refused with the reason.
--
-- The settings: OFFSET 0 keeps each level of the parse computed once, not again at every use
-- above it, but the planner cannot count the rows of the CTEs and would join them in nested loops
-- (a thousand events: a million comparisons): hash joins it is. Without JIT: the cost of the
-- nested loops it is told to avoid would make it compile the statement (seconds) at every call.
-- One generic plan per connection: planning the statement costs as much as a hundred events.
CREATE FUNCTION event_private.ingest(p_events jsonb, p_bad jsonb DEFAULT NULL)
RETURNS SETOF event_private.ingested
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_consumers boolean := EXISTS (SELECT FROM event.consumers);
    -- A store without any profile link (one probe of the partial index profilestore_links_idx)
    -- needs no probe per event.
    v_links     boolean := v_consumers AND EXISTS (SELECT FROM profile.profilestore p WHERE p.profile_type = 'profile_link');
    v_res       event_private.ingested[];
    v_heads     jsonb;
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'events must be a JSON object (one event) or an array of events'
            USING ERRCODE = 'SLINV', DETAIL = format('got %s', coalesce(jsonb_typeof(p_events), 'NULL'));
    END IF;

    WITH src AS MATERIALIZED (
        SELECT c.ord, c.eid, c.p_id, c.etype, c.cid, c.harvester, c.version, c.headers, c.payload,
               coalesce(c.at, now()) AS at,
               CASE WHEN c.bad IS NOT NULL THEN ARRAY['SEEVT', c.bad]
                    WHEN NOT c.is_obj THEN ARRAY['SEEVT', 'an event must be a JSON object {"event_headers": {...}, "event_payload": ...}, got ' || jsonb_typeof(c.m)]
                    WHEN jsonb_typeof(c.headers) IS DISTINCT FROM 'object'
                        THEN ARRAY['SEEVT', 'event_headers must be a JSON object, got ' || coalesce(jsonb_typeof(c.headers), 'nothing')]
                    WHEN c.payload IS NULL THEN ARRAY['SEEVT', 'event_payload is required (any JSON value)']
                    WHEN c.p_id IS NOT NULL THEN ARRAY['SEHDR', c.p_id]
                    WHEN c.p_type IS NOT NULL THEN ARRAY['SEHDR', c.p_type]
                    WHEN c.p_cid IS NOT NULL THEN ARRAY['SEHDR', c.p_cid]
                    WHEN c.harvester IS NULL AND c.j_harvester IS NOT NULL AND c.j_harvester <> 'null'
                        THEN ARRAY['SEHDR', 'grnry-harvester-name must be a string, got ' || jsonb_typeof(c.j_harvester)]
                    WHEN c.version IS NULL AND c.j_version IS NOT NULL AND c.j_version <> 'null'
                        THEN ARRAY['SEHDR', 'grnry-event-type-version must be a string, got ' || jsonb_typeof(c.j_version)]
                    WHEN c.at IS NULL AND c.j_ts IS NOT NULL AND c.j_ts <> 'null'
                        THEN ARRAY['SETIM', 'grnry-event-timestamp must be epoch milliseconds (a number or a string of digits) or an ISO 8601 date-time from 1970 to 9999, got ' || left(c.j_ts::text, 100)]
               END AS problem
        FROM (
            SELECT b.*,
                   -- The usual valid header is told by cheap tests; only a broken one costs a call.
                   CASE WHEN jsonb_typeof(b.j_id) = 'string' AND length(b.j_id #>> '{}') BETWEEN 1 AND 255 THEN NULL
                        ELSE event_private.header_problem('grnry-event-id', b.j_id, 255, false) END AS p_id,
                   CASE WHEN jsonb_typeof(b.j_type) = 'string' AND length(b.j_type #>> '{}') BETWEEN 1 AND 255 THEN NULL
                        ELSE event_private.header_problem('grnry-event-type', b.j_type, 255, false) END AS p_type,
                   CASE WHEN jsonb_typeof(b.j_cid) = 'string' AND octet_length(b.j_cid #>> '{}') BETWEEN 1 AND 512 THEN NULL
                        ELSE event_private.header_problem('grnry-correlation-id', b.j_cid, 512, true) END AS p_cid,
                   CASE WHEN jsonb_typeof(b.j_id) = 'string' THEN b.j_id #>> '{}' END AS eid,
                   CASE WHEN jsonb_typeof(b.j_type) = 'string' THEN b.j_type #>> '{}' END AS etype,
                   CASE WHEN jsonb_typeof(b.j_cid) = 'string' THEN b.j_cid #>> '{}' END AS cid,
                   CASE WHEN jsonb_typeof(b.j_harvester) = 'string' THEN b.j_harvester #>> '{}' END AS harvester,
                   CASE WHEN jsonb_typeof(b.j_version) = 'string' THEN b.j_version #>> '{}' END AS version,
                   CASE WHEN b.j_ts IS NULL OR b.j_ts = 'null' THEN NULL
                        -- Digits only, told without a regular expression (which costs more than the rest).
                        WHEN jsonb_typeof(b.j_ts) = 'string' AND length(b.j_ts #>> '{}') BETWEEN 1 AND 15
                             AND translate(b.j_ts #>> '{}', '0123456789', '') = ''
                             AND (b.j_ts #>> '{}')::bigint <= 253402300799999
                            THEN timestamptz 'epoch' + (b.j_ts #>> '{}')::bigint * interval '1 millisecond'
                        ELSE event_private.timestamp_of(b.j_ts) END AS at
            FROM (
                SELECT a.ord, a.m, a.is_obj, a.bad, a.headers, a.payload,
                       a.headers -> 'grnry-event-id' AS j_id, a.headers -> 'grnry-event-type' AS j_type,
                       a.headers -> 'grnry-correlation-id' AS j_cid, a.headers -> 'grnry-harvester-name' AS j_harvester,
                       a.headers -> 'grnry-event-type-version' AS j_version, a.headers -> 'grnry-event-timestamp' AS j_ts
                FROM (
                    SELECT e.ord::integer AS ord, e.m, jsonb_typeof(e.m) = 'object' AS is_obj,
                           CASE WHEN p_bad IS NOT NULL THEN p_bad ->> e.ord::text END AS bad,
                           CASE WHEN jsonb_typeof(e.m) = 'object' THEN e.m -> 'event_headers' END AS headers,
                           CASE WHEN jsonb_typeof(e.m) = 'object' THEN e.m -> 'event_payload' END AS payload
                    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_events) = 'array' THEN p_events
                                                   ELSE jsonb_build_array(p_events) END) WITH ORDINALITY AS e(m, ord)
                    OFFSET 0
                ) a
                OFFSET 0
            ) b
            OFFSET 0
        ) c
    ), valid AS MATERIALIZED (
        -- The first event of each id (in the order of the call) is the one that may be stored.
        SELECT s.ord, s.eid, s.etype, s.cid, s.at, s.harvester, s.version, s.headers, s.payload,
               s.eid IS DISTINCT FROM lag(s.eid) OVER (ORDER BY s.eid, s.ord) AS first
        FROM src s
        WHERE s.problem IS NULL
    ), ids AS (
        INSERT INTO event.event_ids (event_id, at, correlation_id)
        SELECT v.eid, v.at, v.cid FROM valid v WHERE v.first ORDER BY v.eid
        ON CONFLICT (event_id) DO NOTHING
        RETURNING event_id
    ), stored AS MATERIALIZED (
        SELECT v.* FROM valid v JOIN ids i ON i.event_id = v.eid WHERE v.first
    ), ev AS (
        INSERT INTO event.events (at, event_id, event_type, correlation_id, harvester_name, type_version, headers, payload)
        SELECT s.at, s.eid, s.etype, s.cid, s.harvester, s.version, s.headers, s.payload
        FROM stored s
    ), dl AS (
        INSERT INTO event.deliveries (consumer_id, lane, correlation_id, event_cid, event_at, event_id)
        SELECT c.id, event_private.lane_of(t.target, c.lanes), t.target, s.cid, s.at, s.eid
        FROM stored s
        JOIN event.consumers c ON s.etype = ANY (c.event_types)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN v_links AND EXISTS (SELECT FROM profile.profilestore p
                                     WHERE p.correlation_id = s.cid AND p.profile_type = 'profile_link'
                                       AND p.path = '/new' AND p.pit = '_latest')
                        THEN (SELECT ch[cardinality(ch)] FROM profile_private.link_chain(s.cid) AS ch)
                        ELSE s.cid END AS target
        ) t
        WHERE v_consumers
        ORDER BY s.ord, c.id
        RETURNING consumer_id, lane, id
    )
    SELECT (SELECT jsonb_agg(jsonb_build_array(h.consumer_id, h.lane, h.first))
            FROM (SELECT x.consumer_id, x.lane, min(x.id) AS first FROM dl x GROUP BY x.consumer_id, x.lane) h),
           array_agg(ROW(s.ord,
                         CASE WHEN s.problem IS NOT NULL THEN 'refused'
                              WHEN st.ord IS NOT NULL THEN 'stored' ELSE 'duplicate' END,
                         CASE WHEN s.p_id IS NULL THEN s.eid END,
                         CASE WHEN st.ord IS NOT NULL THEN now() END,
                         s.problem[1], s.problem[2])::event_private.ingested ORDER BY s.ord)
    INTO v_heads, v_res
    FROM src s
    LEFT JOIN stored st ON st.ord = s.ord;

    -- Wake idle belt workers when a lane had nothing waiting: behind waiting deliveries the
    -- workers are busy with the lane already, and a notifying commit takes a database-wide lock
    -- (profile_private.inbox_add does the same for the profile updater).
    IF v_heads IS NOT NULL AND EXISTS (
            SELECT FROM jsonb_array_elements(v_heads) h
            WHERE NOT EXISTS (SELECT FROM event.deliveries d
                              WHERE d.consumer_id = (h ->> 0)::bigint AND d.lane = (h ->> 1)::smallint
                                AND d.id < (h ->> 2)::bigint)) THEN
        PERFORM pg_notify('silo_belt', '');
    END IF;

    -- When the duplicates were first stored: a new statement, which sees the rows of the
    -- concurrent calls that ON CONFLICT waited for.
    IF EXISTS (SELECT FROM unnest(v_res) r WHERE r.status = 'duplicate') THEN
        v_res := ARRAY(
            SELECT ROW(r.ord, r.status, r.event_id, CASE WHEN r.status = 'duplicate' THEN i.received ELSE r.first_stored END,
                       r.sqlstate, r.reason)::event_private.ingested
            FROM unnest(v_res) r
            LEFT JOIN event.event_ids i ON r.status = 'duplicate' AND i.event_id = r.event_id
            ORDER BY r.ord);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_res);
END
$$;
COMMENT ON FUNCTION event_private.ingest(jsonb, jsonb) IS
    'Ingests p_events (one event object or a JSON array of them) in the caller''s transaction; p_bad (default NULL): {"<ord>": "<reason>"} for elements that stand for unreadable input, refused with SEEVT and the reason. Each valid event whose grnry-event-id is not stored yet (and not earlier in p_events) is stored in event.events and event.event_ids and delivered (event.deliveries) to every consumer of its type, in the lane of the final profile-link target of its correlation id, and notifies silo_belt (empty payload) when a lane it delivered to had nothing waiting, to wake idle belt workers. Returns one event_private.ingested per element, in order. Refusals: SEEVT (not an object, event_headers not an object, event_payload missing, unreadable), SEHDR (grnry-event-id or grnry-event-type missing, not a string, empty or over 255 characters; grnry-correlation-id the same with 512 bytes; grnry-harvester-name or grnry-event-type-version not a string), SETIM (grnry-event-timestamp neither epoch milliseconds nor ISO 8601, or outside 1970..9999). Raises SLINV when p_events is neither an object nor an array.';

-- A view rather than RETURNS TABLE, as api.profile_apply_results: its row type is the function's,
-- and sqlc reads it.
CREATE VIEW api.event_ingested AS
SELECT NULL::integer AS ord, NULL::text AS status, NULL::text AS event_id, NULL::timestamptz AS first_stored,
       NULL::text AS sqlstate, NULL::text AS reason
WHERE false;
COMMENT ON VIEW api.event_ingested IS
    'Always empty: the row type of api.event_ingest. ord: the event''s position, from 1; status: stored, duplicate or refused; event_id: its grnry-event-id (when valid); first_stored: when an event with its id was first stored (now for stored); sqlstate and reason: why it was refused.';

CREATE FUNCTION api.event_ingest(p_events jsonb)
RETURNS SETOF api.event_ingested
LANGUAGE sql VOLATILE
AS $$
    SELECT i.ord, i.status, i.event_id, i.first_stored, i.sqlstate, i.reason FROM event_private.ingest(p_events) i;
$$;
COMMENT ON FUNCTION api.event_ingest(jsonb) IS
    'Stores events, as psql''s counterpart of POST /events. p_events (no default): one event {"event_headers": {...}, "event_payload": <any JSON>} or a JSON array of them. Headers: grnry-event-id (required string, 1 to 255 characters: deduplicates), grnry-event-type (required string, 1 to 255 characters: which consumers receive it), grnry-correlation-id (required string, 1 to 512 bytes), grnry-event-timestamp (optional: epoch milliseconds as a number or a string of digits, or an ISO 8601 date-time, UTC without offset; absent or null: the time of ingest), grnry-harvester-name and grnry-event-type-version (optional strings); any other header is kept as sent. Returns one row per event, in order: ord (from 1), status stored | duplicate (an event with its id is stored already, or came earlier in p_events: not stored or delivered again) | refused, event_id, first_stored (when its id was first stored; now for stored), and for a refused event sqlstate and reason: SEEVT (not an object, event_headers not an object, event_payload missing), SEHDR (a header breaks its rule), SETIM (invalid grnry-event-timestamp). Refused events cost the others nothing. Each stored event is delivered (event.deliveries) to every consumer whose event types hold its type; notifies silo_belt when a lane it delivered to had nothing waiting. Raises SLINV when p_events is NULL or neither an object nor an array; transient errors (40P01, 55P03, 57014, 53xxx, 08xxx) roll back the whole call.';

CREATE VIEW api.event_ingest_results AS
SELECT NULL::integer AS request, NULL::integer AS ord, NULL::text AS status, NULL::text AS event_id,
       NULL::timestamptz AS first_stored, NULL::text AS sqlstate, NULL::text AS reason, NULL::boolean AS replayed
WHERE false;
COMMENT ON VIEW api.event_ingest_results IS
    'Always empty: the row type of api.event_ingest_requests. request: the request''s position in the call, from 1; ord: the event''s position in its request, from 1 (NULL for a refused request); status: stored, duplicate or refused as in api.event_ingest (refused with ord NULL: the whole request); event_id, first_stored, sqlstate, reason: as in api.event_ingest; replayed: the request repeated an idempotency key and this row is the first answer (nothing was stored again).';

CREATE FUNCTION api.event_ingest_requests(p_requests jsonb)
RETURNS SETOF api.event_ingest_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims idempotency_private.claimed[];
    v_events jsonb;
    v_bad    jsonb;
    v_req_of integer[];
    v_ord_in integer[];
    v_one    integer;
    v_res    api.event_ingest_results[];
BEGIN
    v_claims := idempotency_private.claim_requests(p_requests, 'POST /events', 'events', '{object,array}');

    -- The events of the requests to apply, one ingest in request order; the unreadable ones of
    -- each request ("invalid": {"<ord>": "<reason>"}) renumbered to the call's positions. One
    -- request to apply (a large body is a call of its own): its events as they are, not copied
    -- into a new array.
    IF (SELECT count(*) FROM unnest(v_claims) AS c WHERE c.outcome IN ('fresh', 'new')) = 1 THEN
        SELECT c.request, c.body,
               CASE WHEN jsonb_typeof(p_requests -> (c.request - 1) -> 'invalid') = 'object'
                    THEN p_requests -> (c.request - 1) -> 'invalid' END
        INTO v_one, v_events, v_bad
        FROM unnest(v_claims) AS c WHERE c.outcome IN ('fresh', 'new');
        v_res := ARRAY(
            SELECT ROW(v_one, i.ord, i.status, i.event_id, i.first_stored, i.sqlstate, i.reason, false)::api.event_ingest_results
            FROM event_private.ingest(v_events, v_bad) AS i);
        v_events := NULL;
    ELSE
        SELECT jsonb_agg(u.m ORDER BY u.g), array_agg(u.request ORDER BY u.g),
               array_agg(u.n::integer ORDER BY u.g),
               jsonb_object_agg(u.g::text, u.inv ->> u.n::text) FILTER (WHERE u.inv ? u.n::text)
        INTO v_events, v_req_of, v_ord_in, v_bad
        FROM (
            SELECT c.request, x.m, x.n, row_number() OVER (ORDER BY c.request, x.n) AS g, c.inv
            FROM (SELECT c.request, c.body,
                         CASE WHEN jsonb_typeof(p_requests -> (c.request - 1) -> 'invalid') = 'object'
                              THEN p_requests -> (c.request - 1) -> 'invalid' END AS inv
                  FROM unnest(v_claims) AS c
                  WHERE c.outcome IN ('fresh', 'new')) c
            CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.body) = 'object'
                                                         THEN jsonb_build_array(c.body) ELSE c.body END)
                               WITH ORDINALITY AS x(m, n)
        ) u;

        IF v_events IS NOT NULL THEN
            v_res := ARRAY(
                SELECT ROW(v_req_of[i.ord], v_ord_in[i.ord], i.status, i.event_id, i.first_stored, i.sqlstate,
                           i.reason, false)::api.event_ingest_results
                FROM event_private.ingest(v_events, v_bad) AS i);
        END IF;
    END IF;

    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := idempotency_private.record_answers(v_claims, to_jsonb(v_res), 'POST /events');
    END IF;

    RETURN QUERY
    SELECT x.* FROM (
        SELECT r.* FROM unnest(v_res) AS r
        UNION ALL
        SELECT c.request, p.ord, p.status, p.event_id, p.first_stored, p.sqlstate, p.reason, true
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL jsonb_populate_recordset(NULL::api.event_ingest_results,
            CASE WHEN c.outcome = 'replay' THEN c.answer ELSE v_claims[c.repeats].answer END) AS p
        WHERE c.outcome IN ('replay', 'repeat')
        UNION ALL
        SELECT c.request, NULL, 'refused', NULL, NULL, c.sqlstate, c.reason, false
        FROM unnest(v_claims) AS c
        WHERE c.outcome = 'refused'
    ) x
    ORDER BY x.request, x.ord;
END
$$;
COMMENT ON FUNCTION api.event_ingest_requests(jsonb) IS
    'Ingests the events of several requests in one transaction, as HTTP''s POST /events does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests, each an object {"events": one event or an array of events as api.event_ingest takes them, "token_id": the caller''s token id (optional: scopes its idempotency keys; without it the keys are the session role''s), "idempotency_key": optional, 1 to 255 printable ASCII characters, "invalid": optional {"<ord>": "<reason>"}: events of the request that could not be read (an NDJSON line that is no JSON), whose elements are placeholders, refused with SEEVT and the reason}. The events of the requests applied are ingested as one api.event_ingest call in request order (an id sent by two requests of the call is stored for the first). A request whose key was used within silo.settings idempotency.window for the same body by the same token is not applied again: it gets the first answer, marked replayed; the answer of a new key is recorded in this transaction. Returns api.event_ingest_results rows by request and ord: one per event (stored, duplicate, or refused with SEEVT, SEHDR or SETIM as in api.event_ingest), and one refused row (ord NULL) for a request that was not applied: SLINV (not an object, events missing or neither an object nor an array, token_id not an integer), SLIDK (invalid idempotency key), SLIDM (key already used for another body). Raises SLINV when p_requests is not a JSON array or idempotency.window is no interval; transient errors (40P01, 55P03, 57014, 53xxx, 08xxx) roll back the whole call. Waits for another transaction that claimed one of its keys, until it ends.';
