-- Schema api: the stateless interface of Silo. Every operation of the HTTP API is a function here,
-- callable from psql with the same result. `silo migrate` drops this schema and rebuilds it from
-- the sql/*.sql files (in name order) whenever they change; tables live in the domain schemas
-- (silo, profile, ...) created by migrations/.
CREATE SCHEMA api;
COMMENT ON SCHEMA api IS 'Silo''s functions and views: everything the HTTP API does, callable from psql. Rebuilt by silo migrate from sql/*.sql.';
