-- The class of an unexpected error (sql/error/01_class.sql): what a worker retries.

-- name: ErrorClass :one
-- transient or deterministic.
SELECT api.error_class(sqlc.arg(sqlstate)::text)::text AS class;
