-- Errors: one classification of SQLSTATEs for every domain's workers. A worker that meets an
-- unexpected error must choose between trying again (the cause may go away: a lost connection, a
-- deadlock, a timeout, a full disk) and setting the work aside (the same input will fail the same
-- way: bad data, a broken constraint, a value over a limit, Silo's own validation). Deciding it here,
-- once, keeps the profile updater, the belts and the jobs in step, and lets a DBA ask the same
-- question from psql: SELECT api.error_class('54000');

CREATE SCHEMA error_private;
COMMENT ON SCHEMA error_private IS 'Internals of errors (sql/error/): not a public contract. Rebuilt with schema api.';

-- A list rather than a CASE, so that the rule can be read from psql as it is applied. A prefix of
-- two characters is a whole SQLSTATE class; five characters, one condition.
CREATE FUNCTION error_private.transient_rules()
RETURNS TABLE (prefix text, condition text)
LANGUAGE sql IMMUTABLE
AS $$
    VALUES ('08', 'connection_exception (the whole class)'),
           ('40001', 'serialization_failure'),
           ('40P01', 'deadlock_detected'),
           ('53', 'insufficient_resources (the whole class: disk full, out of memory, too many connections)'),
           ('55P03', 'lock_not_available (lock_timeout)'),
           ('57014', 'query_canceled (statement_timeout, a cancel)'),
           ('57P01', 'admin_shutdown'),
           ('57P02', 'crash_shutdown'),
           ('57P03', 'cannot_connect_now'),
           ('58', 'system_error (the whole class: I/O errors)');
$$;
COMMENT ON FUNCTION error_private.transient_rules() IS
    'The transient SQLSTATEs, one row per rule: prefix (two characters: a whole SQLSTATE class; five: one condition) and condition (its PostgreSQL name). Every other SQLSTATE is deterministic (api.error_class). Raises nothing.';

-- A NULL or malformed code is deterministic: an exception handler always has a well-formed code,
-- so such a value comes from a caller's mistake, and setting work aside (where a person sees it)
-- is safer than retrying forever what nobody can identify. Lower case is accepted, as PostgreSQL
-- accepts it in RAISE ... USING ERRCODE.
CREATE FUNCTION api.error_class(p_sqlstate text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN upper(p_sqlstate) ~ '^[0-9A-Z]{5}$'
                     AND EXISTS (SELECT FROM error_private.transient_rules() r
                                 WHERE starts_with(upper(p_sqlstate), r.prefix))
                THEN 'transient' ELSE 'deterministic' END;
$$;
COMMENT ON FUNCTION api.error_class(text) IS
    'The class of an unexpected error with SQLSTATE p_sqlstate, the one rule every worker of Silo follows (the profile updater now; belts and jobs use the same). Returns transient when trying again may succeed: connection exceptions 08xxx, serialization_failure 40001, deadlock_detected 40P01, insufficient resources 53xxx, lock_not_available 55P03 (lock_timeout), query_canceled 57014 (statement_timeout), admin_shutdown 57P01, crash_shutdown 57P02, cannot_connect_now 57P03, system errors 58xxx (I/O); the list: SELECT * FROM error_private.transient_rules(). Returns deterministic for every other code, where the same input fails the same way: data exceptions 22xxx, integrity violations 23xxx, program limits 54xxx (such as an index row too large), syntax and access errors 42xxx, raise_exception P0001, internal_error XX000, and Silo''s own codes (SLxxx, SPxxx); and for NULL or a value that is not five letters or digits. Case-insensitive. Raises nothing.';
