-- Profile store, read path (sql/profile/): profiles and grains in Granary's jsonPayload shape.

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
