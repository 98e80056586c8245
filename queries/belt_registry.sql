-- Belts, the registry (sql/belt/02_registry.sql): belt documents in Granary's Belt API shape, as
-- jsonb, created, changed, deleted, started and stopped.

-- name: BeltCreate :one
SELECT api.belt_create(sqlc.arg(belt)::jsonb)::jsonb AS doc;

-- name: BeltUpdate :one
SELECT api.belt_update(sqlc.arg(id)::bigint, sqlc.arg(belt)::jsonb)::jsonb AS doc;

-- name: BeltDelete :one
-- false when there was no such belt.
SELECT api.belt_delete(sqlc.arg(id)::bigint)::boolean AS deleted;

-- name: BeltGet :one
SELECT api.belt_get(sqlc.arg(id)::bigint)::jsonb AS doc;

-- name: BeltList :one
-- {"totalCount", "items"}.
SELECT api.belt_list(sqlc.arg(page_offset)::integer, sqlc.arg(page_size)::integer)::jsonb AS page;

-- name: BeltState :one
-- {"status", "reason"}.
SELECT api.belt_state(sqlc.arg(id)::bigint)::jsonb AS state;

-- name: BeltSetState :one
-- START or STOP; the new {"status", "reason"}.
SELECT api.belt_set_state(sqlc.arg(id)::bigint, sqlc.arg(action)::text)::jsonb AS state;
