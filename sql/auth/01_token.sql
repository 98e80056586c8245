-- Access tokens. A token is a random string shown once; only its SHA-256 is stored. What a token
-- may read is decided here: the readers it matches are _all, _auth and its roles.

-- api.token_create: creates a token and returns it in plain text (the only time it is visible).
-- Raises: SLINV when the name is empty, SLCNF when a token of that name exists.
CREATE FUNCTION api.token_create(
    p_name text,
    p_roles text[] DEFAULT '{}',
    p_can_write boolean DEFAULT false,
    p_is_admin boolean DEFAULT false,
    OUT token text,
    OUT id bigint,
    OUT name text,
    OUT roles text[],
    OUT can_write boolean,
    OUT is_admin boolean)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF coalesce(p_name, '') = '' THEN
        RAISE EXCEPTION 'token name must not be empty' USING ERRCODE = 'SLINV';
    END IF;
    IF EXISTS (SELECT 1 FROM silo.tokens t WHERE t.name = p_name) THEN
        RAISE EXCEPTION 'a token named "%" already exists', p_name USING ERRCODE = 'SLCNF',
            HINT = 'Revoke it with api.token_revoke or choose another name.';
    END IF;
    token := 'silo_' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
    INSERT INTO silo.tokens (name, token_hash, roles, can_write, is_admin)
    VALUES (p_name, sha256(convert_to(token, 'UTF8')), coalesce(p_roles, '{}'),
            coalesce(p_can_write, false) OR coalesce(p_is_admin, false), coalesce(p_is_admin, false))
    RETURNING tokens.id, tokens.name, tokens.roles, tokens.can_write, tokens.is_admin
    INTO id, name, roles, can_write, is_admin;
END
$$;
COMMENT ON FUNCTION api.token_create(text, text[], boolean, boolean) IS
    'Creates an access token and returns it in plain text, the only time it is visible. roles: reader roles; can_write: may apply profile updates; is_admin: may administer (dead letters), implies can_write.';

-- api.token_authenticate: the identity of a request. A NULL or empty token is the anonymous
-- identity, which reads only grains whose reader is _all and may not write.
-- Raises: SLAUT when the token is unknown or revoked.
CREATE FUNCTION api.token_authenticate(
    p_token text,
    OUT token_id bigint,
    OUT name text,
    OUT readers text[],
    OUT can_write boolean,
    OUT is_admin boolean)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF coalesce(p_token, '') = '' THEN
        readers := ARRAY['_all'];
        can_write := false;
        is_admin := false;
        RETURN;
    END IF;
    SELECT t.id, t.name, ARRAY['_all', '_auth'] || t.roles, t.can_write, t.is_admin
    INTO token_id, name, readers, can_write, is_admin
    FROM silo.tokens t
    WHERE t.token_hash = sha256(convert_to(p_token, 'UTF8')) AND t.revoked IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid access token' USING ERRCODE = 'SLAUT',
            HINT = 'Send a token made by "silo token create" as "Authorization: Bearer <token>".';
    END IF;
END
$$;
COMMENT ON FUNCTION api.token_authenticate(text) IS
    'Identity of a request: the token''s id, name, the readers it may read (_all, _auth and its roles), and its write and admin flags. NULL or empty: anonymous (reads _all only). Raises SLAUT for an unknown or revoked token.';

-- api.token_revoke: revokes a token by name. Raises: SLNFD when no active token has that name.
CREATE FUNCTION api.token_revoke(p_name text)
RETURNS SETOF silo.tokens
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    RETURN QUERY UPDATE silo.tokens t SET revoked = now()
        WHERE t.name = p_name AND t.revoked IS NULL RETURNING t.*;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no active token named "%"', p_name USING ERRCODE = 'SLNFD';
    END IF;
END
$$;
COMMENT ON FUNCTION api.token_revoke(text) IS 'Revokes the active token of that name. Raises SLNFD when there is none.';

-- api.token_list: every token, without hashes.
CREATE VIEW api.tokens AS
    SELECT id, name, roles, can_write, is_admin, created, revoked FROM silo.tokens;
COMMENT ON VIEW api.tokens IS 'Access tokens without their hashes.';
