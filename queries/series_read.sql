-- High-frequency series, reads (sql/series/): each query one call of an api.series_* function.

-- name: SeriesColumns :one
SELECT api.series_columns(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(fields)::text[],
                          sqlc.arg(time_field)::text)::text[] AS columns;

-- name: SeriesRead :many
-- One page of points, as flatJSON arrays or CSV lines; the next page starts after the last at.
SELECT r.at::timestamptz AS at, r.line::text AS line
FROM api.series_read(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(from_time)::double precision,
                     sqlc.narg(to_time)::double precision, sqlc.arg(relative)::boolean, sqlc.narg(fields)::text[],
                     sqlc.arg(time_field)::text, sqlc.arg(format)::text, sqlc.narg(after)::timestamptz,
                     sqlc.narg(max_points)::integer) r;

-- name: SeriesGet :one
SELECT api.series_get(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(from_time)::double precision,
                      sqlc.narg(to_time)::double precision, sqlc.arg(relative)::boolean, sqlc.narg(fields)::text[],
                      sqlc.arg(time_field)::text)::jsonb AS body;

-- name: SeriesDownsample :one
SELECT api.series_downsample(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.arg(interval_seconds)::double precision,
                             sqlc.arg(aggregate)::text, sqlc.narg(from_time)::double precision, sqlc.narg(to_time)::double precision,
                             sqlc.arg(relative)::boolean, sqlc.narg(fields)::text[], sqlc.arg(time_field)::text)::jsonb AS body;
