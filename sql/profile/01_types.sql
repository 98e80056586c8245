-- Profile store, types: schema profile_private, the two row types that carry a batch of profile
-- updates from stage to stage, and the table of the 21 operations (class, direct or not, archiving
-- or not, the grain type each writes). The table lives in one place so that validation
-- (sql/profile/04_validate.sql) and both apply statements (sql/profile/05_direct.sql,
-- sql/profile/06_general.sql) classify an operation the same way. The write path is split by
-- stage, one file each: parsers of the fields (02_parse.sql), profile links (03_link.sql),
-- validation (04_validate.sql), the direct and the general statement (05_direct.sql,
-- 06_general.sql), the entry points (07_batch.sql) and the dead letters (08_dead_letter.sql).
-- Each stage is set-based, one statement over a whole batch (or round), so stages pass arrays of
-- these types, not single rows.
--
-- The write path: profile update messages applied to profile.profilestore, rejected messages kept
-- in profile.dead_letters, and profile links.
--
-- An update message (one JSON object):
--   {"_operation": "_set", "_id": "007", "_profile_type": "_d", "_path": ["a2", "b1"],
--    "_value": {"_v": "22", "_c": 0.4, "_in": "2018-09-24", "_ttl": "P3M", "_ttn": "P100Y",
--               "_origin": "/belts/123", "_reader": "_auth"}, "_schema": null}
--
-- Public functions: api.profile_apply and api.profile_apply_batch (sql/profile/07_batch.sql),
-- api.profile_dead_letter_list, api.profile_dead_letter_replay and api.profile_dead_letter_trim
-- (sql/profile/08_dead_letter.sql), api.profile_link_resolve (sql/profile/03_link.sql). Everything
-- else of the write path lives in schema profile_private.
--
-- Rules where the specification leaves room (see also each function's comment):
-- * Validation, in this order, the first failure wins: the message is an object; _operation (a
--   string, default _set, one of the 21 operations); _id (a non-empty string); _profile_type (a
--   non-empty string, default _d; profile_link is reserved for profile links: only _profile_link,
--   _delete, _delete_with_history, _set_ttl and _set_ttn may address it; ignored by _profile_link,
--   which always addresses profile_link); _path (an array of at least one non-empty string without
--   "/", no segment _latest or shaped like a point in time, the first segment not _id; ignored by
--   _profile_link, which writes path /new); the key (_id, _profile_type, path) at most 2000 bytes;
--   _value (an object); _v (not null, the shape its operation needs; the link target, the _v of
--   _profile_link, a non-empty string of at most 512 bytes: it becomes the correlation id that
--   later updates of the linked id are written to, with their own profile type and path, which
--   the key rule holds to 1999 bytes, so that every key written under a target fits in an index
--   row of the primary key, at most 2704 bytes; a target as long as an _id may be would not);
--   _c (a number or numeric string in [0, 1], default 1); _in (epoch milliseconds as a number or
--   numeric string, a whole number, or an ISO 8601 date or date-time: a date alone is midnight
--   UTC, a date-time without offset is UTC, fractions below the millisecond are cut; at most
--   9999-12-31; default the time the batch is applied, clock_timestamp(), not the transaction's
--   start, and never earlier than the _latest value it replaces); _ttl and _ttn (strict ISO 8601 durations such as P3M, P1W, PT1.5S
--   or P1Y2M3DT4H5M6S, at most 64 characters and about 31,000 years, default P100Y); _origin (a
--   string or null); _reader (a non-empty string, default _auth). _origin, _reader and the pits
--   listed by _delete, _set_ttl and _set_ttn have no length limit: none is part of a key or of an
--   index, the pits only select rows. Unknown keys, and _schema, are ignored. The SQLSTATEs,
--   reasons and contexts of these rules are profile_private.validate_full's.
-- * Every write keeps expires_at = inserted + ttl and notify_at = inserted + ttn (computed in UTC),
--   NULL when the duration is the default P100Y.
-- * Profile links: a _profile_link that would create a cycle (a self link too) is rejected
--   (SPLNK). Every other update for a linked _id is applied to the final target of its links,
--   except _delete, _delete_with_history, _profile_link and updates addressing profile type
--   profile_link.
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
-- * What a caller is told: a write token may write any grain, whoever may read it (writers are
--   trusted to write), but the results tell a caller nothing of a grain it may not read.
--   api.profile_apply_batch and api.profile_apply take the caller's readers (p_readers; NULL, the
--   default, is a caller that may read everything, as a psql user, and changes nothing), and
--   profile_private.results_for_readers rewrites, after the dead letters are recorded, only the
--   results that could tell something: a noop that depended on the _latest pit of a grain whose
--   reader is not among them reports ok; an SPTYP rejection names the existing grain type only when
--   the caller may read a pit of the grain; an SPLNK rejection lists the links of the cycle only
--   when the caller may read each of them; and correlation_id is a link target only as far as the
--   caller may read the links that lead to it. The dead letter keeps the full reason: only admins
--   read it.
-- * Concurrency: values that are read and rewritten are locked (FOR UPDATE) first, except
--   counters (_inc) and arrays (_array_append, _array_put), which are read and rewritten by the
--   UPDATE that locks them and works on their newest version. So concurrent writers of an
--   existing grain do not lose updates. Two transactions that create the same grain at the same
--   moment do not wait for each other (there is no row to lock yet): the later one overwrites the
--   new _latest as if it had been first (a counter adds up even then). The asynchronous updater
--   (api.profile_enqueue and api.profile_inbox_process, sql/profile/11_updater.sql) applies the
--   updates of one correlation id one after another, in the order they were accepted within their
--   stream.

CREATE SCHEMA profile_private;
COMMENT ON SCHEMA profile_private IS 'Internals of the profile store (sql/profile/): parsers, the validation and apply stages, the updater''s helpers, trigger functions. Not a public contract: call the api.profile_* functions. Rebuilt with schema api by silo migrate.';

-- A type, not a temporary table: each stage is one statement over unnest() of an array of these,
-- so a batch costs no catalog work. seg, target and round are rewritten by
-- profile_private.apply_core when some update changes profile links or a grain comes twice.
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
COMMENT ON TYPE profile_private.validated_update IS 'One profile update message after validation (profile_private.validate_plain, profile_private.validate_full): ord (position in the batch, from 1); the message''s fields normalised, defaults filled in (operation, correlation_id, profile_type, path as /a/b, v, certainty, inserted in epoch ms, ttl, ttn, origin, reader); grain_type written (t, a, c); inc ({initial, step, steps} of an _inc); seg (the segment: 1 right after validation when the update changes profile links, else 0; after segmentation odd for such an update, even for the others); target (the correlation id written, after profile links); round (the n-th update of its grain within its segment); sqlstate, reason, context of the first rule it breaks, NULL when valid. profile_private.apply_core passes arrays of it to profile_private.apply_round.';

CREATE TYPE profile_private.apply_result AS (
    ord             integer,
    status          text,
    operation       text,
    correlation_id  text,
    sqlstate        text,
    reason          text,
    context         text,
    dead_letter_id  bigint,
    reader          text         -- reader of the _latest pit a decision read (a noop's grain)
);
COMMENT ON TYPE profile_private.apply_result IS 'The result of one update of a batch, as the apply stages make it: ord (from 1), status (ok, noop, dead_letter), operation, correlation_id (written, after profile links; the _id as given for an update that failed validation), sqlstate, reason, context (where it was rejected, kept in the dead letter), dead_letter_id (NULL until profile_private.apply_core records the dead letter), reader (the reader of the _latest pit profile_private.apply_general read to decide the update, NULL when it read none: what profile_private.results_for_readers needs to tell whether a noop depended on a grain the caller may not read). api.profile_apply_batch returns it without context and reader.';

-- A CASE rather than a lookup table: it is inlined into the validation queries and costs no join.
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
    'The class of profile update operation p_operation, which decides how its _v is checked and what it writes: set (_set, _set_if_not_exist, _set_with_history, _set_with_history_distinct), max (_set_max, _set_min, _set_max_with_history, _set_min_with_history), del (_delete), delh (_delete_with_history), inc (_inc), arr (_array_append, _array_append_with_history, _array_put, _array_put_with_history, _array_put_with_history_distinct), rem (_array_remove, _array_remove_with_history), ttl (_set_ttl, _set_ttn), link (_profile_link); NULL for anything else. Raises nothing.';

-- These are the operations whose new _latest value follows from the update and the current _latest
-- alone, so no decision has to read the old value first: the bulk of real traffic, which
-- profile_private.apply_direct writes with one UPDATE (or upsert).
CREATE FUNCTION profile_private.op_direct(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set', '_inc', '_array_append', '_array_put', '_set_with_history',
                           '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION profile_private.op_direct(text) IS
    'Whether profile update operation p_operation is direct, written by profile_private.apply_direct''s single UPDATE (or upsert) rather than profile_private.apply_general: _set, _inc, _array_append, _array_put, and _set_with_history, _array_append_with_history, _array_put_with_history (whose old value is archived first). Raises nothing.';

-- Callers ask it of a whole round, so profile_private.apply_direct takes the history locks only
-- when some update archives.
CREATE FUNCTION profile_private.op_archives(p_operation text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT p_operation IN ('_set_with_history', '_array_append_with_history', '_array_put_with_history');
$$;
COMMENT ON FUNCTION profile_private.op_archives(text) IS
    'Whether direct profile update operation p_operation (profile_private.op_direct) archives the old _latest value to history before writing: _set_with_history, _array_append_with_history, _array_put_with_history. Raises nothing.';

-- Takes the class and the JSON type rather than the message: validation has both at hand already.
CREATE FUNCTION profile_private.grain_type(p_class text, p_v_type text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE p_class WHEN 'set' THEN CASE WHEN p_v_type = 'array' THEN 'a' ELSE 't' END
                        WHEN 'arr' THEN 'a' WHEN 'rem' THEN 'a' WHEN 'inc' THEN 'c'
                        ELSE 't' END;
$$;
COMMENT ON FUNCTION profile_private.grain_type(text, text) IS
    'The grain type an update writes, from its operation class p_class (profile_private.op_class) and the JSON type p_v_type of its _v (jsonb_typeof): c for inc, a for arr and rem and for a set of an array, t otherwise (also for classes that write no value). Raises nothing.';
