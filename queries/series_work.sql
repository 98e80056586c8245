-- High-frequency series, periodic work (sql/series/05_metadata.sql): each query one call.

-- name: SeriesMetadataFlush :one
SELECT api.series_metadata_flush(sqlc.arg(max_updates)::integer)::integer AS flushed;

-- name: SeriesCleanup :one
SELECT api.series_cleanup(sqlc.arg(max_series)::integer)::integer AS removed;

-- name: SeriesRetain :one
SELECT r.dropped_chunks::integer AS dropped_chunks, r.deleted_points::bigint AS deleted_points FROM api.series_retain() r;

-- name: SeriesRetentionSet :exec
SELECT api.series_retention_set(sqlc.arg(username)::text, sqlc.narg(keep)::interval, sqlc.narg(event_id)::text);
