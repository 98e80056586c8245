-- +goose Up
CREATE SCHEMA IF NOT EXISTS profile;
COMMENT ON SCHEMA profile IS 'The profile store: grains of profiles at points in time, and the dead letters of rejected profile updates.';

CREATE TABLE profile.profilestore (
    correlation_id  varchar     NOT NULL,
    profile_type    varchar     NOT NULL DEFAULT '_d',
    path            varchar     NOT NULL,
    pit             varchar     NOT NULL DEFAULT '_latest',
    value           jsonb       NOT NULL,
    certainty       real        NOT NULL DEFAULT 1.0,
    grain_type      character(1) NOT NULL,
    inserted        bigint      NOT NULL,
    ttl             varchar     NOT NULL DEFAULT 'P100Y',
    reader          varchar     NOT NULL DEFAULT '_auth',
    origin          varchar,
    ttn             varchar     NOT NULL DEFAULT 'P100Y',
    expires_at      timestamptz,
    notify_at       timestamptz,
    CONSTRAINT profilestore_pkey PRIMARY KEY (correlation_id, profile_type, path, pit),
    CONSTRAINT profilestore_grain_type_check CHECK (grain_type IN ('t', 'a', 'c')),
    CONSTRAINT profilestore_certainty_check CHECK (certainty >= 0 AND certainty <= 1),
    CONSTRAINT profilestore_inserted_check CHECK (inserted >= 0),
    CONSTRAINT profilestore_path_check CHECK (path LIKE '/_%'),
    CONSTRAINT profilestore_expires_check CHECK ((expires_at IS NULL) = (ttl = 'P100Y')),
    CONSTRAINT profilestore_notify_check CHECK ((notify_at IS NULL) = (ttn = 'P100Y'))
);
CREATE INDEX profilestore_expires_at_idx ON profile.profilestore (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX profilestore_notify_at_idx ON profile.profilestore (notify_at) WHERE notify_at IS NOT NULL;
-- Profile links only: lets a batch of updates find which of its correlation ids are linked without
-- touching the rest of the table. profile_type never changes, so updates stay HOT.
CREATE INDEX profilestore_links_idx ON profile.profilestore (correlation_id) WHERE profile_type = 'profile_link';
COMMENT ON TABLE profile.profilestore IS 'The profile store: one row per grain value of a profile (correlation_id, profile_type) at a path and point in time (pit). Written only through api.profile_apply*; read the profile as a document with api.profile_get or flat with api.profilestore_latest.';
COMMENT ON COLUMN profile.profilestore.correlation_id IS 'Correlation ID: groups all grains of one profile (cookie, device, customer, contract, ...).';
COMMENT ON COLUMN profile.profilestore.profile_type IS 'Profile type: the kind of entity (customer, contract, ...). profile_link holds profile links.';
COMMENT ON COLUMN profile.profilestore.path IS 'Grain path in the profile document: a leading slash and one segment per level, e.g. /a2/b1. The last segment is the grain''s name.';
COMMENT ON COLUMN profile.profilestore.pit IS 'Point in time: _latest for the current value; _YYYYMMDDTHHMISS.mmmZ (UTC) for a history value archived from _latest, named after its inserted time.';
COMMENT ON COLUMN profile.profilestore.value IS 'Grain value: a JSON string (grain type t), a JSON array of strings (a), or a counter object {"_initial","_step","_current"} (c).';
COMMENT ON COLUMN profile.profilestore.certainty IS 'Certainty of the value, between 0 and 1.';
COMMENT ON COLUMN profile.profilestore.grain_type IS 'Grain type, fixed when the grain is created: t text, a array, c counter.';
COMMENT ON COLUMN profile.profilestore.inserted IS 'Insertion time as unix epoch milliseconds (the update''s _in, or the time it was applied).';
COMMENT ON COLUMN profile.profilestore.ttl IS 'Time to live, an ISO 8601 duration counted from inserted; P100Y means never.';
COMMENT ON COLUMN profile.profilestore.reader IS 'Who may read the grain: _all anyone, _auth any valid token, any other value tokens holding that role.';
COMMENT ON COLUMN profile.profilestore.origin IS 'Origin of the value, for tracing (e.g. /belts/28).';
COMMENT ON COLUMN profile.profilestore.ttn IS 'Time to notify, an ISO 8601 duration counted from inserted; P100Y means never.';
COMMENT ON COLUMN profile.profilestore.expires_at IS 'inserted + ttl, kept only when ttl is not the default P100Y (partial index for the reaper).';
COMMENT ON COLUMN profile.profilestore.notify_at IS 'inserted + ttn, kept only when ttn is not the default P100Y (partial index for the reaper).';

CREATE TABLE profile.dead_letters (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message         jsonb       NOT NULL,
    reason          text        NOT NULL,
    sqlstate        char(5)     NOT NULL,
    context         text,
    correlation_id  text,
    profile_type    text,
    operation       text,
    created         timestamptz NOT NULL DEFAULT now(),
    replay_count    integer     NOT NULL DEFAULT 0,
    last_replayed   timestamptz,
    resolved        timestamptz
);
CREATE INDEX dead_letters_unresolved_idx ON profile.dead_letters (id) WHERE resolved IS NULL;
CREATE INDEX dead_letters_correlation_idx ON profile.dead_letters (correlation_id, profile_type);
COMMENT ON TABLE profile.dead_letters IS 'Dead letter table: profile updates that could not be applied, kept whole with the reason. List with api.profile_dead_letter_list, replay with api.profile_dead_letter_replay.';
COMMENT ON COLUMN profile.dead_letters.message IS 'The original update message, exactly as received.';
COMMENT ON COLUMN profile.dead_letters.reason IS 'Why the update was rejected, e.g. "Value must be an Array" or "_v can not be null".';
COMMENT ON COLUMN profile.dead_letters.sqlstate IS 'SQLSTATE of the rejection: a Silo code (see the README''s error table) or PostgreSQL''s own for unexpected errors.';
COMMENT ON COLUMN profile.dead_letters.context IS 'Where the rejection happened: the validation step, or the PL/pgSQL error context of an unexpected error.';
COMMENT ON COLUMN profile.dead_letters.correlation_id IS 'The update''s _id when it was a string, for filtering.';
COMMENT ON COLUMN profile.dead_letters.profile_type IS 'The update''s _profile_type (default _d) when it was a string, for filtering.';
COMMENT ON COLUMN profile.dead_letters.operation IS 'The update''s _operation (default _set) when it was a string, for filtering.';
COMMENT ON COLUMN profile.dead_letters.replay_count IS 'How often the message was replayed and failed again.';
COMMENT ON COLUMN profile.dead_letters.resolved IS 'When a replay applied the message; NULL while it is still dead.';

-- +goose Down
DROP TABLE profile.dead_letters;
DROP TABLE profile.profilestore;
DROP SCHEMA profile;
