-- High-frequency series, periodic work (sql/series/05_metadata.sql): each query one call.

-- name: SeriesMetadataFlush :one
SELECT api.series_metadata_flush(sqlc.arg(max_updates)::integer)::integer AS flushed;

-- name: SeriesCleanup :one
SELECT api.series_cleanup(sqlc.arg(max_series)::integer)::integer AS removed;

-- name: SeriesRetentionSet :exec
SELECT api.series_retention_set(sqlc.arg(username)::text, sqlc.narg(keep)::interval, sqlc.narg(event_id)::text);
