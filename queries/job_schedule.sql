-- Job service, scheduler (sql/job/02_enrich.sql).

-- name: JobEventIngest :many
-- events: one event object or a JSON array of them (psql's api.job_event_ingest).
SELECT * FROM api.job_event_ingest(sqlc.arg(events)::jsonb);

-- name: JobEventIngestRequests :many
-- requests: a JSON array of {"events", "token_id", "idempotency_key"}, one per HTTP request joined
-- into this call.
SELECT * FROM api.job_event_ingest_requests(sqlc.arg(requests)::jsonb);
