-- Retention (sql/purge/05_retention.sql): every kind of time-ordered data trimmed by one job.

-- name: RetentionRun :many
-- target: NULL for every enabled target.
SELECT r.target::text AS target, r.setting, r.retention, r.cutoff, r.result, r.sqlstate, r.message
FROM api.retention_run(sqlc.arg(now)::timestamptz, sqlc.narg(target)::text) r;
