-- Operational data store (sql/ods/): ingest of process-flow events and objects, a unit of work
-- whole, and its archiving.

-- name: OdsIngestRequests :many
-- requests: a JSON array of {"events", "token_id", "idempotency_key"}, one per HTTP request joined
-- into this call.
SELECT r.request::integer AS request, r.ord, r.status::text AS status, r.unit_of_work_id, r.object_id,
       r.sqlstate, r.reason, r.replayed::boolean AS replayed
FROM api.ods_ingest_requests(sqlc.arg(requests)::jsonb) r;

-- name: OdsAppendRequests :many
-- requests: a JSON array of {"objects", "token_id", "idempotency_key"}.
SELECT r.request::integer AS request, r.ord, r.status::text AS status, r.unit_of_work_id, r.object_id,
       r.sqlstate, r.reason, r.replayed::boolean AS replayed
FROM api.ods_append_requests(sqlc.arg(requests)::jsonb) r;

-- name: OdsUnitOfWorkGet :one
SELECT api.ods_unit_of_work_get(sqlc.arg(id)::text)::jsonb AS doc;

-- name: OdsUnitOfWorkArchive :one
SELECT api.ods_unit_of_work_archive(sqlc.arg(id)::text)::jsonb AS doc;
