-- The job service, configuration: the seed's YAML (read as JSON by silo jobs load-config, or
-- given as jsonb in psql) is checked section by section and stored in the job.config_* tables,
-- whole or not at all. Every process reads the pools from api.job_pools and reloads them when
-- silo_job_config is notified (at the commit of a load), so a new configuration needs no restart.
--
-- Rules where the seed leaves room:
-- * The seed writes the enricher's topics, common and defaults, and the cache manager's rules, at
--   the top level of its example; they are read there or under enricher: and cache_manager:.
-- * The Kafka sections (kafka, job_scheduler.kafka, job_manager) are accepted and ignored.
-- * A hook is http (feed_manager.worker_url), cache (the cache hook), mock (does nothing) or
--   sql:<function> (a SQL function taking the job as jsonb); the seed's Python class paths are
--   read by their last part: ...MockHook is mock, ...CacheHook cache, ...FeedHook http.
-- * Priorities: lower numbers are more urgent (the seed's range [0, 5] has the largest pool).
--   The ranges of a topic must not overlap: each job has one pool.

CREATE FUNCTION api.job_config_load(p_config jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_k        text;
    v_e        jsonb;
    v_ord      integer := 0;
    v_topic    text;
    v_key      text;
    v_defaults jsonb;
    v_dedup    jsonb;
    v_gen      jsonb;
    v_feed     jsonb;
    v_cache    jsonb;
    v_affected jsonb;
    v_version  integer;
    v_sources  text[] := '{}';
    v_known    text[] := ARRAY['kafka', 'job_scheduler', 'job_manager', 'enricher', 'topics', 'common', 'defaults',
                               'deduper', 'job_publisher', 'feed_manager', 'cache_manager', 'rules', 'job_consumers', 'sources'];
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION 'the configuration must be a mapping' USING ERRCODE = 'SJCFG',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_config), 'NULL'));
    END IF;
    FOR v_k IN SELECT jsonb_object_keys(p_config) LOOP
        IF NOT v_k = ANY (v_known) THEN
            PERFORM job_private.bad(v_k, 'unknown section (known: ' || array_to_string(v_known, ', ') || ')');
        END IF;
    END LOOP;

    DELETE FROM job.config_routes;
    DELETE FROM job.config_enrich;
    DELETE FROM job.config_pools;
    DELETE FROM job.config_generations;

    -- job_scheduler.job_rules
    v_e := p_config -> 'job_scheduler' -> 'job_rules';
    IF v_e IS NOT NULL AND jsonb_typeof(v_e) <> 'array' THEN
        PERFORM job_private.bad('job_scheduler.job_rules', 'must be a list of rules');
    END IF;
    FOR v_i IN 0 .. coalesce(jsonb_array_length(v_e), 0) - 1 LOOP
        v_key := format('job_scheduler.job_rules[%s]', v_i + 1);
        PERFORM job_private.match_check(v_key, v_e -> v_i, ARRAY['action_type', 'resource_type', 'topic']);
        IF NOT coalesce((v_e -> v_i) ? 'topic', false) OR v_e -> v_i ->> 'topic' = '' THEN
            PERFORM job_private.bad(v_key || '.topic', 'is required: the topic of the jobs the rule makes');
        END IF;
        INSERT INTO job.config_routes (ord, action_type, resource_type, topic)
        VALUES (v_i + 1, job_private.regex_check(v_key || '.action_type', v_e -> v_i -> 'action_type'),
                job_private.regex_check(v_key || '.resource_type', v_e -> v_i -> 'resource_type'), v_e -> v_i ->> 'topic');
    END LOOP;

    -- The enricher: topics, common, defaults.
    v_e := job_private.section(p_config, 'enricher', 'topics');
    IF v_e IS NOT NULL AND jsonb_typeof(v_e) <> 'object' THEN
        PERFORM job_private.bad('topics', 'must be a mapping of topic to rules');
    END IF;
    FOR v_topic, v_gen IN SELECT * FROM jsonb_each(coalesce(v_e, '{}')) ORDER BY 1 LOOP
        IF jsonb_typeof(v_gen) <> 'array' THEN
            PERFORM job_private.bad('topics.' || v_topic, 'must be a list of rules');
        END IF;
        FOR v_i IN 0 .. jsonb_array_length(v_gen) - 1 LOOP
            v_ord := v_ord + 1;
            PERFORM job_private.enrich_add(format('topics.%s[%s]', v_topic, v_i + 1), v_topic, v_ord, v_gen -> v_i);
        END LOOP;
    END LOOP;
    v_e := job_private.section(p_config, 'enricher', 'common');
    IF v_e IS NOT NULL AND jsonb_typeof(v_e) <> 'array' THEN
        PERFORM job_private.bad('common', 'must be a list of rules');
    END IF;
    FOR v_i IN 0 .. coalesce(jsonb_array_length(v_e), 0) - 1 LOOP
        v_ord := v_ord + 1;
        PERFORM job_private.enrich_add(format('common[%s]', v_i + 1), NULL, v_ord, v_e -> v_i);
    END LOOP;
    v_e := job_private.section(p_config, 'enricher', 'defaults');
    IF v_e IS NOT NULL AND (jsonb_typeof(v_e) <> 'object' OR EXISTS (SELECT FROM jsonb_object_keys(v_e) k WHERE k <> 'job_properties')) THEN
        PERFORM job_private.bad('defaults', 'must be a mapping with job_properties only');
    END IF;
    v_defaults := '{"job_type": "invalidate", "due": 0, "expires": 5, "priority": 1, "superceedable": false, "retry_limit": 3}'::jsonb
                  || job_private.props_check('defaults.job_properties', v_e -> 'job_properties');

    -- deduper, job_publisher, feed_manager, cache_manager.
    v_dedup := coalesce(p_config -> 'deduper' -> 'unique_id_expiry', '60000');
    IF jsonb_typeof(v_dedup) <> 'number' OR v_dedup::text !~ '^[0-9]{1,12}$' THEN
        PERFORM job_private.bad('deduper.unique_id_expiry', 'must be a whole number of milliseconds, got ' || v_dedup::text);
    END IF;
    v_gen := coalesce(p_config -> 'job_publisher' -> 'generations_limit', '3');
    IF jsonb_typeof(v_gen) <> 'number' OR v_gen::text !~ '^[0-9]{1,4}$' THEN
        PERFORM job_private.bad('job_publisher.generations_limit', 'must be a whole number, got ' || v_gen::text);
    END IF;
    v_feed := p_config -> 'feed_manager' -> 'worker_url';
    IF v_feed IS NOT NULL AND (jsonb_typeof(v_feed) <> 'string' OR v_feed #>> '{}' !~ '^https?://') THEN
        PERFORM job_private.bad('feed_manager.worker_url', 'must be an http:// or https:// URL, got ' || v_feed::text);
    END IF;
    v_cache := p_config -> 'cache_manager';
    IF v_cache IS NOT NULL AND v_cache <> 'null' AND jsonb_typeof(v_cache) <> 'object' THEN
        PERFORM job_private.bad('cache_manager', 'must be a mapping');
    END IF;
    v_affected := v_cache -> 'ppro_user_id/token_endpoint';
    IF v_affected IS NOT NULL AND (jsonb_typeof(v_affected) <> 'string' OR v_affected #>> '{}' !~ '^https?://') THEN
        PERFORM job_private.bad('cache_manager.ppro_user_id/token_endpoint', 'must be an http:// or https:// URL, got ' || v_affected::text);
    END IF;

    -- The cache manager's generational-job rules.
    v_e := job_private.section(p_config, 'cache_manager', 'rules');
    IF v_e IS NOT NULL AND jsonb_typeof(v_e) <> 'array' THEN
        PERFORM job_private.bad('rules', 'must be a list of rules');
    END IF;
    FOR v_i IN 0 .. coalesce(jsonb_array_length(v_e), 0) - 1 LOOP
        v_key := format('rules[%s]', v_i + 1);
        PERFORM job_private.match_check(v_key || '.match', v_e -> v_i -> 'match', ARRAY['action_type', 'resource_type', 'job_type']);
        IF jsonb_typeof(v_e -> v_i -> 'jobs') IS DISTINCT FROM 'array' THEN
            PERFORM job_private.bad(v_key || '.jobs', 'is required: a list of jobs');
        END IF;
        FOR v_j IN 0 .. jsonb_array_length(v_e -> v_i -> 'jobs') - 1 LOOP
            PERFORM job_private.generation_check(format('%s.jobs[%s]', v_key, v_j + 1), v_e -> v_i -> 'jobs' -> v_j);
        END LOOP;
        INSERT INTO job.config_generations (ord, action_type, resource_type, job_type, jobs)
        VALUES (v_i + 1, v_e -> v_i -> 'match' ->> 'action_type', v_e -> v_i -> 'match' ->> 'resource_type',
                v_e -> v_i -> 'match' ->> 'job_type', v_e -> v_i -> 'jobs');
    END LOOP;

    -- job_consumers: one pool per topic and priority range.
    v_e := p_config -> 'job_consumers';
    IF v_e IS NOT NULL AND jsonb_typeof(v_e) <> 'array' THEN
        PERFORM job_private.bad('job_consumers', 'must be a list of consumers');
    END IF;
    FOR v_i IN 0 .. coalesce(jsonb_array_length(v_e), 0) - 1 LOOP
        PERFORM job_private.consumer_add(format('job_consumers[%s]', v_i + 1), v_e -> v_i);
    END LOOP;

    -- sources: Silo's own changes routed as events.
    v_e := p_config -> 'sources';
    IF v_e IS NOT NULL AND v_e <> 'null' THEN
        IF jsonb_typeof(v_e) <> 'object' THEN
            PERFORM job_private.bad('sources', 'must be a mapping of source to True or False (profile_updates, series_writes, purge_reports)');
        END IF;
        FOR v_key IN SELECT jsonb_object_keys(v_e) LOOP
            IF v_key NOT IN ('profile_updates', 'series_writes', 'purge_reports') THEN
                PERFORM job_private.bad('sources.' || v_key, 'unknown source (known: profile_updates, series_writes, purge_reports)');
            ELSIF jsonb_typeof(v_e -> v_key) <> 'boolean' THEN
                PERFORM job_private.bad('sources.' || v_key, 'must be True or False');
            ELSIF (v_e ->> v_key)::boolean THEN
                v_sources := v_sources || v_key;
            END IF;
        END LOOP;
    END IF;

    INSERT INTO job.config AS c (id, version, document, unique_id_expiry, generations_limit, feed_worker_url, affected_url, defaults, sources)
    VALUES (true, 1, p_config, (v_dedup::text)::bigint, (v_gen::text)::integer, v_feed #>> '{}', v_affected #>> '{}', v_defaults, v_sources)
    ON CONFLICT (id) DO UPDATE
    SET version = c.version + 1, loaded_at = now(), document = excluded.document, sources = excluded.sources,
        unique_id_expiry = excluded.unique_id_expiry, generations_limit = excluded.generations_limit,
        feed_worker_url = excluded.feed_worker_url, affected_url = excluded.affected_url, defaults = excluded.defaults
    RETURNING c.version INTO v_version;
    PERFORM pg_notify('silo_job_config', v_version::text);
    PERFORM api.change_publish('jobs:config', 'loaded', jsonb_build_object('version', v_version));
    RETURN v_version;
END
$$;
COMMENT ON FUNCTION api.job_config_load(jsonb) IS
    'Checks and stores the job service''s configuration p_config (the seed''s YAML as JSON: job_scheduler.job_rules, the enricher''s topics, common and defaults (at the top level or under enricher), deduper.unique_id_expiry (default 60000 ms), job_publisher.generations_limit (default 3), feed_manager.worker_url, cache_manager (ppro_user_id/token_endpoint, and rules at the top level or under cache_manager), job_consumers, sources (profile_updates, series_writes, purge_reports: True routes the profile store''s writes, the appends of series points, the purge reports as events, sql/job/06_sources.sql); kafka, job_scheduler.kafka and job_manager are accepted and ignored), replacing the previous one whole, in job.config, job.config_routes, job.config_enrich, job.config_pools and job.config_generations. Returns the new version. Notifies silo_job_config (the running processes reload their pools) and publishes kind loaded on channel jobs:config. Raises SJCFG with the offending key (such as job_consumers[1].priority_ranges[2].pool_size) and what is wrong.';

-- A view rather than RETURNS TABLE, so that sqlc reads its row type.
CREATE VIEW api.job_pools AS
SELECT p.consumer, p.topic, p.hook, p.lo, p.hi, p.pool_size, c.version
FROM job.config_pools p
CROSS JOIN job.config c
ORDER BY p.topic, p.lo;
COMMENT ON VIEW api.job_pools IS
    'The worker pools of the loaded configuration, as each process runs them: consumer, topic, hook (http, cache, mock, sql:<function>), lo and hi (the priority range), pool_size (workers per process), version (of the configuration).';
