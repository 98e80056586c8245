-- Events: create, read one, update, trash and delete, with Pryv's rules. A series holder (type
-- series:{class}/{format}) gets a new series id and server-made content, and its type, content and
-- duration cannot be changed by an update (the series' data decides its duration). Every change is
-- published on the user's channel account:<username>:events.

CREATE FUNCTION account_private.event_json(p_event account.events)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('id', p_event.id, 'streamIds', to_jsonb(p_event.stream_ids), 'streamId', p_event.stream_ids[1],
               'type', p_event.type, 'time', p_event.time,
               'created', p_event.created, 'createdBy', p_event.created_by,
               'modified', p_event.modified, 'modifiedBy', p_event.modified_by)
        || CASE WHEN p_event.duration IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('duration', p_event.duration) END
        || CASE WHEN p_event.content IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('content', p_event.content) END
        || CASE WHEN p_event.tags IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('tags', to_jsonb(p_event.tags)) END
        || CASE WHEN p_event.description IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('description', p_event.description) END
        || CASE WHEN p_event.client_data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('clientData', p_event.client_data) END
        || CASE WHEN p_event.trashed THEN '{"trashed": true}'::jsonb ELSE '{}'::jsonb END;
$$;
COMMENT ON FUNCTION account_private.event_json(account.events) IS 'An event in Pryv''s shape: id, streamIds, streamId (the first), type, time, duration, content, tags, description and clientData when set, trashed when true, created, createdBy, modified, modifiedBy. Raises nothing.';

CREATE FUNCTION account_private.series_content(p_type text)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_element text := substr(p_type, 8);
    v jsonb;
BEGIN
    SELECT jsonb_build_object('elementType', v_element,
               'fields', '["deltaTime"]'::jsonb || jsonb_agg(f.field ORDER BY f.position),
               'required', '["deltaTime"]'::jsonb || coalesce(jsonb_agg(f.field ORDER BY f.position) FILTER (WHERE f.required), '[]'))
    INTO v
    FROM account.series_type_fields f WHERE f.type = v_element
    HAVING count(*) > 0;
    IF v IS NULL THEN
        RAISE EXCEPTION 'Event type ''%'' not allowed for High-Frequency Series', p_type USING ERRCODE = 'SATYP',
            HINT = 'A series type is series:{type} with a type of account.series_types (Pryv''s catalogue), e.g. series:mass/kg.';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION account_private.series_content(text) IS 'The server-made content of a series holder of type p_type (series:{type}), as Pryv has it: {elementType, fields: [deltaTime, ...], required: [deltaTime, ...]} from account.series_type_fields. Raises SATYP (invalid-event-type) when {type} is not a series type.';

-- The streams of a new or updated event: streamIds, or streamId alone, deduplicated in order.
CREATE FUNCTION account_private.event_streams(p_body jsonb)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_ids text[] := account_private.string_array(p_body, 'streamIds');
    v_one text := account_private.prop(p_body, 'streamId', 'string') #>> '{}';
BEGIN
    IF v_ids IS NOT NULL AND v_one IS NOT NULL AND v_ids[1] IS DISTINCT FROM v_one THEN
        RAISE EXCEPTION 'streamId and streamIds disagree: streamId must be the first of streamIds' USING ERRCODE = 'SAINV';
    END IF;
    v_ids := coalesce(v_ids, CASE WHEN v_one IS NULL THEN NULL ELSE ARRAY[v_one] END);
    IF v_ids IS NOT NULL THEN
        IF cardinality(v_ids) = 0 THEN
            RAISE EXCEPTION 'streamIds must not be empty' USING ERRCODE = 'SAINV';
        END IF;
        v_ids := ARRAY(SELECT i FROM unnest(v_ids) WITH ORDINALITY u(i, n) GROUP BY i ORDER BY min(n));
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION account_private.event_streams(jsonb) IS 'The stream ids that p_body gives (streamIds, or streamId alone), duplicates dropped, in order; NULL when it gives neither. Raises SAINV when they are not strings, streamIds is empty, or streamId is not the first of streamIds.';

-- The access must exist on every stream with the right: unknown streams are named first.
CREATE FUNCTION account_private.require_streams(p_by account.accesses, p_stream_ids text[], p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_missing text;
    v_denied text;
BEGIN
    SELECT i INTO v_missing FROM unnest(p_stream_ids) i
    WHERE NOT EXISTS (SELECT FROM account.streams s WHERE s.user_id = p_by.user_id AND s.id = i) LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION 'unknown stream "%"', v_missing USING ERRCODE = 'SAREF', DETAIL = format('streamIds %s', v_missing);
    END IF;
    SELECT i INTO v_denied FROM unnest(p_stream_ids) i
    LEFT JOIN account_private.stream_levels(p_by) l ON l.stream_id = i
    WHERE NOT account_private.can(l.level, p_action) LIMIT 1;
    IF v_denied IS NOT NULL THEN
        RAISE EXCEPTION 'this access may not % events in stream "%"', p_action, v_denied USING ERRCODE = 'SAFRB';
    END IF;
END
$$;
COMMENT ON FUNCTION account_private.require_streams(account.accesses, text[], text) IS 'Checks that every stream of p_stream_ids exists and that access p_by may p_action (account_private.can: create, write) in each. Raises SAREF (unknown-referenced-resource) for the first unknown stream, SAFRB (forbidden) for the first stream it lacks the right on.';

-- An event the access may see: it must exist (trashed or not) and be readable on one stream.
CREATE FUNCTION account_private.event_for(p_by account.accesses, p_id text, p_action text)
RETURNS account.events
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v account.events;
BEGIN
    SELECT * INTO v FROM account.events e WHERE e.user_id = p_by.user_id AND e.id = p_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Unknown event "%"', coalesce(p_id, 'NULL') USING ERRCODE = 'SANFD', DETAIL = format('id %s', p_id);
    END IF;
    IF p_action = 'read' THEN
        IF NOT EXISTS (SELECT FROM account_private.stream_levels(p_by) l
                       WHERE l.stream_id = ANY (v.stream_ids) AND account_private.can(l.level, 'read')) THEN
            RAISE EXCEPTION 'this access may not read event "%"', p_id USING ERRCODE = 'SAFRB';
        END IF;
    ELSE
        PERFORM account_private.require_streams(p_by, v.stream_ids, p_action);
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION account_private.event_for(account.accesses, text, text) IS 'The event p_id of the access''s user, trashed or not, when the access may p_action it: read needs read on one of its streams; write needs contribute on all (account_private.require_streams). Raises SANFD (unknown-resource) when there is no such event; SAFRB when the access lacks the right; SAREF when a stream of the event is gone.';

CREATE FUNCTION api.account_event_create(p_access_id text, p_event jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_streams text[];
    v_id text;
    v_type text;
    v_content jsonb;
    v_duration double precision;
    v_new account.events;
    v_now double precision := account_private.now_s();
BEGIN
    PERFORM account_private.require_object(p_event, 'the event');
    PERFORM account_private.require_keys(p_event, ARRAY['id', 'streamId', 'streamIds', 'type', 'time', 'duration', 'content',
        'tags', 'description', 'clientData', 'trashed'], 'the event');
    v_streams := account_private.event_streams(p_event);
    IF v_streams IS NULL THEN
        RAISE EXCEPTION 'property streamIds (or streamId) is required' USING ERRCODE = 'SAINV';
    END IF;
    v_type := account_private.prop(p_event, 'type', 'string') #>> '{}';
    IF v_type IS NULL OR v_type !~ '^(series:)?[a-z0-9-]+/[a-z0-9-]+$' THEN
        RAISE EXCEPTION 'property type is required and must be {class}/{format} or series:{class}/{format}, not %',
            coalesce(v_type, 'missing') USING ERRCODE = 'SAINV';
    END IF;
    v_id := account_private.prop(p_event, 'id', 'string') #>> '{}';
    IF v_id IS NOT NULL AND v_id !~ '^c[a-z0-9-]{24}$' THEN
        RAISE EXCEPTION 'invalid event id "%"', v_id USING ERRCODE = 'SAINV', HINT = 'An event id is c and 24 lowercase letters, digits or dashes (cuid-like).';
    END IF;
    v_content := p_event -> 'content';
    v_duration := account_private.seconds(p_event, 'duration');
    IF v_type LIKE 'series:%' THEN
        IF v_content IS NOT NULL THEN
            RAISE EXCEPTION 'a series event gets its content from the server: do not give content' USING ERRCODE = 'SAINV';
        END IF;
        v_content := account_private.series_content(v_type);
        v_duration := coalesce(v_duration, 0);
        IF v_duration <> 0 THEN
            RAISE EXCEPTION 'a series event starts with duration 0: its data sets it' USING ERRCODE = 'SAINV';
        END IF;
    END IF;
    IF v_duration < 0 THEN
        RAISE EXCEPTION 'duration must not be negative' USING ERRCODE = 'SAINV';
    END IF;
    PERFORM account_private.require_streams(v_by, v_streams, 'create');
    IF v_id IS NULL THEN
        v_id := account_private.new_id();
    END IF;
    INSERT INTO account.events (user_id, id, stream_ids, type, time, duration, content, tags, description, client_data,
                                series_id, trashed, created, created_by, modified, modified_by)
    VALUES (v_by.user_id, v_id, v_streams, v_type,
            coalesce(account_private.seconds(p_event, 'time'), v_now),
            v_duration, v_content,
            account_private.string_array(p_event, 'tags'), account_private.prop(p_event, 'description', 'string') #>> '{}',
            account_private.prop(p_event, 'clientData', 'object'),
            CASE WHEN v_type LIKE 'series:%' THEN nextval('account.series_id_seq') END,
            coalesce((account_private.prop(p_event, 'trashed', 'boolean') #>> '{}')::boolean, false),
            v_now, v_by.id, v_now, v_by.id)
    ON CONFLICT ON CONSTRAINT events_pkey DO NOTHING
    RETURNING * INTO v_new;
    IF v_new.id IS NULL THEN
        RAISE EXCEPTION 'an event with id "%" already exists', v_id USING ERRCODE = 'SACNF', DETAIL = format('id %s', v_id);
    END IF;
    DELETE FROM account.event_deletions d WHERE d.user_id = v_by.user_id AND d.id = v_id;
    PERFORM account_private.publish(v_by.user_id, 'events', 'created', jsonb_build_object('id', v_id));
    RETURN jsonb_build_object('event', account_private.event_json(v_new));
END
$$;
COMMENT ON FUNCTION api.account_event_create(text, jsonb) IS 'Creates an event on behalf of access p_access_id. p_event: Pryv''s event {streamIds or streamId, type, time? (seconds since the epoch, default now), duration?, content?, tags?, description?, clientData?, trashed?, id? (cuid-like: c and 24 lowercase letters, digits or dashes)}. type series:{class}/{format} makes a series holder: {class}/{format} must be in account.series_types, content is made by the server ({elementType, fields, required}) and must not be given, duration starts at 0, and the event gets a new series id. Needs create (contribute, manage or create-only) on every stream. An id of a deleted event may be used again (its account.event_deletions row goes). Returns {"event": {...}} in Pryv''s shape. Publishes kind created, payload {"id"}, on channel account:<username>:events (readers {account:<username>}). Raises SAAUT when p_access_id is unknown or deleted; SASTR when p_event is not an object; SAINV for unknown properties, missing streams or type, a malformed type, id, time, duration, tags, description or clientData, content or a non-zero duration on a series event; SATYP for a series type not in the catalogue; SAREF for an unknown stream; SAFRB without create on a stream; SACNF when the id is taken.';

CREATE FUNCTION api.account_event_get(p_access_id text, p_id text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('event', account_private.event_json(account_private.event_for(account_private.access(p_access_id), p_id, 'read')));
$$;
COMMENT ON FUNCTION api.account_event_get(text, text) IS 'Event p_id, trashed or not, in Pryv''s shape {"event": {...}}, when access p_access_id may read it (read, contribute or manage on one of its streams). Raises SAAUT when p_access_id is unknown or deleted; SANFD when there is no such event (or it was deleted); SAFRB when the access may not read it.';
