-- Belts, the belt document: what api.belt_create and api.belt_update read (sql/belt/02_registry.sql),
-- in Granary's field names: which fields exist, the settings of extraEnv and their ranges, and the
-- validation of the callback by the seed's rules (a SQL function looked up in the catalog, Python
-- source handed to the Python runtime's belt_private.python_check). A callback that fails
-- validation is no error: belt_private.checked marks the belt FAILED with the reason.

-- Fields of Granary's belt document that Silo reads, answers only, or ignores.
CREATE FUNCTION belt_private.input_fields(p_kind text)
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE p_kind
        WHEN 'writable' THEN ARRAY['name', 'description', 'author', 'labels', 'eventTypes', 'extractorFn',
                                   'sqlCallback', 'fetchProfile', 'profileType', 'extraEnv']
        WHEN 'answered' THEN ARRAY['id', 'version', 'created', 'updated', 'status', 'statusReason', 'settings',
                                   'processed', 'failed', 'retried', 'deadLettered', 'longRunning', '_links']
        WHEN 'deployment' THEN ARRAY['kubernetesName', 'replicas', 'millicpu', 'memory', 'requirementsPy',
                                     'extractorVersion', 'volumes', 'volumeMounts', 'partitionOffsets',
                                     'editor', 'viewer']
    END;
$$;
COMMENT ON FUNCTION belt_private.input_fields(text) IS
    'The fields of a belt document by kind: p_kind writable (read by api.belt_create and api.belt_update), answered (answered by api.belt_get, accepted and ignored in input so that a document read can be sent back), deployment (Granary''s deployment fields, meaningless in Silo: accepted and ignored, never stored nor answered; so is every field whose name starts with secret). NULL for any other p_kind. Raises nothing.';

-- A number of extraEnv, checked against its range. Values may be JSON strings ("30") or numbers.
CREATE FUNCTION belt_private.env_number(p_name text, p_value text, p_min numeric, p_max numeric,
                                        p_min_exclusive boolean DEFAULT false, p_integer boolean DEFAULT false)
RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v numeric;
BEGIN
    IF p_value ~ '^\s*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$' THEN
        v := p_value::numeric;
    END IF;
    IF v IS NULL OR (p_integer AND v <> trunc(v)) OR v > p_max OR v < p_min OR (p_min_exclusive AND v = p_min) THEN
        RAISE EXCEPTION 'extraEnv %: % expected, got %', p_name,
            format('%s %s %s and at most %s', CASE WHEN p_integer THEN 'an integer' ELSE 'a number' END,
                   CASE WHEN p_min_exclusive THEN 'greater than' ELSE 'from' END, p_min, p_max),
            coalesce(quote_literal(p_value), 'null')
            USING ERRCODE = 'SLINV';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION belt_private.env_number(text, text, numeric, numeric, boolean, boolean) IS
    'The value p_value of setting p_name of a belt''s extraEnv as a number: a decimal number (a JSON number or a string holding one) from p_min (excluded when p_min_exclusive, default false) to p_max, whole when p_integer (default false). Raises SLINV naming the setting and the range otherwise.';

CREATE FUNCTION belt_private.fetch_profile_of(p_what text, p_value jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v text := upper(CASE jsonb_typeof(p_value) WHEN 'string' THEN p_value #>> '{}' WHEN 'boolean' THEN p_value::text END);
BEGIN
    IF v IS NULL OR v NOT IN ('FALSE', 'TRUE', 'LAZY') THEN
        RAISE EXCEPTION '%: FALSE, TRUE or LAZY expected, got %', p_what, coalesce(p_value::text, 'null')
            USING ERRCODE = 'SLINV', HINT = 'FALSE: no profile; TRUE: the profile of the event''s correlation id is the callback''s third argument; LAZY: the callback fetches profiles itself.';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION belt_private.fetch_profile_of(text, jsonb) IS
    'A FETCH_PROFILE value p_value (a JSON string false, true or lazy in any case, or a JSON boolean) as FALSE, TRUE or LAZY; p_what names where it was given, for the error. Raises SLINV for anything else.';

-- The settings of extraEnv, parsed into the columns of a belt row. Names not listed are kept in
-- extra_env only (a Python callback sees them in os.environ).
CREATE FUNCTION belt_private.apply_env(p_belt belt.belts, p_env jsonb)
RETURNS belt.belts
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    r   belt.belts := p_belt;
    e   jsonb;
    v   text;
    dup text;
BEGIN
    IF p_env IS NULL OR jsonb_typeof(p_env) <> 'array' THEN
        RAISE EXCEPTION 'extraEnv must be an array of {"name", "value"} objects' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_env), 'NULL'));
    END IF;
    FOR e IN SELECT x FROM jsonb_array_elements(p_env) x LOOP
        IF jsonb_typeof(e) <> 'object' OR jsonb_typeof(e -> 'name') IS DISTINCT FROM 'string' OR e ->> 'name' = ''
           OR jsonb_typeof(e -> 'value') NOT IN ('string', 'number', 'boolean')
           OR EXISTS (SELECT FROM jsonb_object_keys(e) k WHERE k NOT IN ('name', 'value')) THEN
            RAISE EXCEPTION 'extraEnv must be an array of {"name", "value"} objects, with a non-empty name and a string or number value'
                USING ERRCODE = 'SLINV', DETAIL = format('got %s', e);
        END IF;
    END LOOP;
    SELECT x ->> 'name' INTO dup FROM jsonb_array_elements(p_env) x GROUP BY 1 HAVING count(*) > 1 LIMIT 1;
    IF dup IS NOT NULL THEN
        RAISE EXCEPTION 'extraEnv names % more than once', dup USING ERRCODE = 'SLINV';
    END IF;
    r.extra_env := p_env;
    r.callback_timeout_sec := 300;
    r.callback_longrunning_sec := 180;
    r.retry_initial_sec := 1;
    r.retry_max_sec := 60;
    r.retry_multiplier := 2.0;
    r.retry_max_retries := -1;
    FOR e IN SELECT x FROM jsonb_array_elements(p_env) x LOOP
        v := e ->> 'value';
        CASE e ->> 'name'
            WHEN 'CALLBACK_TIMEOUT_SEC' THEN
                r.callback_timeout_sec := belt_private.env_number('CALLBACK_TIMEOUT_SEC', v, 0, 86400, true);
            WHEN 'CALLBACK_LONGRUNNING_SEC' THEN
                r.callback_longrunning_sec := belt_private.env_number('CALLBACK_LONGRUNNING_SEC', v, 0, 86400, true);
            WHEN 'RETRY_BACK_OFF_INITIAL_INTERVAL_SEC' THEN
                r.retry_initial_sec := belt_private.env_number('RETRY_BACK_OFF_INITIAL_INTERVAL_SEC', v, 0, 86400);
            WHEN 'RETRY_BACK_OFF_INTERVAL_MAX_SEC' THEN
                r.retry_max_sec := belt_private.env_number('RETRY_BACK_OFF_INTERVAL_MAX_SEC', v, 0, 86400);
            WHEN 'RETRY_BACK_OFF_MULTIPLIER' THEN
                r.retry_multiplier := belt_private.env_number('RETRY_BACK_OFF_MULTIPLIER', v, 1, 1000);
            WHEN 'RETRY_MAX_RETRIES' THEN
                r.retry_max_retries := belt_private.env_number('RETRY_MAX_RETRIES', v, -1, 2147483647, false, true);
            WHEN 'FETCH_PROFILE' THEN
                r.fetch_profile := belt_private.fetch_profile_of('extraEnv FETCH_PROFILE', e -> 'value');
            WHEN 'PROFILE_TYPE' THEN
                IF v = '' THEN
                    RAISE EXCEPTION 'extraEnv PROFILE_TYPE must not be empty' USING ERRCODE = 'SLINV';
                END IF;
                r.profile_type := v;
            ELSE
                NULL;
        END CASE;
    END LOOP;
    RETURN r;
END
$$;
COMMENT ON FUNCTION belt_private.apply_env(belt.belts, jsonb) IS
    'Belt row p_belt with extraEnv p_env (an array of {"name", "value"}, names unique, values strings or numbers) stored in extra_env and its settings parsed into the columns: CALLBACK_TIMEOUT_SEC (> 0, at most 86400; default 300), CALLBACK_LONGRUNNING_SEC (> 0, at most 86400; default 180), RETRY_BACK_OFF_INITIAL_INTERVAL_SEC (0 to 86400; default 1), RETRY_BACK_OFF_INTERVAL_MAX_SEC (0 to 86400; default 60), RETRY_BACK_OFF_MULTIPLIER (1 to 1000; default 2.0), RETRY_MAX_RETRIES (an integer, -1 unlimited, 0 none; default -1); a setting not given takes its default. FETCH_PROFILE (false, true, lazy) and PROFILE_TYPE set fetch_profile and profile_type (the document''s fields, applied after, win). Other names are kept in extra_env only. Raises SLINV for a malformed list, a name given twice, or a value out of its range.';

-- The belt row a document describes: p_old's values where the document is silent (NULL p_old:
-- the defaults of a new belt). Event types are the consumer's, read by belt_private.event_types_of.
CREATE FUNCTION belt_private.parse_input(p_belt jsonb, p_old belt.belts)
RETURNS belt.belts
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    r       belt.belts := p_old;
    v_bad   text;
    v_fn    text;
    v_cb    text;
    v_field text;
BEGIN
    IF p_belt IS NULL OR jsonb_typeof(p_belt) <> 'object' THEN
        RAISE EXCEPTION 'a belt must be a JSON object' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_belt), 'NULL'));
    END IF;
    SELECT string_agg(k, ', ' ORDER BY k) INTO v_bad
    FROM jsonb_object_keys(p_belt) k
    WHERE k <> ALL (belt_private.input_fields('writable') || belt_private.input_fields('answered')
                    || belt_private.input_fields('deployment'))
      AND k NOT LIKE 'secret%';
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown belt field: %', v_bad USING ERRCODE = 'SLINV',
            HINT = 'A belt has ' || array_to_string(belt_private.input_fields('writable'), ', ')
                   || '; Granary''s deployment fields (' || array_to_string(belt_private.input_fields('deployment'), ', ')
                   || ', secret*) and the answered ones (id, version, status, counters ...) are accepted and ignored.';
    END IF;
    IF p_old IS NULL THEN
        r.labels := '{}';
        r.version := 1;
        r.fetch_profile := 'FALSE';
        r.profile_type := '_d';
        r.status := 'RUNNING';
        r.created := now();
        r := belt_private.apply_env(r, '[]');
    END IF;
    r.updated := now();

    FOREACH v_field IN ARRAY ARRAY['name', 'description', 'author', 'extractorFn', 'sqlCallback', 'profileType'] LOOP
        IF jsonb_typeof(p_belt -> v_field) NOT IN ('string', 'null')
           OR (v_field IN ('name', 'profileType') AND jsonb_typeof(p_belt -> v_field) = 'null') THEN
            RAISE EXCEPTION '% must be a string', v_field USING ERRCODE = 'SLINV',
                DETAIL = format('got %s', jsonb_typeof(p_belt -> v_field));
        END IF;
    END LOOP;
    IF p_belt ? 'name' THEN
        r.name := p_belt ->> 'name';
    END IF;
    IF r.name IS NULL OR length(btrim(r.name)) = 0 OR length(r.name) > 255 THEN
        RAISE EXCEPTION 'a belt needs a name of 1 to 255 characters' USING ERRCODE = 'SLINV';
    END IF;
    IF p_belt ? 'description' THEN
        r.description := p_belt ->> 'description';
    END IF;
    IF p_belt ? 'author' THEN
        r.author := p_belt ->> 'author';
    END IF;
    IF p_belt ? 'labels' THEN
        IF jsonb_typeof(p_belt -> 'labels') NOT IN ('object', 'null') THEN
            RAISE EXCEPTION 'labels must be a JSON object' USING ERRCODE = 'SLINV',
                DETAIL = format('got %s', jsonb_typeof(p_belt -> 'labels'));
        END IF;
        r.labels := coalesce(nullif(p_belt -> 'labels', 'null'), '{}');
    END IF;

    -- The callback: one of extractorFn (Python) and sqlCallback (SQL). Giving one replaces the
    -- other, so a belt read and sent back (the other one null) keeps its callback.
    v_fn := CASE WHEN p_belt ? 'extractorFn' THEN p_belt ->> 'extractorFn' ELSE r.extractor_fn END;
    v_cb := CASE WHEN p_belt ? 'sqlCallback' THEN p_belt ->> 'sqlCallback' ELSE r.sql_callback END;
    IF p_belt ->> 'extractorFn' IS NOT NULL AND p_belt ->> 'sqlCallback' IS NOT NULL THEN
        RAISE EXCEPTION 'a belt has one callback: extractorFn or sqlCallback, not both' USING ERRCODE = 'SLINV';
    ELSIF p_belt ->> 'extractorFn' IS NOT NULL THEN
        v_cb := NULL;
    ELSIF p_belt ->> 'sqlCallback' IS NOT NULL THEN
        v_fn := NULL;
    END IF;
    IF coalesce(btrim(v_fn), '') = '' AND coalesce(btrim(v_cb), '') = '' THEN
        RAISE EXCEPTION 'a belt needs a callback: extractorFn (Python source) or sqlCallback (a SQL function)'
            USING ERRCODE = 'SLINV',
            HINT = 'sqlCallback names a function (event_headers jsonb, event_payload jsonb[, profile jsonb]) returning jsonb, e.g. "my_callback" or "public.my_callback(jsonb, jsonb)".';
    ELSIF v_fn IS NOT NULL AND v_cb IS NOT NULL THEN
        RAISE EXCEPTION 'a belt has one callback: extractorFn or sqlCallback, not both' USING ERRCODE = 'SLINV';
    END IF;
    r.extractor_fn := nullif(v_fn, '');
    r.sql_callback := nullif(btrim(v_cb), '');
    r.language := CASE WHEN r.extractor_fn IS NOT NULL THEN 'python' ELSE 'sql' END;

    IF p_belt ? 'extraEnv' THEN
        r := belt_private.apply_env(r, coalesce(nullif(p_belt -> 'extraEnv', 'null'), '[]'));
    END IF;
    IF p_belt ? 'fetchProfile' AND jsonb_typeof(p_belt -> 'fetchProfile') <> 'null' THEN
        r.fetch_profile := belt_private.fetch_profile_of('fetchProfile', p_belt -> 'fetchProfile');
    END IF;
    IF p_belt ->> 'profileType' IS NOT NULL THEN
        IF length(p_belt ->> 'profileType') NOT BETWEEN 1 AND 255 THEN
            RAISE EXCEPTION 'profileType must have 1 to 255 characters' USING ERRCODE = 'SLINV';
        END IF;
        r.profile_type := p_belt ->> 'profileType';
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION belt_private.parse_input(jsonb, belt.belts) IS
    'The belt row that belt document p_belt describes, over p_old (NULL: a new belt, from the defaults: labels {}, version 1, fetch_profile FALSE, profile_type _d, status RUNNING, the default settings). Fields given replace the old values (null clears description and author; null labels or extraEnv mean {} and []). Exactly one of extractorFn and sqlCallback names the callback: giving one drops the other. fetchProfile and profileType win over FETCH_PROFILE and PROFILE_TYPE of extraEnv; a value given nowhere keeps the old one. id, consumer_id, status and version are left to the caller; the callback is not validated here (belt_private.checked). Raises SLINV for a document that is not an object, an unknown field, a field of the wrong type, a missing or over-long name, no callback or both, and the errors of belt_private.apply_env and belt_private.fetch_profile_of.';

CREATE FUNCTION belt_private.event_types_of(p_belt jsonb)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF jsonb_typeof(p_belt -> 'eventTypes') IS DISTINCT FROM 'array'
       OR EXISTS (SELECT FROM jsonb_array_elements(p_belt -> 'eventTypes') t WHERE jsonb_typeof(t) <> 'string') THEN
        RAISE EXCEPTION 'eventTypes must be an array of event types (strings)' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_belt -> 'eventTypes'), 'nothing'));
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(p_belt -> 'eventTypes'));
END
$$;
COMMENT ON FUNCTION belt_private.event_types_of(jsonb) IS
    'The eventTypes of belt document p_belt as a text array. Raises SLINV when it is missing or not an array of strings (event_private.consumer_create and consumer_set_types check the types themselves: SLINV for none, an empty one, one over 255 characters).';

-- The seed's rules, for a SQL function: found by signature or by a name that only one function
-- has, (jsonb, jsonb[, jsonb]) returning jsonb, the third parameter as FETCH_PROFILE says.
CREATE FUNCTION belt_private.sql_callback_check(p_callback text, p_fetch_profile text,
                                                OUT o_signature text, OUT o_problem text)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_oid   oid;
    v_names text[];
    v_n     integer;
    p       record;
BEGIN
    IF strpos(p_callback, '(') > 0 THEN
        BEGIN
            v_oid := to_regprocedure(p_callback);
        EXCEPTION WHEN OTHERS THEN
            o_problem := format('%s is not a function signature: %s', p_callback, SQLERRM);
            RETURN;
        END;
        IF v_oid IS NULL THEN
            o_problem := format('function %s does not exist', p_callback);
            RETURN;
        END IF;
    ELSE
        BEGIN
            v_names := parse_ident(p_callback);
        EXCEPTION WHEN OTHERS THEN
            o_problem := format('%s is not a function name: %s', p_callback, SQLERRM);
            RETURN;
        END;
        IF cardinality(v_names) > 2 THEN
            o_problem := format('%s is not a function name: give name, schema.name or a signature', p_callback);
            RETURN;
        END IF;
        SELECT count(*), min(f.oid) INTO v_n, v_oid
        FROM pg_catalog.pg_proc f
        WHERE f.proname = v_names[cardinality(v_names)]
          AND CASE WHEN cardinality(v_names) = 2 THEN f.pronamespace = to_regnamespace(quote_ident(v_names[1]))
                   ELSE pg_catalog.pg_function_is_visible(f.oid) END;
        IF v_n = 0 THEN
            o_problem := format('function %s does not exist', p_callback);
            RETURN;
        ELSIF v_n > 1 THEN
            o_problem := format('function name %s is ambiguous: %s functions have it; give the signature, e.g. %s(jsonb, jsonb)',
                                p_callback, v_n, p_callback);
            RETURN;
        END IF;
    END IF;
    SELECT f.prokind, f.pronargs, f.pronargdefaults, f.proretset, f.prorettype,
           f.proargtypes::oid[] AS argtypes, format('%I.%I(%s)', n.nspname, f.proname, oidvectortypes(f.proargtypes)) AS sig
    INTO p
    FROM pg_catalog.pg_proc f JOIN pg_catalog.pg_namespace n ON n.oid = f.pronamespace
    WHERE f.oid = v_oid;
    o_problem := CASE
        WHEN p.prokind <> 'f' THEN format('%s is not a function (a procedure, aggregate or window function)', p.sig)
        WHEN p.pronargs NOT IN (2, 3) THEN
            format('the callback must have 2 or 3 parameters (event_headers jsonb, event_payload jsonb[, profile jsonb]): %s has %s', p.sig, p.pronargs)
        WHEN EXISTS (SELECT FROM unnest(p.argtypes) t WHERE t <> 'jsonb'::regtype) THEN
            format('the callback''s parameters must be jsonb (event_headers jsonb, event_payload jsonb[, profile jsonb]): %s', p.sig)
        WHEN p.prorettype <> 'jsonb'::regtype OR p.proretset THEN
            format('the callback must return jsonb: %s returns %s%s', p.sig, CASE WHEN p.proretset THEN 'setof ' ELSE '' END,
                   format_type(p.prorettype, NULL))
        WHEN p_fetch_profile = 'TRUE' AND p.pronargs <> 3 THEN
            format('with FETCH_PROFILE TRUE the callback must have exactly 3 parameters (the third receives the profile): %s has 2', p.sig)
        WHEN p_fetch_profile <> 'TRUE' AND p.pronargs = 3 AND p.pronargdefaults = 0 THEN
            format('with FETCH_PROFILE %s the callback may have a third parameter only with a default (profile jsonb DEFAULT NULL): %s', p_fetch_profile, p.sig)
    END;
    IF o_problem IS NULL THEN
        o_signature := p.sig;
    END IF;
END
$$;
COMMENT ON FUNCTION belt_private.sql_callback_check(text, text) IS
    'Validates SQL callback p_callback for FETCH_PROFILE p_fetch_profile (FALSE, TRUE, LAZY) by the rules of Granary''s callback validation: the function exists (p_callback with parentheses: a signature, read by to_regprocedure; else a name, optionally schema-qualified, that exactly one function visible in the search path has), it is a plain function with 2 or 3 parameters, all jsonb, returning jsonb (not a set); with FETCH_PROFILE FALSE or LAZY a third parameter needs a default; with TRUE there must be exactly 3. Returns o_signature, the function''s full signature schema.name(jsonb, jsonb) when it validates (NULL otherwise), and o_problem, why it does not (NULL when it does). Raises nothing.';

CREATE FUNCTION belt_private.python_available()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT to_regprocedure('belt_private.python_check(text,text)') IS NOT NULL;
$$;
COMMENT ON FUNCTION belt_private.python_available() IS
    'Whether Python belts can be validated and run: the Python runtime (belt_private.python_check, sql/belt/07_python_4_install.sql) exists, which it does only when the database has plpython3u. Raises nothing.';

-- Python belts are validated by the Python runtime, called by name because it exists only with
-- plpython3u (sql/belt/07_python_4_install.sql).
CREATE FUNCTION belt_private.checked(p_belt belt.belts)
RETURNS belt.belts
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r         belt.belts := p_belt;
    v_problem text;
    v_sig     text;
BEGIN
    IF r.language = 'python' THEN
        IF NOT belt_private.python_available() THEN
            RAISE EXCEPTION 'Python belts are not available: this database has no PL/Python (plpython3u)'
                USING ERRCODE = 'SBPYN',
                DETAIL = CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'plpython3u')
                              THEN 'plpython3u is installed, but Silo''s Python runtime is not: run silo migrate.'
                              ELSE 'Python callbacks run in PostgreSQL through the untrusted language plpython3u, which this database does not have.' END,
                HINT = 'Install the server package postgresql-plpython3-15, have a superuser run CREATE EXTENSION plpython3u; in this database, then run silo migrate. SQL belts (sqlCallback) work without it.';
        END IF;
        -- The function is named through its oid: the statement is built, not a literal, so that
        -- the lint of PL/pgSQL does not look for a function the database may not have.
        -- A checker that fails (the interpreter cannot start, the source breaks it) fails the belt,
        -- not the request.
        BEGIN
            EXECUTE format('SELECT %s($1, $2)', to_regprocedure('belt_private.python_check(text,text)')::oid::regproc)
                INTO v_problem USING r.extractor_fn, r.fetch_profile;
        EXCEPTION WHEN OTHERS THEN
            v_problem := format('the Python check failed: %s (SQLSTATE %s)', SQLERRM, SQLSTATE);
        END;
    ELSE
        SELECT c.o_signature, c.o_problem INTO v_sig, v_problem
        FROM belt_private.sql_callback_check(r.sql_callback, r.fetch_profile) c;
        r.sql_callback := coalesce(v_sig, r.sql_callback);
    END IF;
    IF v_problem IS NOT NULL THEN
        r.status := 'FAILED';
        r.status_reason := 'callback validation failed: ' || v_problem;
    ELSE
        r.status := CASE WHEN r.status = 'STOPPED' THEN 'STOPPED' ELSE 'RUNNING' END;
        r.status_reason := NULL;
    END IF;
    RETURN r;
END
$$;
COMMENT ON FUNCTION belt_private.checked(belt.belts) IS
    'Belt row p_belt with its callback validated: a Python callback by belt_private.python_check (called with dynamic SQL), a SQL callback by belt_private.sql_callback_check (sql_callback becomes the function''s full signature when it validates). Invalid: status FAILED, status_reason "callback validation failed: <why>". Valid: status_reason NULL and status RUNNING, or STOPPED when it was STOPPED. An error raised by belt_private.python_check (other than a cancellation) fails the belt with its message. Raises SBPYN for a Python callback when the Python runtime is missing (belt_private.python_available).';
