-- Job service, manager (sql/job/03_dispatch.sql, 04_take.sql).

-- name: JobDispatch :one
-- One step of a pool whose hook runs in the database (mock, sql:<function>).
SELECT * FROM api.job_dispatch(sqlc.arg(topic)::text, sqlc.arg(lo)::integer, sqlc.arg(hi)::integer, sqlc.arg(max_jobs)::integer);

-- name: JobTake :many
-- Jobs of a pool whose hook is http or cache, leased for lease_seconds.
SELECT * FROM api.job_take(sqlc.arg(topic)::text, sqlc.arg(lo)::integer, sqlc.arg(hi)::integer, sqlc.arg(max_jobs)::integer,
                           sqlc.arg(lease_seconds)::double precision);

-- name: JobFinish :one
-- results: a JSON array of {"id", "outcome", "error", "sqlstate", "jobs"}.
SELECT * FROM api.job_finish(sqlc.arg(results)::jsonb);

-- name: JobStatementTimeout :exec
SELECT set_config('statement_timeout', sqlc.arg(ms)::text, true);
