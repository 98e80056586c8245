-- Event store, the requests of HTTP's POST /events: api.event_ingest_requests ingests the events of
-- the requests joined into one call (each its own caller and idempotency key, sql/idempotency/)
-- with event_private.ingest_all (sql/event/02_ingest.sql), and answers each request per event or,
-- when the caller asks and none of its events was refused, with the text of its whole answer: the
-- usual request of a thousand stored events is then one row, whose text HTTP writes as it comes,
-- rather than a thousand rows to read and encode again.

CREATE VIEW api.event_ingest_results AS
SELECT NULL::integer AS request, NULL::integer AS ord, NULL::text AS status, NULL::text AS event_id,
       NULL::timestamptz AS first_stored, NULL::text AS sqlstate, NULL::text AS reason, NULL::boolean AS replayed,
       NULL::text AS answer
WHERE false;
COMMENT ON VIEW api.event_ingest_results IS
    'Always empty: the row type of api.event_ingest_requests. request: the request''s position in the call, from 1; ord: the event''s position in its request, from 1 (NULL for a refused request); status: stored, duplicate or refused as in api.event_ingest (refused with ord NULL: the whole request); event_id, first_stored, sqlstate, reason: as in api.event_ingest; replayed: the request repeated an idempotency key and this row is the first answer (nothing was stored again); answer: NULL, or (status answered, ord NULL, with p_answers) the JSON text of the whole answer of a request none of whose events was refused (event_private.answer_text).';

-- The JSON of POST /events' answer to a request none of whose events was refused: an array of
-- {"eventId", "status", "firstStored"} in order, firstStored in UTC to the millisecond. The time of
-- the statement (that of every event stored by it) is formatted once. NULL when an event of p_rows
-- was refused (that answer carries errors, which HTTP words) or when there is none.
CREATE FUNCTION event_private.answer_text(p_rows api.event_ingest_results[])
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN count(*) > 0 AND count(*) FILTER (WHERE r.status = 'refused') = 0 THEN
        '[' || string_agg('{"eventId":' || to_json(r.event_id)::text || ',"status":"' || r.status || '"'
                          || CASE WHEN r.first_stored IS NULL THEN ''
                                  WHEN r.first_stored = now() THEN (SELECT ',"firstStored":"' || to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"')
                                  ELSE ',"firstStored":"' || to_char(r.first_stored AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"' END
                          || '}', ',' ORDER BY r.ord) || ']' END
    FROM unnest(p_rows) AS r;
$$;
COMMENT ON FUNCTION event_private.answer_text(api.event_ingest_results[]) IS
    'The answer of POST /events to the events p_rows of one request (api.event_ingest_results rows, any order): the JSON array of {"eventId": <event_id>, "status": <status>, "firstStored": <first_stored as 2006-01-02T15:04:05.000Z, UTC, truncated to milliseconds; absent when NULL>} by ord; NULL when p_rows is empty or one of them is refused. Raises nothing.';

CREATE FUNCTION api.event_ingest_requests(p_requests jsonb, p_texts text[] DEFAULT NULL, p_answers boolean DEFAULT false)
RETURNS SETOF api.event_ingest_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_requests jsonb := p_requests;
    v_claims   idempotency_private.claimed[];
    v_events jsonb[];
    v_bad    jsonb;
    v_req_of integer[];
    v_ord_in integer[];
    v_res    api.event_ingest_results[];
    v_answer text;
    v_ingest record;
BEGIN
    -- A body sent apart as text ("text": true) stands in the claims as a string: the SHA-256 of
    -- the text when the request has a key (what a repeat of the key is compared by), else ''.
    IF p_texts IS NOT NULL AND jsonb_typeof(p_requests) = 'array' THEN
        SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(e.r) = 'object' AND e.r -> 'text' = 'true'
                                       THEN (e.r - 'text') || jsonb_build_object('events',
                                            CASE WHEN e.r ? 'idempotency_key'
                                                 THEN encode(sha256(convert_to(coalesce(p_texts[e.n], ''), 'UTF8')), 'hex')
                                                 ELSE '' END)
                                       ELSE e.r END ORDER BY e.n), '[]')
        INTO v_requests
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n);
    END IF;
    v_claims := idempotency_private.claim_requests(v_requests, 'POST /events', 'events', '{object,array,string}');

    -- One request without a key, alone in its call (a large body always is): its answers as they
    -- come, with nothing to record or to merge.
    IF cardinality(v_claims) = 1 AND v_claims[1].outcome = 'fresh' THEN
        v_bad := CASE WHEN jsonb_typeof(p_requests -> 0 -> 'invalid') = 'object' THEN p_requests -> 0 -> 'invalid' END;
        SELECT * INTO v_ingest FROM event_private.ingest_all(
            event_private.elements(v_claims[1].body, CASE WHEN p_requests -> 0 -> 'text' = 'true' THEN p_texts[1] END, v_bad),
            v_bad, p_answers);
        IF v_ingest.answer IS NOT NULL THEN
            RETURN NEXT ROW(1, NULL, 'answered', NULL, NULL, NULL, NULL, false, v_ingest.answer)::api.event_ingest_results;
            RETURN;
        END IF;
        v_res := ARRAY(
            SELECT ROW(1, i.ord, i.status, i.event_id, i.first_stored, i.sqlstate, i.reason, false, NULL)::api.event_ingest_results
            FROM unnest(v_ingest.results) AS i);
        v_answer := CASE WHEN p_answers THEN event_private.answer_text(v_res) END;
        IF v_answer IS NOT NULL THEN
            RETURN NEXT ROW(1, NULL, 'answered', NULL, NULL, NULL, NULL, false, v_answer)::api.event_ingest_results;
        ELSE
            RETURN QUERY SELECT * FROM unnest(v_res);
        END IF;
        RETURN;
    END IF;

    -- The events of the requests to apply, one ingest in request order; the unreadable ones of
    -- each request ("invalid": {"<ord>": "<reason>"}) renumbered to the call's positions.
    SELECT array_agg(u.m ORDER BY u.g), array_agg(u.request ORDER BY u.g), array_agg(u.n::integer ORDER BY u.g),
           jsonb_object_agg(u.g::text, u.inv ->> u.n::text) FILTER (WHERE u.inv ? u.n::text)
    INTO v_events, v_req_of, v_ord_in, v_bad
    FROM (
        SELECT c.request, x.m, x.n, row_number() OVER (ORDER BY c.request, x.n) AS g, c.inv
        FROM (SELECT c.request, c.body,
                     CASE WHEN p_requests -> (c.request - 1) -> 'text' = 'true' THEN p_texts[c.request] END AS text,
                     CASE WHEN jsonb_typeof(p_requests -> (c.request - 1) -> 'invalid') = 'object'
                          THEN p_requests -> (c.request - 1) -> 'invalid' END AS inv
              FROM unnest(v_claims) AS c
              WHERE c.outcome IN ('fresh', 'new')) c
        CROSS JOIN LATERAL unnest(event_private.elements(c.body, c.text, c.inv)) WITH ORDINALITY AS x(m, n)
    ) u;

    IF v_events IS NOT NULL THEN
        v_res := ARRAY(
            SELECT ROW(v_req_of[i.ord], v_ord_in[i.ord], i.status, i.event_id, i.first_stored, i.sqlstate,
                       i.reason, false, NULL)::api.event_ingest_results
            FROM unnest((event_private.ingest_all(v_events, v_bad)).results) AS i);
    END IF;

    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := idempotency_private.record_answers(v_claims, to_jsonb(v_res), 'POST /events');
    END IF;

    -- Every row of the call by request and ord; with p_answers, a request none of whose events was
    -- refused as the one row of its answer's text.
    v_res := ARRAY(
        SELECT x FROM (
            SELECT r.* FROM unnest(v_res) AS r
            UNION ALL
            SELECT c.request, p.ord, p.status, p.event_id, p.first_stored, p.sqlstate, p.reason, true, NULL
            FROM unnest(v_claims) AS c
            CROSS JOIN LATERAL jsonb_populate_recordset(NULL::api.event_ingest_results,
                CASE WHEN c.outcome = 'replay' THEN c.answer ELSE v_claims[c.repeats].answer END) AS p
            WHERE c.outcome IN ('replay', 'repeat')
            UNION ALL
            SELECT c.request, NULL, 'refused', NULL, NULL, c.sqlstate, c.reason, false, NULL
            FROM unnest(v_claims) AS c
            WHERE c.outcome = 'refused'
        ) x
        ORDER BY x.request, x.ord);
    IF NOT p_answers THEN
        RETURN QUERY SELECT * FROM unnest(v_res);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT y.* FROM (
        SELECT a.request, NULL::integer AS ord, 'answered', NULL::text, NULL::timestamptz, NULL::text, NULL::text, a.replayed, a.answer
        FROM (SELECT r.request, bool_or(r.replayed) AS replayed, event_private.answer_text(array_agg(r)) AS answer
              FROM unnest(v_res) AS r GROUP BY r.request) a
        WHERE a.answer IS NOT NULL
        UNION ALL
        SELECT r.* FROM unnest(v_res) AS r
        WHERE r.status = 'refused' OR r.request IN (SELECT t.request FROM unnest(v_res) AS t WHERE t.status = 'refused')
    ) y
    ORDER BY y.request, y.ord;
END
$$;
COMMENT ON FUNCTION api.event_ingest_requests(jsonb, text[], boolean) IS
    'Ingests the events of several requests in one transaction, as HTTP''s POST /events does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests, each an object {"events": one event or an array of events as api.event_ingest takes them, or NDJSON as one JSON string (one event per line, blank lines skipped; a line that is no JSON raises 22P02 for the whole call); "text": true in its place says that the body is NDJSON in p_texts (HTTP''s NDJSON bodies travel so, unparsed), "token_id": the caller''s token id (optional: scopes its idempotency keys; without it the keys are the session role''s), "idempotency_key": optional, 1 to 255 printable ASCII characters, "invalid": optional {"<ord>": "<reason>"}: events of the request that could not be read (an NDJSON line that is no JSON), whose elements (or lines) are placeholders such as null, refused with SEEVT and the reason}. p_texts (default NULL): the NDJSON bodies of the requests with "text": true, one element per request in request order (the others'' elements are ignored). The events of the requests applied are ingested as one api.event_ingest call in request order (an id sent by two requests of the call is stored for the first). A request whose key was used within silo.settings idempotency.window for the same body by the same token is not applied again: it gets the first answer, marked replayed; the answer of a new key is recorded in this transaction. p_answers (default false): answer each request none of whose events was refused with one row, status answered, ord NULL, answer the JSON text of its answer (event_private.answer_text; replayed as its events), rather than a row per event. Returns api.event_ingest_results rows by request and ord: one per event (stored, duplicate, or refused with SEEVT, SEHDR or SETIM as in api.event_ingest; answer NULL) or the answered row, and one refused row (ord NULL) for a request that was not applied: SLINV (not an object, events missing or neither an object, an array nor a string, token_id not an integer), SLIDK (invalid idempotency key), SLIDM (key already used for another body). Raises SLINV when p_requests is not a JSON array or idempotency.window is no interval, 22P02 for an NDJSON line that is no JSON; transient errors (40P01, 55P03, 57014, 53xxx, 08xxx) roll back the whole call. Waits for another transaction that claimed one of its keys, until it ends.';
