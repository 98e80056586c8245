-- Job service, reading and upkeep (sql/job/05_read.sql).

-- name: JobList :one
SELECT api.job_list(sqlc.narg(state)::text, sqlc.narg(topic)::text, sqlc.arg(after)::bigint, sqlc.arg(page_size)::integer)::jsonb AS page;

-- name: JobGet :one
SELECT api.job_get(sqlc.arg(id)::bigint)::jsonb AS job;

-- name: JobStats :many
SELECT * FROM api.job_stats;

-- name: JobTrim :one
SELECT * FROM api.job_trim(sqlc.narg(retention)::interval);
