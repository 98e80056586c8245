-- profile_private.pit: internal. The history point in time of a value inserted at p_ms (epoch ms):
-- _YYYYMMDDTHHMISS.mmmZ in UTC.
-- Raises: nothing.
CREATE FUNCTION profile_private.pit(p_ms bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '_' || to_char(timestamp '1970-01-01' + p_ms * interval '1 millisecond', 'YYYYMMDD"T"HH24MISS.MS"Z"');
$$;
COMMENT ON FUNCTION profile_private.pit(bigint) IS
    'Internal: the history point in time (_YYYYMMDDTHHMISS.mmmZ, UTC) of a value inserted at epoch milliseconds p_ms.';

-- profile_private.expiry: internal. inserted + duration, computed in UTC so the session time zone
-- does not matter; NULL for the default duration P100Y (never). p_duration must be a duration
-- accepted by profile_private.duration_error.
-- Raises: nothing.
CREATE FUNCTION profile_private.expiry(p_inserted bigint, p_duration text)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_duration = 'P100Y' THEN NULL::timestamptz
                ELSE ((timestamp '1970-01-01' + p_inserted * interval '1 millisecond') + p_duration::interval) AT TIME ZONE 'UTC'
           END;
$$;
COMMENT ON FUNCTION profile_private.expiry(bigint, text) IS
    'Internal: epoch milliseconds p_inserted plus the ISO 8601 duration p_duration as a timestamptz (computed in UTC); NULL when p_duration is P100Y, which means never.';

-- profile_private.duration_error: internal. Checks an ISO 8601 duration strictly (PnYnMnWnDTnHnMnS,
-- each part optional but at least one, decimals with a dot, no sign) and returns why it is not
-- acceptable, or NULL when it is. p_label names the field in the reason.
-- Raises: nothing.
CREATE FUNCTION profile_private.duration_error(p_value text, p_label text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_num constant text := '(\d+(?:\.\d+)?)';
    v_re  text;
    v_m   text[];
BEGIN
    IF p_value = 'P100Y' THEN
        RETURN NULL;
    END IF;
    IF length(p_value) > 64 THEN
        RETURN p_label || ' is out of range';
    END IF;
    v_re := '^P(?:' || v_num || 'Y)?(?:' || v_num || 'M)?(?:' || v_num || 'W)?(?:' || v_num || 'D)?'
         || '(?:T(?:' || v_num || 'H)?(?:' || v_num || 'M)?(?:' || v_num || 'S)?)?$';
    v_m := regexp_match(p_value, v_re);
    IF v_m IS NULL OR p_value ~ '^PT?$' OR p_value ~ 'T$' THEN
        IF p_value ~ '-' AND regexp_replace(p_value, '^-(?=P)|-(?=\d)', '', 'g') ~ v_re
           AND regexp_replace(p_value, '^-(?=P)|-(?=\d)', '', 'g') !~ '^PT?$|T$' THEN
            RETURN p_label || ' contains a negative number';
        END IF;
        RETURN p_label || ' must be an ISO 8601 duration like P3M, P1DT12H or PT30S';
    END IF;
    IF coalesce(v_m[1]::numeric, 0) * 31557600 + coalesce(v_m[2]::numeric, 0) * 2629800
       + coalesce(v_m[3]::numeric, 0) * 604800 + coalesce(v_m[4]::numeric, 0) * 86400
       + coalesce(v_m[5]::numeric, 0) * 3600 + coalesce(v_m[6]::numeric, 0) * 60
       + coalesce(v_m[7]::numeric, 0) > 1e12 THEN
        RETURN p_label || ' is out of range';
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION profile_private.duration_error(text, text) IS
    'Internal: NULL when p_value is a strict ISO 8601 duration Silo accepts (P3M, P1W, PT1.5S, P1Y2M3DT4H5M6S; at most about 31,000 years), else the reason, naming the field p_label.';

-- profile_private.in_parse: internal. An ISO 8601 date (YYYY-MM-DD, midnight UTC) or date-time
-- (YYYY-MM-DDTHH:MI[:SS[.fff]][Z|+HH[:MM]|-HH[:MM]], UTC when no offset is given) as epoch
-- milliseconds, fractions below the millisecond cut; NULL when p_text is not such a valid date.
-- The result may be negative (before 1970): the caller rejects that.
-- Raises: nothing.
CREATE FUNCTION profile_private.in_parse(p_text text)
RETURNS numeric
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_m    text[];
    v_y    integer;
    v_mo   integer;
    v_d    integer;
    v_h    integer;
    v_mi   integer;
    v_s    integer;
    v_dim   integer;
    v_off_h integer;
    v_off_m integer;
    v_off   integer := 0;
BEGIN
    v_m := regexp_match(p_text,
        '^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$');
    IF v_m IS NULL THEN
        RETURN NULL;
    END IF;
    v_y := v_m[1]::integer;
    v_mo := v_m[2]::integer;
    v_d := v_m[3]::integer;
    v_h := coalesce(v_m[4]::integer, 0);
    v_mi := coalesce(v_m[5]::integer, 0);
    v_s := coalesce(v_m[6]::integer, 0);
    IF v_y < 1 OR v_mo NOT BETWEEN 1 AND 12 OR v_h > 23 OR v_mi > 59 OR v_s > 59 THEN
        RETURN NULL;
    END IF;
    v_dim := CASE WHEN v_mo = 2 THEN CASE WHEN (v_y % 4 = 0 AND v_y % 100 <> 0) OR v_y % 400 = 0 THEN 29 ELSE 28 END
                  WHEN v_mo IN (4, 6, 9, 11) THEN 30
                  ELSE 31 END;
    IF v_d NOT BETWEEN 1 AND v_dim THEN
        RETURN NULL;
    END IF;
    IF v_m[8] IS NOT NULL AND v_m[8] <> 'Z' THEN
        v_off_h := substr(v_m[8], 2, 2)::integer;
        v_off_m := CASE WHEN length(replace(v_m[8], ':', '')) = 5 THEN right(v_m[8], 2)::integer ELSE 0 END;
        IF v_off_h > 23 OR v_off_m > 59 THEN
            RETURN NULL;
        END IF;
        v_off := (v_off_h * 60 + v_off_m) * CASE WHEN left(v_m[8], 1) = '-' THEN -1 ELSE 1 END;
    END IF;
    RETURN extract(epoch FROM make_timestamp(v_y, v_mo, v_d, v_h, v_mi, v_s)) * 1000
         + coalesce(floor(('0.' || v_m[7])::numeric * 1000), 0)
         - v_off * 60000;
END
$$;
COMMENT ON FUNCTION profile_private.in_parse(text) IS
    'Internal: an ISO 8601 date (midnight UTC) or date-time (UTC unless an offset is given) as epoch milliseconds; NULL when p_text is not a valid date.';

-- profile_private.value_beats: internal. Whether p_new wins against p_old for _set_max (p_max) or
-- _set_min: numerically when both look like JSON numbers (exponents of at most three digits),
-- else byte-wise (COLLATE "C"), which orders ISO 8601 dates. Equal values never win.
-- Raises: nothing.
CREATE FUNCTION profile_private.value_beats(p_new text, p_old text, p_max boolean)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE
        WHEN length(p_new) <= 1000 AND length(p_old) <= 1000
             AND p_new ~ '^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$'
             AND p_old ~ '^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?$'
        THEN CASE WHEN p_max THEN p_new::numeric > p_old::numeric ELSE p_new::numeric < p_old::numeric END
        ELSE CASE WHEN p_max THEN p_new COLLATE "C" > p_old COLLATE "C" ELSE p_new COLLATE "C" < p_old COLLATE "C" END
    END;
$$;
COMMENT ON FUNCTION profile_private.value_beats(text, text, boolean) IS
    'Internal: whether p_new is higher (p_max) or lower than p_old: numerically when both are JSON-number-shaped, else byte-wise; equal never wins.';

-- profile_private.certainty: internal. A valid certainty (_c, a number in [0, 1]) as stored: real, with
-- values too small for real stored as 0; NULL outside [0, 1].
-- Raises: nothing.
CREATE FUNCTION profile_private.certainty(p_c numeric)
RETURNS real
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_c >= 1e-37 AND p_c <= 1 THEN p_c::real
                WHEN p_c >= 0 AND p_c < 1e-37 THEN 0::real END;
$$;
COMMENT ON FUNCTION profile_private.certainty(numeric) IS
    'Internal: a certainty in [0, 1] as stored (real; below 1e-37 stored as 0); NULL outside [0, 1].';

-- profile_private.counter: internal. The counter of an _inc, initialvalue|stepsize|steps (three
-- decimal numbers, exponents of at most three digits), as {initial, step, steps}; NULL when p_v is
-- not one.
-- Raises: nothing.
CREATE FUNCTION profile_private.counter(p_v text)
RETURNS numeric[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN length(p_v) <= 400
                     -- Three whole numbers, the usual counter, are recognised without the regular
                     -- expression.
                     AND ((translate(p_v, '0123456789', '') = '||' AND p_v NOT LIKE '|%' AND p_v NOT LIKE '%|'
                           AND strpos(p_v, '||') = 0)
                          OR p_v ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?\|[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?\|[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$')
                THEN ARRAY[split_part(p_v, '|', 1)::numeric, split_part(p_v, '|', 2)::numeric,
                           split_part(p_v, '|', 3)::numeric] END;
$$;
COMMENT ON FUNCTION profile_private.counter(text) IS
    'Internal: an _inc counter initialvalue|stepsize|steps as {initial, step, steps}; NULL when the text is not one.';

-- profile_private.counter_json: internal. The value of a counter grain, {"_initial", "_step",
-- "_current"}: p_initial as it is (the JSON number of the counter's first _inc), p_step and
-- p_current without trailing zeros. Built as JSON text, which costs less than building the object
-- (text casts, not ||'s implicit ones, which are only stable: so the function is inlined).
-- Raises: nothing.
CREATE FUNCTION profile_private.counter_json(p_initial jsonb, p_step numeric, p_current numeric)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ('{"_initial": ' || p_initial::text || ', "_step": ' || trim_scale(p_step)::text
            || ', "_current": ' || trim_scale(p_current)::text || '}')::jsonb;
$$;
COMMENT ON FUNCTION profile_private.counter_json(jsonb, numeric, numeric) IS
    'Internal: a counter grain value {"_initial", "_step", "_current"} from its initial value (JSON), the step used and the current value.';

-- profile_private.certainty_value: internal. The number a _c stands for: 1 when it is absent (NULL) or
-- JSON null, a JSON number, or a string holding a decimal number (exponent of at most three
-- digits); NULL for anything else. Whether it is in [0, 1] is the caller's check.
-- Raises: nothing.
CREATE FUNCTION profile_private.certainty_value(p_c jsonb)
RETURNS numeric
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_c IS NULL THEN 1::numeric
                ELSE CASE jsonb_typeof(p_c)
                     WHEN 'number' THEN p_c::numeric
                     WHEN 'null' THEN 1::numeric
                     WHEN 'string' THEN
                         CASE WHEN length(p_c #>> '{}') <= 100
                                   AND (p_c #>> '{}') ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
                              THEN (p_c #>> '{}')::numeric END
                     END
           END;
$$;
COMMENT ON FUNCTION profile_private.certainty_value(jsonb) IS
    'Internal: the number a _c stands for (1 when absent or null; a JSON number or a numeric string); NULL when it is none.';

-- profile_private.path_is_plain: internal. Whether a _path, as its JSON text p_text and its segments
-- joined with "/" (p_join, from the text with the enclosing [" "] dropped and every ", " a "/"),
-- is plain: ["s1", "s2", ...] with no backslash (so no escaped character: every quote delimits a
-- string), no "/", no empty segment, and every quote inside part of a ", " between two strings.
-- A plain path is '/' || p_join; others go through profile_private.path_check.
-- Raises: nothing.
CREATE FUNCTION profile_private.path_is_plain(p_text text, p_join text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_text LIKE '["%"]'
           AND strpos(p_text, '\') = 0 AND strpos(p_text, '/') = 0
           AND strpos(p_text, '""') = 0 AND strpos(p_join, '"') = 0;
$$;
COMMENT ON FUNCTION profile_private.path_is_plain(text, text) IS
    'Internal: whether a _path (its JSON text and its segments joined with "/") is made of plain segments, checked without parsing it.';

-- profile_private.grain_hash: internal. A hash of a grain's key (correlation id written, profile type,
-- path), to find grains a batch writes more than once (equal hashes of distinct grains only cost
-- the work of splitting the batch into rounds).
-- Raises: nothing.
CREATE FUNCTION profile_private.grain_hash(p_target text, p_profile_type text, p_path text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT hashtextextended(p_path, hashtextextended(p_profile_type, hashtextextended(p_target, 0)));
$$;
COMMENT ON FUNCTION profile_private.grain_hash(text, text, text) IS
    'Internal: a hash of a grain key (correlation id, profile type, path), to find grains written twice in a batch.';

-- profile_private.path_check: internal. Validates a _path that is not in the plain form the batch
-- query checks inline: returns {path, NULL} for a valid path (segments joined with "/", a leading
-- "/"), else {NULL, reason}.
-- Raises: nothing.
CREATE FUNCTION profile_private.path_check(p_path jsonb)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_segs text[];
BEGIN
    IF p_path IS NULL OR p_path = 'null' THEN
        RETURN ARRAY[NULL, '_path can not be null'];
    END IF;
    IF jsonb_typeof(p_path) <> 'array' OR jsonb_array_length(p_path) = 0
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(p_path) AS x WHERE jsonb_typeof(x) <> 'string') THEN
        RETURN ARRAY[NULL, '_path must be an Array of at least one String'];
    END IF;
    v_segs := ARRAY(SELECT jsonb_array_elements_text(p_path));
    IF '' = ANY (v_segs) THEN
        RETURN ARRAY[NULL, '_path segments can not be empty'];
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(v_segs) AS s WHERE strpos(s, '/') > 0) THEN
        RETURN ARRAY[NULL, '_path segments can not contain "/"'];
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(v_segs) AS s WHERE s = '_latest' OR s ~ '^_[0-9]{8}T[0-9]{6}\.[0-9]{3}Z$') THEN
        RETURN ARRAY[NULL, '_path segments can not be _latest or a point in time like _20210706T155637.111Z'];
    END IF;
    IF v_segs[1] = '_id' THEN
        RETURN ARRAY[NULL, '_path can not start with _id, the profile''s own id'];
    END IF;
    RETURN ARRAY['/' || array_to_string(v_segs, '/'), NULL];
END
$$;
COMMENT ON FUNCTION profile_private.path_check(jsonb) IS
    'Internal: validates a _path (an array of at least one non-empty string without "/", no segment _latest or shaped like a pit, not starting with _id); returns {path, NULL} or {NULL, reason}.';
