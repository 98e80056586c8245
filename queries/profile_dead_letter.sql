-- Profile store, dead letters (sql/profile/): rejected updates, listed, replayed and trimmed.

-- name: ProfileDeadLetterList :many
SELECT * FROM api.profile_dead_letter_list(
    p_correlation_id => sqlc.narg(correlation_id)::text,
    p_profile_type => sqlc.narg(profile_type)::text,
    p_operation => sqlc.narg(operation)::text,
    p_sqlstate => sqlc.narg(sqlstate)::text,
    p_resolved => sqlc.narg(resolved)::boolean,
    p_after_id => sqlc.arg(after_id)::bigint,
    p_limit => sqlc.arg(max_rows)::integer
);

-- name: ProfileDeadLetterReplay :one
SELECT r.status::text AS status, r.operation, r.correlation_id, r.sqlstate, r.reason,
       r.dead_letter_id::bigint AS dead_letter_id
FROM api.profile_dead_letter_replay(sqlc.arg(id)::bigint) r;

-- name: ProfileDeadLetterTrim :one
-- Deletes dead letters resolved longer than the retention ago (a periodic job).
SELECT api.profile_dead_letter_trim(sqlc.arg(retention)::interval)::bigint AS deleted;
