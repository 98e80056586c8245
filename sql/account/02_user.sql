-- Users and their personal access. A username follows Pryv's rule and never shadows one of Silo's
-- own routes (account.reserved_usernames, which a test keeps in step with the route table).

CREATE FUNCTION api.account_username_problem(p_username text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_username IS NULL OR p_username !~ '^[a-z0-9][a-z0-9-]{3,58}[a-z0-9]$' THEN
            'a username is 5 to 60 lowercase letters, digits and dashes, starting and ending with a letter or digit'
        WHEN EXISTS (SELECT FROM account.reserved_usernames r WHERE r.username = p_username) THEN
            'reserved: ' || (SELECT r.reason FROM account.reserved_usernames r WHERE r.username = p_username)
    END;
$$;
COMMENT ON FUNCTION api.account_username_problem(text) IS 'Why p_username cannot name a user (text), or NULL when it can (taken or not): it breaks Pryv''s rule (5 to 60 lowercase letters, digits and dashes, starting and ending with a letter or digit), or it is reserved (account.reserved_usernames: Silo''s own top-level routes). Raises nothing.';

CREATE FUNCTION api.account_user_create(
    p_username text,
    p_access_name text DEFAULT 'silo',
    OUT username text,
    OUT access_id text,
    OUT token text)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_problem text := api.account_username_problem(p_username);
    v_user_id bigint;
    v_now double precision := account_private.now_s();
BEGIN
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid username "%": %', coalesce(p_username, 'NULL'), v_problem USING ERRCODE = 'SAUSR';
    END IF;
    IF coalesce(p_access_name, '') = '' THEN
        RAISE EXCEPTION 'the access name must not be empty' USING ERRCODE = 'SAINV';
    END IF;
    INSERT INTO account.users (username) VALUES (p_username)
    ON CONFLICT ON CONSTRAINT users_username_key DO NOTHING
    RETURNING id INTO v_user_id;
    IF v_user_id IS NULL THEN
        RAISE EXCEPTION 'user "%" already exists', p_username USING ERRCODE = 'SACNF';
    END IF;
    access_id := account_private.new_id();
    token := account_private.new_token();
    INSERT INTO account.accesses (id, user_id, type, name, token_hash, created, created_by, modified, modified_by)
    VALUES (access_id, v_user_id, 'personal', p_access_name, account_private.token_hash(token),
            v_now, access_id, v_now, access_id);
    username := p_username;
END
$$;
COMMENT ON FUNCTION api.account_user_create(text, text) IS 'Creates user p_username and its personal access named p_access_name (default silo), which has every right on the user''s data. Returns one row: username, access_id, and token, the personal access token in plain text (the only time it is visible: only its SHA-256 is stored). Raises SAUSR when the username breaks Pryv''s rule or is reserved (api.account_username_problem says why); SAINV for an empty access name; SACNF when the user exists.';

CREATE VIEW api.account_users AS
    SELECT u.username, u.created,
           (SELECT count(*) FROM account.accesses a WHERE a.user_id = u.id AND a.deleted IS NULL) AS accesses,
           (SELECT count(*) FROM account.streams s WHERE s.user_id = u.id) AS streams,
           (SELECT count(*) FROM account.events e WHERE e.user_id = u.id) AS events
    FROM account.users u;
COMMENT ON VIEW api.account_users IS 'Every user: username, created (seconds since the epoch), and how many live accesses, streams and events (trashed included) it has.';

CREATE VIEW api.account_accesses AS
    SELECT u.username, a.id, a.type, a.name, a.device_name, a.created, a.created_by, a.deleted,
           (SELECT coalesce(jsonb_agg(jsonb_build_object('streamId', p.stream_id, 'level', p.level) ORDER BY p.stream_id), '[]')
            FROM account.permissions p WHERE p.access_id = a.id) AS permissions
    FROM account.accesses a JOIN account.users u ON u.id = a.user_id;
COMMENT ON VIEW api.account_accesses IS 'Every access of every user, without its token hash: username, id (the access id the api.account_* functions take), type, name, device_name, created, created_by, deleted (NULL: live), permissions as Pryv''s [{streamId, level}] ([] for a personal access).';
