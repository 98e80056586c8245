-- Job service, configuration (sql/job/01_config.sql).

-- name: JobConfigLoad :one
-- config: the configuration document (YAML read as JSON).
SELECT api.job_config_load(sqlc.arg(config)::jsonb)::integer AS version;

-- name: JobPools :many
SELECT * FROM api.job_pools;
