-- Idempotency keys (sql/idempotency/): the periodic trim. Claiming and recording keys happens
-- inside each write route's function.

-- name: IdempotencyTrim :one
-- window: NULL for silo.settings idempotency.window.
SELECT api.idempotency_trim(sqlc.narg(time_window)::interval)::bigint AS deleted;
