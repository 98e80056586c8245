-- Operational data store, a unit of work whole: reading it back (the unit of work, its Summary and
-- its objects by kind) and the archiver's call that sets archivedAt. Archiving again keeps the
-- first archivedAt, so the call is idempotent without a key.

CREATE FUNCTION ods_private.unit_of_work_doc(p_id text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'unitOfWorkId', u.id, 'journeyType', u.journey_type, 'globalStatus', u.global_status,
        'startedAt', ods_private.iso(u.started_at), 'finishedAt', ods_private.iso(u.finished_at),
        'archivedAt', ods_private.iso(u.archived_at), 'lastUpdated', ods_private.iso(u.last_updated), 'ttl', u.ttl)
    FROM ods.unit_of_works u WHERE u.id = p_id;
$$;
COMMENT ON FUNCTION ods_private.unit_of_work_doc(text) IS
    'Unit of work p_id as a JSON object (unitOfWorkId, journeyType, globalStatus, startedAt, finishedAt, archivedAt, lastUpdated: ISO-8601 in UTC or null; ttl), or NULL when there is none. Raises nothing.';

CREATE FUNCTION api.ods_unit_of_work_get(p_id text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_doc jsonb := ods_private.unit_of_work_doc(p_id);
BEGIN
    IF v_doc IS NULL THEN
        RAISE EXCEPTION 'no unit of work %', left(p_id, 256) USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v_doc || jsonb_build_object(
        'summary', (SELECT jsonb_build_object('journeyType', s.journey_type, 'globalStatus', s.global_status,
                                              'events', s.events, 'lastEvent', s.last_event,
                                              'lastUpdated', ods_private.iso(s.last_updated))
                    FROM ods.summaries s WHERE s.unit_of_work_id = p_id),
        'mdsObjects', '[]'::jsonb, 'pdsObjects', '[]'::jsonb, 'processObjects', '[]'::jsonb, 'customObjects', '[]'::jsonb)
        || coalesce((
            SELECT jsonb_object_agg(k.field, k.objects)
            FROM (SELECT CASE o.kind WHEN 'MDS' THEN 'mdsObjects' WHEN 'PDS' THEN 'pdsObjects'
                                     WHEN 'PROCESS' THEN 'processObjects' ELSE 'customObjects' END AS field,
                         jsonb_agg(jsonb_build_object('id', o.object_id, 'type', o.type,
                                                      'createdAt', ods_private.iso(o.created_at), 'payload', o.payload)
                                   ORDER BY o.created_at, o.object_id) AS objects
                  FROM ods.objects o WHERE o.unit_of_work_id = p_id
                  GROUP BY o.kind) k), '{}');
END
$$;
COMMENT ON FUNCTION api.ods_unit_of_work_get(text) IS
    'Unit of work p_id whole, as GET /ods/unit-of-works/{id} answers it: {unitOfWorkId, journeyType, globalStatus, startedAt, finishedAt, archivedAt, lastUpdated (ISO-8601 in UTC or null), ttl, summary: {journeyType, globalStatus, events, lastEvent, lastUpdated} or null, mdsObjects, pdsObjects, processObjects, customObjects: arrays of {id, type, createdAt, payload} in time order}. Raises SLNFD when there is no such unit of work.';

CREATE FUNCTION api.ods_unit_of_work_archive(p_id text, p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_doc jsonb;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the archive time must not be null' USING ERRCODE = 'SLINV';
    END IF;
    UPDATE ods.unit_of_works u
    SET archived_at = coalesce(u.archived_at, p_now), last_updated = greatest(u.last_updated, p_now)
    WHERE u.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no unit of work %', left(p_id, 256) USING ERRCODE = 'SLNFD';
    END IF;
    v_doc := ods_private.unit_of_work_doc(p_id);
    RETURN v_doc;
END
$$;
COMMENT ON FUNCTION api.ods_unit_of_work_archive(text, timestamptz) IS
    'Marks unit of work p_id as archived with all its objects (the archiver''s call; POST /ods/unit-of-works/{id}/archive): sets archivedAt to p_now (default now()) unless it is set already (a repeat keeps the first time), and lastUpdated. Returns the unit of work as api.ods_unit_of_work_get''s head (without summary and objects). Raises SLNFD when there is no such unit of work, SLINV when p_now is NULL.';
