-- Profile store, validation: a JSON array of update messages becomes profile_private.validated_update
-- rows, each valid one normalised (defaults filled in, durations and _in parsed) with the
-- correlation id it writes (after profile links), each invalid one with the first rule it breaks
-- (SQLSTATE, reason, context). The rules and their order are listed in the header of
-- sql/profile/01_types.sql; profile_private.apply_core (sql/profile/07_batch.sql) calls both
-- functions here and applies what they return.
--
-- Two named functions, one set-based query each: most real updates are plain and are checked by a
-- short query (profile_private.validate_plain); every other one goes through every rule
-- (profile_private.validate_full). Both make the same rows for the same update: they share the
-- helpers of sql/profile/01_types.sql and sql/profile/02_parse.sql, and a test holds them to the
-- same results. The nested subqueries are fenced with OFFSET 0 so that each field is computed once
-- per update.

-- A batch comes as one JSON array (api.profile_apply_batch, the updater) or as an array of
-- messages (a belt's step, which has its callbacks' results one by one: aggregating them into one
-- JSON array only for validation to take it apart again cost a tenth of a step). One scan of both
-- (ROWS FROM), not a UNION ALL, so that a JSON array costs what it cost alone: the function not
-- given returns no row (both are strict). SQL, so that it is inlined into the validation queries.
CREATE FUNCTION profile_private.messages(p_updates jsonb, p_messages jsonb[])
RETURNS TABLE (m jsonb, ord bigint)
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(el.j, el.a), el.ord
    FROM ROWS FROM (jsonb_array_elements(p_updates), unnest(p_messages)) WITH ORDINALITY AS el(j, a, ord);
$$;
COMMENT ON FUNCTION profile_private.messages(jsonb, jsonb[]) IS
    'The update messages of a batch with their ords (from 1): the elements of JSON array p_updates, then those of array p_messages; a caller gives one of them and NULL for the other. Raises nothing.';

-- The plain shapes are those of most real traffic: a few inline conditions settle them, without
-- the per-field parsers of the full query (_in, durations, profile_private.path_check). The counts
-- it returns spare the apply stage a second pass over the usual batch.
CREATE FUNCTION profile_private.validate_plain(
    p_updates jsonb,
    p_now bigint,
    p_origin text DEFAULT NULL,
    p_messages jsonb[] DEFAULT NULL,
    OUT plain_updates profile_private.validated_update[],
    OUT rest_ords integer[],
    OUT direct_count bigint,
    OUT archives boolean,
    OUT twice boolean)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT array_agg(ROW(
               f.ord, f.op, f.cid, f.ptype, f.path, f.v, profile_private.certainty(f.c_num), p_now, 'P100Y', 'P100Y',
               p_origin, '_auth', profile_private.grain_type(f.cls, f.v_type), f.inc, 0, f.target, 1,
               NULL, NULL, NULL)::profile_private.validated_update) FILTER (WHERE f.plain),
           array_agg(f.ord) FILTER (WHERE NOT f.plain),
           -- What profile_private.apply_round needs to know of the plain updates.
           count(*) FILTER (WHERE f.plain AND profile_private.op_direct(f.op)),
           coalesce(bool_or(profile_private.op_archives(f.op)) FILTER (WHERE f.plain), false),
           -- A grain written twice (or a hash collision: then the rounds are worked out for nothing).
           count(*) FILTER (WHERE f.plain)
           > count(DISTINCT profile_private.grain_hash(f.target, f.ptype, f.path)) FILTER (WHERE f.plain)
    INTO plain_updates, rest_ords, direct_count, archives, twice
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
                   CASE WHEN profile_private.path_is_plain(e.path_txt, e.path_join) AND strpos(e.path_txt, '"_') = 0
                        THEN '/' || e.path_join END AS path,
                   CASE WHEN e.v_type = 'array'
                        THEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(e.v) AS x WHERE jsonb_typeof(x) <> 'string') END AS v_strings,
                   CASE WHEN e.cls = 'inc' AND e.v_type = 'string' THEN profile_private.counter(e.v #>> '{}') END AS inc,
                   profile_private.certainty_value(e.j_c) AS c_num
            FROM (
                SELECT d.ord, d.op, profile_private.op_class(d.op) AS cls, d.v, jsonb_typeof(d.v) AS v_type, d.j_c,
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
                    FROM profile_private.messages(p_updates, p_messages) AS el
                    OFFSET 0
                ) d
                OFFSET 0
            ) e
            OFFSET 0
        ) g
        OFFSET 0
    ) f;
END
$$;
COMMENT ON FUNCTION profile_private.validate_plain(jsonb, bigint, text, jsonb[]) IS
    'Validates the plain updates of p_updates, a JSON array of update messages (or of p_messages, default NULL, the same messages as an array, when p_updates is NULL), with p_now (epoch ms) as their _in and p_origin (default NULL) as their _origin. Plain: an operation of class set, max, inc, arr or rem (profile_private.op_class) with the _v it needs (set: a string or an array of strings; max, rem: a string; inc: a counter; arr: an array of strings); _id a non-empty string; _profile_type absent, null or a non-empty string other than profile_link; a plain _path (profile_private.path_is_plain) with no segment starting with "_"; a key of at most 2000 bytes; _value an object without _in, _ttl, _ttn, _origin or _reader; _c absent, null, or a number or numeric string in [0, 1]. Returns plain_updates: those updates, valid and normalised (inserted p_now, ttl and ttn P100Y, origin p_origin, reader _auth, seg 0, round 1), in batch order, each with the correlation id it writes (after profile links), NULL when none is plain; rest_ords: the ords (from 1) of the others, for profile_private.validate_full, NULL when every update is plain; direct_count: how many plain updates are direct (profile_private.op_direct); archives: whether a plain update archives (profile_private.op_archives); twice: whether a grain may be written twice among them (equal profile_private.grain_hash). Raises nothing.';

-- One CASE whose first matching WHEN is the rule broken, so the order of its WHENs is the order of
-- the rules. It treats the batch as one segment of one round; when some update changes profile
-- links or some grain may come twice, profile_private.apply_core works out segments and rounds.
CREATE FUNCTION profile_private.validate_full(
    p_updates jsonb,
    p_rest integer[],
    p_now bigint,
    p_origin text DEFAULT NULL,
    p_messages jsonb[] DEFAULT NULL,
    OUT checked_updates profile_private.validated_update[],
    OUT all_valid boolean,
    OUT changes_links boolean)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT array_agg(ROW(
               s.ord, s.op, s.cid, s.ptype, s.path, s.v, s.certainty, s.inserted, s.ttl, s.ttn, coalesce(s.origin, p_origin),
               s.reader, s.gtype, s.inc, s.lc, s.target, CASE WHEN s.target IS NOT NULL THEN 1 END,
               s.err[1], s.err[2], s.err[3])::profile_private.validated_update),
           bool_and(s.err IS NULL), bool_or(s.lc = 1)
    INTO checked_updates, all_valid, changes_links
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
                    WHEN c.cls = 'link' AND octet_length(c.v #>> '{}') > 512 THEN
                        ARRAY['SPVAL', 'The link target (_v) is longer than 512 bytes', 'validating _v for ' || c.op]
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
                    profile_private.certainty(c.c_num) AS certainty,
                    profile_private.grain_type(c.cls, c.v_type) AS gtype
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
                        -- profile_private.path_check.
                        CASE WHEN a.op = '_profile_link' THEN '{/new,NULL}'::text[]
                             WHEN profile_private.path_is_plain(a.path_txt, a.path_join)
                                 THEN ARRAY['/' || a.path_join,
                                            CASE WHEN strpos(a.path_txt, '"_') > 0
                                                      AND a.path_txt ~ '"(_latest|_[0-9]{8}T[0-9]{6}\.[0-9]{3}Z)"' THEN
                                                     '_path segments can not be _latest or a point in time like _20210706T155637.111Z'
                                                 WHEN left(a.path_txt, 6) = '["_id"' THEN
                                                     '_path can not start with _id, the profile''s own id' END]
                             ELSE profile_private.path_check(a.j_path) END AS path_res,
                        CASE WHEN a.cls = 'inc' AND a.v_type = 'string' THEN profile_private.counter(a.v #>> '{}') END AS inc,
                        CASE WHEN a.cls = 'ttl' AND a.v_type = 'string' AND a.v <> '""'
                             THEN profile_private.duration_error(a.v #>> '{}', 'Value (_v)') END AS v_dur_err,
                        profile_private.certainty_value(a.j_c) AS c_num,
                        a.in_num,
                        CASE WHEN a.in_num >= 0 AND a.in_num <= 253402300799999 AND a.in_num = trunc(a.in_num)
                             THEN a.in_num::bigint END AS inserted,
                        CASE WHEN a.j_ttl IS NULL OR a.ttl = 'P100Y' THEN NULL
                             ELSE CASE jsonb_typeof(a.j_ttl)
                                  WHEN 'null' THEN NULL
                                  WHEN 'string' THEN profile_private.duration_error(a.ttl, 'Time to live (_ttl)')
                                  ELSE 'Time to live (_ttl) must be a String' END
                        END AS ttl_err,
                        CASE WHEN a.j_ttn IS NULL OR a.ttn = 'P100Y' THEN NULL
                             ELSE CASE jsonb_typeof(a.j_ttn)
                                  WHEN 'null' THEN NULL
                                  WHEN 'string' THEN profile_private.duration_error(a.ttn, 'Time to notification (_ttn)')
                                  ELSE 'Time to notification (_ttn) must be a String' END
                        END AS ttn_err,
                        CASE WHEN a.j_origin IS NULL THEN NULL
                             WHEN jsonb_typeof(a.j_origin) = 'string' THEN a.j_origin #>> '{}' END AS origin,
                        a.j_origin IS NOT NULL AND jsonb_typeof(a.j_origin) NOT IN ('string', 'null') AS origin_bad
                    FROM (
                        SELECT f.*,
                            profile_private.op_class(f.op) AS cls,
                            jsonb_typeof(f.v) AS v_type,
                            replace(left(substr(f.path_txt, 3), -2), '", "', '/') AS path_join,
                            CASE WHEN jsonb_typeof(f.v) = 'array'
                                 THEN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(f.v) AS x
                                                  WHERE jsonb_typeof(x) <> 'string') END AS v_strings,
                            CASE WHEN f.j_in IS NULL THEN p_now::numeric
                                 ELSE CASE jsonb_typeof(f.j_in)
                                      WHEN 'number' THEN f.j_in::numeric
                                      WHEN 'null' THEN p_now::numeric
                                      WHEN 'string' THEN
                                          CASE WHEN length(f.j_in #>> '{}') > 100 THEN NULL
                                               WHEN (f.j_in #>> '{}') ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
                                                   THEN (f.j_in #>> '{}')::numeric
                                               ELSE profile_private.in_parse(f.j_in #>> '{}') END
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
                                FROM profile_private.messages(p_updates, p_messages) AS el
                                WHERE el.ord = ANY (p_rest)
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
END
$$;
COMMENT ON FUNCTION profile_private.validate_full(jsonb, integer[], bigint, text, jsonb[]) IS
    'Validates the updates at ords p_rest (from 1) of p_updates, a JSON array of update messages (or of p_messages, default NULL, the same messages as an array, when p_updates is NULL), by every rule in order (listed in sql/profile/01_types.sql), with p_now (epoch ms) as the default _in and p_origin (default NULL) as the default _origin (of an update without one or with a null one). Returns checked_updates: one row per update at p_rest; a valid one normalised, with seg 1 when it changes profile links (a _profile_link, or a _delete or _delete_with_history of profile type profile_link) else 0, round 1, and the correlation id it writes if no update before it changes profile links; an invalid one with target and round NULL and the SQLSTATE, reason and context of the first rule it breaks: SPMSG (not an object, _profile_type, a key over 2000 bytes, _value, _origin, _reader), SPOPR (_operation), SPIDX (_id), SPRSV (profile type profile_link addressed by another operation), SPPTH (_path), SPVAL (_v, a link target over 512 bytes), SPCRT (_c), SPINS (_in), SPDUR (_ttl, _ttn, a negative duration as the _v of _set_ttl/_set_ttn). all_valid: whether every one is valid; changes_links: whether a valid one changes profile links. Raises nothing: a broken rule is a row, not an error.';
