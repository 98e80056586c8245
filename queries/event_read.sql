-- Event store, reads (sql/event/03_read.sql): Granary's Event Store API.

-- name: EventList :many
SELECT e.event_id::text AS event_id, e.correlation_id::text AS correlation_id, e.event_type::text AS event_type,
       e.at::timestamptz AS at, e.received::timestamptz AS received, e.headers::jsonb AS headers,
       e.payload::jsonb AS payload, e.total_count
FROM api.event_list(sqlc.narg(correlation_id)::text, sqlc.narg(event_type)::text, sqlc.narg(from_time)::timestamptz,
                    sqlc.narg(to_time)::timestamptz, sqlc.arg(page_offset)::integer, sqlc.arg(page_size)::integer,
                    sqlc.arg(total)::boolean) e;

-- name: EventGet :one
SELECT e.event_id::text AS event_id, e.correlation_id::text AS correlation_id, e.event_type::text AS event_type,
       e.at::timestamptz AS at, e.received::timestamptz AS received, e.headers::jsonb AS headers,
       e.payload::jsonb AS payload
FROM api.event_get(sqlc.arg(correlation_id)::text, sqlc.arg(event_id)::text) e;
