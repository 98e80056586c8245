-- Profile store, change notifications: what Silo's own write path does not record itself. The
-- statement triggers record every other writer of profile.profilestore (the reaper's deletions, a
-- DBA's INSERT, UPDATE or DELETE); a row trigger tells the old reader of a grain whose reader
-- changed; a statement trigger publishes every new dead letter. Channels and payloads are
-- described in sql/change/01_publish.sql.

-- profile_private.tg_profilestore__change: internal. AFTER INSERT, UPDATE and DELETE statement trigger of
-- profile.profilestore: one compact pending row with the grain rows the statement wrote (kind
-- changed; updated rows under their new reader, the old one being recorded by the row trigger
-- below) or deleted (kind deleted), unless change_private.triggers_on() says otherwise. Each of its
-- triggers names its transition table grains.
-- Raises: nothing.
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
    'Internal: AFTER INSERT, UPDATE and DELETE statement trigger of profile.profilestore; records the grains written (kind changed, under their new reader) or deleted (kind deleted) as one compact pending change (channel profile:*), which api.change_sequence expands into one change per profile and grain reader. Does nothing while silo.change_capture or silo.change_triggers is off.';

-- profile_private.tg_profilestore__reader_change: internal. AFTER UPDATE row trigger of profile.profilestore
-- for rows whose reader changed (whoever writes them): one compact pending row (kind changed) for
-- the grain under its old reader, so that subscribers who could read it learn that it changed,
-- unless silo.change_capture is off.
-- Raises: nothing.
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
    'Internal: AFTER UPDATE row trigger of profile.profilestore, for rows whose reader changed; records the grain under its old reader (channel profile:*, kind changed) so that subscribers who could read it learn that it changed. Does nothing while silo.change_capture is off.';

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

-- profile_private.tg_dead_letters__change: internal. AFTER INSERT statement trigger of profile.dead_letters: one
-- pending change per dead letter on channel dead-letters (kind dead_letter, admins only).
-- Raises: nothing.
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
    'Internal: AFTER INSERT statement trigger of profile.dead_letters; records one change per dead letter (channel dead-letters, kind dead_letter, payload id, correlation_id, profile_type, operation, sqlstate, reason; readers empty: admins only).';

CREATE TRIGGER dead_letters_change AFTER INSERT ON profile.dead_letters
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION profile_private.tg_dead_letters__change();
