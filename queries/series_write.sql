-- High-frequency series, writes (sql/series/): each query one call of an api.series_* function.

-- name: SeriesAppendRequests :many
-- The series write route: the requests joined into one call, one row per request.
-- sqlstate, reason, detail and hint are empty for a request that was applied.
SELECT r.request::integer AS request, r.answer::jsonb AS answer, coalesce(r.sqlstate, '')::text AS sqlstate,
       coalesce(r.reason, '')::text AS reason, coalesce(r.detail, '')::text AS detail, coalesce(r.hint, '')::text AS hint,
       r.replayed::boolean AS replayed
FROM api.series_append_requests(sqlc.arg(requests)::jsonb) r;

-- name: SeriesAppend :one
SELECT api.series_append(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.arg(data)::jsonb)::jsonb AS body;

-- name: SeriesAppendBatch :one
SELECT api.series_append_batch(sqlc.arg(access_id)::text, sqlc.arg(batch)::jsonb)::jsonb AS body;

-- name: SeriesDelete :one
SELECT api.series_delete(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(from_time)::double precision,
                         sqlc.narg(to_time)::double precision, sqlc.arg(relative)::boolean)::jsonb AS body;

-- name: SeriesAppendColumns :one
-- A body (or a seriesBatch's bodies) as typed columns; -2^63 in a value column stands for null.
SELECT api.series_append_columns(sqlc.arg(access_id)::text, sqlc.arg(event_ids)::text[], sqlc.arg(fields)::text[],
                                 sqlc.arg(field_counts)::integer[], sqlc.arg(scales)::smallint[], sqlc.narg(points)::integer[],
                                 sqlc.arg(time)::bigint[],
                                 array_replace(sqlc.narg(v1)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v2)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v3)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v4)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v5)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v6)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v7)::bigint[], -9223372036854775808, NULL),
                                 array_replace(sqlc.narg(v8)::bigint[], -9223372036854775808, NULL),
                                 sqlc.arg(batch)::boolean)::jsonb AS body;
