-- The job service, Silo's own changes as events. Each source is on when job.config.sources names
-- it (the configuration's sources: {name: True}); its statement trigger then schedules one event
-- per thing the statement touched, in the writing transaction, and the routing rules decide what
-- they become, as for any event (an event no rule routes is dropped). A source that is off costs
-- the write one probe of job.config. The sources:
-- * profile_updates, every statement that writes the profile store: one event per profile,
--   {"resource_type": "Profile", "action_type": "Update" (insert or update) or "Delete",
--   "resource_url": "/profiles/{profile_type}/{correlation_id}", "payload": {"profile_type",
--   "correlation_id"}}.
-- * series_writes, every append of points (a series write merges the metadata update of each
--   series it wrote into series.pending_updates, in the statement that writes the points): one
--   event per series, {"resource_type": "Series", "action_type": "Append", "resource_url":
--   "/{username}/events/{event_id}/series", "payload": {"username", "event_id", "data_min",
--   "data_max"}} (the extent of the points appended since the holder's metadata was last written).
-- * purge_reports, the purge's reports (purge.reports): "Start" when the day's report is created,
--   "Progress" when a batch deleted units of work or dropped partitions, "Finish" when it is
--   closed; {"resource_type": "PurgeReport", "resource_url": "/purge/reports/{execution_date}",
--   "payload": {"execution_date", "mode", "unit_of_works_to_delete", "unit_of_works_deleted",
--   "finished_at"}}. A run that deleted nothing is no event.
--
-- Writes made by a hook inside a dispatch step (api.job_dispatch sets silo.job_hook for its
-- transaction) are no new events: a hook's own follow-up work is its jobs, counted in generations,
-- so a hook that writes profiles cannot feed itself without end.

-- PL/pgSQL, so that its probe is planned once a connection (it runs at every write of the profile
-- store and of series).
CREATE FUNCTION job_private.source_on(p_source text)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM job.config c WHERE p_source = ANY (c.sources))
           AND coalesce(current_setting('silo.job_hook', true), '') <> 'on';
END
$$;
COMMENT ON FUNCTION job_private.source_on(text) IS
    'Whether source p_source (profile_updates, series_writes, purge_reports) makes events now: job.config.sources names it and the caller is not a hook inside a dispatch step (silo.job_hook). Raises nothing.';

CREATE FUNCTION job_private.source_schedule(p_events jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_events IS NOT NULL THEN  -- an upsert fires the UPDATE trigger with no rows too
        PERFORM count(*) FROM job_private.schedule(p_events);
    END IF;
END
$$;
COMMENT ON FUNCTION job_private.source_schedule(jsonb) IS
    'Schedules the events p_events (a JSON array, or NULL: nothing) of a source''s trigger, as job_private.schedule does. Raises what job_private.schedule raises.';

CREATE FUNCTION job_private.tg_profilestore__events()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF job_private.source_on('profile_updates') THEN
        PERFORM job_private.source_schedule(
            (SELECT jsonb_agg(jsonb_build_object(
                        'resource_type', 'Profile',
                        'action_type', CASE WHEN TG_OP = 'DELETE' THEN 'Delete' ELSE 'Update' END,
                        'resource_url', '/profiles/' || t.profile_type || '/' || t.correlation_id,
                        'payload', jsonb_build_object('profile_type', t.profile_type, 'correlation_id', t.correlation_id))
                    ORDER BY t.correlation_id, t.profile_type)
             FROM (SELECT DISTINCT g.profile_type, g.correlation_id FROM grains g) t));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.tg_profilestore__events() IS
    'Statement trigger of profile.profilestore (transition table grains): when source profile_updates is on (job_private.source_on), schedules one event per profile the statement touched: resource_type Profile, action_type Update or Delete, resource_url /profiles/{type}/{id}, payload {profile_type, correlation_id}.';

CREATE TRIGGER profilestore_job_events_insert AFTER INSERT ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();
CREATE TRIGGER profilestore_job_events_update AFTER UPDATE ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();
CREATE TRIGGER profilestore_job_events_delete AFTER DELETE ON profile.profilestore
    REFERENCING OLD TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();

-- On series.pending_updates rather than series.points: every append merges into it, one row per
-- series, in the statement that writes the points, and a hypertable (series.points on
-- TimescaleDB) takes no trigger with transition tables.
CREATE FUNCTION job_private.tg_pending_updates__events()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF job_private.source_on('series_writes') THEN
        PERFORM job_private.source_schedule(
            (SELECT jsonb_agg(jsonb_build_object(
                        'resource_type', 'Series', 'action_type', 'Append',
                        'resource_url', '/' || u.username || '/events/' || s.event_id || '/series',
                        'payload', jsonb_build_object('username', u.username, 'event_id', s.event_id,
                                                      'data_min', s.data_min, 'data_max', s.data_max))
                    ORDER BY s.series_id)
             FROM appended s JOIN account.users u ON u.id = s.user_id));
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.tg_pending_updates__events() IS
    'Statement trigger of series.pending_updates (transition table appended: the series an append wrote): when source series_writes is on (job_private.source_on), schedules one event per series: resource_type Series, action_type Append, resource_url /{username}/events/{event_id}/series, payload {username, event_id, data_min, data_max}.';

CREATE TRIGGER pending_updates_job_events_insert AFTER INSERT ON series.pending_updates
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_pending_updates__events();
CREATE TRIGGER pending_updates_job_events_update AFTER UPDATE ON series.pending_updates
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_pending_updates__events();

CREATE FUNCTION job_private.report_event(p_report purge.reports, p_action text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object(
        'resource_type', 'PurgeReport', 'action_type', p_action,
        'resource_url', '/purge/reports/' || p_report.execution_date,
        'payload', jsonb_build_object('execution_date', p_report.execution_date, 'mode', p_report.mode,
                                      'unit_of_works_to_delete', p_report.unit_of_works_to_delete,
                                      'unit_of_works_deleted', p_report.unit_of_works_deleted,
                                      'finished_at', p_report.finished_at));
$$;
COMMENT ON FUNCTION job_private.report_event(purge.reports, text) IS
    'The event of purge report p_report with action_type p_action (Start, Progress or Finish), as sql/job/06_sources.sql describes it. Raises nothing.';

-- Two trigger functions, one per statement kind: an INSERT trigger has no old_reports.
CREATE FUNCTION job_private.tg_reports__started()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF job_private.source_on('purge_reports') THEN
        PERFORM job_private.source_schedule(jsonb_agg(job_private.report_event(n, 'Start') ORDER BY n.execution_date))
        FROM new_reports n;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.tg_reports__started() IS
    'Statement trigger of purge.reports on INSERT (transition table new_reports): when source purge_reports is on (job_private.source_on), schedules one event per report created: resource_type PurgeReport, action_type Start, resource_url /purge/reports/{execution_date}, payload {execution_date, mode, unit_of_works_to_delete, unit_of_works_deleted, finished_at}.';

CREATE FUNCTION job_private.tg_reports__advanced()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF job_private.source_on('purge_reports') THEN
        PERFORM job_private.source_schedule(jsonb_agg(job_private.report_event(n,
                    CASE WHEN o.finished_at IS NULL AND n.finished_at IS NOT NULL THEN 'Finish' ELSE 'Progress' END)
                    ORDER BY n.execution_date))
        FROM new_reports n JOIN old_reports o USING (execution_date)
        WHERE (o.finished_at IS NULL AND n.finished_at IS NOT NULL)
           OR n.unit_of_works_deleted > o.unit_of_works_deleted OR n.dropped_partitions > o.dropped_partitions;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.tg_reports__advanced() IS
    'Statement trigger of purge.reports on UPDATE (transition tables new_reports and old_reports): when source purge_reports is on (job_private.source_on), schedules one event per report closed (action_type Finish) or advanced by a batch that deleted units of work or dropped partitions (Progress), as job_private.tg_reports__started; an update that did neither is no event.';

CREATE TRIGGER reports_job_events_insert AFTER INSERT ON purge.reports
    REFERENCING NEW TABLE AS new_reports FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_reports__started();
CREATE TRIGGER reports_job_events_update AFTER UPDATE ON purge.reports
    REFERENCING NEW TABLE AS new_reports OLD TABLE AS old_reports FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_reports__advanced();
