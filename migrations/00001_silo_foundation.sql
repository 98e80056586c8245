-- +goose Up
-- Schemas and the tables every domain shares: the record of the stateless `api` code and the
-- access tokens. Stateful DDL only: nothing here may depend on schema `api`, which `silo migrate`
-- drops and rebuilds from sql/ whenever that code changes.
CREATE SCHEMA IF NOT EXISTS silo;
COMMENT ON SCHEMA silo IS 'Silo infrastructure shared by every domain: access tokens, the record of the installed api code.';

CREATE TABLE silo.api_code (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    hash        text NOT NULL,
    files       text[] NOT NULL,
    installed   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE silo.api_code IS 'One row: the SHA-256 of the sql/ files that schema api was last built from, so `silo migrate` rebuilds api only when that code changed.';

CREATE TABLE silo.tokens (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name <> ''),
    token_hash  bytea NOT NULL UNIQUE,
    roles       text[] NOT NULL DEFAULT '{}',
    can_write   boolean NOT NULL DEFAULT false,
    is_admin    boolean NOT NULL DEFAULT false,
    created     timestamptz NOT NULL DEFAULT now(),
    revoked     timestamptz
);
COMMENT ON TABLE silo.tokens IS 'Access tokens. Only the SHA-256 of a token is stored. roles are matched against the profile store''s reader column; can_write allows writes (profile updates); is_admin allows administration (dead letters, configuration) and implies can_write.';
COMMENT ON COLUMN silo.tokens.roles IS 'Reader roles: a grain whose reader is one of these is readable with this token (besides _all and _auth).';

-- +goose Down
DROP TABLE silo.tokens;
DROP TABLE silo.api_code;
DROP SCHEMA silo;
