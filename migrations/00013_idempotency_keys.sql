-- +goose Up
-- Idempotency keys: a client that sends a write again after an error or a timeout (it cannot tell
-- whether the first one committed) names it with a key, and the repeat gets the first answer
-- instead of being applied twice. The key and the write commit in one transaction, so a key is
-- recorded exactly when its write is. Keys are per caller (scope): one token's keys never meet
-- another's. sql/idempotency/ holds the rules; every write route of every domain uses them.
CREATE TABLE silo.idempotency_keys (
    scope        text        NOT NULL,
    key          text        NOT NULL,
    request      text        NOT NULL,
    request_hash bytea       NOT NULL,
    answer       jsonb,
    created      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created_idx ON silo.idempotency_keys (created);
COMMENT ON TABLE silo.idempotency_keys IS 'Idempotency keys of writes that committed, with their first answer, for the window in silo.settings idempotency.window (default 24 hours); api.idempotency_trim deletes older ones. Written in the transaction of the write it names.';
COMMENT ON COLUMN silo.idempotency_keys.scope IS 'Whose key it is: token:{id} for a request with an access token, role:{name} for a psql session without one. Keys of different scopes never meet.';
COMMENT ON COLUMN silo.idempotency_keys.key IS 'The key as the client sent it (the Idempotency-Key header): 1 to 255 printable ASCII characters.';
COMMENT ON COLUMN silo.idempotency_keys.request IS 'What was asked, without the body: the route and its parameters, e.g. POST /profile-updates mode=async priority=high. The same key with another request is refused (SLIDM).';
COMMENT ON COLUMN silo.idempotency_keys.request_hash IS 'SHA-256 of request and the body as jsonb text (so whitespace and key order do not matter). The same key with another body is refused (SLIDM).';
COMMENT ON COLUMN silo.idempotency_keys.answer IS 'The first answer, returned again to a repeat: for POST /profile-updates the result rows, for its async mode the accepted count and inbox ids. NULL only inside the transaction that claimed the key.';
COMMENT ON COLUMN silo.idempotency_keys.created IS 'When the key was first used; after the window a repeat counts as a new request.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('idempotency.window', '24 hours', 'How long an idempotency key is remembered (a PostgreSQL interval, default 24 hours): a request repeated with the same key within it gets the first answer and applies nothing again; after it, the key counts as new. api.idempotency_trim (a periodic job of silo work) deletes older keys.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key = 'idempotency.window';
DROP TABLE silo.idempotency_keys;
