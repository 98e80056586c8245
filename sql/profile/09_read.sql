-- Profile store, read path: a profile as Granary's JSON document (api.profile_get), one grain's
-- versions page by page (api.profile_grain_get), and flat views for psql (api.profilestore_latest,
-- api.profilestore_history, api.profile_links). The HTTP layer and psql users read through these
-- alone, so the rules below (readers, fragments, order, not found) hold for every reader.
--
-- The document of a profile:
--   {"_id": "0815",
--    "a2": {"b1": {"_20180921T000000.000Z": {"_v": "21", "_c": 0.1, "_in": 1537488000000, ...},
--                  "_latest": {"_v": "23", "_c": 0.3, "_in": 1537660800000, "_ttl": "P100Y",
--                              "_ttn": "P100Y", "_origin": null, "_reader": "_all"}}}}
-- Fragments and grains nest by path segment; a grain holds its points in time (pits), each pit
-- {"_v", "_c", "_in" (epoch ms), "_ttl", "_ttn", "_origin", "_reader"}. A path can be a grain and a
-- fragment at once (/a and /a/b): its pits and its children sit side by side under "a".
--
-- Rules where the specification leaves room:
-- * Readers: p_readers NULL reads everything (psql); otherwise only rows whose reader is in
--   p_readers are read, pit by pit (a history pit keeps the reader it had). The HTTP layer passes
--   the readers of the request's token (api.token_authenticate).
-- * Fragments: '/customer/name' and 'customer/name' are the same; a fragment matches its path and
--   everything below it, whole segments only (/a matches /a and /a/b, not /ab). A fragment '' or
--   '/' is the whole profile; NULL elements are ignored and an empty array is no filter.
-- * Order in the document (JSON object order is not significant, but it is deterministic): paths
--   by segment, byte-wise (COLLATE "C"); in a grain the history pits oldest first, then _latest,
--   then its children. In api.profile_grain_get: _latest first, then history newest first.
-- * Not found (SLNFD) covers "no such profile" and "nothing in it the caller may read" alike, so
--   an error never tells whether unreadable data exists.
-- * Profile links (p_resolve_links) are followed with the same readers: a link's target is the
--   value of its link grain (profile type profile_link, path /new, _latest), so a caller follows a
--   link only when it may read that grain, and otherwise reads the id as given. The document's _id,
--   the correlation_id returned and the DETAIL of a not found name only ids reached so.
--
-- Speed: the document is built as JSON text in one pass over the profile's rows in path order,
-- opening and closing objects as the path changes, instead of being assembled from nested jsonb
-- level by level. Most of the cost is the text of the pits themselves (about 2 microseconds each).
-- Certainties are written as the real they are stored as (0.4, not 0.4000000059604645).

-- Text rather than jsonb: the documents are concatenated in one pass (see above), and to_json
-- escapes the keys and strings. STABLE, not IMMUTABLE: real::text follows extra_float_digits.
CREATE FUNCTION profile_private.pit_json(
    p_pit text, p_value jsonb, p_certainty real, p_inserted bigint,
    p_ttl text, p_ttn text, p_origin text, p_reader text)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT to_json(p_pit)::text || ':{"_v":' || p_value::text
        || ',"_c":' || p_certainty::text
        || ',"_in":' || p_inserted::text
        || ',"_ttl":' || to_json(p_ttl)::text
        || ',"_ttn":' || to_json(p_ttn)::text
        || ',"_origin":' || coalesce(to_json(p_origin)::text, 'null')
        || ',"_reader":' || to_json(p_reader)::text || '}';
$$;
COMMENT ON FUNCTION profile_private.pit_json(text, jsonb, real, bigint, text, text, text, text) IS
    'One point in time of a grain as a JSON object member in text, "<p_pit>":{"_v":p_value,"_c":p_certainty,"_in":p_inserted,"_ttl":p_ttl,"_ttn":p_ttn,"_origin":p_origin,"_reader":p_reader}, for the documents of api.profile_get and api.profile_grain_get. The arguments are the columns of a profile.profilestore row; a NULL p_origin is written as null, any other NULL argument makes the result NULL. Raises nothing.';

CREATE FUNCTION profile_private.path_normalize(p_path text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN btrim(coalesce(p_path, ''), '/') = '' THEN '' ELSE '/' || btrim(p_path, '/') END;
$$;
COMMENT ON FUNCTION profile_private.path_normalize(text) IS
    'Grain path or fragment p_path as profile.profilestore.path stores it: one leading slash, no trailing slash (customer/name/ becomes /customer/name); the empty string for the root ('''', / or NULL). Raises nothing.';

-- Each fragment becomes an exact path and a LIKE prefix ending in '/%', with \, % and _ escaped
-- (paths contain _), so that /a matches /a and /a/b but never /ab. The rows come in document
-- order, so one loop opens and closes the objects as the path changes.
CREATE FUNCTION api.profile_get(
    p_profile_type text,
    p_correlation_id text,
    p_fragments text[] DEFAULT NULL,
    p_with_history boolean DEFAULT true,
    p_resolve_links boolean DEFAULT false,
    p_readers text[] DEFAULT NULL,
    OUT correlation_id text,
    OUT profile_type text,
    OUT json_payload json)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_history  boolean := coalesce(p_with_history, true);
    v_equal    text[];          -- fragments matched exactly
    v_below    text[];          -- LIKE patterns of what lies below the fragments
    v_row      record;
    v_open     text[] := '{}';  -- segments of the objects open below the root
    v_depth    integer := 0;
    v_common   integer;
    v_n        integer;
    v_path     text;            -- path of the previous row
    v_out      text;
BEGIN
    IF coalesce(p_profile_type, '') = '' OR coalesce(p_correlation_id, '') = '' THEN
        RAISE EXCEPTION 'profile type and correlation id are required' USING ERRCODE = 'SLINV',
            HINT = 'Read a profile as api.profile_get(profile_type, correlation_id).';
    END IF;
    correlation_id := p_correlation_id;
    IF p_resolve_links THEN
        correlation_id := api.profile_link_resolve(p_correlation_id, p_readers);
    END IF;
    profile_type := p_profile_type;

    -- Fragments: no filter at all when one of them is the root (or there are none).
    IF p_fragments IS NOT NULL THEN
        SELECT array_agg(n.f), array_agg(replace(replace(replace(n.f, '\', '\\'), '%', '\%'), '_', '\_') || '/%')
        INTO v_equal, v_below
        FROM (SELECT DISTINCT profile_private.path_normalize(f) AS f FROM unnest(p_fragments) AS u(f) WHERE f IS NOT NULL) AS n
        HAVING bool_and(n.f <> '');
    END IF;

    v_out := '{"_id":' || to_json(correlation_id)::text;
    FOR v_row IN
        SELECT p.path,
               string_to_array(substr(p.path, 2), '/') COLLATE "C" AS segs,
               profile_private.pit_json(p.pit, p.value, p.certainty, p.inserted, p.ttl, p.ttn, p.origin, p.reader) AS pit
        FROM profile.profilestore AS p
        WHERE p.correlation_id = profile_get.correlation_id
          AND p.profile_type = p_profile_type
          AND (v_history OR p.pit = '_latest')
          AND (p_readers IS NULL OR p.reader = ANY (p_readers))
          AND (v_equal IS NULL OR p.path = ANY (v_equal) OR p.path LIKE ANY (v_below))
        ORDER BY segs, p.pit COLLATE "C"
    LOOP
        IF v_row.path = v_path THEN
            v_out := v_out || ',' || v_row.pit;
            CONTINUE;
        END IF;
        -- A new grain: close the objects it does not share with the previous one, open the rest.
        v_n := cardinality(v_row.segs);
        v_common := 0;
        WHILE v_common < v_depth AND v_common < v_n AND v_open[v_common + 1] = v_row.segs[v_common + 1] LOOP
            v_common := v_common + 1;
        END LOOP;
        v_out := v_out || repeat('}', v_depth - v_common) || ',';
        FOR i IN v_common + 1 .. v_n LOOP
            v_out := v_out || to_json(v_row.segs[i])::text || ':{';
        END LOOP;
        v_out := v_out || v_row.pit;
        v_open := v_row.segs;
        v_depth := v_n;
        v_path := v_row.path;
    END LOOP;

    IF v_path IS NULL THEN
        IF correlation_id = p_correlation_id THEN
            RAISE EXCEPTION 'profile with correlation id ''%'' and type ''%'' not found', p_correlation_id, p_profile_type
                USING ERRCODE = 'SLNFD';
        END IF;
        RAISE EXCEPTION 'profile with correlation id ''%'' and type ''%'' not found', p_correlation_id, p_profile_type
            USING ERRCODE = 'SLNFD', DETAIL = format('Its profile links lead to correlation id ''%s''.', correlation_id);
    END IF;
    json_payload := (v_out || repeat('}', v_depth + 1))::json;
END
$$;
COMMENT ON FUNCTION api.profile_get(text, text, text[], boolean, boolean, text[]) IS
    'A profile as Granary''s jsonPayload document. p_profile_type, p_correlation_id: the profile (required). p_fragments (default NULL: the whole profile): keep only these paths and what lies below them, whole segments, with or without the leading slash; NULL elements are ignored, an empty array or a fragment '''' or / is the whole profile. p_with_history (default true): false keeps only the _latest pits. p_resolve_links (default false): true reads the final target of the id''s profile links (api.profile_link_resolve with p_readers: a link whose link grain the readers may not read is not followed). p_readers (default NULL: every pit and every link): only pits whose reader is one of these. Returns one row: correlation_id (the id read: the link target when links were resolved), profile_type, json_payload {"_id", <fragments and grains>}, each grain with its pits "<pit>":{"_v","_c","_in","_ttl","_ttn","_origin","_reader"}, history oldest first, then _latest, then its children. Raises SLINV when p_profile_type or p_correlation_id is NULL or empty; SLNFD when nothing readable is found in the fragments (no such profile, or nothing the readers may read; the DETAIL names the link target when links were resolved and led elsewhere).';

-- The count and the page are separate statements: total_grain_versions counts the readable
-- versions whatever the page, and a page past the end is still a document, without pits. A path
-- with nothing readable at it but grains below it is a fragment: SLINV rather than SLNFD, so the
-- caller learns to name a grain.
CREATE FUNCTION api.profile_grain_get(
    p_profile_type text,
    p_correlation_id text,
    p_path text,
    p_with_history boolean DEFAULT true,
    p_page_size integer DEFAULT 250,
    p_offset integer DEFAULT 0,
    p_resolve_links boolean DEFAULT false,
    p_readers text[] DEFAULT NULL,
    OUT correlation_id text,
    OUT profile_type text,
    OUT json_payload json,
    OUT total_grain_versions integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_path      text := profile_private.path_normalize(p_path);
    v_history   boolean := coalesce(p_with_history, true);
    v_page_size integer := coalesce(p_page_size, 250);
    v_offset    integer := coalesce(p_offset, 0);
    v_segs      text[];
    v_keys      text;
    v_pits      text;
BEGIN
    IF coalesce(p_profile_type, '') = '' OR coalesce(p_correlation_id, '') = '' THEN
        RAISE EXCEPTION 'profile type and correlation id are required' USING ERRCODE = 'SLINV',
            HINT = 'Read a grain as api.profile_grain_get(profile_type, correlation_id, path).';
    END IF;
    IF v_page_size NOT BETWEEN 1 AND 250 THEN
        RAISE EXCEPTION 'page size must be between 1 and 250' USING ERRCODE = 'SLINV',
            DETAIL = format('The page size was %s.', v_page_size);
    END IF;
    IF v_offset < 0 THEN
        RAISE EXCEPTION 'offset must not be negative' USING ERRCODE = 'SLINV',
            DETAIL = format('The offset was %s.', v_offset);
    END IF;
    IF v_path = '' THEN
        RAISE EXCEPTION 'you need to provide the full path of the grain' USING ERRCODE = 'SLINV',
            HINT = 'Give the path of a grain, such as customer/contract.';
    END IF;
    correlation_id := p_correlation_id;
    IF p_resolve_links THEN
        correlation_id := api.profile_link_resolve(p_correlation_id, p_readers);
    END IF;
    profile_type := p_profile_type;

    SELECT count(*)::integer INTO total_grain_versions
    FROM profile.profilestore AS p
    WHERE p.correlation_id = profile_grain_get.correlation_id
      AND p.profile_type = p_profile_type
      AND p.path = v_path
      AND (v_history OR p.pit = '_latest')
      AND (p_readers IS NULL OR p.reader = ANY (p_readers));

    IF total_grain_versions = 0 THEN
        IF EXISTS (SELECT 1
                   FROM profile.profilestore AS p
                   WHERE p.correlation_id = profile_grain_get.correlation_id
                     AND p.profile_type = p_profile_type
                     AND starts_with(p.path, v_path || '/')
                     AND (p_readers IS NULL OR p.reader = ANY (p_readers))) THEN
            RAISE EXCEPTION 'you need to provide the full path of the grain' USING ERRCODE = 'SLINV',
                DETAIL = format('%s is a fragment: the grains are below it.', v_path);
        END IF;
        IF correlation_id = p_correlation_id THEN
            RAISE EXCEPTION 'grain ''%'' of profile with correlation id ''%'' and type ''%'' not found',
                v_path, p_correlation_id, p_profile_type USING ERRCODE = 'SLNFD';
        END IF;
        RAISE EXCEPTION 'grain ''%'' of profile with correlation id ''%'' and type ''%'' not found',
            v_path, p_correlation_id, p_profile_type
            USING ERRCODE = 'SLNFD', DETAIL = format('Its profile links lead to correlation id ''%s''.', correlation_id);
    END IF;

    SELECT string_agg(g.pit, ',' ORDER BY g.is_latest DESC, g.pit_name COLLATE "C" DESC)
    INTO v_pits
    FROM (SELECT p.pit = '_latest' AS is_latest, p.pit AS pit_name,
                 profile_private.pit_json(p.pit, p.value, p.certainty, p.inserted, p.ttl, p.ttn, p.origin, p.reader) AS pit
          FROM profile.profilestore AS p
          WHERE p.correlation_id = profile_grain_get.correlation_id
            AND p.profile_type = p_profile_type
            AND p.path = v_path
            AND (v_history OR p.pit = '_latest')
            AND (p_readers IS NULL OR p.reader = ANY (p_readers))
          ORDER BY p.pit = '_latest' DESC, p.pit COLLATE "C" DESC
          LIMIT v_page_size OFFSET v_offset) AS g;

    v_segs := string_to_array(substr(v_path, 2), '/');
    SELECT string_agg(to_json(s.seg)::text || ':{', '' ORDER BY s.i) INTO v_keys
    FROM unnest(v_segs) WITH ORDINALITY AS s(seg, i);
    json_payload := ('{"_id":' || to_json(correlation_id)::text || ',' || v_keys || coalesce(v_pits, '')
                     || repeat('}', cardinality(v_segs) + 1))::json;
END
$$;
COMMENT ON FUNCTION api.profile_grain_get(text, text, text, boolean, integer, integer, boolean, text[]) IS
    'One grain of a profile, a page of its versions, in the document shape of api.profile_get: {"_id", "customer": {"contract": {"_latest": {...}, "_2021...": {...}}}}. p_profile_type, p_correlation_id: the profile (required). p_path: the grain, customer/contract or /customer/contract (required). p_with_history (default true): false reads _latest only. p_page_size (default 250; 1 to 250) and p_offset (default 0; 0 or more) select the page of versions, _latest first, then the history newest first; a page past the end holds no pits. p_resolve_links (default false) and p_readers (default NULL: every pit and every link) as in api.profile_get: links are followed only as far as the readers may read them. Returns one row: correlation_id (the id read), profile_type, json_payload, total_grain_versions (the readable versions on every page). Raises SLINV when p_profile_type or p_correlation_id is NULL or empty, p_page_size is not 1 to 250, p_offset is negative, p_path is empty, or p_path is a fragment (nothing readable at it, grains below it); SLNFD when nothing readable is found at the path (the DETAIL names the link target when links were resolved and led elsewhere).';

-- The redundant casts in these views tell sqlc the column types of its generated models.
CREATE VIEW api.profilestore_history AS
SELECT p.correlation_id,
       p.profile_type,
       p.path,
       p.pit,
       p.grain_type,
       CASE WHEN p.grain_type = 't' THEN p.value #>> '{}' END AS value_text,
       CASE WHEN p.grain_type = 'a' AND jsonb_typeof(p.value) = 'array'
            THEN ARRAY(SELECT e.elem FROM jsonb_array_elements_text(p.value) WITH ORDINALITY AS e(elem, n) ORDER BY e.n)
       END AS value_array,
       CASE WHEN p.grain_type = 'c' AND jsonb_typeof(p.value -> '_current') = 'number'
            THEN (p.value ->> '_current')::numeric END AS counter_current,
       CASE WHEN p.grain_type = 'c' AND jsonb_typeof(p.value -> '_step') = 'number'
            THEN (p.value ->> '_step')::numeric END AS counter_step,
       CASE WHEN p.grain_type = 'c' AND jsonb_typeof(p.value -> '_initial') = 'number'
            THEN (p.value ->> '_initial')::numeric END AS counter_initial,
       p.certainty,
       (timestamptz 'epoch' + p.inserted * interval '1 millisecond')::timestamptz AS inserted,
       p.ttl,
       p.ttn,
       p.reader,
       p.origin,
       p.expires_at,
       p.notify_at,
       p.value
FROM profile.profilestore AS p;
COMMENT ON VIEW api.profilestore_history IS
    'The profile store flat, for psql: one row per point in time (pit) of every grain: correlation_id, profile_type, path, pit, grain_type, the value decoded by grain type (value_text for t, value_array for a, counter_current, counter_step and counter_initial for c), certainty, inserted (as a timestamp), ttl, ttn, reader, origin, expires_at, notify_at and value as stored (jsonb).';

-- Read through api.profilestore_history so the decoding lives in one place; the view is inlined,
-- so the pit filter reaches the table scan.
CREATE VIEW api.profilestore_latest AS
SELECT h.correlation_id, h.profile_type, h.path, h.grain_type, h.value_text, h.value_array,
       h.counter_current, h.counter_step, h.counter_initial, h.certainty, h.inserted, h.ttl, h.ttn,
       h.reader, h.origin, h.expires_at, h.notify_at, h.value
FROM api.profilestore_history AS h
WHERE h.pit = '_latest';
COMMENT ON VIEW api.profilestore_latest IS
    'The profile store flat, for psql: one row per grain with its current value (pit _latest), the columns of api.profilestore_history without pit.';

-- A profile link is the _latest row of profile type profile_link at /new whose value is the
-- target id (sql/profile/03_link.sql). Each row follows its chain of links: fine for psql, not a
-- query for bulk reads.
CREATE VIEW api.profile_links AS
SELECT p.correlation_id,
       (p.value #>> '{}')::text AS target_correlation_id,
       api.profile_link_resolve(p.correlation_id) AS resolved_correlation_id,
       (timestamptz 'epoch' + p.inserted * interval '1 millisecond')::timestamptz AS inserted,
       p.origin
FROM profile.profilestore AS p
WHERE p.profile_type = 'profile_link' AND p.path = '/new' AND p.pit = '_latest';
COMMENT ON VIEW api.profile_links IS
    'Profile links, for psql: updates for correlation_id go to target_correlation_id; resolved_correlation_id is the final target through further links (what api.profile_get reads with p_resolve_links); inserted: when the link was written (a timestamp); origin: the origin of the link update.';
