-- Event store, parse: the elements of an ingest read as events (event_private.parse), each rule of
-- the headers checked, for sql/event/02_ingest.sql. Set-based: one statement reads a thousand
-- events; the usual valid event is told by a quick test of its headers' texts, and only the others
-- are read rule by rule (event_private.parse_one), which words the first rule broken.

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
-- (profile_private.in_parse, as _in of a profile update), from 1970 to 9999. PL/pgSQL: the same
-- tests as a SQL function with a subquery, which PostgreSQL cannot inline and planned again at
-- every call (milliseconds an event).
CREATE FUNCTION event_private.timestamp_of(p_value jsonb)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_type text := jsonb_typeof(p_value);
    v_text text;
    v_ms   numeric;
BEGIN
    IF v_type IS NULL OR v_type NOT IN ('number', 'string') THEN
        RETURN NULL;
    END IF;
    v_text := p_value #>> '{}';
    IF length(v_text) BETWEEN 1 AND 15 AND translate(v_text, '0123456789', '') = '' THEN
        v_ms := v_text::bigint;
    ELSIF v_type = 'string' AND length(v_text) <= 64 THEN
        v_ms := profile_private.in_parse(v_text);
    END IF;
    IF v_ms BETWEEN 0 AND 253402300799999 THEN
        RETURN timestamptz 'epoch' + v_ms * interval '1 millisecond';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION event_private.timestamp_of(jsonb) IS
    'The time header grnry-event-timestamp p_value gives: epoch milliseconds (a JSON number or a string of up to 15 digits), or an ISO 8601 date or date-time as profile_private.in_parse reads it (UTC when it has no offset); NULL when it is none of these or outside 1970-01-01 to 9999-12-31. Raises nothing.';

CREATE TYPE event_private.parsed AS (
    ord       integer,
    eid       text,
    id_ok     boolean,
    etype     text,
    cid       text,
    harvester text,
    version   text,
    headers   jsonb,
    payload   jsonb,
    at        timestamptz,
    problem   text[]
);
COMMENT ON TYPE event_private.parsed IS
    'One element of an ingest, read: ord (its position, from 1), eid (grnry-event-id when it is a string), id_ok (eid is a valid id), etype, cid, harvester, version (the headers when strings), headers, payload, at (the event time: the timestamp header, or now), problem (NULL, or {SQLSTATE, reason} of its refusal).';

-- One element read the careful way: each header looked up, its JSON type told and its text taken,
-- every rule checked in order for the first one broken (event_private.parse calls it only for
-- the elements its quick test does not pass). Each level is a subquery with OFFSET 0, so that it
-- is computed once, not again at every use above it. p_bad: the reason the element could not be
-- read (it is then a placeholder), NULL when it could.
CREATE FUNCTION event_private.parse_one(p_ord integer, p_m jsonb, p_bad text)
RETURNS event_private.parsed
LANGUAGE sql STABLE
AS $$
    SELECT c.ord, c.eid, c.id_ok, c.etype, c.cid, c.harvester, c.version, c.headers, c.payload,
           coalesce(c.at, now()),
           CASE WHEN c.bad IS NULL AND c.id_ok AND c.type_ok AND c.cid_ok AND c.payload IS NOT NULL
                     AND (c.t_harvester IS NULL OR c.t_harvester IN ('string', 'null'))
                     AND (c.t_version IS NULL OR c.t_version IN ('string', 'null'))
                     AND (c.at IS NOT NULL OR c.t_ts IS NULL OR c.t_ts = 'null') THEN NULL
                WHEN c.bad IS NOT NULL THEN ARRAY['SEEVT', c.bad]
                WHEN jsonb_typeof(c.m) IS DISTINCT FROM 'object'
                    THEN ARRAY['SEEVT', 'an event must be a JSON object {"event_headers": {...}, "event_payload": ...}, got ' || coalesce(jsonb_typeof(c.m), 'nothing')]
                WHEN jsonb_typeof(c.headers) IS DISTINCT FROM 'object'
                    THEN ARRAY['SEEVT', 'event_headers must be a JSON object, got ' || coalesce(jsonb_typeof(c.headers), 'nothing')]
                WHEN c.payload IS NULL THEN ARRAY['SEEVT', 'event_payload is required (any JSON value)']
                WHEN NOT c.id_ok THEN ARRAY['SEHDR', event_private.header_problem('grnry-event-id', c.j_id, 255, false)]
                WHEN NOT c.type_ok THEN ARRAY['SEHDR', event_private.header_problem('grnry-event-type', c.j_type, 255, false)]
                WHEN NOT c.cid_ok THEN ARRAY['SEHDR', event_private.header_problem('grnry-correlation-id', c.j_cid, 512, true)]
                WHEN c.t_harvester NOT IN ('string', 'null')
                    THEN ARRAY['SEHDR', 'grnry-harvester-name must be a string, got ' || c.t_harvester]
                WHEN c.t_version NOT IN ('string', 'null')
                    THEN ARRAY['SEHDR', 'grnry-event-type-version must be a string, got ' || c.t_version]
                WHEN c.at IS NULL AND c.t_ts <> 'null'
                    THEN ARRAY['SETIM', 'grnry-event-timestamp must be epoch milliseconds (a number or a string of digits) or an ISO 8601 date-time from 1970 to 9999, got ' || left(c.j_ts::text, 100)]
           END
    FROM (
        SELECT b.*,
               -- Valid key-like headers: strings of 1 to 255 characters (bytes for the correlation
               -- id); up to 255 bytes are up to 255 characters, and only a longer one is counted.
               coalesce(octet_length(b.eid) BETWEEN 1 AND 255 OR (octet_length(b.eid) > 255 AND length(b.eid) <= 255), false) AS id_ok,
               coalesce(octet_length(b.etype) BETWEEN 1 AND 255 OR (octet_length(b.etype) > 255 AND length(b.etype) <= 255), false) AS type_ok,
               coalesce(octet_length(b.cid) BETWEEN 1 AND 512, false) AS cid_ok,
               CASE WHEN b.ts IS NULL THEN NULL
                    -- Digits only, told without a regular expression (which costs more than the rest).
                    WHEN octet_length(b.ts) BETWEEN 1 AND 15 AND translate(b.ts, '0123456789', '') = ''
                         AND b.ts::bigint <= 253402300799999
                        THEN timestamptz 'epoch' + b.ts::bigint * interval '1 millisecond'
                    ELSE event_private.timestamp_of(b.j_ts) END AS at
        FROM (
            SELECT a.*,
                   CASE WHEN a.t_id = 'string' THEN a.j_id #>> '{}' END AS eid,
                   CASE WHEN a.t_type = 'string' THEN a.j_type #>> '{}' END AS etype,
                   CASE WHEN a.t_cid = 'string' THEN a.j_cid #>> '{}' END AS cid,
                   CASE WHEN a.t_harvester = 'string' THEN a.j_harvester #>> '{}' END AS harvester,
                   CASE WHEN a.t_version = 'string' THEN a.j_version #>> '{}' END AS version,
                   CASE WHEN a.t_ts IN ('string', 'number') THEN a.j_ts #>> '{}' END AS ts
            FROM (
                SELECT h.*,
                       jsonb_typeof(h.j_id) AS t_id, jsonb_typeof(h.j_type) AS t_type, jsonb_typeof(h.j_cid) AS t_cid,
                       jsonb_typeof(h.j_harvester) AS t_harvester, jsonb_typeof(h.j_version) AS t_version,
                       jsonb_typeof(h.j_ts) AS t_ts
                FROM (
                    SELECT e.*,
                           e.headers -> 'grnry-event-id' AS j_id, e.headers -> 'grnry-event-type' AS j_type,
                           e.headers -> 'grnry-correlation-id' AS j_cid, e.headers -> 'grnry-harvester-name' AS j_harvester,
                           e.headers -> 'grnry-event-type-version' AS j_version, e.headers -> 'grnry-event-timestamp' AS j_ts
                    FROM (
                        SELECT p_ord AS ord, p_m AS m, p_bad AS bad,
                               p_m -> 'event_headers' AS headers, p_m -> 'event_payload' AS payload
                    ) e
                    OFFSET 0
                ) h
                OFFSET 0
            ) a
            OFFSET 0
        ) b
        OFFSET 0
    ) c;
$$;
COMMENT ON FUNCTION event_private.parse_one(integer, jsonb, text) IS
    'Element p_m of an ingest at position p_ord read as an event (event_private.parsed): headers and payload taken apart, each rule of api.event_ingest checked (problem: the first one broken, with its SQLSTATE). p_bad: NULL, or the reason the element stands for unreadable input (refused with SEEVT and it). Raises nothing.';

-- Whether p_text, the text (->>) of a JSON value that is neither null nor a number's digits, is
-- that of a string: a number's text starts with '-' or a digit, an object's or array's with '{'
-- or '[', a boolean's is true or false. Inlined into event_private.parse.
CREATE FUNCTION event_private.string_text(p_text text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ascii(p_text) NOT IN (45, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 91, 123) AND p_text NOT IN ('true', 'false');
$$;
COMMENT ON FUNCTION event_private.string_text(text) IS
    'Whether p_text, the ->> text of a JSON value, can only be that of a string: it does not start as a number, an object or an array does, and is not true or false (NULL for NULL). Raises nothing.';

-- p_bad: an object {"<ord>": "<reason>"} of events that could not be read (an NDJSON line that is
-- no JSON): their elements of p_events are placeholders, refused with the reason.
--
-- The usual event is told valid by a quick test of the headers' texts (->>, one lookup each, no
-- JSON value made: event_private.string_text). A timestamp of 1 to 15 digits is epoch
-- milliseconds whether sent as a number or a string. Every other element, valid or not, is read by event_private.parse_one, which checks each
-- rule in order and words the first one broken; it runs only for those. A SQL function of one
-- SELECT: inlined into the statements that read it. Each level is a subquery with OFFSET 0, so
-- that it is computed once, not again at every use above it.
CREATE FUNCTION event_private.parse(p_events jsonb[], p_bad jsonb)
RETURNS SETOF event_private.parsed
LANGUAGE sql STABLE
AS $$
    SELECT q.ord,
           CASE WHEN q.slow IS NULL THEN q.eid ELSE (q.slow).eid END,
           CASE WHEN q.slow IS NULL THEN true ELSE (q.slow).id_ok END,
           CASE WHEN q.slow IS NULL THEN q.etype ELSE (q.slow).etype END,
           CASE WHEN q.slow IS NULL THEN q.cid ELSE (q.slow).cid END,
           CASE WHEN q.slow IS NULL THEN q.harvester ELSE (q.slow).harvester END,
           CASE WHEN q.slow IS NULL THEN q.version ELSE (q.slow).version END,
           q.headers, q.payload,
           CASE WHEN q.slow IS NULL THEN coalesce(timestamptz 'epoch' + q.ts::bigint * interval '1 millisecond', now())
                ELSE (q.slow).at END,
           CASE WHEN q.slow IS NULL THEN NULL ELSE (q.slow).problem END
    FROM (
        SELECT f.ord, f.eid, f.etype, f.cid, f.harvester, f.version, f.ts, f.headers, f.payload,
               CASE WHEN f.bad IS NULL AND f.payload IS NOT NULL
                         AND octet_length(f.eid) BETWEEN 1 AND 255 AND event_private.string_text(f.eid)
                         AND octet_length(f.etype) BETWEEN 1 AND 255 AND event_private.string_text(f.etype)
                         AND octet_length(f.cid) BETWEEN 1 AND 512 AND event_private.string_text(f.cid)
                         AND (f.harvester IS NULL OR event_private.string_text(f.harvester))
                         AND (f.version IS NULL OR event_private.string_text(f.version))
                         -- Digits only: the regular expression costs half of translate's pass here.
                         AND (f.ts IS NULL OR octet_length(f.ts) BETWEEN 1 AND 15 AND f.ts ~ '^[0-9]+$'
                                           AND f.ts::bigint <= 253402300799999)
                    THEN NULL
                    ELSE event_private.parse_one(f.ord, f.m, f.bad) END AS slow
        FROM (
            SELECT e.*,
                   e.headers ->> 'grnry-event-id' AS eid, e.headers ->> 'grnry-event-type' AS etype,
                   e.headers ->> 'grnry-correlation-id' AS cid, e.headers ->> 'grnry-harvester-name' AS harvester,
                   e.headers ->> 'grnry-event-type-version' AS version, e.headers ->> 'grnry-event-timestamp' AS ts
            FROM (
                SELECT x.ord::integer AS ord, x.m,
                       CASE WHEN p_bad IS NOT NULL THEN p_bad ->> x.ord::text END AS bad,
                       x.m -> 'event_headers' AS headers, x.m -> 'event_payload' AS payload
                FROM unnest(p_events) WITH ORDINALITY AS x(m, ord)
                OFFSET 0
            ) e
            OFFSET 0
        ) f
        OFFSET 0
    ) q;
$$;
COMMENT ON FUNCTION event_private.parse(jsonb[], jsonb) IS
    'The elements of p_events read as events (event_private.parsed, in order): headers and payload taken apart, each rule of api.event_ingest checked (problem: the first one broken, with its SQLSTATE). p_bad: NULL, or {"<ord>": "<reason>"} for elements that stand for unreadable input (refused with SEEVT and the reason). Raises nothing.';
