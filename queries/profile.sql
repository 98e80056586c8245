-- Profile store: every query is one call of an api.* function (sql/020_profile.sql, the write
-- path, and sql/021_profile_read.sql, the read path).

-- The write path names its columns, cast where they are never NULL, so sqlc types them exactly.

-- name: ProfileApplyBatch :many
SELECT b.ord::integer AS ord, b.status::text AS status, b.operation, b.correlation_id, b.sqlstate,
       b.reason, b.dead_letter_id
FROM api.profile_apply_batch(sqlc.arg(updates)::jsonb) b;

-- name: ProfileApply :one
SELECT a.status::text AS status, a.operation, a.correlation_id, a.sqlstate, a.reason, a.dead_letter_id
FROM api.profile_apply(sqlc.arg(update)::jsonb) a;

-- name: ProfileLinkResolve :one
SELECT api.profile_link_resolve(sqlc.arg(correlation_id)::text)::text AS target;

-- name: ProfileGet :one
-- A profile as Granary's jsonPayload document. The columns are never NULL: the casts type them so.
SELECT g.correlation_id::text AS correlation_id, g.profile_type::text AS profile_type,
       g.json_payload
FROM api.profile_get(
    sqlc.arg(profile_type)::text,
    sqlc.arg(correlation_id)::text,
    sqlc.narg(fragments)::text[],
    sqlc.arg(with_history)::boolean,
    sqlc.arg(resolve_links)::boolean,
    sqlc.narg(readers)::text[]
) g;

-- name: ProfileGrainGet :one
-- A page of one grain's versions in the document shape of ProfileGet, with the number of versions.
SELECT g.correlation_id::text AS correlation_id, g.profile_type::text AS profile_type,
       g.json_payload, g.total_grain_versions::integer AS total_grain_versions
FROM api.profile_grain_get(
    sqlc.arg(profile_type)::text,
    sqlc.arg(correlation_id)::text,
    sqlc.arg(path)::text,
    sqlc.arg(with_history)::boolean,
    sqlc.arg(page_size)::integer,
    sqlc.arg(page_offset)::integer,
    sqlc.arg(resolve_links)::boolean,
    sqlc.narg(readers)::text[]
) g;

-- name: ProfileDeadLetterList :many
SELECT * FROM api.profile_dead_letter_list(
    sqlc.narg(correlation_id)::text,
    sqlc.narg(profile_type)::text,
    sqlc.narg(operation)::text,
    sqlc.narg(sqlstate)::text,
    sqlc.narg(resolved)::boolean,
    sqlc.arg(after_id)::bigint,
    sqlc.arg(max_rows)::integer
);

-- name: ProfileDeadLetterReplay :one
SELECT r.status::text AS status, r.operation, r.correlation_id, r.sqlstate, r.reason,
       r.dead_letter_id::bigint AS dead_letter_id
FROM api.profile_dead_letter_replay(sqlc.arg(id)::bigint) r;
