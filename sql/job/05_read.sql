-- The job service, reading and upkeep: jobs by state and topic (GET /jobs), one job (GET
-- /jobs/{id}), the counters and the states now (GET /jobs/stats, /metrics), and the periodic trim
-- of finished jobs and ended deduplication claims.

CREATE FUNCTION job_private.doc(p_job job.jobs)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT to_jsonb(p_job) - 'work_key';
$$;
COMMENT ON FUNCTION job_private.doc(job.jobs) IS
    'A job as the API answers it: its job.jobs row as JSON without work_key. Raises nothing.';

CREATE FUNCTION api.job_list(p_state text DEFAULT NULL, p_topic text DEFAULT NULL, p_after bigint DEFAULT 0,
                             p_limit integer DEFAULT 100)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_state IS NOT NULL AND p_state NOT IN ('pending', 'running', 'done', 'expired', 'deduplicated', 'superseded', 'failed') THEN
        RAISE EXCEPTION 'unknown state %', p_state USING ERRCODE = 'SLINV',
            HINT = 'pending, running, done, expired, deduplicated, superseded or failed';
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 OR p_after IS NULL OR p_after < 0 THEN
        RAISE EXCEPTION 'limit must be from 1 to 1000 and after at least 0' USING ERRCODE = 'SLINV';
    END IF;
    RETURN (SELECT jsonb_build_object('jobs', coalesce(jsonb_agg(job_private.doc(j) ORDER BY j.id), '[]'),
                                      'next', CASE WHEN count(*) = p_limit THEN max(j.id) END)
            FROM (SELECT * FROM job.jobs j
                  WHERE j.id > p_after AND (p_state IS NULL OR j.state = p_state) AND (p_topic IS NULL OR j.topic = p_topic)
                  ORDER BY j.id LIMIT p_limit) j);
END
$$;
COMMENT ON FUNCTION api.job_list(text, text, bigint, integer) IS
    'Jobs in id order: {"jobs": [...], "next": the id to pass as p_after for the next page, or null}. p_state (default NULL: any): pending, running, done, expired, deduplicated, superseded or failed; p_topic (default NULL: any); p_after (default 0): only ids above it; p_limit (default 100, 1 to 1000). Raises SLINV for an unknown state or a limit out of range.';

CREATE FUNCTION api.job_get(p_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_doc jsonb;
BEGIN
    SELECT job_private.doc(j) INTO v_doc FROM job.jobs j WHERE j.id = p_id;
    IF v_doc IS NULL THEN
        RAISE EXCEPTION 'job % not found', p_id USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v_doc;
END
$$;
COMMENT ON FUNCTION api.job_get(bigint) IS
    'Job p_id as JSON (its job.jobs columns but work_key). Raises SLNFD when there is none.';

CREATE VIEW api.job_stats AS
SELECT t.topic,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'scheduled'), 0)::bigint AS scheduled,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'deduplicated'), 0)::bigint AS deduplicated,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'superseded'), 0)::bigint AS superseded,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'expired'), 0)::bigint AS expired,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'dispatched'), 0)::bigint AS dispatched,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'failed'), 0)::bigint AS failed,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'retried'), 0)::bigint AS retried,
       coalesce(sum(c.n) FILTER (WHERE c.counter = 'discarded_generation'), 0)::bigint AS discarded_generation,
       (SELECT count(*) FROM job.jobs j WHERE j.topic = t.topic AND j.state = 'pending')::bigint AS pending,
       (SELECT count(*) FROM job.jobs j WHERE j.topic = t.topic AND j.state = 'running')::bigint AS running
FROM (SELECT DISTINCT c.topic FROM job.counters c) t
JOIN job.counters c ON c.topic = t.topic
GROUP BY t.topic
ORDER BY t.topic;
COMMENT ON VIEW api.job_stats IS
    'Per topic: the counters since the database was created (scheduled, deduplicated, superseded, expired, dispatched, failed, retried: dispatches that failed and will be tried again, discarded_generation: hook jobs beyond generations_limit) and the jobs pending and running now.';

CREATE VIEW api.job_trimmed AS
SELECT NULL::bigint AS jobs, NULL::bigint AS claims WHERE false;
COMMENT ON VIEW api.job_trimmed IS 'Always empty: the row type of api.job_trim. jobs: finished jobs deleted; claims: ended deduplication claims deleted.';

CREATE FUNCTION api.job_trim(p_retention interval DEFAULT NULL, p_now timestamptz DEFAULT now())
RETURNS SETOF api.job_trimmed
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_keep interval := coalesce(p_retention, settings_private.setting_interval('job.retention', '7 days'));
    v_jobs bigint;
    v_claims bigint;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'SLINV';
    END IF;
    DELETE FROM job.jobs j WHERE j.finished_at < p_now - v_keep;
    GET DIAGNOSTICS v_jobs = ROW_COUNT;
    -- An ended claim is replaced in place when its work comes again (sql/job/03_dispatch.sql):
    -- deleting it is only tidying.
    DELETE FROM job.dedup d WHERE d.expires_at < p_now;
    GET DIAGNOSTICS v_claims = ROW_COUNT;
    RETURN QUERY SELECT v_jobs, v_claims;
END
$$;
COMMENT ON FUNCTION api.job_trim(interval, timestamptz) IS
    'Deletes the jobs that finished more than p_retention (default NULL: silo.settings job.retention, 7 days) before p_now (default now()) and the deduplication claims that ended before p_now. Returns one api.job_trimmed row. Run by silo work''s retention job (purge.retention_targets, target job). Raises SLINV when the setting is no interval or p_now is NULL.';
