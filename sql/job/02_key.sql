-- The job service, scheduler: the texts a job's unique hash and work key are hashes of.
--
-- The unique hash (the canonical form): the lowercase hex SHA-256 of the UTF-8 text of the jsonb
-- object {key_field: value, ...}, one member per key field (a field the job lacks is null), where
-- a value is the job's: its properties as enriched (job_type, priority, due, expires,
-- superceedable, retry_limit, as numbers and booleans), topic, generation, and the event's
-- resource_type, action_type, resource_url, payload and timestamp as they came (JSON). jsonb's text
-- is canonical: keys sorted (by length, then bytes), one spacing, so the same values give the same
-- hash whatever the order of keys or the spacing of the input. Numbers keep their written scale
-- (1 and 1.0 are different text, hence different hashes): send a number one way. The same
-- expression in psql: encode(sha256(convert_to(jsonb_build_object(...)::text, 'UTF8')), 'hex').
--
-- Superseding, "the same work": two jobs do the same work when they have the same topic, job_type,
-- resource_type and resource_url, and the same session when they are for one (the payload's
-- access_token, as the cache hook's jobs per affected user have it) (work_key: hex SHA-256 of the
-- jsonb array of these five). A job published while an older superceedable job of the same work is
-- pending replaces it: the older becomes superseded (superseded_by the newer). Running jobs are
-- not replaced.

-- The canonical text is written out rather than built as a jsonb object and printed (which costs
-- several times the hash): jsonb prints an object's keys by length, then bytes, so the key fields
-- always come in the order of job_private.key_order; each value is printed as jsonb prints it
-- (strings escaped as to_json escapes them, jsonb values as their text, null when absent), joined
-- by ", " and wrapped in braces, which is jsonb's text of the object {key_field: value, ...}.
-- The fields a key has are given as flags in that order, computed once per key list of a call.
CREATE FUNCTION job_private.key_order()
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['due', 'topic', 'expires', 'payload', 'job_type', 'priority', 'timestamp', 'generation',
                 'action_type', 'retry_limit', 'resource_url', 'resource_type', 'superceedable'];
$$;
COMMENT ON FUNCTION job_private.key_order() IS
    'The job fields (job_private.job_fields) in the order jsonb prints an object''s keys (by length, then bytes): the order of the fields in the canonical text of a unique hash. Raises nothing.';

CREATE FUNCTION job_private.key_flags(p_key_fields text[])
RETURNS boolean[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT array_agg(k.f = ANY (p_key_fields) ORDER BY k.n) FROM unnest(job_private.key_order()) WITH ORDINALITY AS k(f, n);
$$;
COMMENT ON FUNCTION job_private.key_flags(text[]) IS
    'For each field of job_private.key_order, whether p_key_fields names it. Raises nothing.';

-- STABLE, not IMMUTABLE: to_json is STABLE, and PostgreSQL inlines a SQL function only when it is
-- not declared stricter than what it calls.
CREATE FUNCTION job_private.key_text(p_flags boolean[], p_topic text, p_props jsonb, p_resource_type text, p_action_type text,
                                     p_resource_url text, p_payload jsonb, p_ts jsonb, p_generation integer)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '{' || concat_ws(', ',
        CASE WHEN p_flags[1] THEN '"due": ' || coalesce((p_props -> 'due')::text, 'null') END,
        CASE WHEN p_flags[2] THEN '"topic": ' || coalesce(to_json(p_topic)::text, 'null') END,
        CASE WHEN p_flags[3] THEN '"expires": ' || coalesce((p_props -> 'expires')::text, 'null') END,
        CASE WHEN p_flags[4] THEN '"payload": ' || coalesce(p_payload::text, 'null') END,
        CASE WHEN p_flags[5] THEN '"job_type": ' || coalesce((p_props -> 'job_type')::text, 'null') END,
        CASE WHEN p_flags[6] THEN '"priority": ' || coalesce((p_props -> 'priority')::text, 'null') END,
        CASE WHEN p_flags[7] THEN '"timestamp": ' || coalesce(p_ts::text, 'null') END,
        CASE WHEN p_flags[8] THEN '"generation": ' || coalesce(p_generation::text, 'null') END,
        CASE WHEN p_flags[9] THEN '"action_type": ' || coalesce(to_json(p_action_type)::text, 'null') END,
        CASE WHEN p_flags[10] THEN '"retry_limit": ' || coalesce((p_props -> 'retry_limit')::text, 'null') END,
        CASE WHEN p_flags[11] THEN '"resource_url": ' || coalesce(to_json(p_resource_url)::text, 'null') END,
        CASE WHEN p_flags[12] THEN '"resource_type": ' || coalesce(to_json(p_resource_type)::text, 'null') END,
        CASE WHEN p_flags[13] THEN '"superceedable": ' || coalesce((p_props -> 'superceedable')::text, 'null') END) || '}';
$$;
COMMENT ON FUNCTION job_private.key_text(boolean[], text, jsonb, text, text, text, jsonb, jsonb, integer) IS
    'The canonical text of a job''s unique hash (sql/job/02_key.sql): jsonb''s text of the object of the fields flagged in p_flags (job_private.key_flags), from the job''s topic, properties p_props, the event''s fields and generation; a field the job lacks is null. Raises nothing.';

CREATE FUNCTION job_private.work_text(p_topic text, p_job_type text, p_resource_type text, p_resource_url text, p_session text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '[' || coalesce(to_json(p_topic)::text, 'null') || ', ' || coalesce(to_json(p_job_type)::text, 'null') || ', '
           || coalesce(to_json(p_resource_type)::text, 'null') || ', ' || coalesce(to_json(p_resource_url)::text, 'null') || ', '
           || coalesce(to_json(p_session)::text, 'null') || ']';
$$;
COMMENT ON FUNCTION job_private.work_text(text, text, text, text, text) IS
    'The text a job''s work_key hashes: jsonb''s text of the array [topic, job_type, resource_type, resource_url, session] (sql/job/02_key.sql), written out as job_private.key_text writes its object. Raises nothing.';

CREATE FUNCTION api.job_unique_hash(p_job jsonb, p_key_fields text[])
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT encode(sha256(convert_to(jsonb_object_agg(f.k, coalesce(p_job -> f.k, 'null'::jsonb))::text, 'UTF8')), 'hex')
    FROM unnest(p_key_fields) AS f(k);
$$;
COMMENT ON FUNCTION api.job_unique_hash(jsonb, text[]) IS
    'The unique hash a job document p_job (its fields: topic, job_type, priority, due, expires, superceedable, retry_limit, resource_type, action_type, resource_url, payload, timestamp, generation) has over p_key_fields, in the documented canonical form: lowercase hex SHA-256 of the UTF-8 text of jsonb {field: value} (absent fields null). For checking a hash by hand; the scheduler computes the same. Raises nothing.';

