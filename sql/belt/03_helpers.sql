-- Belts, helpers for SQL callbacks: Granary's Update vocabulary (the Python callback's Update
-- object: constructor Update(id, [path]), set_value, set_type, set_operation, set_schema), as SQL
-- functions that build the update message a callback returns, and api.belt_retry, the SQL form of
-- raising RetryException. A SQL callback builds its updates with them:
--
--   SELECT api.set_value(api.update(p_headers ->> 'grnry-correlation-id', '{visits,last}'),
--                        p_payload ->> 'page', p_reader => '_all');
--
-- They check nothing: the profile store validates each update when the processing step applies it
-- (an invalid one is dead-lettered there with its reason, the event's other updates apply), as it
-- does for a Python callback's updates. Left out of the message is what the processing step and
-- the store default: _origin (/belts/{id}), _c (1), _in (now), _ttl (P100Y), _reader (_auth).
-- They are SQL functions of one expression, STABLE as the JSON builders they call, so that
-- PostgreSQL inlines them into a set-based callback's statement (a function declared IMMUTABLE
-- around a STABLE builder is not inlined, and each call then costs a function call's setup, about
-- a hundred times the expression); api.belt_retry raises. api.set_value tests its optional
-- arguments first: inlined with them left out, the test is folded away when the statement is
-- planned and only the {"_v": ...} object is built. They build with jsonb_object (text arrays) and
-- jsonb_set where they can, not jsonb_build_object: that one looks up the type of each of its
-- arguments, keys included, at every call, and was most of a callback's cost (a three-update
-- callback: about 11 µs an event with it, 9 without; three equivalent updates written by hand
-- with only the keys the store needs, about 6).

CREATE FUNCTION api.update(p_id text, p_path text[], p_operation text DEFAULT '_set', p_profile_type text DEFAULT '_d')
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT jsonb_set(jsonb_object('{_schema,_operation,_id,_profile_type}',
                                  ARRAY[NULL, coalesce(p_operation, '_set'), p_id, coalesce(p_profile_type, '_d')]),
                     '{_path}', coalesce(to_jsonb(p_path), 'null'));
$$;
COMMENT ON FUNCTION api.update(text, text[], text, text) IS
    'Granary''s Update(id, [path]) for SQL callbacks of belts: a new profile update message {"_schema": null, "_operation", "_id", "_path", "_profile_type"} without a value yet (add it with api.set_value). p_id: the profile''s correlation id; p_path: the grain path, one element per segment (''{a2,b1}''); p_operation (default _set; NULL counts as _set; Python''s Update(..., operation=...)), p_profile_type (default _d; NULL counts as _d). Checks nothing (the profile store validates the update when it is applied). Raises nothing.';

CREATE FUNCTION api.set_value(p_update jsonb, p_value jsonb, p_certainty double precision DEFAULT NULL,
                              p_in numeric DEFAULT NULL, p_ttl text DEFAULT NULL, p_origin text DEFAULT NULL,
                              p_reader text DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_update || jsonb_set('{"_value": null}', '{_value}', CASE
        WHEN p_certainty IS NULL AND p_in IS NULL AND p_ttl IS NULL AND p_origin IS NULL AND p_reader IS NULL
            THEN jsonb_build_object('_v', p_value)
        ELSE jsonb_build_object('_v', p_value) || jsonb_strip_nulls(jsonb_build_object(
            '_c', p_certainty,
            '_in', CASE WHEN abs(p_in) < 100000000000 THEN round(p_in * 1000) ELSE round(p_in) END,
            '_ttl', p_ttl,
            '_origin', p_origin,
            '_reader', p_reader)) END);
$$;
COMMENT ON FUNCTION api.set_value(jsonb, jsonb, double precision, numeric, text, text, text) IS
    'Granary''s Update.set_value(value, certainty, _in, ttl, origin, reader) for SQL callbacks of belts: update message p_update (from api.update) with its _value set to {"_v": p_value, "_c": p_certainty, "_in", "_ttl": p_ttl, "_origin": p_origin, "_reader": p_reader}, leaving out each one not given (NULL): the processing step and the profile store apply their defaults (_c 1, _in now, _ttl P100Y, _origin /belts/{belt id}, _reader _auth). p_value: the grain value as JSON: a string, or an array of strings for the array operations (an overload takes text, so set_value(u, ''x'') works; the store refuses a number for _set: give counters and numbers as text, ''0|1|1'' for _inc). p_in: the insertion time as epoch milliseconds, or as epoch seconds as Python''s time() and extract(epoch FROM ...) give them: a number whose absolute value is below 100,000,000,000 (in milliseconds a time in 1973, in seconds one in the year 5138) counts as seconds and is multiplied by 1000; the result is rounded to whole milliseconds. Replaces a _value set before. Checks nothing. Raises nothing.';

CREATE FUNCTION api.set_value(p_update jsonb, p_value text, p_certainty double precision DEFAULT NULL,
                              p_in numeric DEFAULT NULL, p_ttl text DEFAULT NULL, p_origin text DEFAULT NULL,
                              p_reader text DEFAULT NULL)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_update || jsonb_set('{"_value": null}', '{_value}', CASE
        WHEN p_certainty IS NULL AND p_in IS NULL AND p_ttl IS NULL AND p_origin IS NULL AND p_reader IS NULL
            THEN jsonb_object('{_v}', ARRAY[p_value])
        ELSE jsonb_object('{_v}', ARRAY[p_value]) || jsonb_strip_nulls(jsonb_build_object(
            '_c', p_certainty,
            '_in', CASE WHEN abs(p_in) < 100000000000 THEN round(p_in * 1000) ELSE round(p_in) END,
            '_ttl', p_ttl,
            '_origin', p_origin,
            '_reader', p_reader)) END);
$$;
COMMENT ON FUNCTION api.set_value(jsonb, text, double precision, numeric, text, text, text) IS
    'api.set_value with a text value (a JSON string; also what a quoted literal such as set_value(u, ''x'') resolves to). Arguments and defaults as api.set_value(jsonb, jsonb, ...). Raises nothing.';

CREATE FUNCTION api.set_type(p_update jsonb, p_profile_type text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_update || jsonb_build_object('_profile_type', p_profile_type);
$$;
COMMENT ON FUNCTION api.set_type(jsonb, text) IS
    'Granary''s Update.set_type(profile_type) for SQL callbacks of belts: update message p_update with _profile_type p_profile_type (api.update''s default is _d). Checks nothing. Raises nothing.';

CREATE FUNCTION api.set_operation(p_update jsonb, p_operation text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_update || jsonb_build_object('_operation', p_operation);
$$;
COMMENT ON FUNCTION api.set_operation(jsonb, text) IS
    'Granary''s Update.set_operation(operation) for SQL callbacks of belts: update message p_update with _operation p_operation, one of the profile store''s 21 operations (_set, _set_with_history, _inc, _array_append, _delete, _profile_link ...; api.update''s default is _set). Checks nothing (an unknown operation is dead-lettered by the store). Raises nothing.';

CREATE FUNCTION api.set_schema(p_update jsonb, p_schema text)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT p_update || jsonb_build_object('_schema', p_schema);
$$;
COMMENT ON FUNCTION api.set_schema(jsonb, text) IS
    'Granary''s Update.set_schema(schema) for SQL callbacks of belts: update message p_update with _schema p_schema (default null: the schema of the update message, informative only). Checks nothing. Raises nothing.';

CREATE FUNCTION api.belt_retry(p_message text DEFAULT 'retry requested')
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RAISE EXCEPTION '%', coalesce(p_message, 'retry requested') USING ERRCODE = 'SBRTY',
        HINT = 'Raised by a belt''s SQL callback to have the event retried with back-off (RETRY_* settings of the belt).';
END
$$;
COMMENT ON FUNCTION api.belt_retry(text) IS
    'The SQL form of Granary''s raise RetryException(message), for SQL callbacks of belts: raises SBRTY with message p_message (default and NULL: retry requested). The processing step then retries the event with exponential back-off, as the belt''s RETRY_BACK_OFF_* and RETRY_MAX_RETRIES settings say, and dead-letters it with SBRTX when the retries run out. Declared to return jsonb so that a callback can use it where it returns its updates (CASE WHEN ... THEN api.belt_retry(''not yet'') ELSE ... END); it never returns. Raises SBRTY.';
