-- Belts, the registry: a belt is an event consumer (event.consumers, named belt:{id}) with a
-- callback and the settings Granary users gave as environment variables. The API speaks Granary's
-- Belt API document (id as a string, eventTypes, extractorFn, fetchProfile, extraEnv, status, ...)
-- plus sqlCallback, Silo's own field for a SQL callback, and the counters summed over the
-- consumer's lanes.
--
-- Why the input is checked here and not in Go: psql users call the same functions as HTTP, so the
-- rules (known fields, types, ranges of the settings, the callback's validation) live in one place.
-- A callback that fails validation is no error: the belt is stored FAILED with the reason, as
-- Granary's belt "transitions into FAILED state" (and START validates again). A Python belt on a
-- database without the Python runtime (sql/belt/06_python.sql, present only with plpython3u) is
-- an error (SBPYN): there is nothing to fail later, and SQL belts work without it.
--
-- Locks: writers of a belt's definition and status take its row (FOR UPDATE); api.belt_delete
-- first takes the rows of the consumer's lanes, in lane order, as a processing step does before it
-- touches the belt row (its dead letters reference it), so deleting a belt waits for running steps
-- instead of deadlocking with them.
--
-- Changes are published on channel belts (kind state, payload {"belt_id", "status"}, admins only)
-- in the writing transaction: created, updated, started, stopped, failed, deleted (status DELETED).

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
    'Whether Python belts can be validated and run: the Python runtime (belt_private.python_check, sql/belt/06_python.sql) exists, which it does only when the database has plpython3u. Raises nothing.';

-- Python belts are validated by the Python runtime, called by name because it exists only with
-- plpython3u (sql/belt/06_python.sql).
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

-- The document of every belt: Granary's field names, the consumer's event types and the counters.
CREATE VIEW belt_private.docs AS
SELECT b.id, b.name, jsonb_build_object(
           'id', b.id::text,
           'name', b.name,
           'description', b.description,
           'author', b.author,
           'labels', b.labels,
           'version', b.version,
           'created', (extract(epoch FROM b.created) * 1000)::bigint,
           'updated', (extract(epoch FROM b.updated) * 1000)::bigint,
           'eventTypes', to_jsonb(c.event_types),
           'extractorFn', b.extractor_fn,
           'sqlCallback', b.sql_callback,
           'fetchProfile', b.fetch_profile,
           'profileType', b.profile_type,
           'extraEnv', b.extra_env,
           'settings', jsonb_build_object(
               'callbackTimeoutSec', b.callback_timeout_sec,
               'callbackLongrunningSec', b.callback_longrunning_sec,
               'retryBackOffInitialIntervalSec', b.retry_initial_sec,
               'retryBackOffIntervalMaxSec', b.retry_max_sec,
               'retryBackOffMultiplier', b.retry_multiplier,
               'retryMaxRetries', b.retry_max_retries),
           'status', b.status,
           'statusReason', b.status_reason,
           'processed', s.processed,
           'failed', s.failed,
           'retried', s.retried,
           'deadLettered', s.dead_lettered,
           'longRunning', s.long_running) AS doc
FROM belt.belts b
JOIN event.consumers c ON c.id = b.consumer_id
CROSS JOIN LATERAL (
    SELECT coalesce(sum(l.processed), 0) AS processed, coalesce(sum(l.failed), 0) AS failed,
           coalesce(sum(l.retried), 0) AS retried, coalesce(sum(l.dead_lettered), 0) AS dead_lettered,
           coalesce(sum(l.long_running), 0) AS long_running
    FROM event.consumer_lanes l WHERE l.consumer_id = b.consumer_id
) s;
COMMENT ON VIEW belt_private.docs IS
    'Each belt (id, name) with its document (doc), as api.belt_get answers it: id (a string), name, description, author, labels, version, created and updated (epoch milliseconds), eventTypes (its consumer''s), extractorFn (Python source) or sqlCallback (the function''s signature), the other null, fetchProfile, profileType, extraEnv (as given), settings (the effective values of extraEnv''s settings, defaults included), status, statusReason (why it is FAILED, else null) and the counters processed, failed, retried, deadLettered, longRunning (sums over the consumer''s lanes).';

CREATE FUNCTION belt_private.doc(p_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT d.doc FROM belt_private.docs d WHERE d.id = p_id;
$$;
COMMENT ON FUNCTION belt_private.doc(bigint) IS
    'The document of belt p_id (belt_private.docs), NULL when there is none. Raises nothing.';

CREATE FUNCTION belt_private.publish_state(p_id bigint, p_status text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    SELECT api.change_publish('belts', 'state', jsonb_build_object('belt_id', p_id, 'status', p_status));
$$;
COMMENT ON FUNCTION belt_private.publish_state(bigint, text) IS
    'Publishes on channel belts (admins only) that belt p_id is now in status p_status (RUNNING, STOPPED, FAILED, or DELETED): kind state, payload {"belt_id", "status"}, in the caller''s transaction. Raises nothing of its own.';

CREATE FUNCTION belt_private.set_status(p_id bigint, p_status text, p_reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    UPDATE belt.belts
    SET status = p_status, status_reason = CASE WHEN p_status = 'FAILED' THEN p_reason END, updated = now()
    WHERE id = p_id AND (status, status_reason) IS DISTINCT FROM (p_status, CASE WHEN p_status = 'FAILED' THEN p_reason END);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM belt_private.publish_state(p_id, p_status);
    RETURN true;
END
$$;
COMMENT ON FUNCTION belt_private.set_status(bigint, text, text) IS
    'Sets belt p_id''s status to p_status (RUNNING, STOPPED or FAILED) and its status_reason to p_reason for FAILED (NULL otherwise), and publishes the state on channel belts: for processing that finds a belt''s callback broken (FAILED). Returns whether anything changed (false also when there is no belt p_id). Raises 23514 (check_violation) for another status.';

CREATE FUNCTION api.belt_create(p_belt jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r       belt.belts := belt_private.parse_input(p_belt, NULL);
    v_types text[] := belt_private.event_types_of(p_belt);
BEGIN
    IF EXISTS (SELECT FROM belt.belts b WHERE b.name = r.name) THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF',
            HINT = 'Belt names are unique: change that belt (api.belt_update, PUT /belts/{id}) or choose another name.';
    END IF;
    r := belt_private.checked(r);
    r.id := nextval(pg_get_serial_sequence('belt.belts', 'id'));
    r.consumer_id := event_private.consumer_create('belt:' || r.id, v_types);
    BEGIN
        INSERT INTO belt.belts OVERRIDING SYSTEM VALUE SELECT (r).*;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END;
    PERFORM belt_private.publish_state(r.id, r.status);
    RETURN belt_private.doc(r.id);
END
$$;
COMMENT ON FUNCTION api.belt_create(jsonb) IS
    'Registers a belt (HTTP POST /belts). p_belt: the belt document, Granary''s Belt API fields: name (required, unique, 1 to 255 characters), description, author, labels (a JSON object), eventTypes (required: the event types it consumes, strings of 1 to 255 characters), exactly one callback: extractorFn (Python source of callback.py, with execute(event_headers, event_payload[, profile])) or sqlCallback (Silo''s own: a SQL function (event_headers jsonb, event_payload jsonb[, profile jsonb]) returning jsonb, by name, schema.name or signature), fetchProfile (FALSE default, TRUE, LAZY; case-insensitive, JSON booleans too), profileType (default _d), extraEnv ([{"name", "value"}]: CALLBACK_TIMEOUT_SEC, CALLBACK_LONGRUNNING_SEC, RETRY_BACK_OFF_INITIAL_INTERVAL_SEC, RETRY_BACK_OFF_INTERVAL_MAX_SEC, RETRY_BACK_OFF_MULTIPLIER, RETRY_MAX_RETRIES with ranges and defaults as belt_private.apply_env says; FETCH_PROFILE and PROFILE_TYPE too, where the fields fetchProfile and profileType win; other names are kept for a Python callback''s os.environ). Answered fields (id, version, status, counters ...) and Granary''s deployment fields (kubernetesName, replicas, millicpu, memory, requirementsPy, extractorVersion, volumes, volumeMounts, partitionOffsets, secret*, editor, viewer) are accepted and ignored: not stored, not answered. The callback is validated (belt_private.checked): a belt whose callback does not validate is stored with status FAILED and the reason in statusReason, else RUNNING. Creates its event consumer belt:{id} (event_private.consumer_create), which receives the events of its types stored from then on. Returns the belt''s document (api.belt_get). Publishes kind state on channel belts. Raises SLINV for an invalid document (not an object, an unknown field, a wrong type, no name, no callback or two, invalid event types, a setting out of range), SLCNF "<name> exists already" for a name in use, SBPYN for a Python belt when the database has no PL/Python (plpython3u; SQL belts work without it).';

CREATE FUNCTION api.belt_update(p_id bigint, p_belt jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_old belt.belts;
    r     belt.belts;
BEGIN
    SELECT * INTO v_old FROM belt.belts b WHERE b.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    r := belt_private.parse_input(p_belt, v_old);
    IF r.name <> v_old.name AND EXISTS (SELECT FROM belt.belts b WHERE b.name = r.name) THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END IF;
    IF p_belt ? 'eventTypes' THEN
        PERFORM event_private.consumer_set_types(v_old.consumer_id, belt_private.event_types_of(p_belt));
    END IF;
    r := belt_private.checked(r);
    r.version := v_old.version + 1;
    BEGIN
        UPDATE belt.belts b
        SET name = r.name, description = r.description, author = r.author, labels = r.labels, version = r.version,
            language = r.language, sql_callback = r.sql_callback, extractor_fn = r.extractor_fn,
            fetch_profile = r.fetch_profile, profile_type = r.profile_type, extra_env = r.extra_env,
            callback_timeout_sec = r.callback_timeout_sec, callback_longrunning_sec = r.callback_longrunning_sec,
            retry_initial_sec = r.retry_initial_sec, retry_max_sec = r.retry_max_sec,
            retry_multiplier = r.retry_multiplier, retry_max_retries = r.retry_max_retries,
            status = r.status, status_reason = r.status_reason, updated = r.updated
        WHERE b.id = p_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END;
    PERFORM belt_private.publish_state(p_id, r.status);
    RETURN belt_private.doc(p_id);
END
$$;
COMMENT ON FUNCTION api.belt_update(bigint, jsonb) IS
    'Changes belt p_id (HTTP PUT /belts/{id}). p_belt: a belt document as for api.belt_create, in which every field given replaces the old value and every field left out keeps it (null clears description and author; giving extractorFn or sqlCallback replaces the callback, even of the other language; extraEnv given replaces the whole list, and settings it leaves out return to their defaults). version goes up by one on every call. Changed eventTypes apply to events stored from then on (event_private.consumer_set_types); deliveries already made stay. The callback is validated again: status FAILED with the reason when it does not validate; else RUNNING, or STOPPED when it was STOPPED. Returns the belt''s document. Publishes kind state on channel belts. Raises SLNFD when there is no belt p_id, SLINV for an invalid document, SLCNF "<name> exists already" when the new name is another belt''s, SBPYN for a Python callback when the database has no PL/Python.';

CREATE FUNCTION api.belt_delete(p_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_consumer bigint;
BEGIN
    SELECT b.consumer_id INTO v_consumer FROM belt.belts b WHERE b.id = p_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM FROM event.consumer_lanes l WHERE l.consumer_id = v_consumer ORDER BY l.lane FOR UPDATE;
    DELETE FROM belt.belts b WHERE b.id = p_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM event_private.consumer_drop(v_consumer);
    PERFORM belt_private.publish_state(p_id, 'DELETED');
    RETURN true;
END
$$;
COMMENT ON FUNCTION api.belt_delete(bigint) IS
    'Deletes belt p_id (HTTP DELETE /belts/{id}) with its dead letters and its event consumer, whose pending deliveries go with it (the events stay in the store). Waits for processing steps that hold its lanes. Returns true, or false when there is no belt p_id (HTTP answers 404). Publishes kind state, status DELETED, on channel belts. Raises nothing of its own.';

CREATE FUNCTION api.belt_get(p_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v jsonb := belt_private.doc(p_id);
BEGIN
    IF v IS NULL THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION api.belt_get(bigint) IS
    'Belt p_id''s document (HTTP GET /belts/{id}): id (a string), name, description, author, labels, version, created and updated (epoch milliseconds), eventTypes, extractorFn or sqlCallback (the other null; sqlCallback as the function''s full signature once it validated), fetchProfile, profileType, extraEnv (as given), settings (effective values: callbackTimeoutSec, callbackLongrunningSec, retryBackOffInitialIntervalSec, retryBackOffIntervalMaxSec, retryBackOffMultiplier, retryMaxRetries), status (RUNNING, STOPPED, FAILED), statusReason (why FAILED, else null), and the counters processed, failed, retried, deadLettered, longRunning (sums over its consumer''s lanes). Raises SLNFD when there is no belt p_id.';

CREATE FUNCTION api.belt_list(p_offset integer DEFAULT 0, p_pagesize integer DEFAULT 20)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_offset IS NULL OR p_offset < 0 OR p_pagesize IS NULL OR p_pagesize NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'offset must be 0 or more and pagesize from 1 to 1000' USING ERRCODE = 'SLINV',
            DETAIL = format('got offset %s, pagesize %s', coalesce(p_offset::text, 'NULL'), coalesce(p_pagesize::text, 'NULL'));
    END IF;
    RETURN jsonb_build_object(
        'totalCount', (SELECT count(*) FROM belt.belts),
        'items', coalesce((SELECT jsonb_agg(d.doc ORDER BY d.id)
                           FROM (SELECT x.id, x.doc FROM belt_private.docs x ORDER BY x.id OFFSET p_offset LIMIT p_pagesize) d),
                          '[]'));
END
$$;
COMMENT ON FUNCTION api.belt_list(integer, integer) IS
    'A page of the belts in order of id (HTTP GET /belts): {"totalCount": every belt, "items": [documents as api.belt_get answers them]}. p_offset (default 0): belts skipped; p_pagesize (default 20, at most 1000): belts answered. Raises SLINV for a NULL or negative offset or a pagesize outside 1 to 1000.';

CREATE FUNCTION api.belt_state(p_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v jsonb;
BEGIN
    SELECT jsonb_build_object('status', b.status, 'reason', b.status_reason) INTO v FROM belt.belts b WHERE b.id = p_id;
    IF v IS NULL THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION api.belt_state(bigint) IS
    'Belt p_id''s state (HTTP GET /belts/{id}/state): {"status": RUNNING (its events are processed), STOPPED (they wait) or FAILED (its callback did not validate; they wait), "reason": why it is FAILED, else null}. Raises SLNFD when there is no belt p_id.';

CREATE FUNCTION api.belt_set_state(p_id bigint, p_action text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_action text := upper(btrim(p_action));
    v_old    belt.belts;
    r        belt.belts;
BEGIN
    IF v_action IS NULL OR v_action NOT IN ('START', 'STOP') THEN
        RAISE EXCEPTION 'action must be START or STOP' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(quote_literal(p_action), 'NULL'));
    END IF;
    SELECT * INTO v_old FROM belt.belts b WHERE b.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    r := v_old;
    IF v_action = 'STOP' THEN
        r.status := 'STOPPED';
        r.status_reason := NULL;
    ELSE
        r.status := 'RUNNING';
        r := belt_private.checked(r);
    END IF;
    IF (r.status, r.status_reason, r.sql_callback) IS DISTINCT FROM (v_old.status, v_old.status_reason, v_old.sql_callback) THEN
        UPDATE belt.belts b SET status = r.status, status_reason = r.status_reason, sql_callback = r.sql_callback, updated = now()
        WHERE b.id = p_id;
        IF (r.status, r.status_reason) IS DISTINCT FROM (v_old.status, v_old.status_reason) THEN
            PERFORM belt_private.publish_state(p_id, r.status);
        END IF;
    END IF;
    RETURN jsonb_build_object('status', r.status, 'reason', r.status_reason);
END
$$;
COMMENT ON FUNCTION api.belt_set_state(bigint, text) IS
    'Starts or stops belt p_id (HTTP POST /belts/{id}/state). p_action: START or STOP (case-insensitive). STOP: status STOPPED (its events wait in its lanes). START validates the callback again (a FAILED belt whose function was fixed or created since runs): RUNNING, or FAILED with the reason. Returns the new state {"status", "reason"} as api.belt_state answers it. Publishes kind state on channel belts when the state changed. Raises SLINV for another action, SLNFD when there is no belt p_id, SBPYN when starting a Python belt on a database without PL/Python.';
