-- API cache (sql/cache/01_store.sql).

-- name: CacheConfigLoad :one
SELECT api.cache_config_load(sqlc.arg(config)::jsonb)::integer AS version;

-- name: CacheRules :many
SELECT * FROM api.cache_rules;

-- name: CacheGet :many
SELECT * FROM api.cache_get(sqlc.arg(key)::text);

-- name: CachePut :one
SELECT api.cache_put(sqlc.arg(key)::text, sqlc.arg(path)::text, sqlc.arg(session)::text, sqlc.arg(status)::integer,
                     sqlc.arg(content_type)::text, sqlc.arg(body)::bytea, sqlc.arg(etag)::text, sqlc.arg(expires_ms)::bigint,
                     sqlc.arg(since)::timestamptz, sqlc.arg(xx)::boolean, sqlc.arg(nx)::boolean)::boolean AS stored;

-- name: CacheInvalidate :one
SELECT api.cache_invalidate(sqlc.arg(path)::text, sqlc.narg(access_token)::text)::bigint AS deleted;
