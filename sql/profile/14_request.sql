-- Profile store, the write routes as HTTP calls them: several requests in one call, each with its
-- own caller and idempotency key. The HTTP layer joins concurrent small requests into one call (one
-- transaction, one WAL flush: group commit), and a request repeated with its Idempotency-Key gets
-- its first answer (sql/idempotency/). api.profile_apply_requests is api.profile_apply_batch for
-- many requests; api.profile_enqueue_requests is api.profile_enqueue for many. The updates of the
-- requests to apply are applied as one batch: every update is applied or dead-lettered on its own,
-- so joining changes no result, and requests in flight together had no order between them.

-- A view rather than a composite type, as api.profile_apply_results.
CREATE VIEW api.profile_request_results AS
SELECT NULL::integer AS request, NULL::integer AS ord, NULL::text AS status, NULL::text AS operation,
       NULL::text AS correlation_id, NULL::text AS sqlstate, NULL::text AS reason, NULL::bigint AS dead_letter_id,
       NULL::boolean AS replayed
WHERE false;
COMMENT ON VIEW api.profile_request_results IS
    'Always empty: the row type of api.profile_apply_requests. request: the request''s position in the call, from 1; ord: the update''s position in its request, from 1 (NULL for a refused request); status: ok, noop or dead_letter as in api.profile_apply_results, or refused (the request was not applied: sqlstate and reason say why); operation, correlation_id, sqlstate, reason, dead_letter_id: as in api.profile_apply_results; replayed: the request repeated an idempotency key, and this row is the first request''s answer (nothing was applied again).';

CREATE VIEW api.profile_enqueue_results AS
SELECT NULL::integer AS request, NULL::integer AS accepted, NULL::bigint AS first_id, NULL::bigint AS last_id,
       NULL::boolean AS replayed, NULL::text AS sqlstate, NULL::text AS reason
WHERE false;
COMMENT ON VIEW api.profile_enqueue_results IS
    'Always empty: the row type of api.profile_enqueue_requests. request: the request''s position in the call, from 1; accepted, first_id, last_id: as api.profile_enqueue returns them (NULL for a refused request); replayed: the request repeated an idempotency key and this is the first request''s answer (nothing was enqueued again); sqlstate and reason: why the request was refused (NULL when it was not).';

-- What a request repeated with its key gets back: the rows of its first answer.
CREATE FUNCTION profile_private.request_replay(p_request integer, p_answer jsonb)
RETURNS SETOF api.profile_request_results
LANGUAGE sql STABLE
AS $$
    SELECT p_request, r.ord, r.status, r.operation, r.correlation_id, r.sqlstate, r.reason, r.dead_letter_id, true
    FROM jsonb_populate_recordset(NULL::api.profile_apply_results, p_answer) AS r
    ORDER BY r.ord;
$$;
COMMENT ON FUNCTION profile_private.request_replay(integer, jsonb) IS
    'The rows of a recorded answer p_answer (a JSON array of api.profile_apply_results objects) as request p_request''s result rows, marked replayed. Raises nothing.';

CREATE FUNCTION api.profile_apply_requests(p_requests jsonb, p_readers text[] DEFAULT NULL)
RETURNS SETOF api.profile_request_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims  idempotency_private.claimed[];
    v_updates jsonb;
    v_req_of  integer[];
    v_ord_in  integer[];
    v_res     api.profile_request_results[];
BEGIN
    -- The usual call, no key and every request well-formed: the batch's rows as they come.
    IF idempotency_private.all_fresh(p_requests, 'updates', '{object,array}') THEN
        SELECT jsonb_agg(u.m ORDER BY e.n, u.n), array_agg(e.n::integer ORDER BY e.n, u.n),
               array_agg(u.n::integer ORDER BY e.n, u.n)
        INTO v_updates, v_req_of, v_ord_in
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n)
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.r -> 'updates') = 'object'
                                                     THEN jsonb_build_array(e.r -> 'updates') ELSE e.r -> 'updates' END)
                           WITH ORDINALITY AS u(m, n);
        IF v_updates IS NOT NULL THEN
            RETURN QUERY
            SELECT v_req_of[b.ord], v_ord_in[b.ord], b.status, b.operation, b.correlation_id, b.sqlstate, b.reason,
                   b.dead_letter_id, false
            FROM profile_private.apply_batch(v_updates, p_readers) AS b;
        END IF;
        RETURN;
    END IF;
    v_claims := idempotency_private.claim_requests(p_requests, 'POST /profile-updates', 'updates', '{object,array}');

    -- The updates of the requests to apply, one batch in request order, and each update's request
    -- and position in it.
    SELECT jsonb_agg(u.m ORDER BY c.request, u.n), array_agg(c.request ORDER BY c.request, u.n),
           array_agg(u.n::integer ORDER BY c.request, u.n)
    INTO v_updates, v_req_of, v_ord_in
    FROM unnest(v_claims) AS c
    CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.body) = 'object'
                                                 THEN jsonb_build_array(c.body) ELSE c.body END)
                       WITH ORDINALITY AS u(m, n)
    WHERE c.outcome IN ('fresh', 'new');
    -- The usual call, no key and nothing refused: the batch's rows as they come.
    IF v_updates IS NOT NULL AND NOT EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome <> 'fresh') THEN
        RETURN QUERY
        SELECT v_req_of[b.ord], v_ord_in[b.ord], b.status, b.operation, b.correlation_id, b.sqlstate, b.reason,
               b.dead_letter_id, false
        FROM profile_private.apply_batch(v_updates, p_readers) AS b;
        RETURN;
    END IF;
    IF v_updates IS NOT NULL THEN
        v_res := ARRAY(
            SELECT ROW(v_req_of[b.ord], v_ord_in[b.ord], b.status, b.operation, b.correlation_id, b.sqlstate,
                       b.reason, b.dead_letter_id, false)::api.profile_request_results
            FROM profile_private.apply_batch(v_updates, p_readers) AS b);
    END IF;

    -- The answers of the keys claimed now, in the same transaction as the updates.
    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := idempotency_private.record_answers(v_claims, to_jsonb(v_res), 'POST /profile-updates');
    END IF;

    RETURN QUERY
    SELECT x.* FROM (
        SELECT r.* FROM unnest(v_res) AS r
        UNION ALL
        SELECT p.* FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL profile_private.request_replay(
            c.request, CASE WHEN c.outcome = 'replay' THEN c.answer ELSE v_claims[c.repeats].answer END) AS p
        WHERE c.outcome IN ('replay', 'repeat')
        UNION ALL
        SELECT c.request, NULL, 'refused', NULL, NULL, c.sqlstate, c.reason, NULL, false
        FROM unnest(v_claims) AS c
        WHERE c.outcome = 'refused'
    ) x
    ORDER BY x.request, x.ord;
END
$$;
COMMENT ON FUNCTION api.profile_apply_requests(jsonb, text[]) IS
    'Applies the profile updates of several requests in one transaction, as HTTP''s POST /profile-updates does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests, each an object {"updates": one update message (an object) or an array of them, "token_id": the caller''s token id (optional: scopes its idempotency keys; without it the keys are the session role''s), "idempotency_key": optional, 1 to 255 printable ASCII characters}. p_readers (default NULL: everything): the readers the results are told for, as in api.profile_apply_batch (one set for every request of the call). The updates of the requests that are applied run as one api.profile_apply_batch batch in request order. A request whose key was used within silo.settings idempotency.window for the same request and body (by the same token) is not applied: it gets the first answer again, marked replayed; the answer of a new key is recorded in this transaction. Returns api.profile_request_results rows, by request and ord: the results of each applied or replayed request, and one refused row for a request that was not applied, with its sqlstate and reason: SLINV (not an object, updates missing or neither an object nor an array, token_id not an integer), SLIDK (invalid idempotency key), SLIDM (key already used within the window for another request or body). A refused request costs the others nothing. Publishes what api.profile_apply_batch publishes. Raises SLINV when p_requests is not a JSON array or idempotency.window is no interval, and the transient errors of api.profile_apply_batch (such as 40P01, 40001, 55P03, 57014, 53xxx, 08xxx): nothing is then applied or recorded. Waits for another transaction that claimed one of its keys, until it ends.';

CREATE FUNCTION api.profile_enqueue_requests(p_requests jsonb, p_priority text DEFAULT 'high')
RETURNS SETOF api.profile_enqueue_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_prio    smallint := profile_private.priority(p_priority);
    v_request text := 'POST /profile-updates mode=async priority=' || p_priority;
    v_claims  idempotency_private.claimed[];
    v_updates jsonb;
    v_req_of  integer[];
    v_ids     bigint[];
    v_res     api.profile_enqueue_results[];
BEGIN
    IF v_prio IS NULL THEN
        RAISE EXCEPTION 'priority must be high or low' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(p_priority, 'NULL'));
    END IF;
    -- The usual call, no key and every request well-formed: no claims.
    IF idempotency_private.all_fresh(p_requests, 'updates', '{object,array}') THEN
        SELECT jsonb_agg(u.m ORDER BY e.n, u.n), array_agg(e.n::integer ORDER BY e.n, u.n)
        INTO v_updates, v_req_of
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n)
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(e.r -> 'updates') = 'object'
                                                     THEN jsonb_build_array(e.r -> 'updates') ELSE e.r -> 'updates' END)
                           WITH ORDINALITY AS u(m, n);
        IF v_updates IS NOT NULL THEN
            v_ids := profile_private.inbox_add(v_updates, v_prio);
        END IF;
        -- One row per request; a request of an empty array accepted none.
        RETURN QUERY
        SELECT e.n::integer, count(i.id)::integer, min(i.id), max(i.id), false, NULL::text, NULL::text
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n)
        LEFT JOIN unnest(v_req_of, v_ids) AS i(request, id) ON i.request = e.n
        GROUP BY e.n
        ORDER BY e.n;
        RETURN;
    END IF;
    v_claims := idempotency_private.claim_requests(p_requests, v_request, 'updates', '{object,array}');

    SELECT jsonb_agg(u.m ORDER BY c.request, u.n), array_agg(c.request ORDER BY c.request, u.n)
    INTO v_updates, v_req_of
    FROM unnest(v_claims) AS c
    CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.body) = 'object'
                                                 THEN jsonb_build_array(c.body) ELSE c.body END)
                       WITH ORDINALITY AS u(m, n)
    WHERE c.outcome IN ('fresh', 'new');
    IF v_updates IS NOT NULL THEN
        v_ids := profile_private.inbox_add(v_updates, v_prio);
    END IF;
    -- One row per applied request; a request of an empty array accepted none.
    v_res := ARRAY(
        SELECT ROW(c.request, count(i.id)::integer, min(i.id), max(i.id), false, NULL, NULL)::api.profile_enqueue_results
        FROM unnest(v_claims) AS c
        LEFT JOIN unnest(v_req_of, v_ids) AS i(request, id) ON i.request = c.request
        WHERE c.outcome IN ('fresh', 'new')
        GROUP BY c.request);

    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := ARRAY(
            SELECT ROW(c.request, c.body, c.scope, c.key, c.hash, c.outcome,
                       CASE WHEN c.outcome = 'new'
                            THEN jsonb_build_object('accepted', r.accepted, 'first_id', r.first_id, 'last_id', r.last_id)
                            ELSE c.answer END,
                       c.repeats, c.sqlstate, c.reason)::idempotency_private.claimed
            FROM unnest(v_claims) AS c
            LEFT JOIN unnest(v_res) AS r ON r.request = c.request
            ORDER BY c.request);
        PERFORM idempotency_private.record(v_claims, v_request);
    END IF;

    RETURN QUERY
    SELECT x.* FROM (
        SELECT r.* FROM unnest(v_res) AS r
        UNION ALL
        SELECT c.request, (a.answer ->> 'accepted')::integer, (a.answer ->> 'first_id')::bigint,
               (a.answer ->> 'last_id')::bigint, true, NULL, NULL
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL (SELECT CASE WHEN c.outcome = 'replay' THEN c.answer
                                        ELSE v_claims[c.repeats].answer END AS answer) a
        WHERE c.outcome IN ('replay', 'repeat')
        UNION ALL
        SELECT c.request, NULL, NULL, NULL, false, c.sqlstate, c.reason
        FROM unnest(v_claims) AS c
        WHERE c.outcome = 'refused'
    ) x
    ORDER BY x.request;
END
$$;
COMMENT ON FUNCTION api.profile_enqueue_requests(jsonb, text) IS
    'Accepts the profile updates of several requests into profile.inbox in one transaction, as HTTP''s POST /profile-updates?mode=async does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests shaped as for api.profile_apply_requests ({"updates", "token_id", "idempotency_key"}); p_priority (default high): the stream of all of them, high or low. The messages of the accepted requests are enqueued in request order, as api.profile_enqueue enqueues a batch. A request whose key was used within silo.settings idempotency.window for the same request (priority included) and body by the same token is not enqueued again: it gets the first answer, marked replayed. Returns one api.profile_enqueue_results row per request, in order: accepted, first_id, last_id (its inbox ids), replayed; or, for a refused request, its sqlstate and reason: SLINV, SLIDK, SLIDM as in api.profile_apply_requests. Notifies silo_inbox as api.profile_enqueue does. Raises SLINV when p_priority is not high or low, p_requests is not a JSON array or idempotency.window is no interval.';
