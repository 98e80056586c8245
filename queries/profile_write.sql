-- Profile store, write path (sql/profile/): the update messages of Granary's Profile Updater.
-- Columns are cast where they are never NULL, so sqlc types them exactly.

-- name: ProfileApplyBatch :many
-- readers: what the caller may read (the HTTP layer passes its token's): the results are told as
-- such a caller may see them. NULL: in full, as a psql user sees them.
SELECT b.ord::integer AS ord, b.status::text AS status, b.operation, b.correlation_id, b.sqlstate,
       b.reason, b.dead_letter_id
FROM api.profile_apply_batch(sqlc.arg(updates)::jsonb, sqlc.narg(readers)::text[]) b;

-- name: ProfileApply :one
SELECT a.status::text AS status, a.operation, a.correlation_id, a.sqlstate, a.reason, a.dead_letter_id
FROM api.profile_apply(sqlc.arg(update)::jsonb) a;

-- name: ProfileLinkResolve :one
SELECT api.profile_link_resolve(sqlc.arg(correlation_id)::text)::text AS target;

-- name: ProfileApplyRequests :many
-- requests: a JSON array of {"updates", "token_id", "idempotency_key"}, one per HTTP request joined
-- into this call; readers as in ProfileApplyBatch (one set for the whole call).
SELECT r.request::integer AS request, r.ord, r.status::text AS status, r.operation, r.correlation_id,
       r.sqlstate, r.reason, r.dead_letter_id, r.replayed::boolean AS replayed
FROM api.profile_apply_requests(sqlc.arg(requests)::jsonb, sqlc.narg(readers)::text[]) r;
