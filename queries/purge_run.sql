-- Purge (sql/purge/): configuration, the recurring runs silo work makes, and the reports.

-- name: PurgeConfig :one
SELECT api.purge_config()::jsonb AS config;

-- name: PurgeConfigSet :one
SELECT api.purge_config_set(sqlc.arg(config)::jsonb)::jsonb AS config;

-- name: PurgeTick :one
SELECT t.enabled::boolean AS enabled, t.mode::text AS mode, t.batch_sizes::integer[] AS batch_sizes,
       t.frequency_ms::bigint AS frequency_ms, t.execution_date, t.finished::boolean AS finished, t.due::boolean AS due
FROM api.purge_tick(sqlc.arg(now)::timestamptz) t;

-- name: PurgeBatch :one
SELECT b.execution_date::date AS execution_date, b.unit_of_works_deleted::integer AS unit_of_works_deleted,
       b.summaries_deleted::integer AS summaries_deleted, b.objects_deleted::bigint AS objects_deleted,
       b.finished::boolean AS finished
FROM api.purge_batch(sqlc.arg(now)::timestamptz, sqlc.arg(batch_limit)::integer) b;

-- name: PurgeTTLRun :one
SELECT r.execution_date::date AS execution_date, r.dropped_partitions::integer AS dropped_partitions,
       r.unit_of_works_deleted::integer AS unit_of_works_deleted, r.objects_deleted::bigint AS objects_deleted,
       r.postponed::bigint AS postponed, r.expiring_next_day::bigint AS expiring_next_day
FROM api.purge_ttl_run(sqlc.arg(now)::timestamptz) r;

-- name: PurgeRun :one
-- One recurring run from psql's side, sequentially: the day's report.
SELECT api.purge_run(sqlc.arg(now)::timestamptz)::jsonb AS report;

-- name: PurgeReport :one
SELECT api.purge_report(sqlc.arg(execution_date)::text)::jsonb AS report;

-- name: PurgeReports :one
SELECT api.purge_reports(sqlc.arg(page_limit)::integer, sqlc.narg(before)::text)::jsonb AS reports;
