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

-- name: SeriesReadColumns :one
-- One page of points as typed columns (api.series_read_columns); the next page starts after last_at.
SELECT r.kinds::text[] AS kinds, r.positions::integer[] AS positions, r.points::integer AS points, r.last_at::timestamptz AS last_at, r.time_us::bigint[] AS time_us,
       r.n1::bigint[] AS n1, r.s1::smallint[] AS s1, r.t1::text[] AS t1, r.n2::bigint[] AS n2, r.s2::smallint[] AS s2, r.t2::text[] AS t2,
       r.n3::bigint[] AS n3, r.s3::smallint[] AS s3, r.t3::text[] AS t3, r.n4::bigint[] AS n4, r.s4::smallint[] AS s4, r.t4::text[] AS t4,
       r.n5::bigint[] AS n5, r.s5::smallint[] AS s5, r.t5::text[] AS t5, r.n6::bigint[] AS n6, r.s6::smallint[] AS s6, r.t6::text[] AS t6,
       r.n7::bigint[] AS n7, r.s7::smallint[] AS s7, r.t7::text[] AS t7, r.n8::bigint[] AS n8, r.s8::smallint[] AS s8, r.t8::text[] AS t8
FROM api.series_read_columns(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(from_time)::double precision,
                             sqlc.narg(to_time)::double precision, sqlc.arg(relative)::boolean, sqlc.narg(fields)::text[],
                             sqlc.arg(time_field)::text, sqlc.narg(after)::timestamptz, sqlc.narg(max_points)::integer) r;
