-- +goose Up
-- The API cache: rules in the seed's format ("<METHOD>/path/" -> defaults and override rules) and
-- the shared store of cached responses, an unlogged table every Silo process reads and writes (a
-- crash empties it, which a cache may). Each process keeps a front cache in memory, kept coherent
-- by the invalidations notified on silo_cache. Code: sql/cache/.
CREATE SCHEMA cache;
COMMENT ON SCHEMA cache IS 'The API cache: its rules (cache.endpoints, cache.rules) and the shared store of cached responses (cache.entries). Code: sql/cache/ (api.cache_*).';

CREATE TABLE cache.config (
    id         boolean     PRIMARY KEY DEFAULT true CHECK (id),
    version    integer     NOT NULL,
    loaded_at  timestamptz NOT NULL DEFAULT now(),
    document   jsonb       NOT NULL
);
COMMENT ON TABLE cache.config IS 'The cache configuration as last loaded (one row); its rules are in cache.endpoints and cache.rules.';
COMMENT ON COLUMN cache.config.id IS 'Always true: the table holds one row.';
COMMENT ON COLUMN cache.config.version IS 'How many configurations were loaded, this one included; processes reload when it changes.';
COMMENT ON COLUMN cache.config.loaded_at IS 'When it was loaded.';
COMMENT ON COLUMN cache.config.document IS 'The document as loaded.';

CREATE TABLE cache.endpoints (
    endpoint    text    PRIMARY KEY,
    method      text    NOT NULL,
    path        text    NOT NULL,
    action      text    CHECK (action IN ('cache', 'invalidate')),
    session     boolean,
    expires_ms  bigint  CHECK (expires_ms > 0),
    xx          boolean,
    nx          boolean
);
COMMENT ON TABLE cache.endpoints IS 'One row per "<METHOD>/path/" of the configuration: its defaults (NULL: none given). A request no endpoint matches bypasses the cache.';
COMMENT ON COLUMN cache.endpoints.endpoint IS 'The configuration''s key, "<METHOD>/path/".';
COMMENT ON COLUMN cache.endpoints.method IS 'The HTTP method.';
COMMENT ON COLUMN cache.endpoints.path IS 'The path pattern: literal segments, {name} for any one segment, a trailing slash optional.';
COMMENT ON COLUMN cache.endpoints.action IS 'defaults.action: cache or invalidate.';
COMMENT ON COLUMN cache.endpoints.session IS 'defaults.session: entries are per access token.';
COMMENT ON COLUMN cache.endpoints.expires_ms IS 'defaults.expires: an entry''s lifetime in milliseconds.';
COMMENT ON COLUMN cache.endpoints.xx IS 'defaults.xx: store only over an existing entry (Redis SET XX).';
COMMENT ON COLUMN cache.endpoints.nx IS 'defaults.nx: store only when there is no entry (Redis SET NX).';

CREATE TABLE cache.rules (
    endpoint    text    NOT NULL REFERENCES cache.endpoints ON DELETE CASCADE,
    ord         integer NOT NULL,
    rule        text    NOT NULL,
    params      jsonb   NOT NULL,
    action      text    CHECK (action IN ('cache', 'invalidate')),
    session     boolean,
    expires_ms  bigint  CHECK (expires_ms > 0),
    xx          boolean,
    nx          boolean,
    PRIMARY KEY (endpoint, ord)
);
COMMENT ON TABLE cache.rules IS 'overrides.rules of an endpoint, in order: a request whose query parameters agree with a rule takes the rule''s settings over the endpoint''s defaults.';
COMMENT ON COLUMN cache.rules.endpoint IS 'The endpoint.';
COMMENT ON COLUMN cache.rules.ord IS 'The rule''s position, from 1.';
COMMENT ON COLUMN cache.rules.rule IS 'The rule pattern as written, <param>:<value>&<param>:<value>... (a value: a word, a comma-separated list, or *).';
COMMENT ON COLUMN cache.rules.params IS 'The pattern parsed: {"<param>": ["<value>", ...]} or {"<param>": "*"}.';
COMMENT ON COLUMN cache.rules.action IS 'action (NULL: the default''s).';
COMMENT ON COLUMN cache.rules.session IS 'session (NULL: the default''s).';
COMMENT ON COLUMN cache.rules.expires_ms IS 'expires in milliseconds (NULL: the default''s).';
COMMENT ON COLUMN cache.rules.xx IS 'xx (NULL: the default''s).';
COMMENT ON COLUMN cache.rules.nx IS 'nx (NULL: the default''s).';

CREATE UNLOGGED TABLE cache.entries (
    key           text        PRIMARY KEY,
    path          text        NOT NULL,
    session       text        NOT NULL DEFAULT '',
    status        integer     NOT NULL,
    content_type  text        NOT NULL,
    body          bytea       NOT NULL,
    etag          text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);
COMMENT ON TABLE cache.entries IS 'Cached responses shared by every Silo process (unlogged: a crash empties it). Read and written by api.cache_get, api.cache_put; dropped by api.cache_invalidate, by cache jobs and by the profile store''s writes.';
COMMENT ON COLUMN cache.entries.key IS 'The cache key: method, path, and the query parameters sorted by name with their values sorted (access_token left out), and for a session entry the hash of the access token.';
COMMENT ON COLUMN cache.entries.path IS 'The request''s path: invalidating a path drops its entries and those of the paths under it.';
COMMENT ON COLUMN cache.entries.session IS 'For a session entry, the SHA-256 (hex) of the access token; empty for a shared entry.';
COMMENT ON COLUMN cache.entries.status IS 'The HTTP status of the cached response (200).';
COMMENT ON COLUMN cache.entries.content_type IS 'Its Content-Type.';
COMMENT ON COLUMN cache.entries.body IS 'Its body.';
COMMENT ON COLUMN cache.entries.etag IS 'Its ETag (a quoted hash of the body).';
COMMENT ON COLUMN cache.entries.created_at IS 'When it was stored.';
COMMENT ON COLUMN cache.entries.expires_at IS 'When it expires.';
CREATE INDEX entries_path_idx ON cache.entries (path text_pattern_ops);
CREATE INDEX entries_session_idx ON cache.entries (session) WHERE session <> '';

CREATE UNLOGGED TABLE cache.invalidations (
    path     text        NOT NULL,
    session  text        NOT NULL DEFAULT '',
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE cache.invalidations IS 'Recent invalidations (the last minute): a response computed before an invalidation of its path and stored after it would be stale, so api.cache_put refuses it.';
COMMENT ON COLUMN cache.invalidations.path IS 'The path invalidated (and the paths under it).';
COMMENT ON COLUMN cache.invalidations.session IS 'The session invalidated; empty: every session.';
COMMENT ON COLUMN cache.invalidations.at IS 'When.';
CREATE INDEX invalidations_at_idx ON cache.invalidations (at);

-- +goose Down
DROP SCHEMA cache CASCADE;
