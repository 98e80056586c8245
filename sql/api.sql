-- Schema api: the public contract of Silo. Every operation of the HTTP API, every call the workers
-- make, and every operation a psql user runs by hand is a function or view here, with the same
-- result whoever calls it; a function's COMMENT (\df+) is its contract. Internals live in one
-- private schema per domain (<domain>_private), so that what api holds is exactly what callers may
-- rely on. This file only creates the schema: each domain folder (sql/<domain>/) adds its functions,
-- run after it, domain by domain. `silo migrate` drops api and every *_private schema and rebuilds
-- them from sql/ whenever that code changes, which a stateless schema allows; tables live in the
-- domain schemas (silo, profile, ...) created by migrations/.
CREATE SCHEMA api;
COMMENT ON SCHEMA api IS 'Silo''s public contract: everything the HTTP API, the workers and psql users call. \df+ api.* and \dv+ api.* list it, each function commented with its contract: arguments and defaults, result, errors (SQLSTATE) and what it notifies or publishes. Internals live in the <domain>_private schemas. Rebuilt by silo migrate from sql/.';
