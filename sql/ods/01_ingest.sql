-- Operational data store, ingest: process-flow events (api.ods_ingest) and the MDS, PDS, Process
-- and Custom objects of units of work (api.ods_append), in the caller's transaction. HTTP's POST
-- /ods/process-flow-events and POST /ods/objects call the *_requests forms with the requests they
-- joined (each its own caller and idempotency key, sql/idempotency/).
--
-- Why it is shaped so:
-- * Set-based: one statement checks every item, stores the objects and upserts one row per unit
--   of work, which holds its Summary and the count of its objects. ON CONFLICT DO UPDATE may touch
--   a row once per statement, so the items are first reduced to one row per unit of work, in item
--   order. The count of objects stored reaches the unit of work, and the answers learn which
--   objects were stored, through JSON objects keyed by unit of work (and object) rather than
--   joins of two CTEs, which the planner, blind to their sizes, would run as a nested loop
--   (quadratic in the units of work of a call).
-- * startedAt is the time of the first event ingested for a unit of work (not the earliest time
--   seen): the seed maps it from the first ProcessFlowEvent ingested. finishedAt is the time of the
--   first event whose global status is terminal; neither moves once set.
-- * Bad items cost the others nothing: each is refused with a SQLSTATE and a reason.

CREATE SCHEMA ods_private;
COMMENT ON SCHEMA ods_private IS 'Internals of the operational data store (sql/ods/): not a public contract. Rebuilt with schema api.';

CREATE VIEW api.ods_ingest_results AS
SELECT NULL::integer AS request, NULL::integer AS ord, NULL::text AS status, NULL::text AS unit_of_work_id,
       NULL::text AS object_id, NULL::text AS sqlstate, NULL::text AS reason, NULL::boolean AS replayed
WHERE false;
COMMENT ON VIEW api.ods_ingest_results IS
    'Always empty: the row type of api.ods_ingest, api.ods_append and their *_requests forms. request: the request''s position in the call (1 for a psql call); ord: the item''s position in its request, from 1 (NULL for a request refused whole); status: stored, duplicate (an object with the same unit of work, createdAt and id is stored already) or refused; unit_of_work_id and object_id of the item; sqlstate and reason: why it was refused; replayed: the request repeated an idempotency key and this row is the first answer.';

-- An ISO-8601 instant in UTC with milliseconds, whatever the session's time zone.
CREATE FUNCTION ods_private.iso(p_at timestamptz)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
$$;
COMMENT ON FUNCTION ods_private.iso(timestamptz) IS
    'p_at as an ISO-8601 date-time in UTC with milliseconds (2021-05-17T00:00:00.000Z); NULL for NULL. Raises nothing.';

-- Times come as ISO-8601 with an offset or Z (or epoch milliseconds, as the event store takes
-- them). Cheap character checks first (digits where digits go, the T, an offset or Z at the end,
-- nothing but digits and separators), then the cast, whose error for what still is no date
-- (02-30, 25:00) is caught: a fraction of a regular expression's or a general parser's cost.
CREATE FUNCTION ods_private.time_of(p_value jsonb)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_text text;
    v_len  integer;
    v_at   timestamptz;
BEGIN
    IF jsonb_typeof(p_value) NOT IN ('number', 'string') THEN
        RETURN NULL;
    END IF;
    v_text := p_value #>> '{}';
    v_len := length(v_text);
    IF v_len BETWEEN 1 AND 15 AND translate(v_text, '0123456789', '') = '' THEN
        v_at := timestamptz 'epoch' + v_text::bigint * interval '1 millisecond';
    ELSIF jsonb_typeof(p_value) = 'string' AND v_len BETWEEN 17 AND 40
          AND translate(left(v_text, 10), '0123456789', '') = '--' AND substr(v_text, 5, 1) = '-'
          AND substr(v_text, 11, 1) = 'T' AND substr(v_text, 14, 1) = ':'
          AND translate(substr(v_text, 12), '0123456789:.+-Z', '') = ''
          AND (right(v_text, 1) = 'Z' OR substr(v_text, v_len - 5, 1) IN ('+', '-') OR substr(v_text, v_len - 4, 1) IN ('+', '-')
               OR substr(v_text, v_len - 2, 1) IN ('+', '-')) THEN
        BEGIN
            v_at := v_text::timestamptz;
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format OR invalid_time_zone_displacement_value THEN
            RETURN NULL;
        END;
    ELSE
        RETURN NULL;
    END IF;
    IF v_at < timestamptz '1970-01-01 00:00Z' OR v_at >= timestamptz '10000-01-01 00:00Z' THEN
        RETURN NULL;
    END IF;
    RETURN v_at;
END
$$;
COMMENT ON FUNCTION ods_private.time_of(jsonb) IS
    'The time p_value gives: an ISO-8601 date-time with seconds optional and an offset or Z (2021-05-16T09:00:00Z, 2021-05-16T11:00+02:00), or epoch milliseconds (a number or a string of up to 15 digits); NULL when it is none of these, names no real date, or is outside 1970 to 9999. Raises nothing.';

-- The usual form, YYYY-MM-DDTHH:MM:SS[.fraction]Z from 1970 with a day of the month up to 28, is
-- certified by character checks alone, so that its cast cannot fail: an expression the planner
-- inlines into the ingest, with no function call and no error handler per item. Anything else
-- goes to ods_private.time_of. (C collation: the comparisons are of digits, at a byte's cost.)
CREATE FUNCTION ods_private.time_of_item(p_text text, p_value jsonb)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN length(p_text) BETWEEN 20 AND 30 AND right(p_text, 1) = 'Z' AND jsonb_typeof(p_value) = 'string'
                     AND translate(p_text, '0123456789', '') IN ('--T::Z', '--T::.Z')
                     AND substr(p_text, 5, 1) = '-' AND substr(p_text, 8, 1) = '-' AND substr(p_text, 11, 1) = 'T'
                     AND substr(p_text, 14, 1) = ':' AND substr(p_text, 17, 1) = ':'
                     AND (length(p_text) = 20 OR (substr(p_text, 20, 1) = '.' AND length(p_text) >= 22))
                     AND left(p_text, 4) COLLATE "C" BETWEEN '1970' AND '9998'
                     AND substr(p_text, 6, 2) COLLATE "C" BETWEEN '01' AND '12'
                     AND substr(p_text, 9, 2) COLLATE "C" BETWEEN '01' AND '28'
                     AND substr(p_text, 12, 2) COLLATE "C" <= '23'
                     AND substr(p_text, 15, 1) COLLATE "C" <= '5' AND substr(p_text, 18, 1) COLLATE "C" <= '5'
                THEN p_text::timestamptz
                ELSE ods_private.time_of(p_value) END;
$$;
COMMENT ON FUNCTION ods_private.time_of_item(text, jsonb) IS
    'The time p_value gives, as ods_private.time_of reads it; p_text is p_value #>> ''{}'' (the caller extracts it once). Raises nothing.';

-- The checks of one item, first broken rule wins. Events need a known global status (the caller
-- joins ods.global_statuses once for all items); objects a kind and a payload. One expression,
-- which the planner inlines: no function call per item.
CREATE FUNCTION ods_private.item_problem(p_item jsonb, p_events boolean, p_at timestamptz, p_known_status boolean)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN jsonb_typeof(p_item) IS DISTINCT FROM 'object' THEN
            ARRAY['SOINV', format('%s must be a JSON object, got %s', CASE WHEN p_events THEN 'an event' ELSE 'an object' END,
                                  coalesce(jsonb_typeof(p_item), 'nothing'))]
        WHEN jsonb_typeof(p_item -> 'unitOfWorkId') IS DISTINCT FROM 'string' OR length(p_item ->> 'unitOfWorkId') NOT BETWEEN 1 AND 256 THEN
            ARRAY['SOINV', 'unitOfWorkId must be a string of 1 to 256 characters']
        WHEN p_item ? 'id' AND (coalesce(jsonb_typeof(p_item -> 'id'), 'null') NOT IN ('string', 'null')
                                OR length(p_item ->> 'id') NOT BETWEEN 1 AND 256) THEN
            ARRAY['SOINV', 'id must be a string of 1 to 256 characters when given']
        WHEN p_at IS NULL AND p_item ? 'createdAt' AND jsonb_typeof(p_item -> 'createdAt') <> 'null' THEN
            ARRAY['SOTIM', 'createdAt must be an ISO-8601 date-time with an offset or Z (or epoch milliseconds) from 1970 to 9999, got '
                           || left((p_item -> 'createdAt')::text, 100)]
        WHEN p_item ? 'ttl' AND (jsonb_typeof(p_item -> 'ttl') NOT IN ('number', 'null')
                                 OR (jsonb_typeof(p_item -> 'ttl') = 'number' AND (p_item ->> 'ttl') !~ '^[1-9][0-9]{0,8}$')) THEN
            ARRAY['SOINV', 'ttl must be a positive whole number of seconds (at most 999999999) when given']
        -- Events.
        WHEN p_events AND p_item ? 'journeyType' AND jsonb_typeof(p_item -> 'journeyType') <> 'null'
             AND NOT coalesce((p_item ->> 'journeyType') IN ('PAYMENT', 'RECALL', 'BULK', 'BATCH'), false) THEN
            ARRAY['SOINV', 'journeyType must be PAYMENT, RECALL, BULK or BATCH, got ' || left((p_item -> 'journeyType')::text, 100)]
        WHEN p_events AND jsonb_typeof(p_item -> 'globalStatus') IS DISTINCT FROM 'string' THEN
            ARRAY['SOSTA', 'globalStatus is required (a string)']
        WHEN p_events AND NOT p_known_status THEN
            ARRAY['SOSTA', format('unknown globalStatus %s (ods.global_statuses lists them)', left(p_item ->> 'globalStatus', 100))]
        WHEN p_events AND p_item ? 'name' AND jsonb_typeof(p_item -> 'name') NOT IN ('string', 'null') THEN
            ARRAY['SOINV', 'name must be a string when given']
        WHEN p_events THEN NULL
        -- Objects.
        WHEN NOT coalesce((p_item ->> 'kind') IN ('MDS', 'PDS', 'PROCESS', 'CUSTOM'), false) THEN
            ARRAY['SOINV', 'kind must be MDS, PDS, PROCESS or CUSTOM, got ' || coalesce(left((p_item -> 'kind')::text, 100), 'nothing')]
        WHEN jsonb_typeof(p_item -> 'type') IS DISTINCT FROM 'string' OR p_item ->> 'type' = '' THEN
            ARRAY['SOINV', 'type is required (a non-empty string)']
        WHEN NOT p_item ? 'payload' THEN
            ARRAY['SOINV', 'payload is required (any JSON value)']
    END;
$$;
COMMENT ON FUNCTION ods_private.item_problem(jsonb, boolean, timestamptz, boolean) IS
    'Why p_item is not a valid process-flow event (p_events true) or object (false), as {sqlstate, reason}, or NULL when it is valid; p_at is its createdAt as ods_private.time_of reads it (NULL: none, or unreadable when createdAt is given); p_known_status whether its globalStatus is in ods.global_statuses (the caller''s join: no query per item). Raises nothing.';

CREATE FUNCTION ods_private.ingest(p_items jsonb, p_events boolean)
RETURNS SETOF api.ods_ingest_results
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_items IS NULL OR jsonb_typeof(p_items) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION '% must be a JSON object or array', CASE WHEN p_events THEN 'events' ELSE 'objects' END
            USING ERRCODE = 'SLINV', DETAIL = format('got %s', coalesce(jsonb_typeof(p_items), 'NULL'));
    END IF;
    RETURN QUERY
    WITH items AS (
        SELECT t.ord, t.item, t.at, t.terminal,
               ods_private.item_problem(t.item, p_events, t.at, t.terminal IS NOT NULL) AS problem
        FROM (SELECT e.ord, e.item, ods_private.time_of_item(e.at_text, e.item -> 'createdAt') AS at, g.terminal
              FROM (SELECT e.n::integer AS ord, e.item, e.item ->> 'createdAt' AS at_text
                    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'object' THEN jsonb_build_array(p_items) ELSE p_items END)
                         WITH ORDINALITY AS e(item, n)
                    OFFSET 0) e
              LEFT JOIN ods.global_statuses g ON p_events AND g.status = e.item ->> 'globalStatus'
              OFFSET 0) t
    ), valid AS (
        SELECT i.ord, i.item ->> 'unitOfWorkId' AS uow,
               coalesce(i.item ->> 'id', gen_random_uuid()::text) AS object_id,
               coalesce(i.at, now()) AS at,
               CASE WHEN p_events THEN 'PROCESS' ELSE i.item ->> 'kind' END AS kind,
               CASE WHEN p_events THEN coalesce(i.item ->> 'name', 'ProcessFlowEvent') ELSE i.item ->> 'type' END AS type,
               CASE WHEN p_events THEN i.item ELSE i.item -> 'payload' END AS payload,
               i.item ->> 'journeyType' AS journey_type, i.item ->> 'globalStatus' AS status,
               coalesce(i.terminal, false) AS terminal, (i.item ->> 'ttl')::integer AS ttl
        FROM items i
        WHERE i.problem IS NULL
    ), stored AS (
        INSERT INTO ods.objects AS o (unit_of_work_id, created_at, object_id, kind, type, payload)
        SELECT v.uow, v.at, v.object_id, v.kind, v.type, v.payload FROM valid v ORDER BY v.ord
        ON CONFLICT DO NOTHING
        RETURNING o.unit_of_work_id, o.created_at, o.object_id
    ), firsts AS MATERIALIZED (
        SELECT v.ord, v.uow, v.at, v.object_id, v.ord = min(v.ord) OVER (PARTITION BY v.uow, v.at, v.object_id) AS first
        FROM valid v
    ), stored_keys AS MATERIALIZED (
        -- Usually every first item of its key was stored, and the keys are not needed.
        SELECT CASE WHEN (SELECT count(*) FROM stored) = (SELECT count(*) FROM firsts f WHERE f.first) THEN NULL
                    ELSE (SELECT coalesce(jsonb_object_agg(x.unit_of_work_id || E'\n' || x.created_at::text || E'\n' || x.object_id, true), '{}')
                          FROM stored x) END AS keys,
               (SELECT coalesce(jsonb_object_agg(c.uow, c.n), '{}')
                FROM (SELECT x.unit_of_work_id AS uow, count(*) AS n FROM stored x GROUP BY x.unit_of_work_id) c) AS counts
    ), per_uow AS (
        SELECT v.uow,
               (array_agg(v.journey_type ORDER BY v.ord DESC) FILTER (WHERE v.journey_type IS NOT NULL))[1] AS journey_type,
               coalesce((array_agg(v.status ORDER BY v.ord) FILTER (WHERE v.terminal))[1],
                        (array_agg(v.status ORDER BY v.ord DESC))[1]) AS status,
               CASE WHEN p_events THEN (array_agg(v.at ORDER BY v.ord))[1] END AS started_at,
               (array_agg(v.at ORDER BY v.ord) FILTER (WHERE v.terminal))[1] AS finished_at,
               min(v.at) AS first_seen,
               (array_agg(v.ttl ORDER BY v.ord DESC) FILTER (WHERE v.ttl IS NOT NULL))[1] AS ttl,
               count(*) FILTER (WHERE p_events)::integer AS events,
               CASE WHEN p_events THEN (array_agg(v.type ORDER BY v.ord DESC))[1] END AS last_event
        FROM valid v GROUP BY v.uow
    ), uows AS (
        INSERT INTO ods.unit_of_works AS u (id, journey_type, global_status, started_at, finished_at, first_seen, last_updated, ttl,
                                            summary_events, summary_last_event, summary_updated, object_count)
        SELECT p.uow, p.journey_type, p.status, p.started_at, p.finished_at, p.first_seen, now(), p.ttl,
               p.events, p.last_event, now(), coalesce((k.counts ->> p.uow)::bigint, 0)
        FROM per_uow p CROSS JOIN stored_keys k
        ORDER BY p.uow
        ON CONFLICT (id) DO UPDATE
        SET journey_type       = coalesce(excluded.journey_type, u.journey_type),
            global_status      = CASE WHEN u.finished_at IS NOT NULL THEN u.global_status
                                      ELSE coalesce(excluded.global_status, u.global_status) END,
            started_at         = coalesce(u.started_at, excluded.started_at),
            finished_at        = coalesce(u.finished_at, excluded.finished_at),
            first_seen         = least(u.first_seen, excluded.first_seen),
            last_updated       = excluded.last_updated,
            ttl                = coalesce(excluded.ttl, u.ttl),
            summary_events     = u.summary_events + excluded.summary_events,
            summary_last_event = coalesce(excluded.summary_last_event, u.summary_last_event),
            summary_updated    = excluded.summary_updated,
            object_count       = u.object_count + excluded.object_count
    )
    -- The first item of each key that was stored is stored, the others duplicates: the window's
    -- sort carries only the keys, never the JSON of the stored keys.
    SELECT 1, i.ord,
           CASE WHEN i.problem IS NOT NULL THEN 'refused'
                WHEN f.first AND coalesce((SELECT k.keys FROM stored_keys k) ? (f.uow || E'\n' || f.at::text || E'\n' || f.object_id), true)
                THEN 'stored'
                ELSE 'duplicate' END,
           CASE WHEN jsonb_typeof(i.item -> 'unitOfWorkId') = 'string' THEN left(i.item ->> 'unitOfWorkId', 256) END,
           f.object_id, i.problem[1], i.problem[2], false
    FROM items i
    LEFT JOIN firsts f ON f.ord = i.ord
    ORDER BY i.ord;
END
$$;
COMMENT ON FUNCTION ods_private.ingest(jsonb, boolean) IS
    'Ingests p_items (one item or a JSON array) in the caller''s transaction: process-flow events when p_events is true, objects otherwise (api.ods_ingest and api.ods_append say what each is). Returns one api.ods_ingest_results row per item, in order (request 1). Raises SLINV when p_items is neither an object nor an array.';

CREATE FUNCTION api.ods_ingest(p_events jsonb)
RETURNS SETOF api.ods_ingest_results
LANGUAGE sql VOLATILE
AS $$
    SELECT * FROM ods_private.ingest(p_events, true);
$$;
COMMENT ON FUNCTION api.ods_ingest(jsonb) IS
    'Ingests process-flow events, as psql''s counterpart of POST /ods/process-flow-events. p_events (no default): one event or a JSON array of them, each {"unitOfWorkId": string (1 to 256 characters, required), "globalStatus": a status of ods.global_statuses (required), "journeyType": PAYMENT | RECALL | BULK | BATCH (optional), "name": the event''s name (optional), "id": the event''s id (optional, made when absent), "createdAt": ISO-8601 date-time or epoch milliseconds (optional: the time of ingest), "ttl": seconds (optional, TTL mode''s per-unit-of-work override), anything else kept}. Each stored event becomes a PROCESS object of its unit of work; the unit of work is created at its first event, whose time is its startedAt; the first event with a terminal status sets finishedAt; the Summary counts the events. Returns one api.ods_ingest_results row per event: stored, duplicate (same unit of work, createdAt and id stored already: nothing changes but lastUpdated) or refused with SOINV (not an object, bad unitOfWorkId, id, ttl, journeyType or name), SOSTA (globalStatus missing or unknown) or SOTIM (bad createdAt); refused events cost the others nothing. Raises SLINV when p_events is NULL or neither an object nor an array; transient errors roll back the whole call.';

CREATE FUNCTION api.ods_append(p_objects jsonb)
RETURNS SETOF api.ods_ingest_results
LANGUAGE sql VOLATILE
AS $$
    SELECT * FROM ods_private.ingest(p_objects, false);
$$;
COMMENT ON FUNCTION api.ods_append(jsonb) IS
    'Appends objects to units of work, as psql''s counterpart of POST /ods/objects. p_objects (no default): one object or a JSON array of them, each {"unitOfWorkId": string (1 to 256 characters, required), "kind": MDS | PDS | PROCESS | CUSTOM (required), "type": non-empty string (required), "payload": any JSON value (required), "id": optional (made when absent), "createdAt": ISO-8601 date-time or epoch milliseconds (optional: the time of ingest), "ttl": seconds (optional)}. A unit of work not seen yet is created without startedAt (only process-flow events set it). Returns one api.ods_ingest_results row per object: stored, duplicate or refused with SOINV or SOTIM; refused objects cost the others nothing. Raises SLINV when p_objects is NULL or neither an object nor an array; transient errors roll back the whole call.';
