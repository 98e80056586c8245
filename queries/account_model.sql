-- Accounts in Pryv's model (sql/account/): each query one call of an api.account_* function.
-- The operations answer Pryv's JSON bodies whole; the HTTP layer adds meta.

-- name: AccountUserCreate :one
SELECT u.username::text AS username, u.access_id::text AS access_id, u.token::text AS token
FROM api.account_user_create(sqlc.arg(username)::text, sqlc.arg(access_name)::text) u;

-- name: AccountAuthenticate :one
-- The access of a request: its id, what every other operation takes.
SELECT a.access_id::text AS access_id, a.user_id::bigint AS user_id, a.username::text AS username,
       a.access_type::text AS access_type, a.readers::text[] AS readers
FROM api.account_authenticate(sqlc.arg(username)::text, sqlc.narg(token)::text) a;

-- name: AccountAccessCreate :one
SELECT api.account_access_create(sqlc.arg(access_id)::text, sqlc.arg(access)::jsonb)::jsonb AS body;

-- name: AccountAccessesGet :one
SELECT api.account_accesses_get(sqlc.arg(access_id)::text)::jsonb AS body;

-- name: AccountStreamCreate :one
SELECT api.account_stream_create(sqlc.arg(access_id)::text, sqlc.arg(stream)::jsonb)::jsonb AS body;

-- name: AccountStreamsGet :one
SELECT api.account_streams_get(sqlc.arg(access_id)::text, sqlc.narg(parent_id)::text, sqlc.arg(state)::text)::jsonb AS body;

-- name: AccountEventCreate :one
SELECT api.account_event_create(sqlc.arg(access_id)::text, sqlc.arg(event)::jsonb)::jsonb AS body;

-- name: AccountEventGet :one
SELECT api.account_event_get(sqlc.arg(access_id)::text, sqlc.arg(id)::text)::jsonb AS body;

-- name: AccountEventUpdate :one
SELECT api.account_event_update(sqlc.arg(access_id)::text, sqlc.arg(id)::text, sqlc.arg(update)::jsonb)::jsonb AS body;

-- name: AccountEventDelete :one
SELECT api.account_event_delete(sqlc.arg(access_id)::text, sqlc.arg(id)::text)::jsonb AS body;

-- name: AccountEventsGet :one
SELECT api.account_events_get(
    sqlc.arg(access_id)::text,
    sqlc.narg(streams)::text[],
    sqlc.narg(types)::text[],
    sqlc.narg(from_time)::double precision,
    sqlc.narg(to_time)::double precision,
    sqlc.narg(max_events)::integer,
    sqlc.arg(skip)::integer,
    sqlc.arg(sort_ascending)::boolean,
    sqlc.arg(state)::text,
    sqlc.arg(include_series)::boolean
)::jsonb AS body;

-- name: AccountAccessInfo :one
SELECT api.account_access_info(sqlc.arg(access_id)::text)::jsonb AS body;
