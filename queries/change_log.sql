-- Change notifications: the change log (sql/change/).

-- name: ChangeSequence :one
-- Moves committed pending changes into the change log; returns the highest change id. notify
-- false: the caller announces with ChangeAnnounce.
SELECT api.change_sequence(sqlc.arg(notify)::boolean)::bigint AS last_id;

-- name: ChangeAnnounce :exec
-- Notifies silo_changes with the highest change id (asynchronous commit).
SELECT api.change_announce(sqlc.arg(last_id)::bigint);

-- name: ChangesAfter :many
-- Every change after an id, oldest first, unfiltered (the hub's feed).
SELECT c.*
FROM api.changes_after(sqlc.arg(after)::bigint, sqlc.arg(max_changes)::integer) c;

-- name: ChangesSince :many
-- The changes after an id that a subscriber receives: its channels, its readers (or admin).
SELECT c.*
FROM api.changes_since(sqlc.arg(after)::bigint, sqlc.arg(channels)::text[], sqlc.arg(readers)::text[],
                       sqlc.arg(is_admin)::boolean, sqlc.arg(max_changes)::integer) c;

-- name: ChangeResume :one
-- Where a subscriber that last saw an id goes on from: ok, expired or ahead.
SELECT r.status::text AS status, r.resume_after::bigint AS resume_after,
       r.trimmed_through::bigint AS trimmed_through, r.last_id::bigint AS last_id
FROM api.change_resume(sqlc.arg(after)::bigint) r;

-- name: ChangeStatus :one
-- The state of the change log.
SELECT s.last_id::bigint AS last_id, coalesce(s.oldest_id, 0)::bigint AS oldest_id,
       s.trimmed_through::bigint AS trimmed_through, s.pending::bigint AS pending, s.retention::text AS retention
FROM api.change_status() s;

-- name: ChangeTrim :one
-- Deletes changes older than the retention; NULL takes silo.settings change_retention.
SELECT api.change_trim(sqlc.narg(retention)::interval)::bigint AS deleted;

-- name: ChangeChannelsCheck :many
-- The subscription patterns a client (an admin or not) may not have, and why: SLINV for a pattern
-- that is no channel pattern, SLFRB for a channel for admins only.
SELECT c.channel::text AS channel, c.sqlstate::text AS sqlstate, c.message::text AS message,
       coalesce(c.hint, '')::text AS hint
FROM api.change_channels_check(sqlc.arg(channels)::text[], sqlc.arg(is_admin)::boolean) c;

-- name: ChangeSequencerWake :one
-- Claims or renews this hub's lease on the awake sequencer, so that writers do not notify; false:
-- another hub holds one.
SELECT api.change_sequencer_wake(sqlc.arg(hub)::integer, sqlc.arg(lease_ms)::integer * interval '1 millisecond')::boolean AS awake;

-- name: ChangeSequencerSleep :one
-- Ends this hub's lease; true: it may stop sequencing by itself (nothing pending, no writer that
-- read the lease still running), false: sequence and ask again.
SELECT api.change_sequencer_sleep(sqlc.arg(hub)::integer)::boolean AS asleep;
