-- Profile store, change notifications: the triggers that publish the changes of
-- profile.profilestore and profile.dead_letters that no code publishes itself. Silo's write path
-- (profile_private.apply_direct and profile_private.apply_general, sql/profile/05_direct.sql and
-- 06_general.sql) publishes the grains its statements write from their RETURNING rows, one compact
-- row per statement and kind (change_private.publish_grains), and runs with silo.change_triggers
-- off: on the hot path that costs a fraction of what transition tables and trigger calls cost.
-- Every other writer (the reaper's TTL deletions, a DBA's INSERT, UPDATE or DELETE in psql) has no
-- such code, so the statement triggers here publish for it: no change of the profile store goes
-- unannounced, whoever makes it, unless the session turned silo.change_capture off. The reader row
-- trigger fires for every writer, the write path included: RETURNING shows only the new reader, and
-- the old one must learn that the grain changed. Every dead letter, whichever path rejected its
-- message, is published by the trigger of profile.dead_letters. Channels and payloads are described
-- in sql/change/01_publish.sql.

-- A statement trigger over the transition table: one compact change per statement, however many
-- rows it wrote. Each of its triggers names its transition table grains.
CREATE FUNCTION profile_private.tg_profilestore__change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF change_private.triggers_on() THEN
        PERFORM change_private.publish_grains(CASE TG_OP WHEN 'DELETE' THEN 'deleted' ELSE 'changed' END,
                                              array_agg(g.correlation_id), array_agg(g.profile_type),
                                              array_agg(g.reader), array_agg(g.path))
        FROM grains g;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION profile_private.tg_profilestore__change() IS
    'AFTER INSERT, UPDATE and DELETE statement trigger of profile.profilestore (triggers profilestore_change_insert, _update and _delete): publishes the grains the statement wrote (kind changed; updated rows under their new reader) or deleted (kind deleted) with change_private.publish_grains, one compact change that api.change_sequence expands into one change per profile and grain reader on channel profile:{type}:{id}. Does nothing while silo.change_capture or silo.change_triggers is off (change_private.triggers_on). Raises nothing.';

-- A row trigger, but only for the rows whose reader changes (its WHEN clause), so the usual update
-- pays nothing; it does not check silo.change_triggers because the write path cannot publish the
-- old reader itself.
CREATE FUNCTION profile_private.tg_profilestore__reader_change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM change_private.publish_grains('changed', ARRAY[OLD.correlation_id], ARRAY[OLD.profile_type],
                                          ARRAY[OLD.reader], ARRAY[OLD.path]);
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION profile_private.tg_profilestore__reader_change() IS
    'AFTER UPDATE row trigger of profile.profilestore for rows whose reader changed, whoever writes them (trigger profilestore_reader_change): publishes the grain under its old reader (change_private.publish_grains, kind changed, channel profile:{type}:{id}) so that subscribers who could read it learn that it changed. Does nothing while silo.change_capture is off. Raises nothing.';

-- Multi-event triggers may not have transition tables: one trigger per event, one function.
CREATE TRIGGER profilestore_change_insert AFTER INSERT ON profile.profilestore
    REFERENCING NEW TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION profile_private.tg_profilestore__change();
CREATE TRIGGER profilestore_change_update AFTER UPDATE ON profile.profilestore
    REFERENCING NEW TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION profile_private.tg_profilestore__change();
CREATE TRIGGER profilestore_change_delete AFTER DELETE ON profile.profilestore
    REFERENCING OLD TABLE AS grains
    FOR EACH STATEMENT EXECUTE FUNCTION profile_private.tg_profilestore__change();
CREATE TRIGGER profilestore_reader_change AFTER UPDATE OF reader ON profile.profilestore
    FOR EACH ROW WHEN (OLD.reader IS DISTINCT FROM NEW.reader)
    EXECUTE FUNCTION profile_private.tg_profilestore__reader_change();

-- One set-based INSERT into change_private.outbox per statement. Not subject to
-- silo.change_capture: a bulk load that hides its profile changes still announces its rejections.
CREATE FUNCTION profile_private.tg_dead_letters__change()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    INSERT INTO change_private.outbox (channel, kind, payload, readers)
    SELECT 'dead-letters', 'dead_letter',
           jsonb_build_object('id', n.id, 'correlation_id', n.correlation_id, 'profile_type', n.profile_type,
                              'operation', n.operation, 'sqlstate', n.sqlstate, 'reason', n.reason),
           '{}'
    FROM new_rows n
    ORDER BY n.id;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION profile_private.tg_dead_letters__change() IS
    'AFTER INSERT statement trigger of profile.dead_letters (trigger dead_letters_change): publishes one change per new dead letter, in id order, on channel dead-letters (kind dead_letter; payload {"id", "correlation_id", "profile_type", "operation", "sqlstate", "reason"}; readers empty: admins only). Raises nothing.';

CREATE TRIGGER dead_letters_change AFTER INSERT ON profile.dead_letters
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION profile_private.tg_dead_letters__change();
