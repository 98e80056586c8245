-- Belts, processing (sql/belt/05_step.sql, 06_dead_letter.sql): the steps workers run, the belts
-- with work, the record of a SQL callback's timeout, and the dead letters.

-- name: BeltProcess :one
-- One step of belt_id (NULL: any running belt with work), at most max_events (NULL: belt.batch_size),
-- only lanes (NULL: any).
SELECT p.belt_id, p.lanes::integer AS lanes, p.taken::integer AS taken, p.processed::integer AS processed,
       p.failed::integer AS failed, p.retried::integer AS retried, p.dead_lettered::integer AS dead_lettered,
       p.long_running::integer AS long_running, p.updates::integer AS updates,
       p.updates_dead_lettered::integer AS updates_dead_lettered, p.callback_ms::double precision AS callback_ms,
       p.apply_ms::double precision AS apply_ms, p.more::boolean AS more
FROM api.belt_process(sqlc.narg(belt_id)::bigint, sqlc.narg(max_events)::integer, sqlc.narg(lanes)::smallint[]) p;

-- name: BeltWork :many
SELECT * FROM api.belt_work ORDER BY belt_id;

-- name: BeltLanesReady :one
SELECT api.belt_lanes_ready(sqlc.arg(belt_id)::bigint)::smallint[] AS lanes;

-- name: BeltLaneTimeout :one
-- retry, dead_letter or empty.
SELECT api.belt_lane_timeout(sqlc.arg(belt_id)::bigint, sqlc.arg(lane)::smallint, sqlc.arg(seconds)::double precision)::text AS outcome;

-- name: BeltDeadLetterList :one
-- {"totalCount", "items"}.
SELECT api.belt_dead_letter_list(sqlc.arg(belt_id)::bigint, sqlc.arg(page_offset)::integer, sqlc.arg(page_size)::integer,
                                 sqlc.narg(replayed)::boolean)::jsonb AS page;

-- name: BeltDeadLetterReplay :one
SELECT api.belt_dead_letter_replay(sqlc.arg(belt_id)::bigint, sqlc.narg(ids)::bigint[])::integer AS replayed;

-- name: BeltDeadLetterTrim :one
SELECT api.belt_dead_letter_trim(sqlc.narg(retention)::interval)::integer AS deleted;

-- name: BeltStatementTimeout :exec
-- For the rest of the caller's transaction: a SQL belt's step runs with its CALLBACK_TIMEOUT_SEC.
SELECT set_config('statement_timeout', sqlc.arg(timeout)::text, true);
