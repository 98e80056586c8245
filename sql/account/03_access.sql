-- Accesses: who a request is, and what it may do on which stream. A request names its user and
-- brings a token; api.account_authenticate turns them into the access id that every other
-- api.account_* function takes (as the profile functions take a token id). The permission rule is
-- Pryv's: an app access's permission on a stream covers its descendants, the nearest permission up
-- the tree wins, * last; a personal access manages everything.

CREATE FUNCTION api.account_authenticate(
    p_username text,
    p_token text,
    OUT access_id text,
    OUT user_id bigint,
    OUT username text,
    OUT access_type text,
    OUT readers text[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT u.id, u.username INTO user_id, username FROM account.users u WHERE u.username = p_username;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown user "%"', coalesce(p_username, 'NULL') USING ERRCODE = 'SANFD';
    END IF;
    IF coalesce(p_token, '') = '' THEN
        RAISE EXCEPTION 'Missing expected header "authorization"' USING ERRCODE = 'SAHDR',
            HINT = 'Send the access token as "Authorization: <token>", "Authorization: Bearer <token>", the user part of basic auth (http://<token>@host/<username>/...) or ?auth=<token>.';
    END IF;
    SELECT a.id, a.type INTO access_id, access_type
    FROM account.accesses a
    WHERE a.token_hash = account_private.token_hash(p_token) AND a.user_id = account_authenticate.user_id
      AND a.deleted IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Cannot find access from token.' USING ERRCODE = 'SAAUT';
    END IF;
    readers := account_private.readers(username);
END
$$;
COMMENT ON FUNCTION api.account_authenticate(text, text) IS 'The access of a request to user p_username that brings token p_token: one row of access_id (what the other api.account_* functions take), user_id, username, access_type (personal or app) and readers (the reader role of the user''s changes, {account:<username>}). Raises SANFD when the user does not exist; SAHDR when p_token is NULL or empty; SAAUT when the token is unknown, deleted, or another user''s.';

-- One access, loaded by every operation: it must be live.
CREATE FUNCTION account_private.access(p_access_id text)
RETURNS account.accesses
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v account.accesses;
BEGIN
    SELECT * INTO v FROM account.accesses a WHERE a.id = p_access_id AND a.deleted IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown or deleted access "%"', coalesce(p_access_id, 'NULL') USING ERRCODE = 'SAAUT';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION account_private.access(text) IS 'The live access of id p_access_id. Raises SAAUT (invalid-access-token) when there is none or it is deleted.';

CREATE FUNCTION account_private.username(p_user_id bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT u.username FROM account.users u WHERE u.id = p_user_id;
$$;
COMMENT ON FUNCTION account_private.username(bigint) IS 'The username of user p_user_id. Raises nothing.';

-- Every stream of the user with the access's level on it (NULL: none), walked down from the
-- roots so each stream inherits its parent's level unless it has a permission of its own.
CREATE FUNCTION account_private.stream_levels(p_access account.accesses)
RETURNS TABLE (stream_id text, level text)
LANGUAGE sql STABLE
AS $$
    WITH RECURSIVE perm AS (
        SELECT p.stream_id, p.level FROM account.permissions p WHERE p.access_id = p_access.id
    ), tree AS (
        SELECT s.id, CASE WHEN p_access.type = 'personal' THEN 'manage'
                          ELSE coalesce((SELECT perm.level FROM perm WHERE perm.stream_id = s.id),
                                        (SELECT perm.level FROM perm WHERE perm.stream_id = '*')) END AS level
        FROM account.streams s
        WHERE s.user_id = p_access.user_id AND s.parent_id IS NULL
        UNION ALL
        SELECT c.id, CASE WHEN p_access.type = 'personal' THEN 'manage'
                          ELSE coalesce((SELECT perm.level FROM perm WHERE perm.stream_id = c.id), t.level) END
        FROM account.streams c JOIN tree t ON c.user_id = p_access.user_id AND c.parent_id = t.id
    )
    SELECT tree.id, tree.level FROM tree;
$$;
COMMENT ON FUNCTION account_private.stream_levels(account.accesses) IS 'Every stream of the access''s user with the access''s level on it: manage for a personal access; for an app access the level of its permission on the stream, else its parent''s level, else the level of its * permission, else NULL (no right). Raises nothing.';

CREATE FUNCTION account_private.level_on(p_access account.accesses, p_stream_id text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_access.type = 'personal' THEN 'manage'
                WHEN p_stream_id = '*' THEN (SELECT p.level FROM account.permissions p WHERE p.access_id = p_access.id AND p.stream_id = '*')
                ELSE (SELECT l.level FROM account_private.stream_levels(p_access) l WHERE l.stream_id = p_stream_id) END;
$$;
COMMENT ON FUNCTION account_private.level_on(account.accesses, text) IS 'The access''s level on one stream (see account_private.stream_levels), or on * (a personal access: manage; an app access: its * permission). NULL: no right, or no such stream. Raises nothing.';

CREATE FUNCTION account_private.can(p_level text, p_action text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(CASE p_action
        WHEN 'read' THEN p_level IN ('read', 'contribute', 'manage')
        WHEN 'see' THEN p_level IN ('read', 'contribute', 'manage', 'create-only')
        WHEN 'create' THEN p_level IN ('contribute', 'manage', 'create-only')
        WHEN 'write' THEN p_level IN ('contribute', 'manage')
        WHEN 'manage' THEN p_level = 'manage'
    END, false);
$$;
COMMENT ON FUNCTION account_private.can(text, text) IS 'Whether level p_level (read, contribute, manage, create-only, NULL) allows p_action: read (events of the stream), see (the stream itself: every level), create (events and series points), write (update and delete events), manage (streams and accesses). Raises nothing.';

CREATE FUNCTION account_private.access_json(p_access account.accesses)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('id', p_access.id, 'type', p_access.type, 'name', p_access.name,
               'created', p_access.created, 'createdBy', p_access.created_by,
               'modified', p_access.modified, 'modifiedBy', p_access.modified_by)
        || CASE WHEN p_access.type = 'personal' THEN '{}'::jsonb ELSE jsonb_build_object('permissions',
               (SELECT coalesce(jsonb_agg(jsonb_build_object('streamId', p.stream_id, 'level', p.level) ORDER BY p.stream_id), '[]')
                FROM account.permissions p WHERE p.access_id = p_access.id)) END
        || CASE WHEN p_access.device_name IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('deviceName', p_access.device_name) END
        || CASE WHEN p_access.client_data IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('clientData', p_access.client_data) END;
$$;
COMMENT ON FUNCTION account_private.access_json(account.accesses) IS 'An access in Pryv''s shape, without its token (only its hash is kept): id, type, name, permissions (app accesses), deviceName and clientData when set, created, createdBy, modified, modifiedBy. Raises nothing.';

CREATE FUNCTION api.account_access_create(p_access_id text, p_access jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_by account.accesses := account_private.access(p_access_id);
    v_new account.accesses;
    v_perms jsonb;
    v_perm jsonb;
    v_stream text;
    v_level text;
    v_token text := account_private.new_token();
    v_now double precision := account_private.now_s();
BEGIN
    PERFORM account_private.require_object(p_access, 'the access');
    PERFORM account_private.require_keys(p_access, ARRAY['name', 'type', 'permissions', 'deviceName', 'clientData'], 'the access');
    IF coalesce(p_access ->> 'type', 'app') <> 'app' THEN
        RAISE EXCEPTION 'only app accesses can be created here, not %', p_access ->> 'type' USING ERRCODE = 'SAINV',
            HINT = 'A personal access comes with the user (silo user create).';
    END IF;
    IF coalesce(account_private.prop(p_access, 'name', 'string') #>> '{}', '') = '' THEN
        RAISE EXCEPTION 'property name is required and must not be empty' USING ERRCODE = 'SAINV';
    END IF;
    v_perms := account_private.prop(p_access, 'permissions', 'array');
    IF v_perms IS NULL OR jsonb_array_length(v_perms) = 0 THEN
        RAISE EXCEPTION 'property permissions is required: a non-empty array of {streamId, level}' USING ERRCODE = 'SAINV';
    END IF;
    IF v_by.type <> 'personal' AND NOT EXISTS (SELECT FROM account.permissions p WHERE p.access_id = v_by.id AND p.level = 'manage') THEN
        RAISE EXCEPTION 'this access may not create accesses' USING ERRCODE = 'SAFRB',
            HINT = 'A personal access, or an app access with manage permissions, creates app accesses.';
    END IF;
    FOR v_perm IN SELECT e FROM jsonb_array_elements(v_perms) e LOOP
        IF jsonb_typeof(v_perm) <> 'object' OR jsonb_typeof(v_perm -> 'streamId') IS DISTINCT FROM 'string'
           OR jsonb_typeof(v_perm -> 'level') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'each permission must be an object {streamId, level} of strings' USING ERRCODE = 'SAINV',
                DETAIL = format('got %s', v_perm);
        END IF;
        PERFORM account_private.require_keys(v_perm, ARRAY['streamId', 'level', 'defaultName', 'name'], 'a permission');
        v_stream := v_perm ->> 'streamId';
        v_level := v_perm ->> 'level';
        IF v_level NOT IN ('read', 'contribute', 'manage', 'create-only') THEN
            RAISE EXCEPTION 'unknown permission level "%"', v_level USING ERRCODE = 'SAINV',
                HINT = 'A level is read, contribute, manage or create-only.';
        END IF;
        IF v_stream <> '*' AND NOT EXISTS (SELECT FROM account.streams s WHERE s.user_id = v_by.user_id AND s.id = v_stream) THEN
            RAISE EXCEPTION 'unknown stream "%" in permissions', v_stream USING ERRCODE = 'SAREF',
                DETAIL = format('streamId %s', v_stream);
        END IF;
        IF NOT account_private.can(account_private.level_on(v_by, v_stream), 'manage') THEN
            RAISE EXCEPTION 'this access does not manage stream "%": it cannot grant permissions on it', v_stream USING ERRCODE = 'SAFRB';
        END IF;
    END LOOP;
    IF (SELECT count(DISTINCT e ->> 'streamId') FROM jsonb_array_elements(v_perms) e) <> jsonb_array_length(v_perms) THEN
        RAISE EXCEPTION 'a stream appears twice in permissions' USING ERRCODE = 'SAINV';
    END IF;
    INSERT INTO account.accesses (id, user_id, type, name, device_name, token_hash, client_data,
                                  created, created_by, modified, modified_by)
    VALUES (account_private.new_id(), v_by.user_id, 'app', p_access ->> 'name',
            account_private.prop(p_access, 'deviceName', 'string') #>> '{}', account_private.token_hash(v_token),
            account_private.prop(p_access, 'clientData', 'object'), v_now, v_by.id, v_now, v_by.id)
    ON CONFLICT (user_id, type, name, coalesce(device_name, '')) WHERE deleted IS NULL DO NOTHING
    RETURNING * INTO v_new;
    IF v_new.id IS NULL THEN
        RAISE EXCEPTION 'an app access named "%" already exists', p_access ->> 'name' USING ERRCODE = 'SACNF',
            DETAIL = format('name %s', p_access ->> 'name');
    END IF;
    INSERT INTO account.permissions (access_id, stream_id, level)
    SELECT v_new.id, e ->> 'streamId', e ->> 'level' FROM jsonb_array_elements(v_perms) e;
    RETURN jsonb_build_object('access', account_private.access_json(v_new) || jsonb_build_object('token', v_token));
END
$$;
COMMENT ON FUNCTION api.account_access_create(text, jsonb) IS 'Creates an app access on behalf of access p_access_id. p_access: Pryv''s access {name, permissions: [{streamId, level}], type? (app, the only one), deviceName?, clientData?}; streamId * covers every stream; level read, contribute, manage or create-only. A personal access may grant anything; an app access only on streams it manages (so never wider than its own). Returns {"access": {id, token, type, name, permissions, created, createdBy, modified, modifiedBy, ...}}: the token in plain text, the only time it is visible. Raises SAAUT when p_access_id is unknown or deleted; SASTR when p_access is not an object; SAINV for unknown properties, a missing name or permissions, another type than app, a malformed permission, an unknown level, a stream twice; SAREF for a stream that does not exist; SAFRB when the caller manages nothing or not a stream it grants; SACNF when a live app access of that name and device name exists.';

CREATE FUNCTION api.account_accesses_get(p_access_id text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT jsonb_build_object('accesses', coalesce(jsonb_agg(account_private.access_json(a) ORDER BY a.created, a.id), '[]'))
    FROM account_private.access(p_access_id) v_by
    JOIN account.accesses a ON a.user_id = v_by.user_id AND a.deleted IS NULL
     AND (v_by.type = 'personal' OR a.created_by = v_by.id);
$$;
COMMENT ON FUNCTION api.account_accesses_get(text) IS 'The accesses access p_access_id may list, in Pryv''s shape {"accesses": [...]}, oldest first, without tokens (only their hashes are kept): every live access of the user for a personal access, the ones it created for an app access. Raises SAAUT when p_access_id is unknown or deleted.';

CREATE FUNCTION api.account_access_info(p_access_id text)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT account_private.access_json(a) || jsonb_build_object('user', jsonb_build_object('username', u.username))
    FROM account_private.access(p_access_id) a JOIN account.users u ON u.id = a.user_id;
$$;
COMMENT ON FUNCTION api.account_access_info(text) IS 'What access p_access_id is, in the shape of Pryv''s GET /{username}/access-info: the access (id, type, name, permissions, ..., without the token) and user {username}. Raises SAAUT when p_access_id is unknown or deleted.';
