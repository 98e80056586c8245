-- Access tokens (sql/auth/). Columns are cast so sqlc types them exactly.

-- name: TokenCreate :one
SELECT t.token::text AS token, t.id::bigint AS id, t.name::text AS name, t.roles::text[] AS roles,
       t.can_write::boolean AS can_write, t.is_admin::boolean AS is_admin
FROM api.token_create(sqlc.arg(name)::text, sqlc.arg(roles)::text[], sqlc.arg(can_write)::boolean, sqlc.arg(is_admin)::boolean) t;

-- name: TokenAuthenticate :one
SELECT t.token_id, t.name, t.readers::text[] AS readers, t.can_write::boolean AS can_write, t.is_admin::boolean AS is_admin
FROM api.token_authenticate(sqlc.narg(token)::text) t;

-- name: TokenRevoke :one
SELECT * FROM api.token_revoke(sqlc.arg(name)::text);
