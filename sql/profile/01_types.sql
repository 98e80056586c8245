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

CREATE SCHEMA profile_private;
COMMENT ON SCHEMA profile_private IS 'Internals of the profile store (sql/profile/): helpers, the validation and apply stages, trigger functions. Not a public contract: call the api.profile_* functions. Rebuilt with schema api.';

-- One validated update message, as the batch carries it from validation to application.
CREATE TYPE profile_private.validated_update AS (
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
COMMENT ON TYPE profile_private.validated_update IS 'Internal: one profile update message after validation, as profile_private.apply_core passes it to profile_private.apply_round.';

-- One result row of a batch.
CREATE TYPE profile_private.apply_result AS (
    ord             integer,
    status          text,
    operation       text,
    correlation_id  text,
    sqlstate        text,
    reason          text,
    context         text,
    dead_letter_id  bigint
);
COMMENT ON TYPE profile_private.apply_result IS 'Internal: the result of one update of a batch, before api.profile_apply_batch returns it.';

-- profile_private.op_class: internal. The class of an operation, which decides how its _v is checked
-- and what it writes: set (_set, _set_if_not_exist, _set_with_history, _set_with_history_distinct),
-- max (_set_max, _set_min and their history forms), del (_delete), delh (_delete_with_history),
-- inc, arr (_array_append, _array_put and their history forms), rem (_array_remove and its history
-- form), ttl (_set_ttl, _set_ttn), link (_profile_link); NULL for anything else.
-- Raises: nothing.
CREATE FUNCTION profile_private.op_class(p_operation text)
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
COMMENT ON FUNCTION profile_private.op_class(text) IS
    'Internal: the class of a profile update operation (set, max, del, delh, inc, arr, rem, ttl, link), NULL for an unknown one.';

-- profile_private.op_direct: internal. Whether an operation's new _latest value follows from the update
-- and the current _latest alone, so that profile_private.apply_round writes it with one UPDATE (or
-- upsert): _set, _inc, _array_append, _array_put, and _set_with_history,
-- _array_append_with_history and _array_put_with_history, whose old value is archived first.
-- Raises: nothing.
CREATE FUNCTION profile_private.op_direct(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set', '_inc', '_array_append', '_array_put', '_set_with_history',
                           '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION profile_private.op_direct(text) IS
    'Internal: whether a profile update operation is written by profile_private.apply_round''s single UPDATE (or upsert): _set, _inc, _array_append, _array_put and _set_with_history, _array_append_with_history, _array_put_with_history.';

-- profile_private.op_archives: internal. Whether a direct operation (profile_private.op_direct) archives
-- the old _latest value to history: _set_with_history, _array_append_with_history and
-- _array_put_with_history.
-- Raises: nothing.
CREATE FUNCTION profile_private.op_archives(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set_with_history', '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION profile_private.op_archives(text) IS
    'Internal: whether a direct profile update operation archives the old _latest value (_set_with_history, _array_append_with_history, _array_put_with_history).';

-- profile_private.grain_type: internal. The grain type an update of operation class p_class writes
-- with a _v of JSON type p_v_type: c for _inc, a for array operations and for a _set* of an array,
-- t otherwise.
-- Raises: nothing.
CREATE FUNCTION profile_private.grain_type(p_class text, p_v_type text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_class WHEN 'set' THEN CASE WHEN p_v_type = 'array' THEN 'a' ELSE 't' END
                        WHEN 'arr' THEN 'a' WHEN 'rem' THEN 'a' WHEN 'inc' THEN 'c'
                        ELSE 't' END;
$$;
COMMENT ON FUNCTION profile_private.grain_type(text, text) IS
    'Internal: the grain type (t, a, c) an update of operation class p_class writes with a _v of JSON type p_v_type.';
