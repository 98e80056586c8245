-- +goose Up
-- Deny by default: a request without an access token is refused unless an operator turns anonymous
-- reads on, as PostgREST does with its anonymous role. api.token_authenticate (sql/auth/) reads the
-- setting at every call. Only true and false are accepted, so a mistyped value fails the UPDATE
-- instead of silently meaning one or the other.
INSERT INTO silo.settings (key, value, description) VALUES
    ('auth.anonymous_reads', 'false', 'Whether requests without an access token are served (true or false, default false). false: they are refused with 401 invalid-access-token, websocket subscriptions included. true: they read the grains and changes whose reader is _all, and can neither write nor administer. Read by api.token_authenticate at every call; a Silo process reuses the answer for up to 5 seconds.')
ON CONFLICT (key) DO NOTHING;
ALTER TABLE silo.settings ADD CONSTRAINT settings_auth_anonymous_reads_check
    CHECK (key <> 'auth.anonymous_reads' OR value IN ('true', 'false'));
COMMENT ON CONSTRAINT settings_auth_anonymous_reads_check ON silo.settings IS 'auth.anonymous_reads is true or false: a mistyped value fails the UPDATE.';

-- +goose Down
ALTER TABLE silo.settings DROP CONSTRAINT settings_auth_anonymous_reads_check;
DELETE FROM silo.settings WHERE key = 'auth.anonymous_reads';
