-- Event store, ingest (sql/event/02_ingest.sql).

-- name: EventIngest :many
-- events: one event object or a JSON array of them (psql's api.event_ingest).
SELECT i.ord::integer AS ord, i.status::text AS status, i.event_id, i.first_stored, i.sqlstate, i.reason
FROM api.event_ingest(sqlc.arg(events)::jsonb) i;

-- name: EventIngestRequests :many
-- requests: a JSON array of {"events" (or "text": true), "token_id", "idempotency_key", "invalid"},
-- one per HTTP request joined into this call; texts: the NDJSON bodies of those with "text", one
-- element per request; answers: a request none of whose events was refused comes as one row, its
-- answer's JSON text in answer.
SELECT r.request::integer AS request, r.ord, r.status::text AS status, r.event_id, r.first_stored,
       r.sqlstate, r.reason, r.replayed::boolean AS replayed, r.answer
FROM api.event_ingest_requests(sqlc.arg(requests)::jsonb, sqlc.arg(texts)::text[], sqlc.arg(answers)::boolean) r;

-- name: EventTrim :one
-- retention: NULL for silo.settings event.retention.
SELECT t.dropped_partitions::integer AS dropped_partitions, t.deleted_ids::bigint AS deleted_ids,
       t.deleted_deliveries::bigint AS deleted_deliveries
FROM api.event_trim(sqlc.narg(retention)::interval) t;
