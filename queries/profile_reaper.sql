-- Profile store reaper: TTL and TTN (sql/profile/).

-- name: ProfileReap :one
-- One reaper batch; batch_size NULL takes silo.settings reaper.batch_size.
SELECT r.ttl_deleted::bigint AS ttl_deleted, r.ttn_notified::bigint AS ttn_notified, r.more::boolean AS more
FROM api.profile_reap(sqlc.narg(batch_size)::integer) r;

-- name: ProfileReaperEvents :many
-- Reaper events after an id, oldest first; readers NULL: all.
SELECT e.*
FROM api.profile_reaper_events(sqlc.arg(after)::bigint, sqlc.arg(max_events)::integer, sqlc.narg(readers)::text[]) e;

-- name: ProfileReaperEventTrim :one
-- Trims reaper events older than the retention; NULL takes silo.settings reaper.event_retention.
SELECT api.profile_reaper_event_trim(sqlc.narg(retention)::interval)::bigint AS deleted;
