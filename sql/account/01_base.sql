-- Accounts in Pryv's model (tables: migrations/00022_account_model.sql): the helpers every stage
-- uses. Times are seconds since the epoch as double precision, as Pryv's API has them; ids that
-- the server makes are cuid-like (c and 24 lowercase hex digits), tokens c and 64 (244 random
-- bits, so an unsalted SHA-256 is safe to keep and one lookup of the hash finds the access).
--
-- SQLSTATEs of the domain (server/account_errors.go maps them to Pryv's error ids and statuses):
--   SASTR invalid-request-structure (400): a body that is not a JSON object
--   SAINV invalid-parameters-format (400): a property of the wrong shape, an unknown property, a bad id
--   SAOPR invalid-operation (400): a change the event does not allow (a series holder's type, content, duration)
--   SATYP invalid-event-type (400): series:{type} with a type not in account.series_types
--   SAREF unknown-referenced-resource (400): a stream or parent that does not exist
--   SAHDR missing-header (401): no access token
--   SAAUT invalid-access-token (403): a token that is unknown, deleted, or another user's
--   SAFRB forbidden (403): the access lacks the permission
--   SANFD unknown-resource (404): an unknown user or event
--   SACNF item-already-exists (409): an id, name or username that is taken
--   SAUSR invalid-parameters-format (400): a username that breaks the rule or is reserved

CREATE SCHEMA account_private;
COMMENT ON SCHEMA account_private IS 'Internals of accounts (sql/account/): not a public contract. Rebuilt with schema api.';

CREATE FUNCTION account_private.now_s()
RETURNS double precision
LANGUAGE sql STABLE
AS $$
    SELECT extract(epoch FROM now())::double precision;
$$;
COMMENT ON FUNCTION account_private.now_s() IS 'The transaction''s time in seconds since the epoch (Pryv''s time unit). Raises nothing.';

CREATE FUNCTION account_private.new_id()
RETURNS text
LANGUAGE sql VOLATILE
AS $$
    SELECT 'c' || left(replace(gen_random_uuid()::text, '-', ''), 24);
$$;
COMMENT ON FUNCTION account_private.new_id() IS 'A new cuid-like id for a stream, event or access: c and 24 lowercase hex digits (matches Pryv''s ^c[a-z0-9-]{24}$). Raises nothing.';

CREATE FUNCTION account_private.new_token()
RETURNS text
LANGUAGE sql VOLATILE
AS $$
    SELECT 'c' || replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', '');
$$;
COMMENT ON FUNCTION account_private.new_token() IS 'A new access token: c and 64 lowercase hex digits (244 random bits), safe in the user part of a URL (http://{token}@host/). Raises nothing.';

CREATE FUNCTION account_private.token_hash(p_token text)
RETURNS bytea
LANGUAGE sql IMMUTABLE
AS $$
    SELECT sha256(convert_to(p_token, 'UTF8'));
$$;
COMMENT ON FUNCTION account_private.token_hash(text) IS 'The SHA-256 of an access token, as account.accesses.token_hash keeps it. Raises nothing.';

-- The readers of a user's changes: only that user's accesses may see them.
CREATE FUNCTION account_private.readers(p_username text)
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['account:' || p_username];
$$;
COMMENT ON FUNCTION account_private.readers(text) IS 'The reader role of a user''s changes, {account:<username>}: the readers of the changes published on account:<username>:* and of an access of that user (api.account_authenticate). Raises nothing.';

CREATE FUNCTION account_private.require_object(p_body jsonb, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_body IS NULL OR jsonb_typeof(p_body) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object', p_what USING ERRCODE = 'SASTR',
            DETAIL = format('got %s', coalesce(jsonb_typeof(p_body), 'nothing'));
    END IF;
END
$$;
COMMENT ON FUNCTION account_private.require_object(jsonb, text) IS 'Raises SASTR (invalid-request-structure) unless p_body is a JSON object; p_what names it in the message.';

CREATE FUNCTION account_private.require_keys(p_body jsonb, p_allowed text[], p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_unknown text[];
BEGIN
    SELECT array_agg(k ORDER BY k) INTO v_unknown FROM jsonb_object_keys(p_body) k WHERE k <> ALL (p_allowed);
    IF v_unknown IS NOT NULL THEN
        RAISE EXCEPTION '% has unknown properties: %', p_what, array_to_string(v_unknown, ', ') USING ERRCODE = 'SAINV',
            DETAIL = format('allowed are %s', array_to_string(p_allowed, ', '));
    END IF;
END
$$;
COMMENT ON FUNCTION account_private.require_keys(jsonb, text[], text) IS 'Raises SAINV (invalid-parameters-format) when the object p_body has a property not in p_allowed (Pryv''s schemas allow no others).';

-- A property of a given JSON type, or NULL when absent or null (when nullable).
CREATE FUNCTION account_private.prop(p_body jsonb, p_key text, p_type text, p_nullable boolean DEFAULT true)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := p_body -> p_key;
BEGIN
    IF v IS NULL OR (jsonb_typeof(v) = 'null' AND p_nullable) THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(v) <> p_type THEN
        RAISE EXCEPTION 'property % must be a %', p_key, p_type USING ERRCODE = 'SAINV',
            DETAIL = format('got %s', jsonb_typeof(v));
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION account_private.prop(jsonb, text, text, boolean) IS 'The property p_key of p_body when it has JSON type p_type (string, number, boolean, object, array); NULL when it is absent, or null and p_nullable (default true). Raises SAINV (invalid-parameters-format) for any other type.';

CREATE FUNCTION account_private.string_array(p_body jsonb, p_key text)
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := account_private.prop(p_body, p_key, 'array');
BEGIN
    IF v IS NULL THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT FROM jsonb_array_elements(v) e WHERE jsonb_typeof(e) <> 'string') THEN
        RAISE EXCEPTION 'property % must be an array of strings', p_key USING ERRCODE = 'SAINV';
    END IF;
    RETURN ARRAY(SELECT jsonb_array_elements_text(v));
END
$$;
COMMENT ON FUNCTION account_private.string_array(jsonb, text) IS 'The property p_key of p_body as a text array; NULL when absent or null. Raises SAINV (invalid-parameters-format) when it is not an array of strings.';

-- A JSON number may exceed double precision (1e400 is valid JSON and valid jsonb): that is the
-- client's mistake, not a server error.
CREATE FUNCTION account_private.seconds(p_body jsonb, p_key text, p_nullable boolean DEFAULT true)
RETURNS double precision
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v jsonb := account_private.prop(p_body, p_key, 'number', p_nullable);
BEGIN
    IF v IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN (v #>> '{}')::double precision;
EXCEPTION WHEN numeric_value_out_of_range THEN
    RAISE EXCEPTION 'property % is out of range: %', p_key, left(v::text, 40) USING ERRCODE = 'SAINV';
END
$$;
COMMENT ON FUNCTION account_private.seconds(jsonb, text, boolean) IS 'The number property p_key of p_body (a time or duration in seconds) as double precision; NULL when absent, or null and p_nullable (default true). Raises SAINV (invalid-parameters-format) when it is not a number or is out of the range of double precision.';
