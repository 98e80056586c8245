-- Asynchronous profile updater: the inbox and its lanes (sql/profile/).

-- name: ProfileEnqueue :one
SELECT e.accepted::integer AS accepted, e.first_id, e.last_id
FROM api.profile_enqueue(sqlc.arg(updates)::jsonb, sqlc.arg(priority)::text) e;

-- name: ProfileEnqueueRequests :many
-- requests: a JSON array of {"updates", "token_id", "idempotency_key"}, one per HTTP request joined
-- into this call, all of one priority.
SELECT r.request::integer AS request, r.accepted, r.first_id, r.last_id, r.replayed::boolean AS replayed,
       r.sqlstate, r.reason
FROM api.profile_enqueue_requests(sqlc.arg(requests)::jsonb, sqlc.arg(priority)::text) r;

-- name: ProfileInboxProcess :one
SELECT p.taken::integer AS taken, p.ok::integer AS ok, p.noop::integer AS noop,
       p.dead_letter::integer AS dead_letter, p.operations::jsonb AS operations,
       p.lanes::integer AS lanes, p.failed_lanes::integer AS failed_lanes, p.error,
       p.apply_ms::double precision AS apply_ms, p.more::boolean AS more
FROM api.profile_inbox_process(sqlc.arg(priority)::text, sqlc.narg(max_updates)::integer) p;

-- name: ProfileUpdaterStatus :many
SELECT s.priority::text AS priority, s.backlog::bigint AS backlog, coalesce(extract(epoch FROM now() - s.oldest), 0)::double precision AS oldest_age_seconds,
       s.blocked_lanes::bigint AS blocked_lanes, s.throttled::boolean AS throttled,
       s.wait_ms::integer AS wait_ms, s.check_interval_ms::integer AS check_interval_ms,
       s.long_running_ms::integer AS long_running_ms
FROM api.profile_updater_status s;

-- name: ProfileInboxDeadLetter :one
SELECT api.profile_inbox_dead_letter(sqlc.arg(id)::bigint, sqlc.narg(reason)::text)::bigint AS dead_letter_id;

-- name: ProfileInboxBlockedLanes :many
SELECT b.priority::text AS priority, b.lane::integer AS lane, b.attempts::integer AS attempts, b.retry_at,
       b.last_failed, b.last_sqlstate, b.last_error, coalesce(b.message_id, 0)::bigint AS message_id,
       coalesce(b.correlation_id, '')::text AS correlation_id, b.waiting::bigint AS waiting
FROM api.profile_inbox_blocked_lanes b;
