-- Operational data store, the write routes' form: HTTP joins concurrent requests into one call
-- (group commit) and each keeps its caller and idempotency key (sql/idempotency/), as the event
-- store's POST /events does. One function serves both routes; the route name and body field say
-- which.

CREATE FUNCTION ods_private.requests(p_requests jsonb, p_events boolean)
RETURNS SETOF api.ods_ingest_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_route  text := CASE WHEN p_events THEN 'POST /ods/process-flow-events' ELSE 'POST /ods/objects' END;
    v_field  text := CASE WHEN p_events THEN 'events' ELSE 'objects' END;
    v_claims idempotency_private.claimed[];
    v_items  jsonb;
    v_req_of integer[];
    v_ord_in integer[];
    v_res    api.ods_ingest_results[];
BEGIN
    -- The usual call, no key and every request well-formed: no claims, the items as they come.
    IF idempotency_private.all_fresh(p_requests, v_field, '{object,array}') THEN
        SELECT jsonb_agg(u.m ORDER BY e.n, u.n), array_agg(e.n::integer ORDER BY e.n, u.n), array_agg(u.n::integer ORDER BY e.n, u.n)
        INTO v_items, v_req_of, v_ord_in
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n)
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.r -> v_field) = 'object'
                                                     THEN jsonb_build_array(e.r -> v_field) ELSE e.r -> v_field END)
                           WITH ORDINALITY AS u(m, n);
        IF v_items IS NOT NULL THEN
            RETURN QUERY
            SELECT v_req_of[i.ord], v_ord_in[i.ord], i.status, i.unit_of_work_id, i.object_id, i.sqlstate, i.reason, false
            FROM ods_private.ingest(v_items, p_events) AS i;
        END IF;
        RETURN;
    END IF;
    v_claims := idempotency_private.claim_requests(p_requests, v_route, v_field, '{object,array}');

    SELECT jsonb_agg(u.m ORDER BY u.g), array_agg(u.request ORDER BY u.g), array_agg(u.n::integer ORDER BY u.g)
    INTO v_items, v_req_of, v_ord_in
    FROM (
        SELECT c.request, x.m, x.n, row_number() OVER (ORDER BY c.request, x.n) AS g
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.body) = 'object'
                                                     THEN jsonb_build_array(c.body) ELSE c.body END)
                           WITH ORDINALITY AS x(m, n)
        WHERE c.outcome IN ('fresh', 'new')
    ) u;
    IF v_items IS NOT NULL THEN
        v_res := ARRAY(
            SELECT ROW(v_req_of[i.ord], v_ord_in[i.ord], i.status, i.unit_of_work_id, i.object_id, i.sqlstate,
                       i.reason, false)::api.ods_ingest_results
            FROM ods_private.ingest(v_items, p_events) AS i);
    END IF;

    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := idempotency_private.record_answers(v_claims, to_jsonb(v_res), v_route);
    END IF;

    RETURN QUERY
    SELECT x.* FROM (
        SELECT r.* FROM unnest(v_res) AS r
        UNION ALL
        SELECT c.request, p.ord, p.status, p.unit_of_work_id, p.object_id, p.sqlstate, p.reason, true
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL jsonb_populate_recordset(NULL::api.ods_ingest_results,
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
COMMENT ON FUNCTION ods_private.requests(jsonb, boolean) IS
    'The body of api.ods_ingest_requests (p_events true) and api.ods_append_requests (false): claims the requests'' idempotency keys, ingests the items of the requests to apply as one call of ods_private.ingest in request order, records the new keys'' answers and returns every request''s rows. Raises SLINV when p_requests is not a JSON array.';

CREATE FUNCTION api.ods_ingest_requests(p_requests jsonb)
RETURNS SETOF api.ods_ingest_results
LANGUAGE sql VOLATILE
AS $$
    SELECT * FROM ods_private.requests(p_requests, true);
$$;
COMMENT ON FUNCTION api.ods_ingest_requests(jsonb) IS
    'Ingests the process-flow events of several requests in one transaction, as HTTP''s POST /ods/process-flow-events does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests, each {"events": one event or an array of events as api.ods_ingest takes them, "token_id": the caller''s token id (optional: scopes its idempotency keys), "idempotency_key": optional, 1 to 255 printable ASCII characters}. A request whose key was used within silo.settings idempotency.window for the same body gets its first answer, marked replayed, and nothing is applied again. Returns api.ods_ingest_results rows by request and ord (as api.ods_ingest: SOINV, SOSTA, SOTIM per event), and one refused row (ord NULL) for a request not applied: SLINV (not an object, events missing or neither object nor array, token_id not an integer), SLIDK (invalid key), SLIDM (key used for another body). Raises SLINV when p_requests is not a JSON array; transient errors roll back the whole call.';

CREATE FUNCTION api.ods_append_requests(p_requests jsonb)
RETURNS SETOF api.ods_ingest_results
LANGUAGE sql VOLATILE
AS $$
    SELECT * FROM ods_private.requests(p_requests, false);
$$;
COMMENT ON FUNCTION api.ods_append_requests(jsonb) IS
    'Appends the objects of several requests in one transaction, as HTTP''s POST /ods/objects does. p_requests (no default): a JSON array of requests, each {"objects": one object or an array of objects as api.ods_append takes them, "token_id": optional, "idempotency_key": optional}. Idempotency as in api.ods_ingest_requests. Returns api.ods_ingest_results rows by request and ord (SOINV, SOTIM per object), and one refused row (ord NULL) for a request not applied: SLINV, SLIDK or SLIDM. Raises SLINV when p_requests is not a JSON array; transient errors roll back the whole call.';
