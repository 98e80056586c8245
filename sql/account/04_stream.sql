-- Streams: each user's tree. Creating one needs manage on its parent (on * or a personal access
-- for a root); listing shows the streams the access has any level on, as trees whose roots are
-- the visible streams with no visible parent (Pryv's shape, with children).

CREATE FUNCTION account_private.stream_json(p_stream account.streams)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('id', p_stream.id, 'name', p_stream.name, 'parentId', p_stream.parent_id,
               'created', p_stream.created, 'createdBy', p_stream.created_by,
               'modified', p_stream.modified, 'modifiedBy', p_stream.modified_by)
        || CASE WHEN p_stream.client_data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('clientData', p_stream.client_data) END
        || CASE WHEN p_stream.trashed THEN '{"trashed": true}'::jsonb ELSE '{}'::jsonb END;
$$;
COMMENT ON FUNCTION account_private.stream_json(account.streams) IS 'A stream in Pryv''s shape without children: id, name, parentId (null for a root), clientData when set, trashed when true, created, createdBy, modified, modifiedBy. Raises nothing.';

CREATE FUNCTION account_private.stream_tree(p_user_id bigint, p_ids text[], p_with_trashed boolean)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(account_private.stream_json(s)
                || jsonb_build_object('children', account_private.stream_tree(p_user_id,
                       ARRAY(SELECT c.id FROM account.streams c WHERE c.user_id = p_user_id AND c.parent_id = s.id), p_with_trashed))
                ORDER BY s.name, s.id), '[]')
            FROM account.streams s
            WHERE s.user_id = p_user_id AND s.id = ANY (p_ids) AND (p_with_trashed OR NOT s.trashed));
END
$$;
COMMENT ON FUNCTION account_private.stream_tree(bigint, text[], boolean) IS 'The streams p_ids of user p_user_id as a JSON array of Pryv streams ordered by name, each with its children (all of them: a permission covers descendants), trashed ones only when p_with_trashed. Raises nothing.';

CREATE FUNCTION api.account_stream_create(p_access_id text, p_stream jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_id text;
    v_name text;
    v_parent text;
    v_new account.streams;
    v_now double precision := account_private.now_s();
    v_n integer := 1;
    v_constraint text;
BEGIN
    PERFORM account_private.require_object(p_stream, 'the stream');
    PERFORM account_private.require_keys(p_stream, ARRAY['id', 'name', 'parentId', 'clientData', 'trashed', 'children'], 'the stream');
    v_name := account_private.prop(p_stream, 'name', 'string') #>> '{}';
    IF coalesce(v_name, '') = '' THEN
        RAISE EXCEPTION 'property name is required and must not be empty' USING ERRCODE = 'SAINV';
    END IF;
    v_id := account_private.prop(p_stream, 'id', 'string') #>> '{}';
    IF v_id IS NOT NULL AND v_id !~ '^[a-z0-9-]{1,100}$' THEN
        RAISE EXCEPTION 'invalid stream id "%"', v_id USING ERRCODE = 'SAINV',
            HINT = 'A stream id is 1 to 100 lowercase letters, digits and dashes.';
    END IF;
    v_parent := account_private.prop(p_stream, 'parentId', 'string') #>> '{}';
    IF v_parent IS NOT NULL AND NOT EXISTS (SELECT FROM account.streams s WHERE s.user_id = v_by.user_id AND s.id = v_parent) THEN
        RAISE EXCEPTION 'unknown parent stream "%"', v_parent USING ERRCODE = 'SAREF', DETAIL = format('parentId %s', v_parent);
    END IF;
    IF NOT account_private.can(account_private.level_on(v_by, coalesce(v_parent, '*')), 'manage') THEN
        RAISE EXCEPTION 'this access may not create streams %', CASE WHEN v_parent IS NULL THEN 'at the root' ELSE 'in "' || v_parent || '"' END
            USING ERRCODE = 'SAFRB';
    END IF;
    IF v_id IS NULL THEN
        -- Pryv makes the id from the name: a slug, with a number added while it is taken.
        v_id := left(trim(BOTH '-' FROM regexp_replace(lower(v_name), '[^a-z0-9]+', '-', 'g')), 90);
        IF v_id = '' THEN
            v_id := account_private.new_id();
        END IF;
        WHILE EXISTS (SELECT FROM account.streams s WHERE s.user_id = v_by.user_id
                      AND s.id = v_id || CASE WHEN v_n = 1 THEN '' ELSE '-' || v_n END) LOOP
            v_n := v_n + 1;
        END LOOP;
        v_id := v_id || CASE WHEN v_n = 1 THEN '' ELSE '-' || v_n END;
    END IF;
    BEGIN
        INSERT INTO account.streams (user_id, id, name, parent_id, client_data, trashed, created, created_by, modified, modified_by)
        VALUES (v_by.user_id, v_id, v_name, v_parent, account_private.prop(p_stream, 'clientData', 'object'),
                coalesce((account_private.prop(p_stream, 'trashed', 'boolean'))::boolean, false),
                v_now, v_by.id, v_now, v_by.id)
        RETURNING * INTO v_new;
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        IF v_constraint = 'streams_pkey' THEN
            RAISE EXCEPTION 'a stream with id "%" already exists', v_id USING ERRCODE = 'SACNF', DETAIL = format('id %s', v_id);
        END IF;
        RAISE EXCEPTION 'a sibling stream named "%" already exists', v_name USING ERRCODE = 'SACNF', DETAIL = format('name %s', v_name);
    END;
    PERFORM account_private.publish(v_by.user_id, 'streams', 'created', jsonb_build_object('id', v_id));
    RETURN jsonb_build_object('stream', account_private.stream_json(v_new) || '{"children": []}'::jsonb);
END
$$;
COMMENT ON FUNCTION api.account_stream_create(text, jsonb) IS 'Creates a stream on behalf of access p_access_id. p_stream: Pryv''s stream {name, id?, parentId?, clientData?, trashed?}; without id, the id is made from the name (a slug, numbered while taken). Needs manage on the parent, or for a root stream a personal access or manage on *. Returns {"stream": {...}} in Pryv''s shape. Publishes kind created on channel account:<username>:streams (readers {account:<username>}). Raises SAAUT when p_access_id is unknown or deleted; SASTR when p_stream is not an object; SAINV for unknown properties, a missing or empty name, an invalid id; SAREF for an unknown parent; SAFRB without manage there; SACNF when the id or a sibling''s name is taken.';

CREATE FUNCTION api.account_streams_get(p_access_id text, p_parent_id text DEFAULT NULL, p_state text DEFAULT 'default')
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_visible text[];
    v_roots text[];
BEGIN
    IF p_state IS NULL OR p_state NOT IN ('default', 'all') THEN
        RAISE EXCEPTION 'state must be default or all, not %', coalesce(p_state, 'NULL') USING ERRCODE = 'SAINV';
    END IF;
    SELECT array_agg(l.stream_id) INTO v_visible FROM account_private.stream_levels(v_by) l WHERE account_private.can(l.level, 'see');
    v_visible := coalesce(v_visible, '{}');
    IF p_parent_id IS NOT NULL THEN
        IF NOT p_parent_id = ANY (v_visible) THEN
            RAISE EXCEPTION 'unknown stream "%"', p_parent_id USING ERRCODE = 'SAREF', DETAIL = format('parentId %s', p_parent_id);
        END IF;
        v_roots := ARRAY(SELECT s.id FROM account.streams s WHERE s.user_id = v_by.user_id AND s.parent_id = p_parent_id);
    ELSE
        v_roots := ARRAY(SELECT s.id FROM account.streams s WHERE s.user_id = v_by.user_id AND s.id = ANY (v_visible)
                         AND (s.parent_id IS NULL OR NOT s.parent_id = ANY (v_visible)));
    END IF;
    RETURN jsonb_build_object('streams', account_private.stream_tree(v_by.user_id, v_roots, p_state = 'all'));
END
$$;
COMMENT ON FUNCTION api.account_streams_get(text, text, text) IS 'The streams access p_access_id may see (any level), in Pryv''s shape {"streams": [...]}: trees with children, ordered by name, whose roots are the visible streams without a visible parent; p_parent_id (default NULL): only the children of that stream; p_state (default default): default leaves trashed streams out, all includes them. Raises SAAUT when p_access_id is unknown or deleted; SAINV for another p_state; SAREF when p_parent_id is not a stream the access sees.';
