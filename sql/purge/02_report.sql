-- Purge, reports: the PurgeReport of each execution date as JSON (the seed's fields, times in
-- ISO-8601 UTC, duration as Java's Duration writes it), read by HTTP and psql, and the progress
-- published on channel purge.

CREATE FUNCTION purge_private.report_doc(p_report purge.reports)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'executionDate', ods_private.iso(p_report.execution_date::timestamp AT TIME ZONE 'UTC'),
        'mode', p_report.mode,
        'retentionPeriod', p_report.retention_period,
        'retentionPeriodLowerBound', ods_private.iso(p_report.retention_period_lower_bound),
        'terminalUnitOfWorksOnly', p_report.terminal_unit_of_works_only,
        'archivedDependentJourneyTypes', to_jsonb(p_report.archived_dependent_journey_types),
        'unitOfWorksToDelete', p_report.unit_of_works_to_delete,
        'unitOfWorksDeleted', p_report.unit_of_works_deleted,
        'summariesToDelete', p_report.unit_of_works_to_delete,
        'summariesDeleted', p_report.summaries_deleted,
        'objectsDeleted', p_report.objects_deleted,
        'droppedPartitions', p_report.dropped_partitions,
        'postponed', p_report.postponed,
        'expiringNextDay', p_report.expiring_next_day,
        'startedAt', ods_private.iso(p_report.started_at),
        'finishedAt', ods_private.iso(p_report.finished_at),
        'duration', purge_private.iso_duration(p_report.duration),
        'runs', p_report.runs,
        'lastRunAt', ods_private.iso(p_report.last_run_at),
        'status', CASE WHEN p_report.finished_at IS NOT NULL THEN 'finished'
                       WHEN EXISTS (SELECT FROM purge.reports l WHERE l.execution_date > p_report.execution_date) THEN 'superseded'
                       ELSE 'running' END);
$$;
COMMENT ON FUNCTION purge_private.report_doc(purge.reports) IS
    'p_report as the JSON object of the report API: executionDate (the day at 00:00 UTC, 2023-05-17T00:00:00.000Z), mode, retentionPeriod (ISO-8601), retentionPeriodLowerBound, terminalUnitOfWorksOnly, archivedDependentJourneyTypes, unitOfWorksToDelete, unitOfWorksDeleted, summariesToDelete, summariesDeleted, objectsDeleted, droppedPartitions, postponed and expiringNextDay (TTL mode; null otherwise), startedAt, finishedAt, duration (ISO-8601, PT32M1.01S; null while running), runs, lastRunAt, status (running; finished; superseded: a later day''s report exists and this one never finished). Raises nothing.';

CREATE FUNCTION purge_private.publish(p_kind text, p_report purge.reports)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO change_private.outbox (channel, kind, payload, readers)
    VALUES ('purge', p_kind, jsonb_build_object(
                'executionDate', p_report.execution_date::text,
                'unitOfWorksToDelete', p_report.unit_of_works_to_delete,
                'unitOfWorksDeleted', p_report.unit_of_works_deleted), '{}');
$$;
COMMENT ON FUNCTION purge_private.publish(text, purge.reports) IS
    'Publishes kind p_kind (started, progress, finished, ttl) of report p_report on channel purge (admins only) in the caller''s transaction. Returns nothing; raises nothing.';

CREATE FUNCTION purge_private.date_of(p_text text)
RETURNS date
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_text ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}(T00:00(:00(\.0+)?)?Z)?$' THEN
        RETURN left(p_text, 10)::date;
    END IF;
    RETURN NULL;
EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION purge_private.date_of(text) IS
    'The execution date p_text names: YYYY-MM-DD, or that day at 00:00 UTC as the reports write it (2023-05-17T00:00:00.000Z); NULL when it is neither or no real date. Raises nothing.';

CREATE FUNCTION api.purge_report(p_execution_date text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_date date := purge_private.date_of(p_execution_date);
    v_doc  jsonb;
BEGIN
    IF v_date IS NULL THEN
        RAISE EXCEPTION 'execution date must be a date (2023-05-17 or 2023-05-17T00:00:00.000Z), got %', left(p_execution_date, 100)
            USING ERRCODE = 'SLINV';
    END IF;
    SELECT purge_private.report_doc(r) INTO v_doc FROM purge.reports r WHERE r.execution_date = v_date;
    IF v_doc IS NULL THEN
        RAISE EXCEPTION 'no purge report for %', v_date USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v_doc;
END
$$;
COMMENT ON FUNCTION api.purge_report(text) IS
    'The purge report of execution date p_execution_date (2023-05-17 or 2023-05-17T00:00:00.000Z), as GET /purge/reports/{executionDate} answers it (the fields of purge_private.report_doc). Raises SLINV when p_execution_date is no date, SLNFD when there is no report for it.';

CREATE FUNCTION api.purge_reports(p_limit integer DEFAULT 30, p_before text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_before date := purge_private.date_of(p_before);
BEGIN
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'limit must be from 1 to 1000, got %', coalesce(p_limit::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF p_before IS NOT NULL AND v_before IS NULL THEN
        RAISE EXCEPTION 'before must be a date (2023-05-17), got %', left(p_before, 100) USING ERRCODE = 'SLINV';
    END IF;
    RETURN coalesce((
        SELECT jsonb_agg(purge_private.report_doc(r) ORDER BY r.execution_date DESC)
        FROM (SELECT * FROM purge.reports r
              WHERE v_before IS NULL OR r.execution_date < v_before
              ORDER BY r.execution_date DESC LIMIT p_limit) r), '[]');
END
$$;
COMMENT ON FUNCTION api.purge_reports(integer, text) IS
    'The purge reports, newest execution date first, as GET /purge/reports answers them: a JSON array of at most p_limit (default 30, 1 to 1000) reports (purge_private.report_doc), those before execution date p_before (default NULL: from the newest; YYYY-MM-DD) for the next page. Raises SLINV when p_limit is outside 1..1000 or p_before is no date.';
