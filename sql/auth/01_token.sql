-- Access tokens: created, authenticated and revoked here, and the one place that decides what a
-- request may read (the readers _all, _auth and the token's roles) and whether it may write or
-- administer. A token is shown once, when it is created; only its SHA-256 is stored. A token is
-- silo_ and the hex of two random UUIDs (244 random bits), so an unsalted hash is safe to keep and
-- a request's token is found by one lookup of the unique hash.

-- is_admin is stored with can_write set, so that a write check reads one flag.
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
    'Creates an access token named p_name. p_roles (default {}): its reader roles: it reads grains and changes whose reader is one of them, besides _all and _auth; p_can_write (default false): may apply profile updates; p_is_admin (default false): may administer (dead letters) and sees every change, implies can_write. NULL arguments count as their defaults. Returns one row: token, the token in plain text (the only time it is visible: only its SHA-256 is stored), and the stored id, name, roles, can_write, is_admin. Raises SLINV when p_name is NULL or empty; SLCNF when a token of that name exists, revoked ones included (a name is never reused). Two concurrent creations of one name may fail with 23505 (unique_violation) instead of SLCNF.';

-- Deny by default: a request without a token is refused unless an operator turned anonymous reads
-- on (silo.settings auth.anonymous_reads, as PostgREST's anonymous role), and then it reads only
-- what is public (_all). The setting is read at every call, never cached here, so an UPDATE takes
-- effect with the next call (an HTTP process reuses the answer for a few seconds: server/auth_cache.go).
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
        IF settings_private.setting('auth.anonymous_reads', 'false') IS DISTINCT FROM 'true' THEN
            RAISE EXCEPTION 'an access token is required' USING ERRCODE = 'SLAUT',
                HINT = 'Send a token made by "silo token create" as "Authorization: Bearer <token>". Requests without a token are refused while the setting auth.anonymous_reads is false; an operator allows anonymous reads of public (_all) grains with UPDATE silo.settings SET value = ''true'' WHERE key = ''auth.anonymous_reads''.';
        END IF;
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
    'The identity of a request that sent access token p_token: one row of token_id, name, readers (the readers it may read: _all, _auth and its roles), can_write and is_admin. A NULL or empty p_token is refused unless silo.settings auth.anonymous_reads is true (default false); when it is true, it is the anonymous identity: token_id and name NULL, readers {_all}, can_write and is_admin false. The setting is read at every call. Raises SLAUT when the token is unknown or revoked, and for a NULL or empty p_token while anonymous reads are off (the HINT names the setting).';

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
COMMENT ON FUNCTION api.token_revoke(text) IS 'Revokes the active token named p_name: sets its revoked time to now(), after which api.token_authenticate refuses it; the name stays taken. Returns the revoked row of silo.tokens (token_hash included). Raises SLNFD when no active token has that name.';

-- A view rather than a function: psql users filter and sort it with plain SQL, and it leaves the
-- hashes out.
CREATE VIEW api.tokens AS
    SELECT id, name, roles, can_write, is_admin, created, revoked FROM silo.tokens;
COMMENT ON VIEW api.tokens IS 'Every access token, active and revoked, without its hash: id, name, roles (reader roles), can_write, is_admin, created, revoked (NULL: active).';
