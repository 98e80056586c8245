-- The job service, Silo's own changes as events: with sources.profile_updates True in the
-- configuration, every statement that writes the profile store schedules one event per profile
-- it touched, in the writing transaction: {"resource_type": "Profile", "action_type": "Update"
-- (insert or update) or "Delete", "resource_url": "/profiles/{profile_type}/{correlation_id}",
-- "payload": {"profile_type", "correlation_id"}}. The routing rules decide what they become, as
-- for any event (an event no rule routes is dropped). A source that is off costs the write one
-- probe of job.config.
--
-- Writes made by a hook inside a dispatch step (api.job_dispatch sets silo.job_hook for its
-- transaction) are no new events: a hook's own follow-up work is its jobs, counted in generations,
-- so a hook that writes profiles cannot feed itself without end.

CREATE FUNCTION job_private.tg_profilestore__events()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_events jsonb;
BEGIN
    IF NOT EXISTS (SELECT FROM job.config c WHERE 'profile_updates' = ANY (c.sources))
       OR coalesce(current_setting('silo.job_hook', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    SELECT jsonb_agg(jsonb_build_object(
               'resource_type', 'Profile',
               'action_type', CASE WHEN TG_OP = 'DELETE' THEN 'Delete' ELSE 'Update' END,
               'resource_url', '/profiles/' || t.profile_type || '/' || t.correlation_id,
               'payload', jsonb_build_object('profile_type', t.profile_type, 'correlation_id', t.correlation_id))
           ORDER BY t.correlation_id, t.profile_type)
    INTO v_events
    FROM (SELECT DISTINCT g.profile_type, g.correlation_id FROM grains g) t;
    IF v_events IS NOT NULL THEN  -- an upsert fires the UPDATE trigger with no rows too
        PERFORM count(*) FROM job_private.schedule(v_events);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION job_private.tg_profilestore__events() IS
    'Statement trigger of profile.profilestore (transition table grains): when job.config.sources holds profile_updates and the write is not a hook''s inside a dispatch step (silo.job_hook), schedules one event per profile the statement touched: resource_type Profile, action_type Update or Delete, resource_url /profiles/{type}/{id}, payload {profile_type, correlation_id}.';

CREATE TRIGGER profilestore_job_events_insert AFTER INSERT ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();
CREATE TRIGGER profilestore_job_events_update AFTER UPDATE ON profile.profilestore
    REFERENCING NEW TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();
CREATE TRIGGER profilestore_job_events_delete AFTER DELETE ON profile.profilestore
    REFERENCING OLD TABLE AS grains FOR EACH STATEMENT EXECUTE FUNCTION job_private.tg_profilestore__events();
