-- The job service, hooks outside the database: the HTTP hook (feed_manager.worker_url) and the
-- cache hook (which may call cache_manager's affected-users endpoint). A worker takes jobs with a
-- lease (api.job_take: locked, screened for expiry and duplicates, then running until
-- leased_until, committed), calls the hook, and records the outcomes (api.job_finish), where the
-- hash is claimed. A worker that dies leaves its jobs running; when the lease passes they are taken
-- again (sql/job/03_dispatch.sql).
--
-- The HTTP hook's URL: worker_url with {type} the job's resource_type and {id} its resource id:
-- the payload's "id" when it has one, else the last segment of the resource_url's path (both
-- URL-escaped by the worker). The request: POST, the job as JSON, header Idempotency-Key the
-- unique hash. A 2xx is done; 408, 429, 5xx and network errors are failures that use an attempt
-- (retried with back-off up to retry_limit); any other status fails the job at once.
--
-- The cache hook: a done cache job invalidates the cached responses of its resource_url's path
-- (and the paths under it); a job whose payload names an access token ("access_token") only that
-- token's session entries. Its jobs come from the first rule of job.config_generations matching
-- its action, resource and job types: for each rule job, one job (others_affected false), or one
-- job per user the affected-users endpoint lists (others_affected true), with payload
-- {"affected": <the endpoint's element>} merged over the parent's.

CREATE FUNCTION job_private.resource_id(p_payload jsonb, p_url text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(CASE WHEN jsonb_typeof(p_payload) = 'object' AND jsonb_typeof(p_payload -> 'id') IN ('string', 'number')
                         THEN p_payload ->> 'id' END,
                    nullif(substring(split_part(split_part(p_url, '?', 1), '#', 1) FROM '([^/]+)/*$'), ''));
$$;
COMMENT ON FUNCTION job_private.resource_id(jsonb, text) IS
    'A job''s resource id for the HTTP hook''s {id}: the payload''s "id" (a string or number), else the last segment of resource_url''s path; NULL when neither. Raises nothing.';

CREATE VIEW api.job_taken AS
SELECT NULL::bigint AS id, NULL::text AS hook, NULL::text AS unique_hash, NULL::text AS url, NULL::text AS resource_type,
       NULL::text AS resource_id, NULL::text AS resource_url, NULL::text AS affected_url, NULL::jsonb AS rule_jobs,
       NULL::jsonb AS job
WHERE false;
COMMENT ON VIEW api.job_taken IS
    'Always empty: the row type of api.job_take. id, hook (http or cache), unique_hash (the Idempotency-Key), url (http: feed_manager.worker_url, placeholders unreplaced), resource_type ({type}), resource_id ({id}), resource_url, affected_url (cache: the affected-users endpoint template), rule_jobs (cache: the jobs of the first matching cache_manager rule, NULL when none), job (the job as JSON, what the HTTP hook posts).';

CREATE FUNCTION api.job_take(p_topic text, p_lo integer, p_hi integer, p_max integer DEFAULT 10,
                             p_lease_seconds double precision DEFAULT 60)
RETURNS SETOF api.job_taken
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_hook text;
    v_ids  bigint[];
BEGIN
    IF p_max IS NULL OR p_max < 1 OR p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'p_max must be at least 1 and p_lease_seconds positive' USING ERRCODE = 'SLINV';
    END IF;
    SELECT p.hook INTO v_hook FROM job.config_pools p WHERE p.topic = p_topic AND p.lo = p_lo AND p.hi = p_hi;
    IF v_hook IS NULL THEN
        RAISE EXCEPTION 'no pool for topic % and priorities % to %', p_topic, p_lo, p_hi USING ERRCODE = 'SLNFD';
    END IF;
    IF v_hook NOT IN ('http', 'cache') THEN
        RAISE EXCEPTION 'the pool of topic % dispatches to hook % in the database: use api.job_dispatch', p_topic, v_hook
            USING ERRCODE = 'SLINV';
    END IF;
    v_ids := job_private.screen(job_private.lock(p_topic, p_lo, p_hi, p_max, true));
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    UPDATE job.jobs j SET state = 'running', leased_until = clock_timestamp() + p_lease_seconds * interval '1 second'
    WHERE j.id = ANY (v_ids);
    RETURN QUERY
    SELECT j.id, v_hook, j.unique_hash, c.feed_worker_url, j.resource_type, job_private.resource_id(j.payload, j.resource_url),
           j.resource_url, c.affected_url,
           CASE WHEN v_hook = 'cache' THEN
               (SELECT g.jobs FROM job.config_generations g
                WHERE (g.action_type IS NULL OR g.action_type = j.action_type)
                  AND (g.resource_type IS NULL OR g.resource_type = j.resource_type)
                  AND (g.job_type IS NULL OR g.job_type = j.job_type)
                ORDER BY g.ord LIMIT 1) END,
           to_jsonb(j) - 'leased_until' - 'work_key'
    FROM unnest(v_ids) WITH ORDINALITY AS i(id, k)
    JOIN job.jobs j ON j.id = i.id
    CROSS JOIN job.config c
    ORDER BY i.k;
END
$$;
COMMENT ON FUNCTION api.job_take(text, integer, integer, integer, double precision) IS
    'Takes up to p_max (default 10) of the most urgent due jobs of the pool of topic p_topic and priorities p_lo to p_hi whose hook is http or cache (and the running jobs of the range whose lease passed), drops the expired and the duplicates (as api.job_dispatch), and leases the others for p_lease_seconds (default 60: state running) in the caller''s transaction, which should commit before the hook is called. Returns one api.job_taken row per leased job, most urgent first. Publishes kinds expired and deduplicated on channels jobs:{topic}. Raises SLINV for p_max below 1, a lease that is not positive, or a pool whose hook runs in the database (api.job_dispatch); SLNFD when there is no such pool.';

CREATE FUNCTION api.job_finish(p_results jsonb)
RETURNS SETOF api.job_dispatched
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids  bigint[];
    v_out  text[];
    v_err  text[];
    v_st   text[];
    v_kids jsonb[];
    v_set  record;
BEGIN
    IF jsonb_typeof(p_results) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'results must be a JSON array' USING ERRCODE = 'SLINV';
    END IF;
    -- Only running jobs: a result for a job whose lease passed and that another worker took and
    -- finished is not recorded twice.
    SELECT array_agg(j.id ORDER BY j.id),
           array_agg(CASE WHEN r.value ->> 'outcome' IN ('ok', 'error', 'fail', 'transient') THEN r.value ->> 'outcome' ELSE 'error' END ORDER BY j.id),
           array_agg(r.value ->> 'error' ORDER BY j.id), array_agg(r.value ->> 'sqlstate' ORDER BY j.id),
           array_agg(r.value -> 'jobs' ORDER BY j.id)
    INTO v_ids, v_out, v_err, v_st, v_kids
    FROM jsonb_array_elements(p_results) r
    JOIN job.jobs j ON j.id = (r.value ->> 'id')::bigint AND j.state = 'running'
    WHERE jsonb_typeof(r.value) = 'object' AND (r.value ->> 'id') ~ '^[0-9]{1,18}$';
    IF v_ids IS NULL THEN
        RETURN QUERY SELECT jsonb_array_length(p_results), 0, 0, 0, 0, 0, false;
        RETURN;
    END IF;
    PERFORM 1 FROM job.jobs j WHERE j.id = ANY (v_ids) ORDER BY j.id FOR UPDATE;
    -- Done jobs claim their hash (the call happened, whatever a concurrent claim says).
    INSERT INTO job.dedup AS d (unique_hash, job_id, expires_at)
    SELECT DISTINCT ON (j.unique_hash) j.unique_hash, j.id,
           clock_timestamp() + (SELECT cf.unique_id_expiry FROM job.config cf) * interval '1 millisecond'
    FROM unnest(v_ids, v_out) AS o(id, outcome) JOIN job.jobs j ON j.id = o.id
    WHERE o.outcome = 'ok'
    ORDER BY j.unique_hash, j.id
    ON CONFLICT (unique_hash) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at;
    -- Done cache jobs invalidate their resource's cached responses.
    PERFORM cache_private.invalidate(x.path, x.session)
    FROM (SELECT DISTINCT split_part(split_part(j.resource_url, '?', 1), '#', 1) AS path,
                 CASE WHEN jsonb_typeof(j.payload -> 'access_token') = 'string'
                      THEN encode(sha256(convert_to(j.payload ->> 'access_token', 'UTF8')), 'hex') END AS session
          FROM unnest(v_ids, v_out) AS o(id, outcome)
          JOIN job.jobs j ON j.id = o.id
          JOIN job.config_pools p ON p.topic = j.topic AND j.priority BETWEEN p.lo AND p.hi AND p.hook = 'cache'
          WHERE o.outcome = 'ok' AND j.resource_url IS NOT NULL) x;
    SELECT * INTO v_set FROM job_private.settle(v_ids, v_out, v_err, v_st, v_kids);
    RETURN QUERY SELECT jsonb_array_length(p_results), 0, v_set.done, v_set.failed, v_set.retried, v_set.children, false;
END
$$;
COMMENT ON FUNCTION api.job_finish(jsonb) IS
    'Records the outcomes of jobs a worker took with api.job_take. p_results: a JSON array of {"id", "outcome": ok | error (uses an attempt) | fail (failed at once) | transient (no attempt used; anything else is error), "error", "sqlstate" (HTTP <status>, NET), "jobs": the jobs the hook made, as for api.job_dispatch}. Results for jobs that are not running (another worker took and finished them after the lease passed) are ignored. A done job claims its unique hash for unique_id_expiry ms; a done cache job invalidates the cached responses of its resource_url''s path (only the session of payload.access_token when it has one: api.cache_invalidate). Outcomes, counters, channels and the hooks'' jobs as job_private.settle records them. Returns one api.job_dispatched row (taken: results given). Raises SLINV when p_results is not a JSON array.';
