-- Profile store, parsers: small pure functions that turn the fields of an update message into what
-- is stored (points in time, expiry times, certainties, counters, paths), and the checks that the
-- short and the full validation query share (sql/profile/04_validate.sql), so that both make the
-- same rows for the same update. Most are one-statement `language sql` functions, which the planner
-- inlines into the set-based statements that call them once per update; the three in PL/pgSQL
-- (profile_private.duration_error, profile_private.in_parse, profile_private.path_check) run only
-- for fields that the inline short tests of validation do not settle.

-- STABLE, not IMMUTABLE: to_char is only stable.
CREATE FUNCTION profile_private.pit(p_ms bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '_' || to_char(timestamp '1970-01-01' + p_ms * interval '1 millisecond', 'YYYYMMDD"T"HH24MISS.MS"Z"');
$$;
COMMENT ON FUNCTION profile_private.pit(bigint) IS
    'The history point in time of a value inserted at p_ms (epoch milliseconds): _YYYYMMDDTHHMISS.mmmZ in UTC, the pit a *_with_history operation archives the old _latest at. Raises nothing.';

-- The duration is added to a timestamp without time zone, read as UTC afterwards, so the session
-- time zone (its daylight saving changes) does not move the result. STABLE: the text-to-interval
-- cast is only stable.
CREATE FUNCTION profile_private.expiry(p_inserted bigint, p_duration text)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_duration = 'P100Y' THEN NULL::timestamptz
                ELSE ((timestamp '1970-01-01' + p_inserted * interval '1 millisecond') + p_duration::interval) AT TIME ZONE 'UTC'
           END;
$$;
COMMENT ON FUNCTION profile_private.expiry(bigint, text) IS
    'p_inserted (epoch milliseconds) plus p_duration (an ISO 8601 duration that profile_private.duration_error accepts) as a timestamptz, computed in UTC: the expires_at (for _ttl) or notify_at (for _ttn) of a pit. NULL when p_duration is P100Y, the default, which means never. Raises nothing for a duration validation accepted.';

-- Stricter than PostgreSQL's interval input, which also takes '1 day', signs and other shapes that
-- are not ISO 8601. The bound is checked on the parts (a year as 365.25 days, a month as 30.4375
-- days) before any cast, so an accepted duration never overflows an interval or a timestamp later.
-- A negative number is recognised only to give the better reason.
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
    'NULL when p_value is an ISO 8601 duration Silo accepts: PnYnMnWnDTnHnMnS, each part optional but at least one, decimals with a dot, no sign (P3M, P1W, PT1.5S, P1Y2M3DT4H5M6S), at most 64 characters and 10^12 seconds (about 31,000 years); else the reason, which starts with p_label, the field''s name: "is out of range", "contains a negative number" or "must be an ISO 8601 duration like P3M, P1DT12H or PT30S". Validation rejects with SPDUR (a negative _v of _set_ttl/_set_ttn too) or SPVAL (another invalid _v). Raises nothing.';

-- A regular expression and make_timestamp rather than a cast to timestamptz: the cast takes many
-- shapes that are not ISO 8601, reads a date-time without offset in the session time zone, and
-- raises on an invalid date where this returns NULL.
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
    'An ISO 8601 date YYYY-MM-DD (midnight UTC) or date-time YYYY-MM-DDTHH:MI[:SS[.f]] (up to nine digits of fraction, cut below the millisecond) with an optional offset Z, +HH, +HHMM or +HH:MM (or -; UTC when none is given), p_text, as epoch milliseconds; NULL when p_text is not such a valid date (year 0001 to 9999). The result may be negative (before 1970) or after 9999-12-31 (through an offset): validation rejects those (SPINS). Raises nothing.';

-- The numeric cast runs only on text shaped like a JSON number with a short exponent and at most
-- 1000 characters, so it cannot fail and its cost stays bounded. Byte-wise (COLLATE "C") for
-- the rest: it orders ISO 8601 dates and does not depend on the database's collation.
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
    'Whether value p_new beats the current value p_old: is higher for _set_max (p_max true), lower for _set_min (p_max false). Numerically when both look like JSON numbers (exponents of at most three digits, at most 1000 characters), else byte-wise; an equal value never beats. Raises nothing.';

-- Certainties below 1e-37 are stored as 0 rather than cast: the cast to real fails for values too
-- small for it (below about 1e-45), and a valid _c must not fail.
CREATE FUNCTION profile_private.certainty(p_c numeric)
RETURNS real
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_c >= 1e-37 AND p_c <= 1 THEN p_c::real
                WHEN p_c >= 0 AND p_c < 1e-37 THEN 0::real END;
$$;
COMMENT ON FUNCTION profile_private.certainty(numeric) IS
    'A certainty p_c (the number a _c stands for, profile_private.certainty_value) as stored: real, 0 below 1e-37; NULL outside [0, 1] or for NULL. Raises nothing.';

-- Bounded (400 characters, exponents of at most three digits) so the numeric casts stay small.
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
    'The counter of an _inc, p_v = initialvalue|stepsize|steps (three decimal numbers, each with an optional sign and an exponent of at most three digits; at most 400 characters), as {initial, step, steps}; NULL when p_v is not one, which validation rejects (SPVAL). Raises nothing.';

-- Built as JSON text, which costs less than building the object; with explicit text casts, not
-- ||'s implicit ones, which are only stable, so the function stays immutable and is inlined.
CREATE FUNCTION profile_private.counter_json(p_initial jsonb, p_step numeric, p_current numeric)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ('{"_initial": ' || p_initial::text || ', "_step": ' || trim_scale(p_step)::text
            || ', "_current": ' || trim_scale(p_current)::text || '}')::jsonb;
$$;
COMMENT ON FUNCTION profile_private.counter_json(jsonb, numeric, numeric) IS
    'The value of a counter grain, {"_initial", "_step", "_current"}: p_initial as it is (the JSON number of the counter''s first _inc), p_step (the step of the latest _inc) and p_current (the current value) without trailing zeros. Raises nothing.';

-- Parsing only: the range check is the caller's, so that a _c that is no number and one outside
-- [0, 1] are rejected by the same rule (SPCRT).
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
    'The number a _c stands for, p_c being its JSON value (NULL when absent): 1 when absent or JSON null; a JSON number as it is; a string holding a decimal number (optional sign, exponent of at most three digits, at most 100 characters) as that number; NULL for anything else. Whether it is in [0, 1] is the caller''s check. Raises nothing.';

-- Checked on the JSON text, without parsing the array: a few string searches per update. No
-- backslash means no escaped character, so every quote delimits a string; once every ", " between
-- two strings is a "/", no quote may be left in p_join. Paths that are not plain go through
-- profile_private.path_check.
CREATE FUNCTION profile_private.path_is_plain(p_text text, p_join text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_text LIKE '["%"]'
           AND strpos(p_text, '\') = 0 AND strpos(p_text, '/') = 0
           AND strpos(p_text, '""') = 0 AND strpos(p_join, '"') = 0;
$$;
COMMENT ON FUNCTION profile_private.path_is_plain(text, text) IS
    'Whether a _path is plain: ["s1", "s2", ...], strings only, with no escaped character, no "/" and no empty segment. p_text: the _path''s JSON text; p_join: that text with the enclosing [" and "] dropped and every ", " turned into "/". The stored path of a plain _path is ''/'' || p_join; segments _latest, pits and a first segment _id are the caller''s checks. Raises nothing.';

-- A hash rather than the key, so that count(DISTINCT ...) compares one bigint per update; equal
-- hashes of distinct grains only cost the work of splitting the batch into rounds.
CREATE FUNCTION profile_private.grain_hash(p_target text, p_profile_type text, p_path text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT hashtextextended(p_path, hashtextextended(p_profile_type, hashtextextended(p_target, 0)));
$$;
COMMENT ON FUNCTION profile_private.grain_hash(text, text, text) IS
    'A 64-bit hash of a grain key: p_target (the correlation id written, after profile links), p_profile_type and p_path; used to find grains a batch may write more than once. Raises nothing.';

-- One test after another, because the first rule broken gives the reason; it runs only for the
-- paths that profile_private.path_is_plain does not settle.
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
    'Validates _path p_path (its JSON value, NULL when absent) by every rule, in this order: not null; an array of at least one string; no empty segment; no "/" in a segment; no segment _latest or shaped like a point in time (_20210706T155637.111Z); not starting with _id. Returns {path, NULL} for a valid path (a leading "/", segments joined with "/"), else {NULL, reason}; validation rejects with SPPTH and that reason. Raises nothing.';
