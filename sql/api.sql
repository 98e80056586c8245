-- Schema api: the public contract of Silo. Every operation of the HTTP API, every call the workers
-- make, and every operation a psql user runs by hand is a function or view here, with the same
-- result whoever calls it. Internals live in one private schema per domain (<domain>_private).
-- `silo migrate` drops api and every *_private schema and rebuilds them from sql/ whenever that code
-- changes; tables live in the domain schemas (silo, profile, ...) created by migrations/.
CREATE SCHEMA api;
COMMENT ON SCHEMA api IS 'Silo''s public contract: everything the HTTP API, the workers and psql users call. \df+ api.* lists it, each function commented with its arguments, result, defaults and errors. Rebuilt by silo migrate from sql/.';
