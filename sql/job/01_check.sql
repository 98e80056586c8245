-- The job service, configuration checks: the pieces api.job_config_load (sql/job/01_config.sql)
-- checks and stores the seed's sections with, each raising SJCFG with the offending key.

CREATE SCHEMA job_private;
COMMENT ON SCHEMA job_private IS 'Internals of the job service (sql/job/): not a public contract. Rebuilt with schema api.';

-- The error every check raises: SJCFG, naming the key.
-- VOLATILE: it only raises, and a checker must not run it for its value.
CREATE FUNCTION job_private.bad(p_key text, p_msg text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION '%: %', p_key, p_msg USING ERRCODE = 'SJCFG',
        DETAIL = format('key %s', p_key), HINT = 'The configuration format: the README''s job service section.';
END
$$;
COMMENT ON FUNCTION job_private.bad(text, text) IS
    'Raises SJCFG with message "<p_key>: <p_msg>" (p_key: the offending key, as a path such as job_scheduler.job_rules[2].topic).';

CREATE FUNCTION job_private.props_check(p_key text, p_props jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_k text;
    v_v jsonb;
BEGIN
    IF p_props IS NULL OR p_props = 'null' THEN
        RETURN '{}';
    END IF;
    IF jsonb_typeof(p_props) <> 'object' THEN
        PERFORM job_private.bad(p_key, 'must be a mapping, got ' || jsonb_typeof(p_props));
    END IF;
    FOR v_k, v_v IN SELECT * FROM jsonb_each(p_props) LOOP
        IF v_k = 'superceedable' AND jsonb_typeof(v_v) <> 'boolean' THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'must be True or False, got ' || v_v::text);
        ELSIF v_k = 'job_type' AND (jsonb_typeof(v_v) <> 'string' OR v_v = '""') THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'must be a non-empty string, got ' || v_v::text);
        ELSIF v_k IN ('priority', 'retry_limit')
              AND (jsonb_typeof(v_v) <> 'number' OR v_v::text !~ '^[0-9]{1,6}$') THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'must be a whole number from 0 to 999999, got ' || v_v::text);
        ELSIF v_k IN ('due', 'expires') AND (jsonb_typeof(v_v) <> 'number' OR (v_v::text)::numeric < 0
                                               OR (v_v::text)::numeric > 5256000) THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'must be a number of minutes from 0 to 5256000, got ' || v_v::text);
        END IF;
    END LOOP;
    RETURN p_props;
END
$$;
COMMENT ON FUNCTION job_private.props_check(text, jsonb) IS
    'Checks job properties p_props found at key p_key (superceedable a boolean, job_type a non-empty string, priority and retry_limit whole numbers, due and expires minutes from 0 to 10 years; other keys are kept as they are) and returns them ({} for NULL). Raises SJCFG naming the key.';

CREATE FUNCTION job_private.match_check(p_key text, p_match jsonb, p_fields text[])
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_k text;
BEGIN
    IF p_match IS NULL OR jsonb_typeof(p_match) <> 'object' THEN
        PERFORM job_private.bad(p_key, 'must be a mapping of ' || array_to_string(p_fields, ', '));
    END IF;
    FOR v_k IN SELECT jsonb_object_keys(p_match) LOOP
        IF NOT v_k = ANY (p_fields) THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'unknown field (known: ' || array_to_string(p_fields, ', ') || ')');
        ELSIF jsonb_typeof(p_match -> v_k) <> 'string' THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'must be a string, got ' || jsonb_typeof(p_match -> v_k));
        END IF;
    END LOOP;
    RETURN p_match;
END
$$;
COMMENT ON FUNCTION job_private.match_check(text, jsonb, text[]) IS
    'Checks a match mapping p_match at key p_key: an object whose keys are among p_fields, each a string. Returns it. Raises SJCFG naming the key.';

CREATE FUNCTION job_private.hook_of(p_key text, p_hook jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_h text := p_hook #>> '{}';
BEGIN
    IF p_hook IS NULL OR jsonb_typeof(p_hook) <> 'string' THEN
        PERFORM job_private.bad(p_key, 'is required: http, cache, mock or sql:<function>');
    END IF;
    v_h := CASE WHEN v_h ~ '\.MockHook$' THEN 'mock' WHEN v_h ~ '\.CacheHook$' THEN 'cache'
                WHEN v_h ~ '\.FeedHook$' THEN 'http' ELSE v_h END;
    IF v_h IN ('http', 'cache', 'mock') THEN
        RETURN v_h;
    END IF;
    IF v_h LIKE 'sql:%' THEN
        IF to_regprocedure(substr(v_h, 5) || '(jsonb)') IS NULL THEN
            PERFORM job_private.bad(p_key, format('no SQL function %s(jsonb) exists', substr(v_h, 5)));
        END IF;
        RETURN v_h;
    END IF;
    PERFORM job_private.bad(p_key, format('unknown hook %s: http, cache, mock or sql:<function> (or a class path ending in MockHook, CacheHook or FeedHook)', v_h));
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.hook_of(text, jsonb) IS
    'The hook a job consumer''s hook value p_hook (at key p_key) names: http, cache, mock or sql:<function> (the function (jsonb) must exist); a class path ending in MockHook, CacheHook or FeedHook is mock, cache or http. Raises SJCFG naming the key.';

CREATE FUNCTION job_private.section(p_doc jsonb, p_top text, p_key text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(nullif(p_doc -> p_top -> p_key, 'null'), nullif(p_doc -> p_key, 'null'));
$$;
COMMENT ON FUNCTION job_private.section(jsonb, text, text) IS
    'Section p_key of the configuration p_doc under p_top (enricher, cache_manager), or at the top level where the seed''s example writes it; NULL when neither. Raises nothing.';

CREATE FUNCTION job_private.regex_check(p_key text, p_value jsonb)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_value IS NULL OR jsonb_typeof(p_value) <> 'string' THEN
        PERFORM job_private.bad(p_key, 'is required: a regular expression');
    END IF;
    BEGIN
        PERFORM '' ~ (p_value #>> '{}');
    EXCEPTION WHEN invalid_regular_expression THEN
        PERFORM job_private.bad(p_key, 'invalid regular expression: ' || SQLERRM);
    END;
    RETURN p_value #>> '{}';
END
$$;
COMMENT ON FUNCTION job_private.regex_check(text, jsonb) IS
    'The regular expression p_value at key p_key, checked by PostgreSQL. Raises SJCFG naming the key when it is missing, not a string or invalid.';


CREATE FUNCTION job_private.enrich_add(p_key text, p_topic text, p_ord integer, p_rule jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_k text;
BEGIN
    IF jsonb_typeof(p_rule) IS DISTINCT FROM 'object' THEN
        PERFORM job_private.bad(p_key, 'must be a mapping with match, key_fields and job_properties');
    END IF;
    FOR v_k IN SELECT jsonb_object_keys(p_rule) LOOP
        IF v_k NOT IN ('match', 'key_fields', 'job_properties') THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'unknown field (known: match, key_fields, job_properties)');
        END IF;
    END LOOP;
    PERFORM job_private.match_check(p_key || '.match', p_rule -> 'match', ARRAY['action_type', 'resource_type', 'job_type']);
    IF jsonb_typeof(p_rule -> 'key_fields') IS DISTINCT FROM 'array' OR jsonb_array_length(p_rule -> 'key_fields') = 0
       OR EXISTS (SELECT FROM jsonb_array_elements(p_rule -> 'key_fields') f WHERE jsonb_typeof(f) <> 'string') THEN
        PERFORM job_private.bad(p_key || '.key_fields', 'is required: a non-empty list of job field names');
    END IF;
    SELECT f INTO v_k FROM jsonb_array_elements_text(p_rule -> 'key_fields') f
    WHERE f NOT IN (SELECT unnest(job_private.job_fields())) LIMIT 1;
    IF v_k IS NOT NULL THEN
        PERFORM job_private.bad(p_key || '.key_fields', format('unknown job field %s (known: %s)', v_k, array_to_string(job_private.job_fields(), ', ')));
    END IF;
    INSERT INTO job.config_enrich (ord, topic, action_type, resource_type, job_type, key_fields, job_properties)
    VALUES (p_ord, p_topic, p_rule -> 'match' ->> 'action_type', p_rule -> 'match' ->> 'resource_type',
            p_rule -> 'match' ->> 'job_type',
            ARRAY(SELECT jsonb_array_elements_text(p_rule -> 'key_fields')),
            job_private.props_check(p_key || '.job_properties', p_rule -> 'job_properties'));
END
$$;
COMMENT ON FUNCTION job_private.enrich_add(text, text, integer, jsonb) IS
    'Checks enrichment rule p_rule (at key p_key: match, key_fields, job_properties) and stores it as rule p_ord of topic p_topic (NULL: common). Raises SJCFG naming the key.';

CREATE FUNCTION job_private.job_fields()
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['topic', 'job_type', 'priority', 'due', 'expires', 'superceedable', 'retry_limit',
                 'resource_type', 'action_type', 'resource_url', 'payload', 'timestamp', 'generation'];
$$;
COMMENT ON FUNCTION job_private.job_fields() IS
    'The job fields a rule''s key_fields may name: the job properties, the event''s fields (resource_type, action_type, resource_url, payload, timestamp) and generation. Raises nothing.';

CREATE FUNCTION job_private.generation_check(p_key text, p_job jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_k text;
BEGIN
    IF jsonb_typeof(p_job) IS DISTINCT FROM 'object' THEN
        PERFORM job_private.bad(p_key, 'must be a mapping');
    END IF;
    FOR v_k IN SELECT jsonb_object_keys(p_job) LOOP
        IF v_k NOT IN ('others_affected', 'entity_type', 'entity_id_offset', 'params', 'topic', 'update_fields') THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'unknown field (known: others_affected, entity_type, entity_id_offset, params, topic, update_fields)');
        END IF;
    END LOOP;
    IF jsonb_typeof(p_job -> 'topic') IS DISTINCT FROM 'string' THEN
        PERFORM job_private.bad(p_key || '.topic', 'is required: a topic');
    END IF;
    IF p_job ? 'others_affected' AND jsonb_typeof(p_job -> 'others_affected') <> 'boolean' THEN
        PERFORM job_private.bad(p_key || '.others_affected', 'must be True or False');
    END IF;
    IF p_job ? 'entity_id_offset' AND (jsonb_typeof(p_job -> 'entity_id_offset') <> 'number' OR (p_job ->> 'entity_id_offset') !~ '^[0-9]{1,3}$') THEN
        PERFORM job_private.bad(p_key || '.entity_id_offset', 'must be a whole number (a position in the resource url''s path)');
    END IF;
    IF p_job ? 'params' AND (jsonb_typeof(p_job -> 'params') <> 'object'
                             OR EXISTS (SELECT FROM jsonb_each(p_job -> 'params') e WHERE jsonb_typeof(e.value) <> 'string')) THEN
        PERFORM job_private.bad(p_key || '.params', 'must be a mapping of resource url parameter to endpoint parameter');
    END IF;
    IF coalesce((p_job ->> 'others_affected')::boolean, false) AND NOT (p_job ? 'params' OR p_job ? 'entity_id_offset') THEN
        PERFORM job_private.bad(p_key, 'others_affected needs params or entity_type and entity_id_offset');
    END IF;
    PERFORM job_private.props_check(p_key || '.update_fields', p_job -> 'update_fields');
END
$$;
COMMENT ON FUNCTION job_private.generation_check(text, jsonb) IS
    'Checks one job p_job of a cache manager rule (at key p_key): its fields, topic required, others_affected a boolean, entity_id_offset a whole number, params a mapping of strings, update_fields job properties. Raises SJCFG naming the key.';

CREATE FUNCTION job_private.consumer_add(p_key text, p_c jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_k     text;
    v_hook  text;
    v_topic text;
    v_r     jsonb;
    v_rk    text;
BEGIN
    IF jsonb_typeof(p_c) IS DISTINCT FROM 'object' THEN
        PERFORM job_private.bad(p_key, 'must be a mapping');
    END IF;
    FOR v_k IN SELECT jsonb_object_keys(p_c) LOOP
        IF v_k NOT IN ('name', 'topics', 'serializing_function', 'hook', 'priority_ranges') THEN
            PERFORM job_private.bad(p_key || '.' || v_k, 'unknown field (known: name, topics, serializing_function, hook, priority_ranges)');
        END IF;
    END LOOP;
    IF jsonb_typeof(p_c -> 'name') IS DISTINCT FROM 'string' THEN
        PERFORM job_private.bad(p_key || '.name', 'is required: a string');
    END IF;
    v_hook := job_private.hook_of(p_key || '.hook', p_c -> 'hook');
    IF jsonb_typeof(p_c -> 'topics') IS DISTINCT FROM 'array' OR jsonb_array_length(p_c -> 'topics') = 0
       OR EXISTS (SELECT FROM jsonb_array_elements(p_c -> 'topics') t WHERE jsonb_typeof(t) <> 'string') THEN
        PERFORM job_private.bad(p_key || '.topics', 'is required: a non-empty list of topics');
    END IF;
    IF jsonb_typeof(p_c -> 'priority_ranges') IS DISTINCT FROM 'array' OR jsonb_array_length(p_c -> 'priority_ranges') = 0 THEN
        PERFORM job_private.bad(p_key || '.priority_ranges', 'is required: a non-empty list of {range: [low, high], pool_size: n}');
    END IF;
    FOR v_i IN 0 .. jsonb_array_length(p_c -> 'priority_ranges') - 1 LOOP
        v_r := p_c -> 'priority_ranges' -> v_i;
        v_rk := format('%s.priority_ranges[%s]', p_key, v_i + 1);
        IF jsonb_typeof(v_r) IS DISTINCT FROM 'object' THEN
            PERFORM job_private.bad(v_rk, 'must be a mapping {range: [low, high], pool_size: n}');
        END IF;
        IF jsonb_typeof(v_r -> 'range') IS DISTINCT FROM 'array' OR jsonb_array_length(v_r -> 'range') <> 2
           OR (v_r -> 'range' ->> 0) !~ '^[0-9]{1,6}$' OR (v_r -> 'range' ->> 1) !~ '^[0-9]{1,6}$'
           OR jsonb_typeof(v_r -> 'range' -> 0) <> 'number' OR jsonb_typeof(v_r -> 'range' -> 1) <> 'number'
           OR (v_r -> 'range' ->> 0)::integer > (v_r -> 'range' ->> 1)::integer THEN
            PERFORM job_private.bad(v_rk || '.range', 'must be [low, high], two whole numbers with low <= high, got ' || coalesce((v_r -> 'range')::text, 'nothing'));
        END IF;
        IF jsonb_typeof(v_r -> 'pool_size') IS DISTINCT FROM 'number' OR (v_r ->> 'pool_size') !~ '^[0-9]{1,4}$'
           OR (v_r ->> 'pool_size')::integer NOT BETWEEN 1 AND 1000 THEN
            PERFORM job_private.bad(v_rk || '.pool_size', 'must be a whole number from 1 to 1000, got ' || coalesce((v_r -> 'pool_size')::text, 'nothing'));
        END IF;
        FOR v_topic IN SELECT jsonb_array_elements_text(p_c -> 'topics') LOOP
            IF EXISTS (SELECT FROM job.config_pools p WHERE p.topic = v_topic
                         AND p.lo <= (v_r -> 'range' ->> 1)::integer AND (v_r -> 'range' ->> 0)::integer <= p.hi) THEN
                PERFORM job_private.bad(v_rk || '.range', format('overlaps another priority range of topic %s', v_topic));
            END IF;
            INSERT INTO job.config_pools (consumer, topic, hook, lo, hi, pool_size)
            VALUES (p_c ->> 'name', v_topic, v_hook, (v_r -> 'range' ->> 0)::integer, (v_r -> 'range' ->> 1)::integer,
                    (v_r ->> 'pool_size')::integer);
        END LOOP;
    END LOOP;
END
$$;
COMMENT ON FUNCTION job_private.consumer_add(text, jsonb) IS
    'Checks job consumer p_c (at key p_key: name, topics, hook, priority_ranges; serializing_function accepted and ignored) and stores a pool per topic and range in job.config_pools. Raises SJCFG naming the key (a range that overlaps another of the same topic included).';
