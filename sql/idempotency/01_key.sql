-- Idempotency keys, for every domain's write routes. A write names itself with a key (HTTP: the
-- Idempotency-Key header); the first request with a key is applied and its answer recorded in the
-- same transaction; a repeat within the window (silo.settings idempotency.window) gets that answer
-- and applies nothing. The same key with another request or body is refused (SLIDM): the client
-- reused a key by mistake, and neither answer would be right.
--
-- Why a lock before the work, not a lookup after it: two repeats in flight at once would both find
-- no answer. A call takes a transaction advisory lock per key (in lock order, so two calls that
-- claim the same keys wait for each other instead of deadlocking), then looks the keys up: a
-- repeat sent while the first request runs waits for its transaction, then finds its answer
-- (commit) or nothing (rollback: nothing was applied, so the repeat applies). The answers are
-- inserted in one statement at the end, in the transaction of the write: a write that fails as a
-- whole records nothing, so a retry after a 503 applies it.

-- The request shape is shared: a write route of a domain takes a JSON array of requests, each
-- {"<body>": ..., "token_id": 42, "idempotency_key": "..."}, so that concurrent requests joined
-- into one call (group commit) keep their own keys and answers. idempotency_private.claim_requests
-- checks and claims them in one pass; the domain applies the requests it returns as new or
-- fresh, records the answers of the new ones (idempotency_private.record) and returns the stored
-- answers of the others.

CREATE SCHEMA idempotency_private;
COMMENT ON SCHEMA idempotency_private IS 'Internals of idempotency keys (sql/idempotency/): not a public contract. Rebuilt with schema api.';

CREATE TYPE idempotency_private.claimed AS (
    request  integer,
    body     jsonb,
    scope    text,
    key      text,
    hash     bytea,
    outcome  text,
    answer   jsonb,
    repeats  integer,
    sqlstate text,
    reason   text
);
COMMENT ON TYPE idempotency_private.claimed IS 'One request of a write call after idempotency_private.claim_requests: request (its position, from 1), body (the part the domain applies), scope, key and hash (of the request and body; NULL without a key), outcome (fresh: no key, apply it; new: key claimed, apply it and set answer for idempotency_private.record; replay: answer holds the first answer, apply nothing; repeat: the same key and request came earlier in this call, as request repeats: give it that request''s answer; refused: sqlstate and reason say why, apply nothing).';

-- A token's keys never meet another token's; a psql session without a token gets its role's.
CREATE FUNCTION idempotency_private.scope(p_token_id bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_token_id IS NOT NULL THEN 'token:' || p_token_id ELSE 'role:' || session_user END;
$$;
COMMENT ON FUNCTION idempotency_private.scope(bigint) IS
    'The scope of idempotency keys of a caller: token:{p_token_id}, or role:{session_user} when p_token_id is NULL (a psql session). Raises nothing.';

-- Stripe's limit: 255 characters. Printable ASCII only, so that a key fits in an HTTP header
-- as sent and reads the same in psql and in logs.
-- STABLE as format() is, so that PostgreSQL inlines it into the claim (an IMMUTABLE wrapper of a
-- STABLE function is called, not inlined).
CREATE FUNCTION idempotency_private.key_problem(p_key text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_key IS NULL OR p_key = '' THEN 'idempotency key must not be empty'
                WHEN length(p_key) > 255 THEN format('idempotency key must be at most 255 characters, got %s', length(p_key))
                WHEN p_key !~ '^[\x20-\x7e]+$' THEN 'idempotency key must be printable ASCII characters'
           END;
$$;
COMMENT ON FUNCTION idempotency_private.key_problem(text) IS
    'Why p_key is not a valid idempotency key (NULL or empty, over 255 characters, or not printable ASCII), or NULL when it is valid. Raises nothing.';

-- Set-based: a call joins up to hundreds of requests, and a statement per key would cost more than
-- the updates. The advisory locks live in their own space (two-key form, first key fixed), taken
-- in lock-id order.
CREATE FUNCTION idempotency_private.claim_requests(p_requests jsonb, p_request text, p_body text, p_shapes text[])
RETURNS idempotency_private.claimed[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims idempotency_private.claimed[];
    v_window interval;
BEGIN
    IF p_requests IS NULL OR jsonb_typeof(p_requests) <> 'array' THEN
        RAISE EXCEPTION 'requests must be a JSON array' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_requests), 'NULL'));
    END IF;
    SELECT array_agg(ROW(x.n, CASE WHEN x.problem IS NULL THEN x.r -> p_body END,
                         CASE WHEN x.problem IS NULL AND x.key IS NOT NULL
                              THEN CASE WHEN jsonb_typeof(x.r -> 'scope') = 'string' THEN x.r ->> 'scope'
                                        ELSE idempotency_private.scope((x.r ->> 'token_id')::bigint) END END,
                         CASE WHEN x.problem IS NULL THEN x.key END,
                         CASE WHEN x.problem IS NULL AND x.key IS NOT NULL
                              THEN sha256(convert_to(p_request || E'\n' || (x.r -> p_body)::text, 'UTF8')) END,
                         CASE WHEN x.problem IS NOT NULL THEN 'refused'
                              WHEN x.key IS NULL THEN 'fresh' ELSE 'new' END,
                         NULL, NULL, x.problem[1], x.problem[2])::idempotency_private.claimed ORDER BY x.n)
    INTO v_claims
    FROM (
        SELECT e.n::integer AS n, e.r, e.r ->> 'idempotency_key' AS key,
               CASE WHEN jsonb_typeof(e.r) <> 'object'
                        THEN ARRAY['SLINV', format('request %s must be a JSON object, got %s', e.n, jsonb_typeof(e.r))]
                    WHEN NOT coalesce(jsonb_typeof(e.r -> p_body) = ANY (p_shapes), false)
                        THEN ARRAY['SLINV', format('%s must be a JSON %s, got %s', p_body, array_to_string(p_shapes, ' or '),
                                                   coalesce(jsonb_typeof(e.r -> p_body), 'nothing'))]
                    WHEN coalesce(jsonb_typeof(e.r -> 'token_id'), 'null') NOT IN ('number', 'null')
                         OR (jsonb_typeof(e.r -> 'token_id') = 'number' AND (e.r ->> 'token_id') !~ '^[0-9]{1,18}$')
                        THEN ARRAY['SLINV', format('token_id of request %s must be a token id, got %s', e.n, e.r -> 'token_id')]
                    WHEN coalesce(jsonb_typeof(e.r -> 'idempotency_key'), 'null') NOT IN ('string', 'null')
                        THEN ARRAY['SLIDK', format('idempotency key must be a string, got %s', jsonb_typeof(e.r -> 'idempotency_key'))]
                    WHEN jsonb_typeof(e.r -> 'idempotency_key') = 'string'
                         AND idempotency_private.key_problem(e.r ->> 'idempotency_key') IS NOT NULL
                        THEN ARRAY['SLIDK', idempotency_private.key_problem(e.r ->> 'idempotency_key')]
               END AS problem
        FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e(r, n)
    ) x;
    IF v_claims IS NULL THEN
        RETURN '{}';
    END IF;
    IF NOT EXISTS (SELECT FROM unnest(v_claims) c WHERE c.outcome = 'new') THEN
        RETURN v_claims;
    END IF;

    PERFORM pg_advisory_xact_lock(1769235817, l.id)
    FROM (SELECT DISTINCT hashtext(c.scope || E'\n' || c.key) AS id
          FROM unnest(v_claims) c WHERE c.outcome = 'new' ORDER BY 1) l;

    -- After the locks, a new snapshot: the keys committed by the calls waited for. A key past the
    -- window counts as new (its row is replaced when the answer is recorded).
    v_window := settings_private.setting_interval('idempotency.window', '24 hours');
    SELECT array_agg(ROW(c.request, c.body, c.scope, c.key, c.hash,
                         CASE WHEN c.outcome <> 'new' THEN c.outcome
                              WHEN coalesce(k.request <> p_request OR k.request_hash <> c.hash, f.hash <> c.hash, false)
                              THEN 'refused'
                              WHEN k.key IS NOT NULL THEN 'replay'
                              WHEN f.request IS NOT NULL THEN 'repeat'
                              ELSE 'new' END,
                         CASE WHEN c.outcome = 'new' THEN k.answer END,
                         f.request,
                         CASE WHEN c.outcome <> 'new' THEN c.sqlstate
                              WHEN coalesce(k.request <> p_request OR k.request_hash <> c.hash, f.hash <> c.hash, false)
                              THEN 'SLIDM' END,
                         CASE WHEN c.outcome <> 'new' THEN c.reason
                              WHEN coalesce(k.request <> p_request OR k.request_hash <> c.hash, false)
                              THEN format('idempotency key %s was first used at %s with another request (%s) or body; a key names one request',
                                          c.key, k.created, k.request)
                              WHEN coalesce(f.hash <> c.hash, false)
                              THEN format('idempotency key %s is used by request %s of this call with another body; a key names one request',
                                          c.key, f.request)
                         END)::idempotency_private.claimed ORDER BY c.request)
    INTO v_claims
    FROM unnest(v_claims) c
    LEFT JOIN silo.idempotency_keys k
      ON c.outcome = 'new' AND k.scope = c.scope AND k.key = c.key AND k.created >= now() - v_window
    LEFT JOIN LATERAL (
        SELECT e.request, e.hash FROM unnest(v_claims) e
        WHERE c.outcome = 'new' AND e.outcome = 'new' AND e.scope = c.scope AND e.key = c.key AND e.request < c.request
        ORDER BY e.request LIMIT 1) f ON true;
    RETURN v_claims;
END
$$;
COMMENT ON FUNCTION idempotency_private.claim_requests(jsonb, text, text, text[]) IS
    'Checks the requests of one write call and claims their idempotency keys in the caller''s transaction. p_requests: a JSON array of request objects {p_body: the part to apply, token_id: the caller''s token id (optional; its keys'' scope, else the session''s role), scope: optional string, the keys'' scope when the caller is no token (account:<access id> for an access of the account routes), idempotency_key: optional, 1 to 255 printable ASCII characters}; p_request: what is asked besides the body (route and parameters); p_body: the name of the body''s field; p_shapes: the JSON types it may have. Returns one idempotency_private.claimed per request, in order (outcome fresh, new, replay, repeat or refused). A request is refused with SLINV when it is no object, its body is missing or of another type, or token_id is no integer; with SLIDK when its key is invalid; with SLIDM when its key was used within the window (silo.settings idempotency.window) for another request or body, or by an earlier request of the call with another body. Holds a transaction advisory lock per key (class 1769235817, hashtext of scope and key) to the end of the transaction, and waits for another transaction that holds it. Raises SLINV when p_requests is not a JSON array, or the window setting is invalid.';

-- The usual call carries no key at all: it needs no claims, no locks and no answers, only the
-- check that claim_requests would make of every request's shape. Callers take their fast path
-- when this says so, and go through claim_requests otherwise (which refuses what is wrong).
CREATE FUNCTION idempotency_private.all_fresh(p_requests jsonb, p_body text, p_shapes text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_typeof(p_requests) = 'array' AND jsonb_array_length(p_requests) > 0
       AND NOT EXISTS (
           SELECT FROM jsonb_array_elements(p_requests) AS e(r)
           WHERE jsonb_typeof(e.r) <> 'object'
              OR e.r ? 'idempotency_key'
              OR NOT coalesce(jsonb_typeof(e.r -> p_body) = ANY (p_shapes), false)
              OR coalesce(jsonb_typeof(e.r -> 'token_id'), 'null') NOT IN ('number', 'null')
              OR (jsonb_typeof(e.r -> 'token_id') = 'number' AND (e.r ->> 'token_id') !~ '^[0-9]{1,18}$'));
$$;
COMMENT ON FUNCTION idempotency_private.all_fresh(jsonb, text, text[]) IS
    'Whether every request of p_requests (a non-empty JSON array) would be claimed fresh by idempotency_private.claim_requests with the same p_body and p_shapes: each is an object without an idempotency_key, whose body field p_body has one of the JSON types p_shapes, and whose token_id, if any, is a non-negative integer. A write function then skips the claims (no lock, no lookup, nothing to record). Raises nothing.';

-- One statement for all the answers of a call. A row there already is a key past the window
-- (claim_requests saw no live one under the lock): it is replaced.
CREATE FUNCTION idempotency_private.record(p_claims idempotency_private.claimed[], p_request text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO silo.idempotency_keys AS k (scope, key, request, request_hash, answer, created)
    SELECT c.scope, c.key, p_request, c.hash, c.answer, now()
    FROM unnest(p_claims) c
    WHERE c.outcome = 'new' AND c.answer IS NOT NULL
    ON CONFLICT (scope, key) DO UPDATE
    SET request = excluded.request, request_hash = excluded.request_hash, answer = excluded.answer,
        created = excluded.created;
$$;
COMMENT ON FUNCTION idempotency_private.record(idempotency_private.claimed[], text) IS
    'Records the answers of the keys claimed by idempotency_private.claim_requests: every element of p_claims with outcome new and an answer, with p_request (what was asked besides the body). Returns nothing; raises nothing (no 23505: the claim''s lock is held).';

CREATE FUNCTION api.idempotency_trim(p_window interval DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_window interval := p_window;
    v_n      bigint;
BEGIN
    IF v_window IS NULL THEN
        v_window := settings_private.setting_interval('idempotency.window', '24 hours');
    ELSIF v_window < interval '0' THEN
        RAISE EXCEPTION 'idempotency window must not be negative, got %', v_window USING ERRCODE = 'SLINV';
    END IF;
    DELETE FROM silo.idempotency_keys k WHERE k.created < p_now - v_window;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION api.idempotency_trim(interval, timestamptz) IS
    'Deletes the idempotency keys created more than p_window (default NULL: silo.settings idempotency.window, 24 hours when unset) before p_now (default now()) from silo.idempotency_keys; a request with such a key counts as new anyway. Returns how many were deleted. Run periodically by silo work''s retention job (api.retention_run, target idempotency); from psql at will. Raises SLINV when p_window is negative or the setting is not a non-negative interval.';

-- The answers of a call's new keys, from its result rows (any row type with request and ord
-- columns): one function for every write route that answers per item (profile updates, events,
-- ODS items, job events).
CREATE FUNCTION idempotency_private.record_answers(p_claims idempotency_private.claimed[], p_rows jsonb, p_request text)
RETURNS idempotency_private.claimed[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims idempotency_private.claimed[];
BEGIN
    v_claims := ARRAY(
        SELECT ROW(c.request, c.body, c.scope, c.key, c.hash, c.outcome,
                   CASE WHEN c.outcome = 'new' THEN coalesce(a.answer, '[]') ELSE c.answer END,
                   c.repeats, c.sqlstate, c.reason)::idempotency_private.claimed
        FROM unnest(p_claims) AS c
        LEFT JOIN (SELECT (e ->> 'request')::integer AS request,
                          jsonb_agg(e - 'request' - 'replayed' ORDER BY (e ->> 'ord')::integer) AS answer
                   FROM jsonb_array_elements(p_rows) AS e GROUP BY 1) a ON a.request = c.request
        ORDER BY c.request);
    PERFORM idempotency_private.record(v_claims, p_request);
    RETURN v_claims;
END
$$;
COMMENT ON FUNCTION idempotency_private.record_answers(idempotency_private.claimed[], jsonb, text) IS
    'Sets the answer of each new claim of p_claims to its request''s rows of p_rows (a JSON array of result rows, each with request and ord: the rows of that request in ord order, without request and replayed; [] when it has none), records the claims of route p_request (idempotency_private.record) and returns them. For the write routes that answer per item. Raises nothing of its own.';
