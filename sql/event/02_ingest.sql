-- Event store, ingest: events in Granary's two parts ({"event_headers": {...}, "event_payload":
-- ...}) are checked, deduplicated by grnry-event-id, stored, and delivered to the consumers of
-- their types, all in the caller's transaction. psql calls api.event_ingest with one event or an
-- array; HTTP's POST /events calls api.event_ingest_requests (sql/event/02_requests.sql) with the
-- requests it joined (each its own caller and idempotency key, sql/idempotency/), an NDJSON body as
-- text beside them.
--
-- Why it is shaped so:
-- * Set-based: a call carries up to thousands of events, and a statement per event would cost
--   more than the events. One statement parses and checks them all (sql/event/02_parse.sql) and
--   inserts their ids (the deduplication) and their rows; one more delivers them when the store
--   has consumers.
-- * NDJSON is read line by line (event_private.elements): a large body never becomes one jsonb
--   document, whose parse costs twice that of its lines.
-- * Bad events cost the others nothing: a rule broken is a refused row (SQLSTATE and reason), not
--   an error.
-- * The usual answer is text: when every event of a call is stored, the statement that stores
--   them writes POST /events' answer (p_answer), and no row per event is formed.
-- * Deduplication by event.event_ids' primary key (event_private.ingest_all says how the usual
--   call, with no id seen before, avoids the cost of ON CONFLICT). Within a call, the first valid
--   event with an id is stored, the later ones answer duplicate.

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

-- The fan-out of stored events: a delivery per consumer whose types hold the event's type, in the
-- lane of the correlation id the profile store's links lead to (the lane of the id its updates are
-- applied to, so old and new ids keep one order). The usual event is not linked: one index probe
-- tells (none when the store holds no link at all), and link_chain runs only for ids that have a
-- link. The consumers are locked once (FOR KEY SHARE) rather than by a foreign key per delivery:
-- event_private.consumer_drop waits for the ingests that deliver to the consumer it drops, and
-- deletes their deliveries after them.
CREATE FUNCTION event_private.deliver(p_eids text[], p_cids text[], p_types text[], p_ats timestamptz[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    -- A store without any profile link (one probe of the partial index profilestore_links_idx)
    -- needs no probe per event.
    v_links boolean := EXISTS (SELECT FROM profile.profilestore p WHERE p.profile_type = 'profile_link');
    v_heads jsonb;
BEGIN
    WITH c AS MATERIALIZED (
        SELECT c.id, c.lanes, c.event_types FROM event.consumers c
        WHERE c.event_types && p_types
        FOR KEY SHARE
    ), dl AS (
        INSERT INTO event.deliveries (consumer_id, lane, correlation_id, event_cid, event_at, event_id)
        SELECT c.id, event_private.lane_of(t.target, c.lanes), t.target, s.cid, s.at, s.eid
        FROM unnest(p_eids, p_cids, p_types, p_ats) WITH ORDINALITY AS s(eid, cid, etype, at, n)
        JOIN c ON s.etype = ANY (c.event_types)
        CROSS JOIN LATERAL (
            SELECT CASE WHEN v_links AND EXISTS (SELECT FROM profile.profilestore p
                                     WHERE p.correlation_id = s.cid AND p.profile_type = 'profile_link'
                                       AND p.path = '/new' AND p.pit = '_latest')
                        THEN (SELECT ch[cardinality(ch)] FROM profile_private.link_chain(s.cid) AS ch)
                        ELSE s.cid END AS target
        ) t
        ORDER BY s.n, c.id
        RETURNING consumer_id, lane, id
    )
    SELECT jsonb_agg(jsonb_build_array(h.consumer_id, h.lane, h.first))
    INTO v_heads
    FROM (SELECT x.consumer_id, x.lane, min(x.id) AS first FROM dl x GROUP BY x.consumer_id, x.lane) h;

    -- Wake idle belt workers when a lane had nothing waiting: behind waiting deliveries the
    -- workers are busy with the lane already, and a notifying commit takes a database-wide lock
    -- (profile_private.inbox_add does the same for the profile updater). One probe of
    -- deliveries_lane_idx per lane: the OFFSET keeps the test a subquery per lane, which the planner
    -- would otherwise make an anti join that reads every waiting delivery.
    IF v_heads IS NOT NULL AND EXISTS (
            SELECT FROM jsonb_array_elements(v_heads) h
            WHERE NOT EXISTS (SELECT FROM event.deliveries d
                              WHERE d.consumer_id = (h ->> 0)::bigint AND d.lane = (h ->> 1)::smallint
                                AND d.id < (h ->> 2)::bigint
                              OFFSET 0)) THEN
        PERFORM pg_notify('silo_belt', '');
    END IF;
END
$$;
COMMENT ON FUNCTION event_private.deliver(text[], text[], text[], timestamptz[]) IS
    'Delivers the stored events given by p_eids, p_cids (their correlation ids), p_types and p_ats (their times), arrays of one length, in that order: a row of event.deliveries per event and consumer whose event_types hold its type, in the consumer''s lane of the final profile-link target of its correlation id. Locks those consumers FOR KEY SHARE until the end of the transaction. Notifies silo_belt (empty payload) when a lane it delivered to had nothing waiting. Raises nothing of its own.';

-- The usual call stores every valid event: no id of it is stored already or sent twice. It inserts
-- the ids without ON CONFLICT (whose speculative insertion costs a second index probe and a WAL
-- record per id), in a subtransaction; an id that is there already raises unique_violation, and
-- the call is made again the careful way: the first valid event of each id (in the order of the
-- call) is the one that may be stored, ids go in with ON CONFLICT DO NOTHING, and what they
-- return says which events are stored. Ids are inserted in the index's (bytewise) order either
-- way, so two calls that share ids wait for each other and never deadlock; of two concurrent
-- ingests of one id, one stores it and the other waits for it and answers duplicate.
--
-- The settings: the planner cannot count the rows of the CTEs and would join them in nested loops
-- (a thousand events: a million comparisons): hash joins it is. Without JIT: the cost of the
-- nested loops it is told to avoid would make it compile the statement (seconds) at every call.
-- One generic plan per connection: planning the statement costs as much as a hundred events.
CREATE FUNCTION event_private.ingest_all(p_events jsonb[], p_bad jsonb DEFAULT NULL, p_answer boolean DEFAULT false,
                                         OUT results event_private.ingested[], OUT answer text)
LANGUAGE plpgsql VOLATILE
SET enable_nestloop = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_consumers boolean := EXISTS (SELECT FROM event.consumers);
    -- An answer's element for an event stored by this call, after its id.
    v_stored    text := ',"status":"stored","firstStored":"' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"}';
    v_refused   bigint;
    v_res       event_private.ingested[];
    v_eids      text[];
    v_cids      text[];
    v_types     text[];
    v_ats       timestamptz[];
BEGIN
    BEGIN
        WITH src AS MATERIALIZED (
            SELECT * FROM event_private.parse(p_events, p_bad)
        ), ids AS (
            INSERT INTO event.event_ids (event_id, at, correlation_id)
            SELECT s.eid, s.at, s.cid FROM src s WHERE s.problem IS NULL ORDER BY s.eid COLLATE "C"
            RETURNING 1
        ), ev AS (
            -- After every id is in (the count runs ids to its end first): the events' partition
            -- may be made here, and its lock must not be held while waiting for another ingest.
            INSERT INTO event.events (at, event_id, event_type, correlation_id, harvester_name, type_version, headers, payload)
            SELECT s.at, s.eid, s.etype, s.cid, s.harvester, s.version, s.headers, s.payload
            FROM src s WHERE s.problem IS NULL AND (SELECT count(*) FROM ids) > 0
        )
        SELECT array_agg(ROW(s.ord, CASE WHEN s.problem IS NULL THEN 'stored' ELSE 'refused' END,
                             CASE WHEN s.id_ok THEN s.eid END, CASE WHEN s.problem IS NULL THEN now() END,
                             s.problem[1], s.problem[2])::event_private.ingested) FILTER (WHERE NOT p_answer),
               count(*) FILTER (WHERE s.problem IS NOT NULL),
               -- The id as JSON is the header's own JSON value as text: to_json(s.eid) would look
               -- its type up again for every event (1 µs an event of a thousand).
               '[{"eventId":' || string_agg((s.headers -> 'grnry-event-id')::text || v_stored, ',{"eventId":')
                   FILTER (WHERE p_answer AND s.problem IS NULL) || ']',
               array_agg(s.eid) FILTER (WHERE v_consumers AND s.problem IS NULL),
               array_agg(s.cid) FILTER (WHERE v_consumers AND s.problem IS NULL),
               array_agg(s.etype) FILTER (WHERE v_consumers AND s.problem IS NULL),
               array_agg(s.at) FILTER (WHERE v_consumers AND s.problem IS NULL)
        INTO v_res, v_refused, answer, v_eids, v_cids, v_types, v_ats
        FROM src s;
        -- An answer with a refusal is the caller's to word: the events read again, for their rows
        -- (the same as the first time: the same elements, the same now()).
        IF p_answer AND v_refused > 0 THEN
            answer := NULL;
            v_res := ARRAY(
                SELECT ROW(s.ord, CASE WHEN s.problem IS NULL THEN 'stored' ELSE 'refused' END,
                           CASE WHEN s.id_ok THEN s.eid END, CASE WHEN s.problem IS NULL THEN now() END,
                           s.problem[1], s.problem[2])::event_private.ingested
                FROM event_private.parse(p_events, p_bad) s);
        END IF;
    EXCEPTION WHEN unique_violation THEN
        WITH src AS MATERIALIZED (
            SELECT p.*, p.problem IS NULL AND p.eid IS DISTINCT FROM lag(p.eid) OVER (PARTITION BY p.problem IS NULL ORDER BY p.eid COLLATE "C", p.ord) AS first
            FROM event_private.parse(p_events, p_bad) p
        ), ids AS (
            INSERT INTO event.event_ids (event_id, at, correlation_id)
            SELECT s.eid, s.at, s.cid FROM src s WHERE s.first ORDER BY s.eid COLLATE "C"
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id
        ), stored AS MATERIALIZED (
            SELECT s.* FROM src s JOIN ids i ON i.event_id = s.eid WHERE s.first
        ), ev AS (
            INSERT INTO event.events (at, event_id, event_type, correlation_id, harvester_name, type_version, headers, payload)
            SELECT s.at, s.eid, s.etype, s.cid, s.harvester, s.version, s.headers, s.payload
            FROM stored s
        )
        SELECT array_agg(ROW(s.ord,
                             CASE WHEN s.problem IS NOT NULL THEN 'refused'
                                  WHEN st.ord IS NOT NULL THEN 'stored' ELSE 'duplicate' END,
                             CASE WHEN s.id_ok THEN s.eid END,
                             CASE WHEN st.ord IS NOT NULL THEN now() END,
                             s.problem[1], s.problem[2])::event_private.ingested ORDER BY s.ord),
               array_agg(s.eid ORDER BY s.ord) FILTER (WHERE v_consumers AND st.ord IS NOT NULL),
               array_agg(s.cid ORDER BY s.ord) FILTER (WHERE v_consumers AND st.ord IS NOT NULL),
               array_agg(s.etype ORDER BY s.ord) FILTER (WHERE v_consumers AND st.ord IS NOT NULL),
               array_agg(s.at ORDER BY s.ord) FILTER (WHERE v_consumers AND st.ord IS NOT NULL)
        INTO v_res, v_eids, v_cids, v_types, v_ats
        FROM src s
        LEFT JOIN stored st ON st.ord = s.ord;

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
    END;
    IF v_eids IS NOT NULL THEN
        PERFORM event_private.deliver(v_eids, v_cids, v_types, v_ats);
    END IF;
    results := CASE WHEN answer IS NULL THEN coalesce(v_res, '{}') END;
END
$$;
COMMENT ON FUNCTION event_private.ingest_all(jsonb[], jsonb, boolean) IS
    'Ingests the events p_events (each element one event) in the caller''s transaction; p_bad (default NULL): {"<ord>": "<reason>"} for elements that stand for unreadable input, refused with SEEVT and the reason. Each valid event whose grnry-event-id is not stored yet (and not earlier in p_events) is stored in event.events and event.event_ids and delivered to the consumers of its type (event_private.deliver). Returns results: one event_private.ingested per element, in order (empty for no element); answer: NULL, or with p_answer (default false) when every element was stored, the text of POST /events'' answer (as event_private.answer_text words it), results then NULL. Refusals as api.event_ingest says. Raises nothing of its own.';

CREATE FUNCTION event_private.ingest(p_events jsonb, p_bad jsonb DEFAULT NULL)
RETURNS SETOF event_private.ingested
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'events must be a JSON object (one event) or an array of events'
            USING ERRCODE = 'SLINV', DETAIL = format('got %s', coalesce(jsonb_typeof(p_events), 'NULL'));
    END IF;
    RETURN QUERY SELECT * FROM unnest((event_private.ingest_all(event_private.elements(p_events), p_bad)).results);
END
$$;
COMMENT ON FUNCTION event_private.ingest(jsonb, jsonb) IS
    'Ingests p_events (one event object or a JSON array of them) in the caller''s transaction, as event_private.ingest_all does with its elements; p_bad (default NULL): {"<ord>": "<reason>"} for elements that stand for unreadable input, refused with SEEVT and the reason. Each valid event whose grnry-event-id is not stored yet (and not earlier in p_events) is stored in event.events and event.event_ids and delivered (event.deliveries) to every consumer of its type, in the lane of the final profile-link target of its correlation id, and notifies silo_belt (empty payload) when a lane it delivered to had nothing waiting, to wake idle belt workers. Returns one event_private.ingested per element, in order. Refusals: SEEVT (not an object, event_headers not an object, event_payload missing, unreadable), SEHDR (grnry-event-id or grnry-event-type missing, not a string, empty or over 255 characters; grnry-correlation-id the same with 512 bytes; grnry-harvester-name or grnry-event-type-version not a string), SETIM (grnry-event-timestamp neither epoch milliseconds nor ISO 8601, or outside 1970..9999). Raises SLINV when p_events is neither an object nor an array.';

-- A body of events as the array of its events: an object is one event, an array's elements are
-- events, and NDJSON (a text, or a JSON string) one event per line, each line read here on its
-- own: a large body costs no large jsonb document of its events, whose parse and copies cost
-- twice what its lines do. Blank lines are skipped, told by a test of the first character's code
-- (btrim of every line would cost a pass over it, taking the first character as a text a tenth of
-- the parse); the lines named unreadable are not read.
-- PL/pgSQL, so that its plan is kept: a SQL function of subqueries is planned at every call.
CREATE FUNCTION event_private.elements(p_body jsonb, p_text text DEFAULT NULL, p_bad jsonb DEFAULT NULL)
RETURNS jsonb[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_text IS NULL AND jsonb_typeof(p_body) = 'object' THEN
        RETURN ARRAY[p_body];
    ELSIF p_text IS NULL AND jsonb_typeof(p_body) = 'array' THEN
        RETURN ARRAY(SELECT e FROM jsonb_array_elements(p_body) AS e);
    ELSIF p_text IS NULL AND jsonb_typeof(p_body) IS DISTINCT FROM 'string' THEN
        RETURN NULL;
    END IF;
    IF p_bad IS NULL THEN
        RETURN ARRAY(SELECT l::jsonb FROM string_to_table(coalesce(p_text, p_body #>> '{}'), E'\n') AS l
                     WHERE l <> '' AND (ascii(l) NOT IN (32, 9, 13) OR btrim(l, E' \t\r') <> ''));
    END IF;
    RETURN ARRAY(SELECT CASE WHEN p_bad ? x.n::text THEN 'null' ELSE x.l::jsonb END
                 FROM (SELECT l, row_number() OVER () AS n
                       FROM string_to_table(coalesce(p_text, p_body #>> '{}'), E'\n') AS l
                       WHERE l <> '' AND (ascii(l) NOT IN (32, 9, 13) OR btrim(l, E' \t\r') <> '')) x
                 ORDER BY x.n);
END
$$;
COMMENT ON FUNCTION event_private.elements(jsonb, text, jsonb) IS
    'The events of a body, in order: p_text (default NULL) when given, else p_body. NDJSON (p_text, or p_body a JSON string): one JSON value per line, blank lines skipped, those whose position (from 1, among the lines not blank) is a key of p_bad (default NULL) null without being read; p_body an object: one event; an array: its elements. NULL for any other p_body. Raises invalid_text_representation 22P02 for another NDJSON line that is no JSON.';

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
