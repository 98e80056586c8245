-- High-frequency series, writes (sql/series/): each query one call of an api.series_* function.

-- name: SeriesAppendRequests :many
-- The series write route: the requests joined into one call, one row per request.
-- sqlstate and reason are empty for a request that was applied.
SELECT r.request::integer AS request, r.answer::jsonb AS answer, coalesce(r.sqlstate, '')::text AS sqlstate,
       coalesce(r.reason, '')::text AS reason, r.replayed::boolean AS replayed
FROM api.series_append_requests(sqlc.arg(requests)::jsonb) r;

-- name: SeriesAppend :one
SELECT api.series_append(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.arg(data)::jsonb)::jsonb AS body;

-- name: SeriesAppendBatch :one
SELECT api.series_append_batch(sqlc.arg(access_id)::text, sqlc.arg(batch)::jsonb)::jsonb AS body;

-- name: SeriesDelete :one
SELECT api.series_delete(sqlc.arg(access_id)::text, sqlc.arg(event_id)::text, sqlc.narg(from_time)::double precision,
                         sqlc.narg(to_time)::double precision, sqlc.arg(relative)::boolean)::jsonb AS body;
