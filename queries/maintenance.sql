-- Periodic maintenance jobs (sql/029_profile_maintenance.sql).

-- name: ProfileDeadLetterTrim :one
SELECT api.profile_dead_letter_trim(sqlc.arg(retention)::interval)::bigint AS deleted;
