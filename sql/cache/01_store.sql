-- The API cache: its configuration (the seed's rule format) and the shared store of cached
-- responses (cache.entries, unlogged). The middleware of each Silo process (server/cache.go)
-- decides per request from the rules (api.cache_rules), looks in its front cache in memory, then
-- here (api.cache_get), and stores what the handler answered (api.cache_put). Invalidation
-- (api.cache_invalidate, cache jobs, the profile store's writes) deletes entries and notifies
-- silo_cache with {"path", "session"}, on which every process drops its front entries.
--
-- Rules where the seed leaves room:
-- * An endpoint is "<METHOD>/path": literal segments and {name} for any one segment.
-- * A rule pattern <param>:<value>&... agrees with a request when the request has exactly the
--   rule's parameters (access_token aside: rule 4, fully scoped) with a value the rule allows (one
--   of a comma-separated list, or * for any). The first rule that agrees applies, its settings
--   over the defaults. A request that agrees with no rule takes the defaults when it has no
--   parameter or a parameter no rule names (rule 3, filter_by), and bypasses the cache otherwise
--   (its parameters are the rules' but agree with none: only calls that agree are cached). An
--   endpoint without rules takes its defaults.
-- * Settings: action cache (look up, store on a miss) or invalidate (after a 2xx answer, drop the
--   path's entries); session (entries per access token: from the Authorization header or the
--   access_token parameter; no token bypasses the cache); expires in milliseconds; nx (store only
--   when there is no entry) and xx (store only over an entry), as Redis SET has them. Values may be
--   written as the seed's template has them: "true"/"false", "60000" or "60000 ms".
-- * A stale store is refused: a response computed before an invalidation of its path is not
--   stored after it (cache.invalidations keeps the last minute of invalidations).

CREATE SCHEMA cache_private;
COMMENT ON SCHEMA cache_private IS 'Internals of the API cache (sql/cache/): not a public contract. Rebuilt with schema api.';

CREATE FUNCTION cache_private.bad(p_key text, p_msg text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION '%: %', p_key, p_msg USING ERRCODE = 'SCCFG', DETAIL = format('key %s', p_key);
END
$$;
COMMENT ON FUNCTION cache_private.bad(text, text) IS 'Raises SCCFG with message "<p_key>: <p_msg>", naming the offending key.';

CREATE FUNCTION cache_private.settings(p_key text, p_s jsonb, p_rule boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_k   text;
    v_v   jsonb;
    v_out jsonb := '{}';
BEGIN
    IF p_s IS NULL OR p_s = 'null' THEN
        RETURN v_out;
    END IF;
    IF jsonb_typeof(p_s) <> 'object' THEN
        PERFORM cache_private.bad(p_key, 'must be an object');
    END IF;
    FOR v_k, v_v IN SELECT * FROM jsonb_each(p_s) LOOP
        IF v_k = 'rule' AND p_rule THEN
            CONTINUE;
        ELSIF v_k = 'action' THEN
            IF v_v #>> '{}' NOT IN ('cache', 'invalidate') OR jsonb_typeof(v_v) <> 'string' THEN
                PERFORM cache_private.bad(p_key || '.action', 'must be cache or invalidate, got ' || v_v::text);
            END IF;
            v_out := v_out || jsonb_build_object('action', v_v #>> '{}');
        ELSIF v_k IN ('session', 'xx', 'nx') THEN
            IF NOT (jsonb_typeof(v_v) = 'boolean' OR (jsonb_typeof(v_v) = 'string' AND lower(v_v #>> '{}') IN ('true', 'false'))) THEN
                PERFORM cache_private.bad(p_key || '.' || v_k, 'must be true or false, got ' || v_v::text);
            END IF;
            v_out := v_out || jsonb_build_object(v_k, lower(v_v #>> '{}')::boolean);
        ELSIF v_k = 'expires' THEN
            IF NOT ((jsonb_typeof(v_v) = 'number' AND v_v::text ~ '^[1-9][0-9]{0,11}$')
                    OR (jsonb_typeof(v_v) = 'string' AND v_v #>> '{}' ~ '^\s*[1-9][0-9]{0,11}\s*(ms)?\s*$')) THEN
                PERFORM cache_private.bad(p_key || '.expires', 'must be a positive whole number of milliseconds, got ' || v_v::text);
            END IF;
            v_out := v_out || jsonb_build_object('expires_ms', substring(v_v #>> '{}' FROM '[0-9]+')::bigint);
        ELSE
            PERFORM cache_private.bad(p_key || '.' || v_k, 'unknown setting (known: action, session, expires, xx, nx' ||
                                                         CASE WHEN p_rule THEN ', rule' ELSE '' END || ')');
        END IF;
    END LOOP;
    IF coalesce((v_out ->> 'xx')::boolean AND (v_out ->> 'nx')::boolean, false) THEN
        PERFORM cache_private.bad(p_key, 'xx and nx exclude each other');
    END IF;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION cache_private.settings(text, jsonb, boolean) IS
    'Checks cache settings p_s at key p_key (action cache|invalidate, session, xx, nx booleans or "true"/"false", expires positive milliseconds as a number or "<n>" or "<n> ms"; rule too when p_rule) and returns them normalised {action, session, expires_ms, xx, nx}. Raises SCCFG naming the key.';

CREATE FUNCTION api.cache_rule_parse(p_rule text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_part text;
    v_out  jsonb := '{}';
    v_name text;
    v_val  text;
BEGIN
    IF p_rule IS NULL OR btrim(p_rule) = '' THEN
        RAISE EXCEPTION 'a rule must not be empty' USING ERRCODE = 'SCCFG';
    END IF;
    FOREACH v_part IN ARRAY string_to_array(p_rule, '&') LOOP
        v_name := btrim(split_part(v_part, ':', 1));
        v_val := btrim(substr(v_part, length(split_part(v_part, ':', 1)) + 2));
        IF position(':' IN v_part) = 0 OR v_name = '' OR v_val = '' THEN
            RAISE EXCEPTION 'rule %: % is not <param>:<value>', p_rule, v_part USING ERRCODE = 'SCCFG';
        END IF;
        IF v_out ? v_name THEN
            RAISE EXCEPTION 'rule %: parameter % appears twice', p_rule, v_name USING ERRCODE = 'SCCFG';
        END IF;
        IF v_name = 'access_token' THEN
            CONTINUE;
        END IF;
        IF v_val = '*' THEN
            v_out := v_out || jsonb_build_object(v_name, '*');
        ELSE
            IF EXISTS (SELECT FROM unnest(string_to_array(v_val, ',')) v WHERE btrim(v) = '') THEN
                RAISE EXCEPTION 'rule %: an empty value in %', p_rule, v_val USING ERRCODE = 'SCCFG';
            END IF;
            v_out := v_out || jsonb_build_object(v_name, (SELECT jsonb_agg(btrim(v) ORDER BY btrim(v)) FROM unnest(string_to_array(v_val, ',')) v));
        END IF;
    END LOOP;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION api.cache_rule_parse(text) IS
    'Parses a cache rule pattern <param>:<value>&<param>:<value>... (a value: a word, a comma-separated list, or *) into {"<param>": ["<value>", ...] sorted, or "*"}; access_token is left out (it never takes part in matching). Raises SCCFG when the pattern is empty, a part is not <param>:<value>, a parameter appears twice or a list holds an empty value.';

CREATE FUNCTION api.cache_config_load(p_config jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ep      text;
    v_def     jsonb;
    v_k       text;
    v_s       jsonb;
    v_r       jsonb;
    v_rk      text;
    v_method  text;
    v_path    text;
    v_version integer;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION 'the cache configuration must be an object of "<METHOD>/path/" to settings' USING ERRCODE = 'SCCFG';
    END IF;
    DELETE FROM cache.endpoints;
    FOR v_ep, v_def IN SELECT * FROM jsonb_each(p_config) LOOP
        v_method := substring(v_ep FROM '^([A-Z]+)/');
        v_path := substring(v_ep FROM '^[A-Z]+(/.*)$');
        IF v_method IS NULL OR v_path IS NULL THEN
            PERFORM cache_private.bad(v_ep, 'an endpoint must be written <METHOD>/path/, such as GET/profiles/{profileType}/{correlationId}');
        END IF;
        IF jsonb_typeof(v_def) <> 'object' THEN
            PERFORM cache_private.bad(v_ep, 'must be an object with defaults and overrides');
        END IF;
        FOR v_k IN SELECT jsonb_object_keys(v_def) LOOP
            IF v_k NOT IN ('defaults', 'overrides') THEN
                PERFORM cache_private.bad(v_ep || '.' || v_k, 'unknown field (known: defaults, overrides)');
            END IF;
        END LOOP;
        v_s := cache_private.settings(v_ep || '.defaults', v_def -> 'defaults', false);
        INSERT INTO cache.endpoints (endpoint, method, path, action, session, expires_ms, xx, nx)
        VALUES (v_ep, v_method, CASE WHEN v_path <> '/' THEN rtrim(v_path, '/') ELSE v_path END,
                v_s ->> 'action', (v_s ->> 'session')::boolean, (v_s ->> 'expires_ms')::bigint,
                (v_s ->> 'xx')::boolean, (v_s ->> 'nx')::boolean);
        IF v_def -> 'overrides' IS NOT NULL AND v_def -> 'overrides' <> 'null' THEN
            IF jsonb_typeof(v_def -> 'overrides') <> 'object' OR EXISTS (SELECT FROM jsonb_object_keys(v_def -> 'overrides') k WHERE k <> 'rules')
               OR jsonb_typeof(v_def -> 'overrides' -> 'rules') IS DISTINCT FROM 'array' THEN
                PERFORM cache_private.bad(v_ep || '.overrides', 'must be an object {"rules": [...]}');
            END IF;
            FOR v_i IN 0 .. jsonb_array_length(v_def -> 'overrides' -> 'rules') - 1 LOOP
                v_r := v_def -> 'overrides' -> 'rules' -> v_i;
                v_rk := format('%s.overrides.rules[%s]', v_ep, v_i + 1);
                IF jsonb_typeof(v_r) <> 'object' OR jsonb_typeof(v_r -> 'rule') IS DISTINCT FROM 'string' THEN
                    PERFORM cache_private.bad(v_rk || '.rule', 'is required: a pattern <param>:<value>&...');
                END IF;
                v_s := cache_private.settings(v_rk, v_r, true);
                BEGIN
                    INSERT INTO cache.rules (endpoint, ord, rule, params, action, session, expires_ms, xx, nx)
                    VALUES (v_ep, v_i + 1, v_r ->> 'rule', api.cache_rule_parse(v_r ->> 'rule'), v_s ->> 'action',
                            (v_s ->> 'session')::boolean, (v_s ->> 'expires_ms')::bigint, (v_s ->> 'xx')::boolean, (v_s ->> 'nx')::boolean);
                EXCEPTION WHEN SQLSTATE 'SCCFG' THEN
                    PERFORM cache_private.bad(v_rk || '.rule', SQLERRM);
                END;
            END LOOP;
        END IF;
    END LOOP;
    INSERT INTO cache.config AS c (id, version, document) VALUES (true, 1, p_config)
    ON CONFLICT (id) DO UPDATE SET version = c.version + 1, loaded_at = now(), document = excluded.document
    RETURNING c.version INTO v_version;
    -- Entries made under the old rules go: the new ones may not cache them, or for less long.
    DELETE FROM cache.entries;
    PERFORM pg_notify('silo_cache', jsonb_build_object('path', '/', 'session', '', 'config', v_version)::text);
    RETURN v_version;
END
$$;
COMMENT ON FUNCTION api.cache_config_load(jsonb) IS
    'Checks and stores the API cache configuration p_config, the seed''s format: {"<METHOD>/path/": {"defaults": {action, session, expires, xx, nx}, "overrides": {"rules": [{"rule": "<param>:<value>&...", action, session, expires, xx, nx}]}}} (sql/cache/01_store.sql gives the rules), replacing the previous one whole in cache.endpoints and cache.rules; empties cache.entries and notifies silo_cache (every process reloads its rules and empties its front cache). Returns the new version. Raises SCCFG naming the offending key.';

-- A view rather than RETURNS TABLE, so that sqlc reads its row type.
CREATE VIEW api.cache_rules AS
SELECT e.endpoint, e.method, e.path, e.action, e.session, e.expires_ms, e.xx, e.nx,
       coalesce((SELECT jsonb_agg(jsonb_build_object('rule', r.rule, 'params', r.params, 'action', r.action, 'session', r.session,
                                                     'expires_ms', r.expires_ms, 'xx', r.xx, 'nx', r.nx) ORDER BY r.ord)
                 FROM cache.rules r WHERE r.endpoint = e.endpoint), '[]'::jsonb)::jsonb AS rules,
       (SELECT c.version FROM cache.config c) AS version
FROM cache.endpoints e
ORDER BY e.endpoint;
COMMENT ON VIEW api.cache_rules IS
    'The cache rules as the middleware reads them: per endpoint, method, path (pattern), the defaults (action, session, expires_ms, xx, nx; NULL when not given) and rules (a JSON array of {rule, params, action, session, expires_ms, xx, nx}, in order), version of the configuration.';

CREATE FUNCTION cache_private.invalidate(p_path text, p_session text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n bigint;
BEGIN
    INSERT INTO cache.invalidations (path, session) VALUES (p_path, coalesce(p_session, ''));
    DELETE FROM cache.invalidations i WHERE i.at < clock_timestamp() - interval '1 minute';
    DELETE FROM cache.entries e
    WHERE (e.path = p_path OR e.path LIKE replace(replace(replace(rtrim(p_path, '/'), '\', '\\'), '%', '\%'), '_', '\_') || '/%')
      AND (p_session IS NULL OR e.session = p_session);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        PERFORM pg_notify('silo_cache', left(jsonb_build_object('path', p_path, 'session', coalesce(p_session, ''))::text, 7900));
    END IF;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION cache_private.invalidate(text, text) IS
    'Deletes the cached responses of path p_path and the paths under it (only session p_session''s, the SHA-256 hex of an access token, when not NULL), records the invalidation in cache.invalidations and, when entries went, notifies silo_cache with {"path", "session"} (every process drops its front entries). Returns the entries deleted. Raises nothing.';

CREATE FUNCTION api.cache_invalidate(p_path text, p_access_token text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT cache_private.invalidate(p_path, CASE WHEN p_access_token IS NOT NULL
                                                 THEN encode(sha256(convert_to(p_access_token, 'UTF8')), 'hex') END);
$$;
COMMENT ON FUNCTION api.cache_invalidate(text, text) IS
    'Invalidates the cached responses of path p_path (such as /profiles/customer/42) and of the paths under it, in every Silo process: those of every session, or only of access token p_access_token (default NULL). Returns the shared entries deleted. Notifies silo_cache. Raises nothing.';

CREATE FUNCTION api.cache_get(p_key text)
RETURNS SETOF cache.entries
LANGUAGE sql STABLE
AS $$
    SELECT * FROM cache.entries e WHERE e.key = p_key AND e.expires_at > now();
$$;
COMMENT ON FUNCTION api.cache_get(text) IS
    'The live cached response of key p_key (cache.entries: not expired), or no row. Raises nothing.';

CREATE FUNCTION api.cache_put(p_key text, p_path text, p_session text, p_status integer, p_content_type text, p_body bytea,
                              p_etag text, p_expires_ms bigint, p_since timestamptz, p_xx boolean DEFAULT false,
                              p_nx boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_expires_ms IS NULL OR p_expires_ms <= 0 THEN
        RAISE EXCEPTION 'expires must be positive' USING ERRCODE = 'SLINV';
    END IF;
    -- Computed before an invalidation of its path (or a parent's) that came since: stale.
    IF p_since < clock_timestamp() - interval '50 seconds' OR EXISTS (
        SELECT FROM cache.invalidations i
        WHERE i.at >= p_since AND (i.session = '' OR i.session = p_session)
          AND (p_path = i.path OR p_path LIKE replace(replace(replace(rtrim(i.path, '/'), '\', '\\'), '%', '\%'), '_', '\_') || '/%')) THEN
        RETURN false;
    END IF;
    IF p_xx THEN
        UPDATE cache.entries e SET status = p_status, content_type = p_content_type, body = p_body, etag = p_etag,
                                   created_at = now(), expires_at = now() + p_expires_ms * interval '1 millisecond'
        WHERE e.key = p_key AND e.expires_at > now();
    ELSIF p_nx THEN
        INSERT INTO cache.entries AS e (key, path, session, status, content_type, body, etag, expires_at)
        VALUES (p_key, p_path, p_session, p_status, p_content_type, p_body, p_etag, now() + p_expires_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE SET status = excluded.status, content_type = excluded.content_type, body = excluded.body,
                                         etag = excluded.etag, created_at = now(), expires_at = excluded.expires_at
        WHERE e.expires_at <= now();
    ELSE
        INSERT INTO cache.entries AS e (key, path, session, status, content_type, body, etag, expires_at)
        VALUES (p_key, p_path, p_session, p_status, p_content_type, p_body, p_etag, now() + p_expires_ms * interval '1 millisecond')
        ON CONFLICT (key) DO UPDATE SET status = excluded.status, content_type = excluded.content_type, body = excluded.body,
                                         etag = excluded.etag, created_at = now(), expires_at = excluded.expires_at;
    END IF;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n > 0;
END
$$;
COMMENT ON FUNCTION api.cache_put(text, text, text, integer, text, bytea, text, bigint, timestamptz, boolean, boolean) IS
    'Stores a response in the shared cache: key p_key, path p_path, session p_session ('''' for shared), status, content type, body, ETag, for p_expires_ms milliseconds; p_since: when the response was computed. p_xx (default false): only over a live entry; p_nx (default false): only when there is none. Refuses (returns false) a response computed before an invalidation of its path, a parent path or its session since, or more than 50 seconds ago; otherwise returns whether it stored. Raises SLINV when p_expires_ms is not positive.';

-- The profile store's writes invalidate the cached reads of the profiles they touch (GET
-- /profiles/{type}/{id} and the grain reads under it). Only when the cache has rules at all: a
-- Silo that caches nothing pays one probe per statement.
CREATE FUNCTION cache_private.tg_profilestore__invalidate()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT FROM cache.endpoints) THEN
        PERFORM cache_private.invalidate('/profiles/' || t.profile_type || '/' || t.correlation_id)
        FROM (SELECT DISTINCT n.profile_type, n.correlation_id FROM grains n) t;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION cache_private.tg_profilestore__invalidate() IS
    'Statement trigger of profile.profilestore (its transition table grains: the rows inserted, updated or deleted): when the cache has rules, invalidates /profiles/{profile_type}/{correlation_id} (and the paths under it) of every profile the statement touched.';

-- Multi-event triggers may not have transition tables: one trigger per event, one function.
CREATE TRIGGER profilestore_cache_insert AFTER INSERT ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION cache_private.tg_profilestore__invalidate();
CREATE TRIGGER profilestore_cache_update AFTER UPDATE ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION cache_private.tg_profilestore__invalidate();
CREATE TRIGGER profilestore_cache_delete AFTER DELETE ON profile.profilestore
    REFERENCING OLD TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION cache_private.tg_profilestore__invalidate();
