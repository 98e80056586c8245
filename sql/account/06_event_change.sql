-- Updating and deleting events. An update names the properties it changes (Pryv's alterable
-- ones); a series holder keeps its type, content and duration (a value equal to the stored one is
-- accepted, so a client may send the event back whole). DELETE trashes first and deletes the
-- second time, leaving account.event_deletions; a series holder's points go with it, and the
-- series id is never given again.

CREATE FUNCTION api.account_event_update(p_access_id text, p_id text, p_update jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_old account.events;
    v_new account.events;
    v_streams text[];
    v_type text;
    v_changed text;
BEGIN
    PERFORM account_private.require_object(p_update, 'the update');
    PERFORM account_private.require_keys(p_update, ARRAY['streamId', 'streamIds', 'time', 'duration', 'type', 'content',
        'tags', 'description', 'clientData', 'trashed'], 'the update');
    v_old := account_private.event_for(v_by, p_id, 'write');
    v_new := v_old;
    v_streams := account_private.event_streams(p_update);
    IF v_streams IS NOT NULL THEN
        PERFORM account_private.require_streams(v_by, v_streams, 'write');
        v_new.stream_ids := v_streams;
    END IF;
    IF p_update ? 'type' THEN
        v_type := account_private.prop(p_update, 'type', 'string', false) #>> '{}';
        IF v_type !~ '^(series:)?[a-z0-9-]+/[a-z0-9-]+$' THEN
            RAISE EXCEPTION 'type must be {class}/{format}, not %', v_type USING ERRCODE = 'SAINV';
        END IF;
        v_new.type := v_type;
    END IF;
    IF p_update ? 'time' THEN
        v_new.time := account_private.seconds(p_update, 'time', false);
    END IF;
    IF p_update ? 'duration' THEN
        v_new.duration := account_private.seconds(p_update, 'duration');
        IF v_new.duration < 0 THEN
            RAISE EXCEPTION 'duration must not be negative' USING ERRCODE = 'SAINV';
        END IF;
    END IF;
    IF p_update ? 'content' THEN
        v_new.content := p_update -> 'content';
    END IF;
    IF p_update ? 'tags' THEN
        v_new.tags := account_private.string_array(p_update, 'tags');
    END IF;
    IF p_update ? 'description' THEN
        v_new.description := account_private.prop(p_update, 'description', 'string') #>> '{}';
    END IF;
    IF p_update ? 'clientData' THEN
        v_new.client_data := account_private.prop(p_update, 'clientData', 'object');
    END IF;
    IF p_update ? 'trashed' THEN
        v_new.trashed := coalesce((account_private.prop(p_update, 'trashed', 'boolean') #>> '{}')::boolean, false);
    END IF;
    IF v_old.type LIKE 'series:%' OR v_new.type LIKE 'series:%' THEN
        v_changed := CASE WHEN v_new.type IS DISTINCT FROM v_old.type THEN 'type'
                          WHEN v_new.content IS DISTINCT FROM v_old.content THEN 'content'
                          WHEN v_new.duration IS DISTINCT FROM v_old.duration THEN 'duration' END;
        IF v_changed IS NOT NULL THEN
            RAISE EXCEPTION 'the % of a series event cannot be changed', v_changed USING ERRCODE = 'SAOPR',
                DETAIL = format('event %s is of type %s', p_id, v_old.type),
                HINT = 'A series event''s type and content are fixed when it is created; its duration follows its data.';
        END IF;
    END IF;
    UPDATE account.events e
    SET stream_ids = v_new.stream_ids, type = v_new.type, time = v_new.time, duration = v_new.duration,
        content = v_new.content, tags = v_new.tags, description = v_new.description, client_data = v_new.client_data,
        trashed = v_new.trashed, modified = account_private.now_s(), modified_by = v_by.id
    WHERE e.user_id = v_by.user_id AND e.id = p_id
    RETURNING * INTO v_new;
    PERFORM account_private.publish(v_by.user_id, 'events', 'updated', jsonb_build_object('id', p_id));
    RETURN jsonb_build_object('event', account_private.event_json(v_new));
END
$$;
COMMENT ON FUNCTION api.account_event_update(text, text, jsonb) IS 'Updates event p_id on behalf of access p_access_id. p_update: the properties to change, of streamIds (or streamId), time, duration, type, content, tags, description, clientData, trashed (false untrashes). Needs contribute on every stream of the event and of its new streams. A series event''s type, content and duration cannot change (equal values are accepted), nor can an event become a series event. Sets modified and modifiedBy. Returns {"event": {...}} in Pryv''s shape. Publishes kind updated, payload {"id"}, on channel account:<username>:events (readers {account:<username>}). Raises SAAUT when p_access_id is unknown or deleted; SASTR when p_update is not an object; SAINV for unknown properties or malformed values; SANFD when there is no such event; SAREF for an unknown stream; SAFRB without contribute; SAOPR for a change a series event does not allow.';

CREATE FUNCTION api.account_event_delete(p_access_id text, p_id text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_event account.events := account_private.event_for(v_by, p_id, 'write');
    v_now double precision := account_private.now_s();
BEGIN
    IF NOT v_event.trashed THEN
        UPDATE account.events e SET trashed = true, modified = v_now, modified_by = v_by.id
        WHERE e.user_id = v_by.user_id AND e.id = p_id
        RETURNING * INTO v_event;
        PERFORM account_private.publish(v_by.user_id, 'events', 'trashed', jsonb_build_object('id', p_id));
        RETURN jsonb_build_object('event', account_private.event_json(v_event));
    END IF;
    DELETE FROM account.events e WHERE e.user_id = v_by.user_id AND e.id = p_id;
    INSERT INTO account.event_deletions (user_id, id, deleted) VALUES (v_by.user_id, p_id, v_now)
    ON CONFLICT ON CONSTRAINT event_deletions_pkey DO UPDATE SET deleted = EXCLUDED.deleted;
    PERFORM account_private.publish(v_by.user_id, 'events', 'deleted', jsonb_build_object('id', p_id));
    RETURN jsonb_build_object('eventDeletion', jsonb_build_object('id', p_id, 'deleted', v_now));
END
$$;
COMMENT ON FUNCTION api.account_event_delete(text, text) IS 'Deletes event p_id on behalf of access p_access_id, as Pryv does: a live event is trashed and returned as {"event": {..., "trashed": true}} (kind trashed); a trashed one is deleted for good and {"eventDeletion": {"id", "deleted"}} returned (kind deleted), leaving a row of account.event_deletions; the row of a series holder goes, and with it (by its series id, never given again) its series. Needs contribute on every stream of the event. Publishes the kind, payload {"id"}, on channel account:<username>:events (readers {account:<username>}). Raises SAAUT when p_access_id is unknown or deleted; SANFD when there is no such event; SAFRB without contribute; SAREF when a stream of the event is gone.';

-- Whoever deletes a series holder (api.account_event_delete, a user's deletion cascading, a DBA),
-- its series is recorded for removal.
CREATE FUNCTION account_private.tg_events__series_deleted()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO account.series_deletions (series_id, user_id, event_id, deleted)
    SELECT o.series_id, o.user_id, o.id, account_private.now_s()
    FROM old_rows o WHERE o.series_id IS NOT NULL
    ON CONFLICT (series_id) DO NOTHING;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION account_private.tg_events__series_deleted() IS 'Statement trigger of account.events after DELETE: records the series of every deleted series holder in account.series_deletions, whoever deleted it. Raises nothing.';
CREATE TRIGGER events_series_deleted AFTER DELETE ON account.events
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION account_private.tg_events__series_deleted();
