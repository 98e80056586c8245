-- Profile store, write path: profile update messages applied to profile.profilestore, rejected
-- messages kept in profile.dead_letters, and profile links.
--
-- An update message (one JSON object):
--   {"_operation": "_set", "_id": "007", "_profile_type": "_d", "_path": ["a2", "b1"],
--    "_value": {"_v": "22", "_c": 0.4, "_in": "2018-09-24", "_ttl": "P3M", "_ttn": "P100Y",
--               "_origin": "/belts/123", "_reader": "_auth"}, "_schema": null}
--
-- Public functions: api.profile_apply, api.profile_apply_batch, api.profile_dead_letter_list,
-- api.profile_dead_letter_replay, api.profile_link_resolve. Everything else here is internal.
--
-- Rules where the specification leaves room (see also each function's comment):
-- * Validation, in this order, the first failure wins: the message is an object; _operation (a
--   string, default _set, one of the 21 operations); _id (a non-empty string); _profile_type (a
--   non-empty string, default _d; profile_link is reserved for profile links: only _profile_link,
--   _delete, _delete_with_history, _set_ttl and _set_ttn may address it); _path (an array of at
--   least one non-empty string without "/", no segment _latest or shaped like a point in time, the
--   first segment not _id; ignored by _profile_link); the key (_id, _profile_type, path) at most
--   2000 bytes; _value (an object); _v (not null, the shape its operation needs); _c (a number or
--   numeric string in [0, 1], default 1); _in (epoch milliseconds as a number or numeric string, a
--   whole number, or an ISO 8601 date or date-time: a date alone is midnight UTC, a date-time
--   without offset is UTC, fractions below the millisecond are cut; at most 9999-12-31; default
--   now()); _ttl and _ttn (strict ISO 8601 durations such as P3M, P1W, PT1.5S or P1Y2M3DT4H5M6S, at
--   most about 31,000 years, default P100Y); _origin (a string or null); _reader (a non-empty
--   string, default _auth). Unknown keys, and _schema, are ignored.
-- * Every write keeps expires_at = inserted + ttl and notify_at = inserted + ttn (computed in UTC),
--   NULL when the duration is the default P100Y.
-- * Profile links: a _profile_link that would create a cycle (a self link too) is rejected. Every
--   other update for a linked _id is applied to the final target of its links, except _delete,
--   _delete_with_history, _profile_link and updates addressing profile type profile_link.
-- * The grain type is fixed when a grain is created (_inc: c; array operations: a; _set*: a for an
--   array, else t; _set_max/_set_min: t); the existing type is that of any of the grain's pits, so
--   a grain whose _latest was deleted keeps the type of its history. A write of another type is
--   rejected (SPTYP). _set_if_not_exist on an existing _latest and _array_remove on a missing one
--   do nothing, without a type check.
-- * _delete: "", [""] or [] delete _latest; an array of pits deletes those ("" means _latest).
--   _delete_with_history ("" only) deletes every pit. _set_ttl/_set_ttn: "" sets every pit, an
--   array the pits listed ("" means _latest, [] none), to the update's _ttl/_ttn (default P100Y);
--   a duration as _v sets every pit to that duration. Value and other metadata stay.
-- * _set_max/_set_min compare numerically when both values look like JSON numbers, else
--   byte-wise; an equal value does not overwrite.
-- * History: a *_with_history operation archives the old _latest, whenever there is one, at
--   _ + its inserted time (UTC, YYYYMMDDTHHMISS.mmmZ), 1 ms later while that pit is taken.
-- * Status of an applied update: ok when it wrote something, noop when it changed nothing
--   (_set_if_not_exist on an existing value, a *_distinct or _set_max/_set_min that does not
--   overwrite, _array_remove on a missing grain, _delete/_set_ttl/_set_ttn that matched no pit).
-- * Concurrency: values that are read and rewritten are locked (FOR UPDATE) first, except
--   counters (_inc) and arrays (_array_append, _array_put), which are read and rewritten by the
--   UPDATE that locks them and works on their newest version. So concurrent writers of an
--   existing grain do not lose updates. Two transactions
--   that create the same grain at the same moment do not wait for each other (there is no row to
--   lock yet): the later one overwrites the new _latest as if it had been first (a counter adds
--   up even then). The asynchronous updater (api.profile_enqueue) applies the updates of one
--   correlation id one after another, in order.

-- One validated update message, as the batch carries it from validation to application.
CREATE TYPE api.profile_update AS (
    ord             integer,     -- position in the batch, from 1
    operation       text,        -- _operation (default _set); NULL when not a string
    correlation_id  text,        -- _id
    profile_type    text,        -- _profile_type (default _d); profile_link for _profile_link
    path            text,        -- /a/b; /new for _profile_link
    v               jsonb,       -- _value._v
    certainty       real,
    inserted        bigint,      -- epoch ms
    ttl             text,
    ttn             text,
    origin          text,
    reader          text,
    grain_type      text,        -- the grain type this update writes (t, a, c)
    inc             numeric[],   -- _inc: initial, step, steps
    seg             integer,     -- segment: the updates between two updates that change profile
                                 -- links; such an update is a segment of its own (odd numbers).
                                 -- Right after validation: 1 when the update changes links, else 0
    target          text,        -- the correlation id written (after profile links)
    round           integer,     -- the n-th update of its grain within its segment
    sqlstate        text,        -- validation failure, NULL when valid
    reason          text,
    context         text
);
COMMENT ON TYPE api.profile_update IS 'Internal: one profile update message after validation, as api.profile_apply_core passes it to api.profile_apply_round.';

-- One result row of a batch.
CREATE TYPE api.profile_apply_result AS (
    ord             integer,
    status          text,
    operation       text,
    correlation_id  text,
    sqlstate        text,
    reason          text,
    context         text,
    dead_letter_id  bigint
);
COMMENT ON TYPE api.profile_apply_result IS 'Internal: the result of one update of a batch, before api.profile_apply_batch returns it.';

-- api.profile_pit: internal. The history point in time of a value inserted at p_ms (epoch ms):
-- _YYYYMMDDTHHMISS.mmmZ in UTC.
-- Raises: nothing.
CREATE FUNCTION api.profile_pit(p_ms bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT '_' || to_char(timestamp '1970-01-01' + p_ms * interval '1 millisecond', 'YYYYMMDD"T"HH24MISS.MS"Z"');
$$;
COMMENT ON FUNCTION api.profile_pit(bigint) IS
    'Internal: the history point in time (_YYYYMMDDTHHMISS.mmmZ, UTC) of a value inserted at epoch milliseconds p_ms.';

-- api.profile_expiry: internal. inserted + duration, computed in UTC so the session time zone
-- does not matter; NULL for the default duration P100Y (never). p_duration must be a duration
-- accepted by api.profile_duration_error.
-- Raises: nothing.
CREATE FUNCTION api.profile_expiry(p_inserted bigint, p_duration text)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_duration = 'P100Y' THEN NULL::timestamptz
                ELSE ((timestamp '1970-01-01' + p_inserted * interval '1 millisecond') + p_duration::interval) AT TIME ZONE 'UTC'
           END;
$$;
COMMENT ON FUNCTION api.profile_expiry(bigint, text) IS
    'Internal: epoch milliseconds p_inserted plus the ISO 8601 duration p_duration as a timestamptz (computed in UTC); NULL when p_duration is P100Y, which means never.';

-- api.profile_duration_error: internal. Checks an ISO 8601 duration strictly (PnYnMnWnDTnHnMnS,
-- each part optional but at least one, decimals with a dot, no sign) and returns why it is not
-- acceptable, or NULL when it is. p_label names the field in the reason.
-- Raises: nothing.
CREATE FUNCTION api.profile_duration_error(p_value text, p_label text)
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
COMMENT ON FUNCTION api.profile_duration_error(text, text) IS
    'Internal: NULL when p_value is a strict ISO 8601 duration Silo accepts (P3M, P1W, PT1.5S, P1Y2M3DT4H5M6S; at most about 31,000 years), else the reason, naming the field p_label.';

-- api.profile_in_parse: internal. An ISO 8601 date (YYYY-MM-DD, midnight UTC) or date-time
-- (YYYY-MM-DDTHH:MI[:SS[.fff]][Z|+HH[:MM]|-HH[:MM]], UTC when no offset is given) as epoch
-- milliseconds, fractions below the millisecond cut; NULL when p_text is not such a valid date.
-- The result may be negative (before 1970): the caller rejects that.
-- Raises: nothing.
CREATE FUNCTION api.profile_in_parse(p_text text)
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
COMMENT ON FUNCTION api.profile_in_parse(text) IS
    'Internal: an ISO 8601 date (midnight UTC) or date-time (UTC unless an offset is given) as epoch milliseconds; NULL when p_text is not a valid date.';

-- api.profile_value_beats: internal. Whether p_new wins against p_old for _set_max (p_max) or
-- _set_min: numerically when both look like JSON numbers (exponents of at most three digits),
-- else byte-wise (COLLATE "C"), which orders ISO 8601 dates. Equal values never win.
-- Raises: nothing.
CREATE FUNCTION api.profile_value_beats(p_new text, p_old text, p_max boolean)
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
COMMENT ON FUNCTION api.profile_value_beats(text, text, boolean) IS
    'Internal: whether p_new is higher (p_max) or lower than p_old: numerically when both are JSON-number-shaped, else byte-wise; equal never wins.';

-- api.profile_op_class: internal. The class of an operation, which decides how its _v is checked
-- and what it writes: set (_set, _set_if_not_exist, _set_with_history, _set_with_history_distinct),
-- max (_set_max, _set_min and their history forms), del (_delete), delh (_delete_with_history),
-- inc, arr (_array_append, _array_put and their history forms), rem (_array_remove and its history
-- form), ttl (_set_ttl, _set_ttn), link (_profile_link); NULL for anything else.
-- Raises: nothing.
CREATE FUNCTION api.profile_op_class(p_operation text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_operation
        WHEN '_set' THEN 'set' WHEN '_set_if_not_exist' THEN 'set'
        WHEN '_set_with_history' THEN 'set' WHEN '_set_with_history_distinct' THEN 'set'
        WHEN '_set_max' THEN 'max' WHEN '_set_min' THEN 'max'
        WHEN '_set_max_with_history' THEN 'max' WHEN '_set_min_with_history' THEN 'max'
        WHEN '_delete' THEN 'del' WHEN '_delete_with_history' THEN 'delh'
        WHEN '_inc' THEN 'inc'
        WHEN '_array_append' THEN 'arr' WHEN '_array_append_with_history' THEN 'arr'
        WHEN '_array_put' THEN 'arr' WHEN '_array_put_with_history' THEN 'arr'
        WHEN '_array_put_with_history_distinct' THEN 'arr'
        WHEN '_array_remove' THEN 'rem' WHEN '_array_remove_with_history' THEN 'rem'
        WHEN '_set_ttl' THEN 'ttl' WHEN '_set_ttn' THEN 'ttl'
        WHEN '_profile_link' THEN 'link'
    END;
$$;
COMMENT ON FUNCTION api.profile_op_class(text) IS
    'Internal: the class of a profile update operation (set, max, del, delh, inc, arr, rem, ttl, link), NULL for an unknown one.';

-- api.profile_op_direct: internal. Whether an operation's new _latest value follows from the update
-- and the current _latest alone, so that api.profile_apply_round writes it with one UPDATE (or
-- upsert): _set, _inc, _array_append, _array_put, and _set_with_history,
-- _array_append_with_history and _array_put_with_history, whose old value is archived first.
-- Raises: nothing.
CREATE FUNCTION api.profile_op_direct(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set', '_inc', '_array_append', '_array_put', '_set_with_history',
                           '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION api.profile_op_direct(text) IS
    'Internal: whether a profile update operation is written by api.profile_apply_round''s single UPDATE (or upsert): _set, _inc, _array_append, _array_put and _set_with_history, _array_append_with_history, _array_put_with_history.';

-- api.profile_op_archives: internal. Whether a direct operation (api.profile_op_direct) archives
-- the old _latest value to history: _set_with_history, _array_append_with_history and
-- _array_put_with_history.
-- Raises: nothing.
CREATE FUNCTION api.profile_op_archives(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set_with_history', '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION api.profile_op_archives(text) IS
    'Internal: whether a direct profile update operation archives the old _latest value (_set_with_history, _array_append_with_history, _array_put_with_history).';

-- api.profile_type_clash: internal. Why an update of operation p_operation, which writes grain type
-- p_grain_type at p_path, is rejected when the grain already has type p_existing: {sqlstate,
-- reason, context}, as a dead letter records them.
-- Raises: nothing.
CREATE FUNCTION api.profile_type_clash(p_operation text, p_grain_type text, p_path text, p_existing text)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY['SPTYP',
                 format('Grain type differs from the existing grain: %s writes grain type %s, the grain at %s has grain type %s',
                        p_operation, p_grain_type, p_path, p_existing),
                 'applying ' || p_operation || ': grain type check'];
$$;
COMMENT ON FUNCTION api.profile_type_clash(text, text, text, text) IS
    'Internal: {sqlstate SPTYP, reason, context} of an update rejected because the grain has another grain type.';

-- api.profile_history_retry: internal. Archives old _latest values whose history pit (_ + their
-- inserted time) was already taken: each moves forward by 1 ms until its pit is free, and the
-- grains written are recorded for change notifications.
-- Raises: nothing of its own.
CREATE FUNCTION api.profile_history_retry(p_pending profile.profilestore[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_pending profile.profilestore[] := p_pending;
    v_offset  bigint := 1;
BEGIN
    WHILE v_pending IS NOT NULL LOOP
        WITH arch AS (
            INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                              inserted, ttl, reader, origin, ttn, expires_at, notify_at)
            SELECT o.correlation_id, o.profile_type, o.path, api.profile_pit(o.inserted + v_offset), o.value,
                   o.certainty, o.grain_type, o.inserted, o.ttl, o.reader, o.origin, o.ttn, o.expires_at, o.notify_at
            FROM unnest(v_pending) AS o
            ON CONFLICT DO NOTHING
            RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
        ), pend AS (
            INSERT INTO silo.change_pending (channel, kind, grains)
            SELECT 'profile:*', 'changed',
                   api.change_grains(array_agg(a.correlation_id), array_agg(a.profile_type), array_agg(a.reader), array_agg(a.path))
            FROM arch AS a
            HAVING count(*) > 0 AND api.change_capture_on()
        )
        SELECT array_agg(o) INTO v_pending
        FROM unnest(v_pending) AS o
        WHERE NOT EXISTS (SELECT 1 FROM arch
                          WHERE arch.correlation_id = o.correlation_id AND arch.profile_type = o.profile_type
                            AND arch.path = o.path);
        v_offset := v_offset + 1;
    END LOOP;
END
$$;
COMMENT ON FUNCTION api.profile_history_retry(profile.profilestore[]) IS
    'Internal: archives old _latest values whose history pit was taken, 1 ms later each time until the pit is free.';

-- api.profile_grain_type: internal. The grain type an update of operation class p_class writes
-- with a _v of JSON type p_v_type: c for _inc, a for array operations and for a _set* of an array,
-- t otherwise.
-- Raises: nothing.
CREATE FUNCTION api.profile_grain_type(p_class text, p_v_type text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_class WHEN 'set' THEN CASE WHEN p_v_type = 'array' THEN 'a' ELSE 't' END
                        WHEN 'arr' THEN 'a' WHEN 'rem' THEN 'a' WHEN 'inc' THEN 'c'
                        ELSE 't' END;
$$;
COMMENT ON FUNCTION api.profile_grain_type(text, text) IS
    'Internal: the grain type (t, a, c) an update of operation class p_class writes with a _v of JSON type p_v_type.';

-- api.profile_certainty: internal. A valid certainty (_c, a number in [0, 1]) as stored: real, with
-- values too small for real stored as 0; NULL outside [0, 1].
-- Raises: nothing.
CREATE FUNCTION api.profile_certainty(p_c numeric)
RETURNS real
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_c >= 1e-37 AND p_c <= 1 THEN p_c::real
                WHEN p_c >= 0 AND p_c < 1e-37 THEN 0::real END;
$$;
COMMENT ON FUNCTION api.profile_certainty(numeric) IS
    'Internal: a certainty in [0, 1] as stored (real; below 1e-37 stored as 0); NULL outside [0, 1].';

-- api.profile_counter: internal. The counter of an _inc, initialvalue|stepsize|steps (three
-- decimal numbers, exponents of at most three digits), as {initial, step, steps}; NULL when p_v is
-- not one.
-- Raises: nothing.
CREATE FUNCTION api.profile_counter(p_v text)
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
COMMENT ON FUNCTION api.profile_counter(text) IS
    'Internal: an _inc counter initialvalue|stepsize|steps as {initial, step, steps}; NULL when the text is not one.';

-- api.profile_counter_json: internal. The value of a counter grain, {"_initial", "_step",
-- "_current"}: p_initial as it is (the JSON number of the counter's first _inc), p_step and
-- p_current without trailing zeros. Built as JSON text, which costs less than building the object
-- (text casts, not ||'s implicit ones, which are only stable: so the function is inlined).
-- Raises: nothing.
CREATE FUNCTION api.profile_counter_json(p_initial jsonb, p_step numeric, p_current numeric)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ('{"_initial": ' || p_initial::text || ', "_step": ' || trim_scale(p_step)::text
            || ', "_current": ' || trim_scale(p_current)::text || '}')::jsonb;
$$;
COMMENT ON FUNCTION api.profile_counter_json(jsonb, numeric, numeric) IS
    'Internal: a counter grain value {"_initial", "_step", "_current"} from its initial value (JSON), the step used and the current value.';

-- api.profile_certainty_value: internal. The number a _c stands for: 1 when it is absent (NULL) or
-- JSON null, a JSON number, or a string holding a decimal number (exponent of at most three
-- digits); NULL for anything else. Whether it is in [0, 1] is the caller's check.
-- Raises: nothing.
CREATE FUNCTION api.profile_certainty_value(p_c jsonb)
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
COMMENT ON FUNCTION api.profile_certainty_value(jsonb) IS
    'Internal: the number a _c stands for (1 when absent or null; a JSON number or a numeric string); NULL when it is none.';

-- api.profile_path_is_plain: internal. Whether a _path, as its JSON text p_text and its segments
-- joined with "/" (p_join, from the text with the enclosing [" "] dropped and every ", " a "/"),
-- is plain: ["s1", "s2", ...] with no backslash (so no escaped character: every quote delimits a
-- string), no "/", no empty segment, and every quote inside part of a ", " between two strings.
-- A plain path is '/' || p_join; others go through api.profile_path_check.
-- Raises: nothing.
CREATE FUNCTION api.profile_path_is_plain(p_text text, p_join text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_text LIKE '["%"]'
           AND strpos(p_text, '\') = 0 AND strpos(p_text, '/') = 0
           AND strpos(p_text, '""') = 0 AND strpos(p_join, '"') = 0;
$$;
COMMENT ON FUNCTION api.profile_path_is_plain(text, text) IS
    'Internal: whether a _path (its JSON text and its segments joined with "/") is made of plain segments, checked without parsing it.';

-- api.profile_grain_hash: internal. A hash of a grain's key (correlation id written, profile type,
-- path), to find grains a batch writes more than once (equal hashes of distinct grains only cost
-- the work of splitting the batch into rounds).
-- Raises: nothing.
CREATE FUNCTION api.profile_grain_hash(p_target text, p_profile_type text, p_path text)
RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $$
    SELECT hashtextextended(p_path, hashtextextended(p_profile_type, hashtextextended(p_target, 0)));
$$;
COMMENT ON FUNCTION api.profile_grain_hash(text, text, text) IS
    'Internal: a hash of a grain key (correlation id, profile type, path), to find grains written twice in a batch.';

-- api.profile_path_check: internal. Validates a _path that is not in the plain form the batch
-- query checks inline: returns {path, NULL} for a valid path (segments joined with "/", a leading
-- "/"), else {NULL, reason}.
-- Raises: nothing.
CREATE FUNCTION api.profile_path_check(p_path jsonb)
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
COMMENT ON FUNCTION api.profile_path_check(jsonb) IS
    'Internal: validates a _path (an array of at least one non-empty string without "/", no segment _latest or shaped like a pit, not starting with _id); returns {path, NULL} or {NULL, reason}.';

-- api.profile_link_chain: internal. The correlation ids reached from p_id by following profile
-- links (rows profile_link, /new, _latest), p_id first; stops before an id already in the chain.
-- PL/pgSQL rather than a recursive query: it runs once per update and keeps its plan cached.
-- Raises: nothing.
CREATE FUNCTION api.profile_link_chain(p_id text)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[] := ARRAY[p_id];
    v_next  text;
BEGIN
    LOOP
        SELECT p.value #>> '{}' INTO v_next
        FROM profile.profilestore p
        WHERE p.correlation_id = v_chain[cardinality(v_chain)] AND p.profile_type = 'profile_link'
          AND p.path = '/new' AND p.pit = '_latest';
        EXIT WHEN NOT FOUND OR v_next IS NULL OR v_next = ANY (v_chain);
        v_chain := v_chain || v_next;
    END LOOP;
    RETURN v_chain;
END
$$;
COMMENT ON FUNCTION api.profile_link_chain(text) IS
    'Internal: the chain of correlation ids reached from p_id through profile links, p_id first, stopping before any id already in the chain (cycle protection).';

-- api.profile_link_resolve: the correlation id that updates for p_correlation_id are applied to:
-- the final target of its profile links, followed transitively with cycle protection; the id
-- itself when it is not linked (NULL for NULL).
-- Raises: nothing.
CREATE FUNCTION api.profile_link_resolve(p_correlation_id text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[];
BEGIN
    IF p_correlation_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_chain := api.profile_link_chain(p_correlation_id);
    RETURN v_chain[cardinality(v_chain)];
END
$$;
COMMENT ON FUNCTION api.profile_link_resolve(text) IS
    'The final target of the profile links of p_correlation_id (followed transitively, with cycle protection); the id itself when it is not linked.';

-- api.profile_dead_letter_add: internal. Records a rejected message and returns its id. The
-- filter columns take the message's _id, _profile_type (default _d) and _operation (default _set)
-- when they are strings, cut to 256 characters; the message is kept whole.
-- Raises: nothing.
CREATE FUNCTION api.profile_dead_letter_add(p_message jsonb, p_sqlstate text, p_reason text, p_context text)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO profile.dead_letters (message, reason, sqlstate, context, correlation_id, profile_type, operation)
    VALUES (
        p_message, p_reason, p_sqlstate, p_context,
        CASE WHEN jsonb_typeof(p_message -> '_id') = 'string' THEN left(p_message ->> '_id', 256) END,
        CASE WHEN jsonb_typeof(p_message) <> 'object' THEN NULL
             WHEN coalesce(p_message -> '_profile_type', 'null') = 'null' THEN '_d'
             WHEN jsonb_typeof(p_message -> '_profile_type') = 'string' THEN left(p_message ->> '_profile_type', 256) END,
        CASE WHEN jsonb_typeof(p_message) <> 'object' THEN NULL
             WHEN coalesce(p_message -> '_operation', 'null') = 'null' THEN '_set'
             WHEN jsonb_typeof(p_message -> '_operation') = 'string' THEN left(p_message ->> '_operation', 256) END)
    RETURNING id;
$$;
COMMENT ON FUNCTION api.profile_dead_letter_add(jsonb, text, text, text) IS
    'Internal: records a rejected profile update message in profile.dead_letters and returns its id.';

-- api.profile_apply_round: internal. Applies valid updates of distinct grains whose targets are
-- resolved (one round of a segment) set-based. The direct operations (api.profile_op_direct:
-- _set, _inc, _array_append, _array_put and the history forms of _set and the two array
-- operations) are written by one statement: the old values that go to history are locked and
-- archived, then an UPDATE rewrites the existing _latest values of their grain type (_inc adds to
-- the counter, the array operations build on the array, both keeping the metadata, all on the
-- row's newest version, which the UPDATE locks), then an upsert writes the rest (new grains; an
-- UPDATE is cheaper than an upsert's conflict check for the usual existing grain). An existing
-- _latest of another grain type is left alone, a new _latest whose grain's history has another
-- type is removed again, and both updates are rejected (SPTYP). Parts with nothing to do are
-- skipped: the history lock when no update archives, the upsert when the UPDATE wrote every row,
-- the statement when no update is direct. p_direct and p_history, when the caller gives both, are
-- the number of direct updates and whether one archives (else the round counts them). Every other
-- update goes through one more statement: read and lock the current _latest values, decide every
-- update, archive old values to their history pits, write the new _latest values, delete pits,
-- set durations. A history pit that is taken moves forward by 1 ms until it is free
-- (api.profile_history_retry, only when that happens). Updates of distinct grains do not affect
-- each other, so this gives what applying them one by one gives. Returns one result per update,
-- or with p_ok false only those that are not ok (an update without a result is ok and wrote its
-- target); expected rejections (grain type differs from the existing grain's: SPTYP; profile link cycle:
-- SPLNK) come back as dead_letter results without a dead letter id: the caller records them.
-- Change notifications: each statement records the grains it wrote or deleted (from its RETURNING
-- rows) in silo.change_pending itself, as compact rows (sql/030_changes.sql), unless
-- silo.change_capture is off; the function runs with silo.change_triggers off, so the statement
-- triggers of profile.profilestore stay idle. It also runs with generic plans: its statements are
-- large, and planning them anew for every small batch cost more than applying it.
-- Raises: nothing of its own; an unexpected error propagates (api.profile_apply_batch handles it).
CREATE FUNCTION api.profile_apply_round(p_round api.profile_update[], p_ok boolean,
                                        p_direct integer DEFAULT NULL, p_history boolean DEFAULT NULL)
RETURNS api.profile_apply_result[]
LANGUAGE plpgsql VOLATILE
SET silo.change_triggers = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_res     api.profile_apply_result[];
    v_part    api.profile_apply_result[];
    v_sent    bigint;
    v_written bigint;
    v_clashes jsonb;
    v_clash   integer[];
    v_pending profile.profilestore[];
    v_history boolean;
BEGIN
    -- How many direct updates there are, and whether some archive an old value: what the statement
    -- below needs to do (the caller may know already).
    IF p_direct IS NOT NULL AND p_history IS NOT NULL THEN
        v_sent := p_direct;
        v_history := p_history;
    ELSE
        SELECT count(*) FILTER (WHERE api.profile_op_direct(u.operation)),
               coalesce(bool_or(api.profile_op_archives(u.operation)), false)
        INTO v_sent, v_history
        FROM unnest(p_round) AS u;
    END IF;

    IF v_sent > 0 THEN
        -- The direct operations (api.profile_op_direct) in one statement. Old values that go to
        -- history are read and locked first (l) and archived (arch); the UPDATE waits for that (its
        -- one-time filter counts arch), then rewrites the existing _latest values of the same grain
        -- type: it locks each row and builds counters and arrays on the row's newest version. The
        -- upsert takes the others: new grains, grains of another type (left alone by its WHERE:
        -- dead-lettered below) and grains created meanwhile by a concurrent writer (overwritten as if
        -- this had come first; a counter adds up). Results are ok unless fewer rows were written than
        -- sent or a new _latest clashes with the grain's history: then the exceptions are worked out
        -- below.
        WITH l AS (
            SELECT p.correlation_id, p.profile_type, p.path, p.pit, p.value, p.certainty, p.grain_type, p.inserted,
                   p.ttl, p.reader, p.origin, p.ttn, p.expires_at, p.notify_at
            FROM unnest(p_round) AS u
            JOIN profile.profilestore p
              ON p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
             AND p.pit = '_latest' AND p.grain_type = u.grain_type
            WHERE v_history AND api.profile_op_archives(u.operation)
            FOR UPDATE OF p
        ), arch AS (
            -- Old values to history, at _ + their inserted time (a pit that is taken: see below).
            INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                              inserted, ttl, reader, origin, ttn, expires_at, notify_at)
            SELECT l.correlation_id, l.profile_type, l.path, api.profile_pit(l.inserted), l.value, l.certainty,
                   l.grain_type, l.inserted, l.ttl, l.reader, l.origin, l.ttn, l.expires_at, l.notify_at
            FROM l
            ON CONFLICT DO NOTHING
            RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
        ), upd AS (
            UPDATE profile.profilestore p
            SET value = CASE WHEN u.repl THEN u.v
                             WHEN u.operation = '_inc' THEN api.profile_counter_json(
                                 p.value -> '_initial', u.inc[2], (p.value ->> '_current')::numeric + u.inc[2] * u.inc[3])
                             WHEN u.operation IN ('_array_append', '_array_append_with_history') THEN p.value || u.v
                             ELSE p.value || coalesce((
                                 SELECT jsonb_agg(e.x ORDER BY e.o)
                                 FROM (SELECT DISTINCT ON (t.x) t.x, t.o
                                       FROM jsonb_array_elements(u.v) WITH ORDINALITY AS t(x, o)
                                       ORDER BY t.x, t.o) e
                                 WHERE NOT p.value @> jsonb_build_array(e.x)), '[]')
                        END,
                -- _set and _set_with_history replace the metadata; counters and arrays keep theirs.
                certainty = CASE WHEN u.repl THEN u.certainty ELSE p.certainty END,
                inserted = u.inserted,
                ttl = CASE WHEN u.repl THEN u.ttl ELSE p.ttl END,
                reader = CASE WHEN u.repl THEN u.reader ELSE p.reader END,
                origin = CASE WHEN u.repl THEN u.origin ELSE p.origin END,
                ttn = CASE WHEN u.repl THEN u.ttn ELSE p.ttn END,
                expires_at = api.profile_expiry(u.inserted, CASE WHEN u.repl THEN u.ttl ELSE p.ttl END),
                notify_at = api.profile_expiry(u.inserted, CASE WHEN u.repl THEN u.ttn ELSE p.ttn END)
            FROM (
                -- repl: the update replaces the metadata (_set, _set_with_history); counters and arrays
                -- keep theirs.
                SELECT r.ord, r.operation, r.target, r.profile_type, r.path, r.v, r.certainty, r.inserted, r.ttl,
                       r.ttn, r.origin, r.reader, r.grain_type, r.inc,
                       r.operation IN ('_set', '_set_with_history') AS repl
                FROM unnest(p_round) AS r
                WHERE api.profile_op_direct(r.operation)
                OFFSET 0
            ) AS u
            WHERE (SELECT count(*) FROM arch) >= 0
              AND p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
              AND p.pit = '_latest' AND p.grain_type = u.grain_type
            RETURNING u.ord, p.correlation_id, p.profile_type, p.path, p.reader
        ), ins AS (
            -- Only _inc writes grain type c, so on a conflict EXCLUDED.grain_type tells a counter, whose
            -- steps (the new counter's _current - _initial) add to the current one and whose metadata
            -- stays, from a value that replaces the current one.
            INSERT INTO profile.profilestore AS p (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                                   inserted, ttl, reader, origin, ttn, expires_at, notify_at)
            SELECT u.target, u.profile_type, u.path, '_latest',
                   CASE WHEN u.operation = '_inc'
                        THEN api.profile_counter_json(to_jsonb(trim_scale(u.inc[1])), u.inc[2], u.inc[1] + u.inc[2] * u.inc[3])
                        ELSE u.v END,
                   u.certainty, u.grain_type, u.inserted, u.ttl, u.reader, u.origin, u.ttn,
                   api.profile_expiry(u.inserted, u.ttl), api.profile_expiry(u.inserted, u.ttn)
            FROM unnest(p_round) AS u
            WHERE (SELECT count(*) FROM upd) < v_sent AND api.profile_op_direct(u.operation)
              AND u.ord NOT IN (SELECT upd.ord FROM upd)
            ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
            SET value = CASE WHEN EXCLUDED.grain_type = 'c' THEN api.profile_counter_json(
                                p.value -> '_initial', (EXCLUDED.value ->> '_step')::numeric,
                                (p.value ->> '_current')::numeric
                                + (EXCLUDED.value ->> '_current')::numeric - (EXCLUDED.value ->> '_initial')::numeric)
                             ELSE EXCLUDED.value END,
                certainty = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.certainty ELSE EXCLUDED.certainty END,
                grain_type = EXCLUDED.grain_type,
                inserted = EXCLUDED.inserted,
                ttl = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttl ELSE EXCLUDED.ttl END,
                reader = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.reader ELSE EXCLUDED.reader END,
                origin = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.origin ELSE EXCLUDED.origin END,
                ttn = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttn ELSE EXCLUDED.ttn END,
                expires_at = CASE WHEN EXCLUDED.grain_type = 'c' THEN api.profile_expiry(EXCLUDED.inserted, p.ttl)
                                  ELSE EXCLUDED.expires_at END,
                notify_at = CASE WHEN EXCLUDED.grain_type = 'c' THEN api.profile_expiry(EXCLUDED.inserted, p.ttn)
                                 ELSE EXCLUDED.notify_at END
            WHERE p.grain_type = EXCLUDED.grain_type
            RETURNING p.correlation_id, p.profile_type, p.path, p.reader,
                      CASE WHEN p.xmax = 0 THEN (SELECT jsonb_build_array(p.correlation_id, p.profile_type, p.path, h.grain_type)
                                                 FROM profile.profilestore h
                                                 WHERE h.correlation_id = p.correlation_id AND h.profile_type = p.profile_type
                                                   AND h.path = p.path AND h.grain_type <> p.grain_type
                                                 LIMIT 1) END AS clash
        ), pend AS (
            -- The grains written, for change notifications (a clashing row is removed again below).
            INSERT INTO silo.change_pending (channel, kind, grains)
            SELECT 'profile:*', 'changed',
                   api.change_grains(array_agg(i.correlation_id), array_agg(i.profile_type), array_agg(i.reader), array_agg(i.path))
            FROM (SELECT upd.correlation_id, upd.profile_type, upd.path, upd.reader FROM upd
                  UNION ALL
                  SELECT ins.correlation_id, ins.profile_type, ins.path, ins.reader FROM ins WHERE ins.clash IS NULL
                  UNION ALL
                  SELECT arch.correlation_id, arch.profile_type, arch.path, arch.reader FROM arch) AS i
            HAVING count(*) > 0 AND api.change_capture_on()
        )
        SELECT (SELECT count(*) FROM upd) + i.written, i.clashes, o.ok, h.pending
        INTO v_written, v_clashes, v_res, v_pending
        FROM (SELECT count(*) AS written, jsonb_agg(i.clash) FILTER (WHERE i.clash IS NOT NULL) AS clashes
              FROM ins AS i) AS i,
             (SELECT array_agg(ROW(u.ord, 'ok', u.operation, u.target, NULL, NULL, NULL, NULL)::api.profile_apply_result) AS ok
              FROM unnest(p_round) AS u
              WHERE p_ok AND api.profile_op_direct(u.operation)) AS o,
             -- Old values whose history pit was taken.
             (SELECT array_agg(ROW(l.*)::profile.profilestore) AS pending
              FROM l
              WHERE (l.correlation_id, l.profile_type, l.path)
                    NOT IN (SELECT arch.correlation_id, arch.profile_type, arch.path FROM arch)) AS h;
        IF v_pending IS NOT NULL THEN
            PERFORM api.profile_history_retry(v_pending);
        END IF;
    END IF;

    IF v_written < v_sent OR v_clashes IS NOT NULL THEN
        -- Rows not written (the _latest has another grain type: the conflicting row stays locked by
        -- the upsert, so it still has that type) and new rows that clash with the grain's history.
        v_res := ARRAY(
            SELECT z.r
            FROM (
                SELECT CASE WHEN c.clash IS NOT NULL OR p.grain_type::text <> u.grain_type THEN
                           ROW(u.ord, 'dead_letter', u.operation, u.target, t.e[1], t.e[2], t.e[3], NULL)::api.profile_apply_result
                       ELSE
                           ROW(u.ord, 'ok', u.operation, u.target, NULL, NULL, NULL, NULL)::api.profile_apply_result
                       END AS r
                FROM unnest(p_round) AS u
                LEFT JOIN profile.profilestore p
                  ON p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                 AND p.pit = '_latest'
                LEFT JOIN LATERAL (
                    SELECT x ->> 3 AS clash FROM jsonb_array_elements(v_clashes) AS x
                    WHERE x ->> 0 = u.target AND x ->> 1 = u.profile_type AND x ->> 2 = u.path) c ON true
                LEFT JOIN LATERAL (
                    SELECT api.profile_type_clash(u.operation, u.grain_type, u.path, coalesce(c.clash, p.grain_type::text)) AS e
                    WHERE c.clash IS NOT NULL OR p.grain_type::text <> u.grain_type) t ON true
                WHERE api.profile_op_direct(u.operation)
                OFFSET 0
            ) z
            WHERE p_ok OR (z.r).status <> 'ok');
        -- A new _latest whose grain's history has another type: not written after all.
        IF v_clashes IS NOT NULL THEN
            DELETE FROM profile.profilestore p
            USING jsonb_array_elements(v_clashes) AS x
            WHERE p.correlation_id = x ->> 0 AND p.profile_type = x ->> 1 AND p.path = x ->> 2
              AND p.pit = '_latest';
        END IF;
    END IF;

    IF v_sent = cardinality(p_round) THEN
        RETURN v_res;
    END IF;

    -- Every other operation.
    WITH d AS MATERIALIZED (
        -- What each update does: st is its decision (ok, noop, dead_letter, or pending for deletes and
        -- durations, whose status follows from what they match), decision the full
        -- {status, sqlstate, reason, context}. Array operations on an existing value keep its
        -- metadata (the w_ columns are what is written).
        SELECT y.ord, y.operation, y.decision[1] AS st, y.hist, y.o_tid, y.target, y.profile_type, y.path, y.grain_type,
               y.inserted, y.newval, y.pits, y.dur, y.decision,
               CASE WHEN y.keep THEN y.o_certainty ELSE y.certainty END AS w_certainty,
               CASE WHEN y.keep THEN y.o_ttl ELSE y.ttl END AS w_ttl,
               CASE WHEN y.keep THEN y.o_reader ELSE y.reader END AS w_reader,
               CASE WHEN y.keep THEN y.o_origin ELSE y.origin END AS w_origin,
               CASE WHEN y.keep THEN y.o_ttn ELSE y.ttn END AS w_ttn,
               y.o_value, y.o_certainty, y.o_grain_type, y.o_inserted, y.o_ttl, y.o_reader, y.o_origin, y.o_ttn,
               y.o_expires_at, y.o_notify_at
        FROM (
            -- The decision: the first rule that applies wins.
            SELECT n.*,
                CASE
                WHEN n.operation IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn') THEN
                    '{pending,NULL,NULL,NULL}'::text[]
                WHEN n.operation = '_profile_link' AND n.target = ANY (n.chain) THEN
                    ARRAY['dead_letter', 'SPLNK',
                          'Profile link would create a cycle: '
                          || array_to_string(n.target || n.chain[1:array_position(n.chain, n.target)], ' -> '),
                          'applying _profile_link: cycle check']
                WHEN n.operation = '_set_if_not_exist' AND n.has_latest THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation IN ('_array_remove', '_array_remove_with_history') AND NOT n.has_latest THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.egt <> n.grain_type THEN
                    'dead_letter'::text || api.profile_type_clash(n.operation, n.grain_type, n.path, n.egt)
                WHEN n.operation = '_set_with_history_distinct' AND n.has_latest AND n.o_value = n.v THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation IN ('_set_max', '_set_min', '_set_max_with_history', '_set_min_with_history') AND n.has_latest
                     AND NOT api.profile_value_beats(n.v #>> '{}', n.o_value #>> '{}', n.operation LIKE '\_set\_max%') THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation = '_array_put_with_history_distinct' AND n.has_latest AND n.newval = n.o_value THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                ELSE
                    '{ok,NULL,NULL,NULL}'::text[]
                END AS decision
            FROM (
                -- The new value (array operations build on the current one), the pits addressed,
                -- the new duration, and whether the old value's metadata stays (keep) and the old value
                -- goes to history (hist).
                SELECT x.*,
                    CASE
                    WHEN x.operation IN ('_array_append', '_array_append_with_history') AND x.has_latest THEN
                        x.o_value || x.v
                    WHEN x.operation IN ('_array_put', '_array_put_with_history', '_array_put_with_history_distinct')
                         AND x.has_latest AND x.egt = 'a' THEN
                        x.o_value || coalesce((
                            SELECT jsonb_agg(e.x ORDER BY e.o)
                            FROM (SELECT DISTINCT ON (t.x) t.x, t.o
                                  FROM jsonb_array_elements(x.v) WITH ORDINALITY AS t(x, o)
                                  ORDER BY t.x, t.o) e
                            WHERE NOT x.o_value @> jsonb_build_array(e.x)), '[]')
                    WHEN x.operation IN ('_array_remove', '_array_remove_with_history') AND x.has_latest AND x.egt = 'a' THEN
                        coalesce((SELECT jsonb_agg(t.x ORDER BY t.o)
                                  FROM jsonb_array_elements(x.o_value) WITH ORDINALITY AS t(x, o)
                                  WHERE t.x <> x.v), '[]')
                    ELSE x.v
                    END AS newval,
                    CASE WHEN x.operation = '_profile_link' THEN api.profile_link_chain(x.v #>> '{}') END AS chain,
                    CASE WHEN x.operation = '_delete' THEN
                             CASE WHEN jsonb_typeof(x.v) = 'string' OR x.v = '[]' THEN '{_latest}'::text[]
                                  ELSE ARRAY(SELECT CASE WHEN e = '' THEN '_latest' ELSE e END
                                             FROM jsonb_array_elements_text(x.v) AS e) END
                         WHEN x.operation IN ('_set_ttl', '_set_ttn') AND jsonb_typeof(x.v) = 'array' THEN
                             ARRAY(SELECT CASE WHEN e = '' THEN '_latest' ELSE e END FROM jsonb_array_elements_text(x.v) AS e)
                    END AS pits,
                    CASE WHEN x.operation IN ('_set_ttl', '_set_ttn') THEN
                             CASE WHEN jsonb_typeof(x.v) = 'string' AND x.v <> '""' THEN x.v #>> '{}'
                                  WHEN x.operation = '_set_ttl' THEN x.ttl
                                  ELSE x.ttn END
                    END AS dur,
                    x.has_latest AND x.operation IN ('_array_append', '_array_append_with_history', '_array_put',
                                                     '_array_put_with_history', '_array_put_with_history_distinct',
                                                     '_array_remove', '_array_remove_with_history') AS keep,
                    x.has_latest AND x.operation IN ('_set_with_history', '_set_with_history_distinct', '_set_max_with_history',
                                                     '_set_min_with_history', '_array_append_with_history', '_array_put_with_history',
                                                     '_array_put_with_history_distinct', '_array_remove_with_history') AS hist
                FROM (
                    -- The current _latest value (o_ columns, o_tid where it is) and the existing grain's type.
                    SELECT u.ord, u.operation, u.target, u.profile_type, u.path, u.v, u.certainty, u.inserted, u.ttl, u.ttn,
                           u.origin, u.reader, u.grain_type, u.inc, l.tid IS NOT NULL AS has_latest,
                           l.tid AS o_tid, l.value AS o_value, l.certainty AS o_certainty, l.grain_type AS o_grain_type,
                           l.inserted AS o_inserted, l.ttl AS o_ttl, l.reader AS o_reader, l.origin AS o_origin,
                           l.ttn AS o_ttn, l.expires_at AS o_expires_at, l.notify_at AS o_notify_at,
                           CASE WHEN u.operation IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn', '_profile_link') THEN NULL
                                WHEN l.tid IS NOT NULL THEN l.grain_type::text
                                ELSE (SELECT p.grain_type::text FROM profile.profilestore p
                                      WHERE p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                                      LIMIT 1)
                           END AS egt
                    FROM unnest(p_round) AS u
                    LEFT JOIN LATERAL (
                        -- Values that are read and rewritten: locked against concurrent writers.
                        SELECT p.ctid AS tid, p.value, p.certainty, p.grain_type, p.inserted, p.ttl, p.reader, p.origin,
                               p.ttn, p.expires_at, p.notify_at
                        FROM profile.profilestore p
                        WHERE p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                          AND p.pit = '_latest'
                          AND u.operation NOT IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn')
                        FOR UPDATE OF p
                    ) l ON true
                    WHERE NOT api.profile_op_direct(u.operation)
                    OFFSET 0
                ) x
                OFFSET 0
            ) n
            OFFSET 0
        ) y
    ), arch AS (
        -- Old values to history, at _ + their inserted time.
        INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                          inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT d.target, d.profile_type, d.path, api.profile_pit(d.o_inserted), d.o_value, d.o_certainty,
               d.o_grain_type, d.o_inserted, d.o_ttl, d.o_reader, d.o_origin, d.o_ttn, d.o_expires_at, d.o_notify_at
        FROM d
        WHERE d.st = 'ok' AND d.hist
        ON CONFLICT DO NOTHING
        RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
    ), upd AS (
        -- New values of an existing _latest: the row read and locked above, found by its key, not
        -- by the ctid read: when a concurrent writer committed a newer version while this statement
        -- waited for the lock, the lock returned that version, which the statement's snapshot does
        -- not see; the key leads UPDATE to it.
        UPDATE profile.profilestore p
        SET value = d.newval, certainty = d.w_certainty, grain_type = d.grain_type, inserted = d.inserted,
            ttl = d.w_ttl, reader = d.w_reader, origin = d.w_origin, ttn = d.w_ttn,
            expires_at = api.profile_expiry(d.inserted, d.w_ttl), notify_at = api.profile_expiry(d.inserted, d.w_ttn)
        FROM d
        WHERE d.st = 'ok' AND d.o_tid IS NOT NULL
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path AND p.pit = '_latest'
        RETURNING p.correlation_id, p.profile_type, p.path, p.reader
    ), ins AS (
        -- New _latest values where there was none. One may have appeared since: if it has another
        -- grain type it is left alone here (and the update dead-lettered below). A new _latest is
        -- checked against the grain's history (and removed again below when it clashes).
        INSERT INTO profile.profilestore AS p (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                               inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT d.target, d.profile_type, d.path, '_latest', d.newval, d.w_certainty, d.grain_type, d.inserted,
               d.w_ttl, d.w_reader, d.w_origin, d.w_ttn,
               api.profile_expiry(d.inserted, d.w_ttl), api.profile_expiry(d.inserted, d.w_ttn)
        FROM d
        WHERE d.st = 'ok' AND d.o_tid IS NULL
        ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
        SET value = EXCLUDED.value, certainty = EXCLUDED.certainty, grain_type = EXCLUDED.grain_type,
            inserted = EXCLUDED.inserted, ttl = EXCLUDED.ttl, reader = EXCLUDED.reader, origin = EXCLUDED.origin,
            ttn = EXCLUDED.ttn, expires_at = EXCLUDED.expires_at, notify_at = EXCLUDED.notify_at
        WHERE p.grain_type = EXCLUDED.grain_type
        RETURNING p.correlation_id, p.profile_type, p.path, p.reader,
                  CASE WHEN p.xmax = 0 THEN (SELECT h.grain_type::text FROM profile.profilestore h
                                             WHERE h.correlation_id = p.correlation_id AND h.profile_type = p.profile_type
                                               AND h.path = p.path AND h.grain_type <> p.grain_type
                                             LIMIT 1) END AS clash
    ), del AS (
        -- _delete and _delete_with_history.
        DELETE FROM profile.profilestore p
        USING d
        WHERE d.operation IN ('_delete', '_delete_with_history')
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path
          AND (d.pits IS NULL OR p.pit = ANY (d.pits))
        RETURNING d.ord, p.correlation_id, p.profile_type, p.path, p.reader
    ), dur AS (
        -- _set_ttl and _set_ttn: value and other metadata stay.
        UPDATE profile.profilestore p
        SET ttl = CASE WHEN d.operation = '_set_ttl' THEN d.dur ELSE p.ttl END,
            expires_at = CASE WHEN d.operation = '_set_ttl' THEN api.profile_expiry(p.inserted, d.dur) ELSE p.expires_at END,
            ttn = CASE WHEN d.operation = '_set_ttn' THEN d.dur ELSE p.ttn END,
            notify_at = CASE WHEN d.operation = '_set_ttn' THEN api.profile_expiry(p.inserted, d.dur) ELSE p.notify_at END
        FROM d
        WHERE d.operation IN ('_set_ttl', '_set_ttn')
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path
          AND (d.pits IS NULL OR p.pit = ANY (d.pits))
        RETURNING d.ord, p.correlation_id, p.profile_type, p.path, p.reader
    ), hit AS (
        SELECT DISTINCT h.ord FROM (SELECT del.ord FROM del UNION ALL SELECT dur.ord FROM dur) h
    ), pend AS (
        -- The grains written and deleted, for change notifications (a clashing new _latest is
        -- removed again below).
        INSERT INTO silo.change_pending (channel, kind, grains)
        SELECT 'profile:*', g.kind,
               api.change_grains(array_agg(g.correlation_id), array_agg(g.profile_type), array_agg(g.reader), array_agg(g.path))
        FROM (SELECT 'changed' AS kind, a.correlation_id, a.profile_type, a.reader, a.path FROM arch AS a
              UNION ALL
              SELECT 'changed', u.correlation_id, u.profile_type, u.reader, u.path FROM upd AS u
              UNION ALL
              SELECT 'changed', i.correlation_id, i.profile_type, i.reader, i.path FROM ins AS i WHERE i.clash IS NULL
              UNION ALL
              SELECT 'changed', t.correlation_id, t.profile_type, t.reader, t.path FROM dur AS t
              UNION ALL
              SELECT 'deleted', x.correlation_id, x.profile_type, x.reader, x.path FROM del AS x) g
        GROUP BY g.kind
        HAVING api.change_capture_on()
        ORDER BY g.kind
    )
    SELECT array_agg(CASE
               WHEN d.st = 'ok' AND d.o_tid IS NULL AND (ins.correlation_id IS NULL OR ins.clash IS NOT NULL) THEN
                   ROW(d.ord, 'dead_letter', d.operation, d.target, t.e[1], t.e[2], t.e[3], NULL)::api.profile_apply_result
               ELSE
                   ROW(d.ord, CASE WHEN d.st <> 'pending' THEN d.st WHEN hit.ord IS NOT NULL THEN 'ok' ELSE 'noop' END,
                       d.operation, d.target, d.decision[2], d.decision[3], d.decision[4], NULL)::api.profile_apply_result
               END),
           array_agg(ROW(d.target, d.profile_type, d.path, '_latest', d.o_value, d.o_certainty, d.o_grain_type,
                         d.o_inserted, d.o_ttl, d.o_reader, d.o_origin, d.o_ttn, d.o_expires_at,
                         d.o_notify_at)::profile.profilestore)
               FILTER (WHERE d.st = 'ok' AND d.hist AND arch.correlation_id IS NULL),
           array_agg(d.ord) FILTER (WHERE ins.clash IS NOT NULL)
    INTO v_part, v_pending, v_clash
    FROM d
    LEFT JOIN hit ON hit.ord = d.ord
    LEFT JOIN arch ON arch.correlation_id = d.target AND arch.profile_type = d.profile_type AND arch.path = d.path
    LEFT JOIN ins ON ins.correlation_id = d.target AND ins.profile_type = d.profile_type AND ins.path = d.path
    LEFT JOIN LATERAL (
        SELECT api.profile_type_clash(d.operation, d.grain_type, d.path,
                   coalesce(ins.clash, (SELECT p.grain_type::text FROM profile.profilestore p
                                        WHERE p.correlation_id = d.target AND p.profile_type = d.profile_type
                                          AND p.path = d.path AND p.pit = '_latest'))) AS e
        WHERE d.st = 'ok' AND d.o_tid IS NULL AND (ins.correlation_id IS NULL OR ins.clash IS NOT NULL)) t ON true;
    v_res := v_res || ARRAY(SELECT r FROM unnest(v_part) AS r WHERE p_ok OR r.status <> 'ok');

    -- A new _latest whose grain's history has another type: not written after all.
    IF v_clash IS NOT NULL THEN
        DELETE FROM profile.profilestore p
        USING unnest(p_round) AS u
        WHERE u.ord = ANY (v_clash)
          AND p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path AND p.pit = '_latest';
    END IF;

    -- History pits already taken (two values inserted in the same millisecond): 1 ms later.
    IF v_pending IS NOT NULL THEN
        PERFORM api.profile_history_retry(v_pending);
    END IF;

    RETURN v_res;
END
$$;
COMMENT ON FUNCTION api.profile_apply_round(api.profile_update[], boolean, integer, boolean) IS
    'Internal: applies validated profile updates of distinct grains set-based (the direct operations of api.profile_op_direct by one statement that archives, updates the existing grains and upserts the new ones; every other operation by one statement that reads and locks, decides, archives, writes, deletes and sets durations); returns the results, or with p_ok false only those that are not ok; p_direct and p_history are optional counts the caller knows; grain type mismatches (SPTYP) and profile link cycles (SPLNK) come back as dead_letter results.';

-- api.profile_apply_core: internal. Validates and applies a JSON array of update messages in
-- order, without any exception handling (api.profile_apply_batch guards it). Numbers the results
-- from p_ord_offset + 1. Records dead letters when p_record (replays do not).
--
-- Shape: a short query validates the plain updates (the usual shapes, see below) and a full one,
-- which applies every rule, the others; both make the same rows (they share the helpers
-- api.profile_op_class, api.profile_grain_type, api.profile_certainty, api.profile_certainty_value,
-- api.profile_counter and api.profile_path_is_plain).
-- The usual batch (no update changes profile links, no grain comes twice) is one round: api.profile_apply_round applies all its valid updates
-- set-based. Otherwise a second query splits the batch into segments (an update that changes
-- profile links is a segment of its own, so every other segment sees fixed link targets) and
-- rounds (the n-th update of each grain within a segment), and segment by segment, round by
-- round, api.profile_apply_round applies the updates of a round. Updates of distinct grains do
-- not affect each other and the updates of one grain run in batch order, so the result is what
-- applying the updates one by one gives.
-- Raises: nothing of its own; an unexpected error propagates (api.profile_apply_batch handles it).
CREATE FUNCTION api.profile_apply_core(p_updates jsonb, p_ord_offset integer, p_record boolean)
RETURNS SETOF api.profile_apply_result
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now       bigint := floor(extract(epoch FROM now()) * 1000)::bigint;
    v_updates   api.profile_update[];
    v_rows      api.profile_update[];
    v_links     boolean;
    v_twice     boolean;
    v_direct    integer;
    v_history   boolean;
    v_max_seg   integer := 0;
    v_max_round integer := 1;
    v_all_valid boolean;
    v_simple    boolean;
    v_res       api.profile_apply_result[];
    v_dl_ids    bigint[];
    v_dead      record;
    v_rest      integer[];
    v_more      api.profile_update[];
BEGIN
    -- Validation, the short way: most updates are plain: a _set*, _set_max/_set_min, _inc, array
    -- operation or _array_remove with a string _id, a string _profile_type other than profile_link
    -- (or none), a path of plain segments none of which starts with "_", a _value with no metadata
    -- but _c (a number, or none), and the _v its operation needs. This query checks and
    -- normalises those (the helpers it shares with the full query below make the same values) and
    -- works out where they write, in batch order; the ords of the others (v_rest) go through the
    -- full query.
    SELECT array_agg(ROW(
               f.ord, f.op, f.cid, f.ptype, f.path, f.v, api.profile_certainty(f.c_num), v_now, 'P100Y', 'P100Y',
               NULL, '_auth', api.profile_grain_type(f.cls, f.v_type), f.inc, 0, f.target, 1,
               NULL, NULL, NULL)::api.profile_update) FILTER (WHERE f.plain),
           array_agg(f.ord) FILTER (WHERE NOT f.plain),
           -- What api.profile_apply_round needs to know of the plain updates.
           count(*) FILTER (WHERE f.plain AND api.profile_op_direct(f.op)),
           coalesce(bool_or(api.profile_op_archives(f.op)) FILTER (WHERE f.plain), false),
           -- A grain written twice (or a hash collision: then the rounds are worked out for nothing).
           count(*) FILTER (WHERE f.plain)
           > count(DISTINCT api.profile_grain_hash(f.target, f.ptype, f.path)) FILTER (WHERE f.plain)
    INTO v_updates, v_rest, v_direct, v_history, v_twice
    FROM (
        SELECT g.ord, g.op, g.cid, g.ptype, g.path, g.v, g.v_type, g.cls, g.inc, g.c_num,
               CASE WHEN EXISTS (SELECT 1 FROM profile.profilestore k
                                 WHERE k.correlation_id = g.cid AND k.profile_type = 'profile_link'
                                   AND k.path = '/new' AND k.pit = '_latest')
                    THEN api.profile_link_resolve(g.cid) ELSE g.cid END AS target,
               coalesce(CASE g.cls WHEN 'set' THEN g.v_type = 'string' OR g.v_strings
                                   WHEN 'inc' THEN g.inc IS NOT NULL
                                   WHEN 'arr' THEN g.v_strings
                                   WHEN 'max' THEN g.v_type = 'string'
                                   WHEN 'rem' THEN g.v_type = 'string'
                                   ELSE false END
                        AND g.cid <> '' AND g.ptype <> 'profile_link'
                        AND g.path IS NOT NULL AND octet_length(g.cid) + octet_length(g.ptype) + octet_length(g.path) <= 2000
                        AND g.val_obj AND NOT g.meta
                        AND g.c_num >= 0 AND g.c_num <= 1, false) AS plain
        FROM (
            SELECT e.ord, e.op, e.cid, e.ptype, e.v, e.v_type, e.cls, e.val_obj, e.meta,
                   -- A plain path with no segment starting with "_".
                   CASE WHEN api.profile_path_is_plain(e.path_txt, e.path_join) AND strpos(e.path_txt, '"_') = 0
                        THEN '/' || e.path_join END AS path,
                   CASE WHEN e.v_type = 'array'
                        THEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(e.v) AS x WHERE jsonb_typeof(x) <> 'string') END AS v_strings,
                   CASE WHEN e.cls = 'inc' AND e.v_type = 'string' THEN api.profile_counter(e.v #>> '{}') END AS inc,
                   api.profile_certainty_value(e.j_c) AS c_num
            FROM (
                SELECT d.ord, d.op, api.profile_op_class(d.op) AS cls, d.v, jsonb_typeof(d.v) AS v_type, d.j_c,
                       CASE WHEN jsonb_typeof(d.j_id) = 'string' THEN d.j_id #>> '{}' END AS cid,
                       CASE WHEN d.j_pt IS NULL THEN '_d'
                            ELSE CASE jsonb_typeof(d.j_pt) WHEN 'string' THEN nullif(d.j_pt #>> '{}', '')
                                                           WHEN 'null' THEN '_d' END
                       END AS ptype,
                       d.path_txt, replace(left(substr(d.path_txt, 3), -2), '", "', '/') AS path_join,
                       jsonb_typeof(d.j_val) = 'object' AS val_obj,
                       d.j_val ?| '{_in,_ttl,_ttn,_origin,_reader}' AS meta
                FROM (
                    SELECT el.ord::integer AS ord, coalesce(el.m ->> '_operation', '_set') AS op,
                           el.m -> '_id' AS j_id, el.m -> '_profile_type' AS j_pt,
                           (el.m -> '_path')::text AS path_txt, el.m -> '_value' AS j_val,
                           el.m -> '_value' -> '_v' AS v, el.m -> '_value' -> '_c' AS j_c
                    FROM jsonb_array_elements(p_updates) WITH ORDINALITY AS el(m, ord)
                    OFFSET 0
                ) d
                OFFSET 0
            ) e
            OFFSET 0
        ) g
        OFFSET 0
    ) f;

    -- Plain updates are valid and change no profile link.
    v_all_valid := true;
    v_links := false;

    -- Validation, the full way, of the updates that are not plain: one query checks and normalises
    -- them, in one pass, and works out where each valid one writes. It treats the batch as one
    -- segment of one round; when some update changes profile links or some grain may come twice,
    -- segments and rounds are worked out below.
    IF v_rest IS NOT NULL THEN
        SELECT array_agg(ROW(
                   s.ord, s.op, s.cid, s.ptype, s.path, s.v, s.certainty, s.inserted, s.ttl, s.ttn, s.origin,
                   s.reader, s.gtype, s.inc, s.lc, s.target, CASE WHEN s.target IS NOT NULL THEN 1 END,
                   s.err[1], s.err[2], s.err[3])::api.profile_update),
               bool_and(s.err IS NULL), bool_or(s.lc = 1)
        INTO v_more, v_all_valid, v_links
        FROM (
            -- Where each valid update writes, if no update before it changes profile links.
            SELECT r.*,
                   CASE WHEN r.err IS NOT NULL THEN NULL
                        WHEN r.op IN ('_delete', '_delete_with_history', '_profile_link') OR r.ptype = 'profile_link' THEN r.cid
                        WHEN EXISTS (SELECT 1 FROM profile.profilestore k
                                     WHERE k.correlation_id = r.cid AND k.profile_type = 'profile_link'
                                       AND k.path = '/new' AND k.pit = '_latest')
                            THEN api.profile_link_resolve(r.cid)
                        ELSE r.cid
                   END AS target
            FROM (
                -- lc: the update changes profile links.
                SELECT b.ord, b.op, b.cid, b.ptype, b.path, b.v, b.certainty, b.inserted, b.ttl, b.ttn, b.origin,
                       b.reader, b.gtype, b.inc, b.err,
                       CASE WHEN b.err IS NULL AND (b.cls = 'link' OR (b.ptype = 'profile_link' AND b.cls IN ('del', 'delh')))
                            THEN 1 ELSE 0 END AS lc
                FROM (
                    -- The first validation failure of each update, as {sqlstate, reason, context}: the
                    -- usual valid update is recognised by a short test, the others go through every rule.
                    SELECT c.*,
                        CASE
                        WHEN c.cls IN ('set', 'arr', 'inc', 'max', 'rem') AND c.cid <> '' AND c.ptype <> 'profile_link'
                             AND c.path_res[2] IS NULL AND c.path_res[1] IS NOT NULL AND c.val_obj
                             AND octet_length(c.cid) + octet_length(c.ptype) + octet_length(c.path_res[1]) <= 2000
                             AND CASE c.cls WHEN 'set' THEN c.v_type = 'string' OR c.v_strings
                                            WHEN 'arr' THEN c.v_strings
                                            WHEN 'inc' THEN c.inc IS NOT NULL
                                            ELSE c.v_type = 'string' END
                             AND c.c_num >= 0 AND c.c_num <= 1 AND c.inserted IS NOT NULL
                             AND c.ttl_err IS NULL AND c.ttn_err IS NULL AND NOT c.origin_bad AND c.reader <> ''
                            THEN NULL
                        WHEN NOT c.is_obj THEN
                            ARRAY['SPMSG', 'Update must be a JSON object', 'validating the update message']
                        WHEN c.op IS NULL THEN
                            ARRAY['SPOPR', '_operation must be a String', 'validating _operation']
                        WHEN c.cls IS NULL THEN
                            ARRAY['SPOPR', 'Unknown operation ' || left(c.op, 100), 'validating _operation']
                        WHEN c.j_id IS NULL OR c.j_id = 'null' THEN
                            ARRAY['SPIDX', '_id can not be null', 'validating _id']
                        WHEN c.cid IS NULL THEN
                            ARRAY['SPIDX', '_id must be a String', 'validating _id']
                        WHEN c.cid = '' THEN
                            ARRAY['SPIDX', '_id can not be empty', 'validating _id']
                        WHEN c.ptype IS NULL THEN
                            ARRAY['SPMSG', '_profile_type must be a non-empty String', 'validating _profile_type']
                        WHEN c.ptype = 'profile_link' AND c.op NOT IN ('_profile_link', '_delete', '_delete_with_history', '_set_ttl', '_set_ttn') THEN
                            ARRAY['SPRSV', 'Profile type profile_link is reserved for profile links: only _profile_link, _delete, _delete_with_history, _set_ttl and _set_ttn may address it', 'validating _profile_type']
                        WHEN c.path_res[2] IS NOT NULL THEN
                            ARRAY['SPPTH', c.path_res[2], 'validating _path']
                        WHEN octet_length(c.cid) + octet_length(c.ptype) + octet_length(c.path_res[1]) > 2000 THEN
                            ARRAY['SPMSG', 'The grain key (_id, _profile_type, _path) is longer than 2000 bytes', 'validating _id, _profile_type and _path']
                        WHEN c.j_val IS NULL OR c.j_val = 'null' THEN
                            ARRAY['SPMSG', '_value can not be null', 'validating _value']
                        WHEN NOT c.val_obj THEN
                            ARRAY['SPMSG', '_value must be an Object', 'validating _value']
                        WHEN c.v IS NULL OR c.v = 'null' THEN
                            ARRAY['SPVAL', '_v can not be null', 'validating _v']
                        WHEN c.cls = 'set' AND NOT (c.v_type = 'string' OR (c.v_type = 'array' AND c.v_strings)) THEN
                            ARRAY['SPVAL', 'Value must be a String or an Array of Strings', 'validating _v for ' || c.op]
                        WHEN c.cls IN ('max', 'rem', 'inc') AND c.v_type <> 'string' THEN
                            ARRAY['SPVAL', 'Value must be a String', 'validating _v for ' || c.op]
                        WHEN c.cls = 'inc' AND c.inc IS NULL THEN
                            ARRAY['SPVAL', 'Value must be a counter like initialvalue|stepsize|steps, e.g. 0|1|1', 'validating _v for ' || c.op]
                        WHEN c.cls = 'arr' AND c.v_type <> 'array' THEN
                            ARRAY['SPVAL', 'Value must be an Array', 'validating _v for ' || c.op]
                        WHEN c.cls = 'arr' AND NOT c.v_strings THEN
                            ARRAY['SPVAL', 'Value must be an Array of Strings', 'validating _v for ' || c.op]
                        WHEN c.cls = 'del' AND NOT (c.v = '""' OR (c.v_type = 'array' AND c.v_strings)) THEN
                            ARRAY['SPVAL', 'Value must be "" or an Array of pits', 'validating _v for ' || c.op]
                        WHEN c.cls = 'delh' AND c.v <> '""' THEN
                            ARRAY['SPVAL', 'Value must be ""', 'validating _v for ' || c.op]
                        WHEN c.cls = 'ttl' AND c.v_type = 'string' AND c.v_dur_err LIKE '% contains a negative number' THEN
                            ARRAY['SPDUR', c.v_dur_err, 'validating _v for ' || c.op]
                        WHEN c.cls = 'ttl' AND NOT (c.v = '""' OR (c.v_type = 'array' AND c.v_strings) OR (c.v_type = 'string' AND c.v_dur_err IS NULL)) THEN
                            ARRAY['SPVAL', 'Value must be "", an Array of pits or an ISO 8601 duration', 'validating _v for ' || c.op]
                        WHEN c.cls = 'link' AND NOT (c.v_type = 'string' AND c.v <> '""') THEN
                            ARRAY['SPVAL', 'Value must be a non-empty String, the correlation id to link to', 'validating _v for ' || c.op]
                        WHEN c.c_num IS NULL OR c.c_num < 0 OR c.c_num > 1 THEN
                            ARRAY['SPCRT', 'Certainty (_c) must be a number between 0 and 1', 'validating _c']
                        WHEN c.in_num IS NULL THEN
                            ARRAY['SPINS', 'Creation timestamp (_in) must be epoch milliseconds or an ISO 8601 date', 'validating _in']
                        WHEN c.in_num < 0 THEN
                            ARRAY['SPINS', 'Creation timestamp (_in) can not be negative', 'validating _in']
                        WHEN c.in_num <> trunc(c.in_num) THEN
                            ARRAY['SPINS', 'Creation timestamp (_in) must be a whole number of milliseconds', 'validating _in']
                        WHEN c.in_num > 253402300799999 THEN
                            ARRAY['SPINS', 'Creation timestamp (_in) is out of range (after 9999-12-31)', 'validating _in']
                        WHEN c.ttl_err IS NOT NULL THEN
                            ARRAY['SPDUR', c.ttl_err, 'validating _ttl']
                        WHEN c.ttn_err IS NOT NULL THEN
                            ARRAY['SPDUR', c.ttn_err, 'validating _ttn']
                        WHEN c.origin_bad THEN
                            ARRAY['SPMSG', '_origin must be a String', 'validating _origin']
                        WHEN c.reader IS NULL OR c.reader = '' THEN
                            ARRAY['SPMSG', '_reader must be a non-empty String', 'validating _reader']
                        END AS err,
                        c.path_res[1] AS path,
                        api.profile_certainty(c.c_num) AS certainty,
                        api.profile_grain_type(c.cls, c.v_type) AS gtype
                    FROM (
                        -- Each field normalised, NULL where it is invalid; the usual shapes (numbers,
                        -- absent metadata, plain paths) take the short way, regular expressions and
                        -- helper functions run only for the others.
                        SELECT a.ord, a.is_obj, a.op, a.cid, a.cls, a.j_id, a.j_val, a.val_obj, a.v, a.v_type,
                               a.v_strings, a.ttl, a.ttn, a.reader,
                            CASE WHEN a.cls = 'link' THEN 'profile_link'
                                 WHEN a.j_pt IS NULL THEN '_d'
                                 ELSE CASE jsonb_typeof(a.j_pt) WHEN 'string' THEN nullif(a.j_pt #>> '{}', '')
                                                                WHEN 'null' THEN '_d' END
                            END AS ptype,
                            -- {path, reason}: a plain path is checked here, others by
                            -- api.profile_path_check.
                            CASE WHEN a.op = '_profile_link' THEN '{/new,NULL}'::text[]
                                 WHEN api.profile_path_is_plain(a.path_txt, a.path_join)
                                     THEN ARRAY['/' || a.path_join,
                                                CASE WHEN strpos(a.path_txt, '"_') > 0
                                                          AND a.path_txt ~ '"(_latest|_[0-9]{8}T[0-9]{6}\.[0-9]{3}Z)"' THEN
                                                         '_path segments can not be _latest or a point in time like _20210706T155637.111Z'
                                                     WHEN left(a.path_txt, 6) = '["_id"' THEN
                                                         '_path can not start with _id, the profile''s own id' END]
                                 ELSE api.profile_path_check(a.j_path) END AS path_res,
                            CASE WHEN a.cls = 'inc' AND a.v_type = 'string' THEN api.profile_counter(a.v #>> '{}') END AS inc,
                            CASE WHEN a.cls = 'ttl' AND a.v_type = 'string' AND a.v <> '""'
                                 THEN api.profile_duration_error(a.v #>> '{}', 'Value (_v)') END AS v_dur_err,
                            api.profile_certainty_value(a.j_c) AS c_num,
                            a.in_num,
                            CASE WHEN a.in_num >= 0 AND a.in_num <= 253402300799999 AND a.in_num = trunc(a.in_num)
                                 THEN a.in_num::bigint END AS inserted,
                            CASE WHEN a.j_ttl IS NULL OR a.ttl = 'P100Y' THEN NULL
                                 ELSE CASE jsonb_typeof(a.j_ttl)
                                      WHEN 'null' THEN NULL
                                      WHEN 'string' THEN api.profile_duration_error(a.ttl, 'Time to live (_ttl)')
                                      ELSE 'Time to live (_ttl) must be a String' END
                            END AS ttl_err,
                            CASE WHEN a.j_ttn IS NULL OR a.ttn = 'P100Y' THEN NULL
                                 ELSE CASE jsonb_typeof(a.j_ttn)
                                      WHEN 'null' THEN NULL
                                      WHEN 'string' THEN api.profile_duration_error(a.ttn, 'Time to notification (_ttn)')
                                      ELSE 'Time to notification (_ttn) must be a String' END
                            END AS ttn_err,
                            CASE WHEN a.j_origin IS NULL THEN NULL
                                 WHEN jsonb_typeof(a.j_origin) = 'string' THEN a.j_origin #>> '{}' END AS origin,
                            a.j_origin IS NOT NULL AND jsonb_typeof(a.j_origin) NOT IN ('string', 'null') AS origin_bad
                        FROM (
                            SELECT f.*,
                                api.profile_op_class(f.op) AS cls,
                                jsonb_typeof(f.v) AS v_type,
                                replace(left(substr(f.path_txt, 3), -2), '", "', '/') AS path_join,
                                CASE WHEN jsonb_typeof(f.v) = 'array'
                                     THEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(f.v) AS x
                                                      WHERE jsonb_typeof(x) <> 'string') END AS v_strings,
                                CASE WHEN f.j_in IS NULL THEN v_now::numeric
                                     ELSE CASE jsonb_typeof(f.j_in)
                                          WHEN 'number' THEN f.j_in::numeric
                                          WHEN 'null' THEN v_now::numeric
                                          WHEN 'string' THEN
                                              CASE WHEN length(f.j_in #>> '{}') > 100 THEN NULL
                                                   WHEN (f.j_in #>> '{}') ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
                                                       THEN (f.j_in #>> '{}')::numeric
                                                   ELSE api.profile_in_parse(f.j_in #>> '{}') END
                                          END
                                END AS in_num,
                                CASE WHEN f.j_ttl IS NULL THEN 'P100Y'
                                     ELSE CASE jsonb_typeof(f.j_ttl) WHEN 'string' THEN f.j_ttl #>> '{}'
                                                                     WHEN 'null' THEN 'P100Y' END
                                END AS ttl,
                                CASE WHEN f.j_ttn IS NULL THEN 'P100Y'
                                     ELSE CASE jsonb_typeof(f.j_ttn) WHEN 'string' THEN f.j_ttn #>> '{}'
                                                                     WHEN 'null' THEN 'P100Y' END
                                END AS ttn,
                                CASE WHEN f.j_reader IS NULL THEN '_auth'
                                     ELSE CASE jsonb_typeof(f.j_reader) WHEN 'string' THEN f.j_reader #>> '{}'
                                                                        WHEN 'null' THEN '_auth' END
                                END AS reader
                            FROM (
                                SELECT e.ord, e.is_obj, e.j_id, e.j_pt, e.j_path, e.j_val, e.j_path::text AS path_txt,
                                    jsonb_typeof(e.j_val) = 'object' AS val_obj,
                                    CASE WHEN NOT e.is_obj THEN NULL
                                         WHEN e.j_op IS NULL THEN '_set'
                                         ELSE CASE jsonb_typeof(e.j_op) WHEN 'string' THEN e.j_op #>> '{}'
                                                                        WHEN 'null' THEN '_set' END
                                    END AS op,
                                    CASE WHEN jsonb_typeof(e.j_id) = 'string' THEN e.j_id #>> '{}' END AS cid,
                                    e.j_val -> '_v' AS v, e.j_val -> '_c' AS j_c,
                                    -- Most updates carry no further metadata: one test instead of five lookups.
                                    CASE WHEN e.j_meta THEN e.j_val -> '_in' END AS j_in,
                                    CASE WHEN e.j_meta THEN e.j_val -> '_ttl' END AS j_ttl,
                                    CASE WHEN e.j_meta THEN e.j_val -> '_ttn' END AS j_ttn,
                                    CASE WHEN e.j_meta THEN e.j_val -> '_origin' END AS j_origin,
                                    CASE WHEN e.j_meta THEN e.j_val -> '_reader' END AS j_reader
                                FROM (
                                    SELECT el.ord::integer AS ord, jsonb_typeof(el.m) = 'object' AS is_obj,
                                           el.m -> '_operation' AS j_op, el.m -> '_id' AS j_id,
                                           el.m -> '_profile_type' AS j_pt, el.m -> '_path' AS j_path,
                                           el.m -> '_value' AS j_val,
                                           (el.m -> '_value') ?| '{_in,_ttl,_ttn,_origin,_reader}' AS j_meta
                                    FROM jsonb_array_elements(p_updates) WITH ORDINALITY AS el(m, ord)
                                    WHERE el.ord = ANY (v_rest)
                                    OFFSET 0
                                ) e
                                OFFSET 0
                            ) f
                            OFFSET 0
                        ) a
                        OFFSET 0
                    ) c
                    OFFSET 0
                ) b
            ) r
            OFFSET 0
        ) s;
        v_updates := coalesce(v_updates, '{}') || v_more;
        -- A grain written twice, among all of them.
        SELECT count(u.target) > count(DISTINCT api.profile_grain_hash(u.target, u.profile_type, u.path))
        INTO v_twice
        FROM unnest(v_updates) AS u;
    END IF;

    IF v_updates IS NULL THEN
        RETURN;
    END IF;

    IF v_links OR v_twice THEN
        -- Segments (seg still holds lc: whether the update changes profile links) and rounds. After a
        -- link change, updates write where the links point by then: their targets are worked out
        -- segment by segment below.
        SELECT array_agg(ROW(
                   t.ord, t.operation, t.correlation_id, t.profile_type, t.path, t.v, t.certainty, t.inserted, t.ttl,
                   t.ttn, t.origin, t.reader, t.grain_type, t.inc, t.seg, t.target, t.round,
                   t.sqlstate, t.reason, t.context)::api.profile_update ORDER BY t.ord),
               max(t.seg), max(t.round)
        INTO v_updates, v_max_seg, v_max_round
        FROM (
            SELECT g.*,
                   CASE WHEN g.target IS NOT NULL
                        THEN row_number() OVER (PARTITION BY g.seg, g.target, g.profile_type, g.path ORDER BY g.ord)::integer
                   END AS round
            FROM (
                SELECT q.ord, q.operation, q.correlation_id, q.profile_type, q.path, q.v, q.certainty, q.inserted,
                       q.ttl, q.ttn, q.origin, q.reader, q.grain_type, q.inc, q.seg2 AS seg,
                       CASE WHEN q.seg2 > 0 AND NOT (q.operation IN ('_delete', '_delete_with_history', '_profile_link')
                                                     OR q.profile_type = 'profile_link')
                            THEN NULL ELSE q.target END AS target,
                       q.sqlstate, q.reason, q.context
                FROM (
                    SELECT u.*,
                           2 * coalesce(sum(u.seg) OVER (ORDER BY u.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::integer
                           + u.seg AS seg2
                    FROM unnest(v_updates) AS u
                ) q
            ) g
        ) t;
    END IF;

    -- The common case: every update valid, no link changes, no grain twice: one round of all.
    v_simple := v_max_seg = 0 AND v_all_valid AND v_max_round = 1;

    -- Updates that failed validation.
    IF NOT v_all_valid THEN
        v_res := ARRAY(
            SELECT ROW(u.ord, 'dead_letter', u.operation, u.correlation_id, u.sqlstate, u.reason, u.context, NULL)::api.profile_apply_result
            FROM unnest(v_updates) AS u
            WHERE u.sqlstate IS NOT NULL);
    END IF;

    IF v_simple THEN
        -- The short query's counts hold when it validated them all; else the round counts.
        v_res := api.profile_apply_round(v_updates, false, CASE WHEN v_rest IS NULL THEN v_direct END, v_history);
    ELSE
        FOR v_seg IN 0 .. v_max_seg LOOP
            IF v_seg % 2 = 0 AND v_seg > 0 THEN
                -- After a profile link changed: where this segment's updates write now.
                v_rows := ARRAY(
                    SELECT ROW(t.ord, t.operation, t.correlation_id, t.profile_type, t.path, t.v, t.certainty,
                               t.inserted, t.ttl, t.ttn, t.origin, t.reader, t.grain_type, t.inc, t.seg, t.tgt,
                               row_number() OVER (PARTITION BY t.tgt, t.profile_type, t.path ORDER BY t.ord)::integer,
                               t.sqlstate, t.reason, t.context)::api.profile_update
                    FROM (SELECT u.*,
                                 CASE WHEN u.operation IN ('_delete', '_delete_with_history') OR u.profile_type = 'profile_link'
                                      THEN u.correlation_id ELSE api.profile_link_resolve(u.correlation_id) END AS tgt
                          FROM unnest(v_updates) AS u
                          WHERE u.seg = v_seg AND u.sqlstate IS NULL) t);
            ELSE
                v_rows := ARRAY(SELECT u FROM unnest(v_updates) AS u WHERE u.seg = v_seg AND u.sqlstate IS NULL);
            END IF;
            CONTINUE WHEN cardinality(v_rows) = 0;
            SELECT max(u.round) INTO v_max_round FROM unnest(v_rows) AS u;
            FOR v_round IN 1 .. v_max_round LOOP
                v_res := v_res || api.profile_apply_round(
                    CASE WHEN v_max_round = 1 THEN v_rows
                         ELSE ARRAY(SELECT u FROM unnest(v_rows) AS u WHERE u.round = v_round) END, true);
            END LOOP;
        END LOOP;
    END IF;

    -- Rejected updates to the dead letter table, in batch order.
    IF p_record THEN
        v_dl_ids := array_fill(NULL::bigint, ARRAY[cardinality(v_updates)]);
        FOR v_dead IN
            SELECT r.ord, r.sqlstate, r.reason, r.context FROM unnest(v_res) AS r
            WHERE r.status = 'dead_letter' ORDER BY r.ord
        LOOP
            v_dl_ids[v_dead.ord] := api.profile_dead_letter_add(p_updates -> (v_dead.ord - 1), v_dead.sqlstate,
                                                                v_dead.reason, v_dead.context);
        END LOOP;
    END IF;

    -- An update without a result is ok and wrote its target (the usual batch's rounds return only
    -- the other results). The short validation query leaves v_updates in batch order: when it
    -- validated them all and every one is ok, they need no sort.
    IF coalesce(cardinality(v_res), 0) = 0 AND v_rest IS NULL THEN
        RETURN QUERY
        SELECT u.ord + p_ord_offset, 'ok'::text, u.operation, u.target, NULL::text, NULL::text, NULL::text, NULL::bigint
        FROM unnest(v_updates) AS u;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.ord + p_ord_offset, coalesce(r.status, 'ok'), u.operation, coalesce(r.correlation_id, u.target),
           r.sqlstate, r.reason, r.context, v_dl_ids[u.ord]
    FROM unnest(v_updates) AS u
    LEFT JOIN unnest(v_res) AS r ON r.ord = u.ord
    ORDER BY u.ord;
END
$$;
COMMENT ON FUNCTION api.profile_apply_core(jsonb, integer, boolean) IS
    'Internal: validates and applies a JSON array of profile updates in batch order (set-based: a short query for plain updates, the full one for the others; the usual batch is one round, otherwise segments and set-based rounds of updates of distinct grains); no exception handling; records dead letters when p_record.';

-- api.profile_apply_safe: internal. The batch again, each update in its own subtransaction, so an
-- unexpected error rejects only the update that raised it: it goes to the dead letter table with
-- its SQLSTATE, message and PL/pgSQL context. Used only after api.profile_apply_core failed.
-- Raises: nothing: every error is caught and dead-lettered.
CREATE FUNCTION api.profile_apply_safe(p_updates jsonb)
RETURNS api.profile_apply_result[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_out    api.profile_apply_result[] := '{}';
    v_r      api.profile_apply_result;
    v_m      jsonb;
    v_state  text;
    v_msg    text;
    v_detail text;
    v_ctx    text;
BEGIN
    FOR v_i IN 0 .. jsonb_array_length(p_updates) - 1 LOOP
        v_m := p_updates -> v_i;
        BEGIN
            SELECT * INTO STRICT v_r FROM api.profile_apply_core(jsonb_build_array(v_m), v_i, true);
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT,
                                    v_detail = PG_EXCEPTION_DETAIL, v_ctx = PG_EXCEPTION_CONTEXT;
            v_msg := v_msg || coalesce(nullif(': ' || v_detail, ': '), '');
            v_r := ROW(v_i + 1, 'dead_letter',
                       CASE WHEN jsonb_typeof(v_m) <> 'object' THEN NULL
                            WHEN coalesce(v_m -> '_operation', 'null') = 'null' THEN '_set'
                            WHEN jsonb_typeof(v_m -> '_operation') = 'string' THEN v_m ->> '_operation' END,
                       CASE WHEN jsonb_typeof(v_m -> '_id') = 'string' THEN v_m ->> '_id' END,
                       v_state, v_msg, v_ctx,
                       api.profile_dead_letter_add(v_m, v_state, v_msg, v_ctx))::api.profile_apply_result;
        END;
        v_out := array_append(v_out, v_r);
    END LOOP;
    RETURN v_out;
END
$$;
COMMENT ON FUNCTION api.profile_apply_safe(jsonb) IS
    'Internal: applies a JSON array of profile updates each in its own subtransaction; an unexpected error dead-letters only the update that raised it, with its SQLSTATE and PL/pgSQL context.';

-- The rows api.profile_apply_batch returns. An empty view: it names the row type, so that psql's
-- \d+ and sqlc see the columns.
CREATE VIEW api.profile_apply_results AS
SELECT NULL::integer AS ord, NULL::text AS status, NULL::text AS operation, NULL::text AS correlation_id,
       NULL::text AS sqlstate, NULL::text AS reason, NULL::bigint AS dead_letter_id
WHERE false;
COMMENT ON VIEW api.profile_apply_results IS
    'Always empty: the row type of api.profile_apply_batch (ord, status ok|noop|dead_letter, operation, correlation_id written, sqlstate, reason, dead_letter_id).';

-- api.profile_apply_batch: applies profile update messages in order and returns one row per
-- update: ord (from 1), status ok | noop | dead_letter, operation, correlation_id (the profile
-- written, after profile links; the _id as given for a dead letter), sqlstate, reason and
-- dead_letter_id of a rejected update. A rejected update goes to profile.dead_letters and never
-- stops the others or undoes them. If an unexpected error interrupts the batch, the batch is
-- redone with each update in its own subtransaction, so only the update that raised it is
-- dead-lettered (with PostgreSQL's SQLSTATE and error context).
-- Raises: SLINV when p_updates is not a JSON object (one update) or array (a batch).
CREATE FUNCTION api.profile_apply_batch(p_updates jsonb)
RETURNS SETOF api.profile_apply_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_updates jsonb;
BEGIN
    IF p_updates IS NULL OR jsonb_typeof(p_updates) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'updates must be a JSON object or array' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_updates), 'NULL')),
            HINT = 'Send one update message as an object or several as an array of objects.';
    END IF;
    v_updates := CASE WHEN jsonb_typeof(p_updates) = 'object' THEN jsonb_build_array(p_updates) ELSE p_updates END;
    BEGIN
        -- api.profile_apply_core runs to completion before this query sees its first row, so when it
        -- fails, no row has been returned yet. It returns its rows in batch order.
        RETURN QUERY
        SELECT c.ord, c.status, c.operation, c.correlation_id, c.sqlstate, c.reason, c.dead_letter_id
        FROM api.profile_apply_core(v_updates, 0, true) AS c;
    EXCEPTION WHEN OTHERS THEN
        RETURN QUERY
        SELECT r.ord, r.status, r.operation, r.correlation_id, r.sqlstate, r.reason, r.dead_letter_id
        FROM unnest(api.profile_apply_safe(v_updates)) AS r
        ORDER BY r.ord;
    END;
END
$$;
COMMENT ON FUNCTION api.profile_apply_batch(jsonb) IS
    'Applies profile update messages (an array, or one object) in order; one row per update: ord, status (ok, noop, dead_letter), operation, correlation_id written, sqlstate, reason, dead_letter_id. Rejected updates go to profile.dead_letters; the others apply. Raises SLINV when p_updates is neither an object nor an array.';

-- api.profile_apply: applies one profile update message and returns its result (as one row of
-- api.profile_apply_batch, without ord). Anything but a JSON object is dead-lettered.
-- Raises: SLINV when p_update is NULL.
CREATE FUNCTION api.profile_apply(
    p_update jsonb,
    OUT status text,
    OUT operation text,
    OUT correlation_id text,
    OUT sqlstate text,
    OUT reason text,
    OUT dead_letter_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_update IS NULL THEN
        RAISE EXCEPTION 'update can not be null' USING ERRCODE = 'SLINV',
            HINT = 'Send one update message as a JSON object.';
    END IF;
    SELECT b.status, b.operation, b.correlation_id, b.sqlstate, b.reason, b.dead_letter_id
    INTO status, operation, correlation_id, sqlstate, reason, dead_letter_id
    FROM api.profile_apply_batch(jsonb_build_array(p_update)) AS b;
END
$$;
COMMENT ON FUNCTION api.profile_apply(jsonb) IS
    'Applies one profile update message; returns status (ok, noop, dead_letter), operation, correlation_id written, sqlstate, reason, dead_letter_id. A rejected message goes to profile.dead_letters. Raises SLINV when p_update is NULL.';

-- api.profile_dead_letter_list: dead letters in id order, after p_after_id (keyset paging), at
-- most p_limit (default 100, capped at 1000). NULL filters are ignored; p_resolved true lists the
-- resolved ones, false the unresolved ones.
-- Raises: nothing.
CREATE FUNCTION api.profile_dead_letter_list(
    p_correlation_id text,
    p_profile_type text,
    p_operation text,
    p_sqlstate text,
    p_resolved boolean,
    p_after_id bigint,
    p_limit integer)
RETURNS SETOF profile.dead_letters
LANGUAGE sql STABLE
AS $$
    SELECT d.*
    FROM profile.dead_letters d
    WHERE d.id > coalesce(p_after_id, 0)
      AND (p_correlation_id IS NULL OR d.correlation_id = p_correlation_id)
      AND (p_profile_type IS NULL OR d.profile_type = p_profile_type)
      AND (p_operation IS NULL OR d.operation = p_operation)
      AND (p_sqlstate IS NULL OR d.sqlstate = p_sqlstate)
      AND (p_resolved IS NULL OR (d.resolved IS NOT NULL) = p_resolved)
    ORDER BY d.id
    LIMIT least(greatest(coalesce(p_limit, 100), 0), 1000);
$$;
COMMENT ON FUNCTION api.profile_dead_letter_list(text, text, text, text, boolean, bigint, integer) IS
    'Lists dead letters by ascending id after p_after_id (keyset paging), at most p_limit (default 100, at most 1000); NULL filters are ignored.';

-- api.profile_dead_letter_replay: applies a dead letter's message again. On ok or noop the dead
-- letter is marked resolved. On failure no new dead letter is written: the existing one gets the
-- new reason, sqlstate and context, replay_count + 1 and last_replayed.
-- Raises: SLNFD when there is no dead letter p_id, SLCNF when it is already resolved.
CREATE FUNCTION api.profile_dead_letter_replay(
    p_id bigint,
    OUT status text,
    OUT operation text,
    OUT correlation_id text,
    OUT sqlstate text,
    OUT reason text,
    OUT dead_letter_id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_dl     profile.dead_letters;
    v_r      api.profile_apply_result;
    v_detail text;
BEGIN
    SELECT d.* INTO v_dl FROM profile.dead_letters d WHERE d.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter not found' USING ERRCODE = 'SLNFD',
            DETAIL = format('There is no dead letter with id %s.', p_id);
    END IF;
    IF v_dl.resolved IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter already resolved' USING ERRCODE = 'SLCNF',
            DETAIL = format('Dead letter %s was resolved at %s.', p_id, v_dl.resolved);
    END IF;
    BEGIN
        SELECT * INTO STRICT v_r FROM api.profile_apply_core(jsonb_build_array(v_dl.message), 0, false);
    EXCEPTION WHEN OTHERS THEN
        v_r.status := 'dead_letter';
        GET STACKED DIAGNOSTICS v_r.sqlstate = RETURNED_SQLSTATE, v_r.reason = MESSAGE_TEXT,
                                v_detail = PG_EXCEPTION_DETAIL, v_r.context = PG_EXCEPTION_CONTEXT;
        v_r.reason := v_r.reason || coalesce(nullif(': ' || v_detail, ': '), '');
        v_r.operation := v_dl.operation;
        v_r.correlation_id := v_dl.correlation_id;
    END;
    IF v_r.status = 'dead_letter' THEN
        UPDATE profile.dead_letters d
        SET reason = v_r.reason, sqlstate = v_r.sqlstate, context = v_r.context,
            replay_count = d.replay_count + 1, last_replayed = now()
        WHERE d.id = p_id;
    ELSE
        UPDATE profile.dead_letters d SET resolved = now(), last_replayed = now() WHERE d.id = p_id;
    END IF;
    status := v_r.status;
    operation := v_r.operation;
    correlation_id := v_r.correlation_id;
    sqlstate := v_r.sqlstate;
    reason := v_r.reason;
    dead_letter_id := p_id;
END
$$;
COMMENT ON FUNCTION api.profile_dead_letter_replay(bigint) IS
    'Applies a dead letter''s message again: on ok or noop marks it resolved; on failure updates its reason, sqlstate, context, replay_count and last_replayed (no new dead letter). Raises SLNFD for an unknown id, SLCNF when already resolved.';
