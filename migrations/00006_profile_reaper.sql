-- +goose Up
-- The reaper: grains past inserted + ttl are deleted, grains past inserted + ttn are notified once
-- (api.profile_reap, sql/profile/10_reaper.sql). Every deletion and notification is recorded here
-- for consumers (belts) and published on the change channel 'reaper'.

-- One notification per TTN value: after notifying a grain the reaper sets its notify_at to NULL.
-- notify_at NULL with a ttn other than P100Y therefore means "notified, nothing due". The write
-- path recomputes notify_at = inserted + ttn on every write of a grain (a new value, a new _in, a
-- new _ttn, _set_ttn), so a rewritten grain is due again; a history pit archived from an already
-- notified _latest keeps notify_at NULL and is not notified twice. The check of 00003 required
-- notify_at to be set whenever ttn is not P100Y; it now only forbids a notify_at for P100Y.
ALTER TABLE profile.profilestore DROP CONSTRAINT profilestore_notify_check;
ALTER TABLE profile.profilestore ADD CONSTRAINT profilestore_notify_check
    CHECK (notify_at IS NULL OR ttn <> 'P100Y') NOT VALID;
ALTER TABLE profile.profilestore VALIDATE CONSTRAINT profilestore_notify_check;
COMMENT ON COLUMN profile.profilestore.notify_at IS 'inserted + ttn while a notification is due or pending; NULL when ttn is the default P100Y or when the reaper has notified this inserted + ttn (every write of the grain sets it again). Partial index for the reaper.';

CREATE TABLE profile.reaper_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text         NOT NULL,
    correlation_id  varchar      NOT NULL,
    profile_type    varchar      NOT NULL,
    path            varchar      NOT NULL,
    pit             varchar      NOT NULL,
    grain_type      character(1) NOT NULL,
    inserted        bigint       NOT NULL,
    ttl             varchar      NOT NULL,
    ttn             varchar      NOT NULL,
    reader          varchar      NOT NULL,
    origin          varchar,
    certainty       real         NOT NULL,
    due             timestamptz  NOT NULL,
    created         timestamptz  NOT NULL DEFAULT now(),
    CONSTRAINT reaper_events_kind_check CHECK (kind IN ('ttl', 'ttn'))
);
CREATE INDEX reaper_events_created_idx ON profile.reaper_events (created);
COMMENT ON TABLE profile.reaper_events IS 'What the reaper did: one row per grain deleted for its ttl or notified for its ttn, with the grain''s coordinates and metadata, never its value. Consumers read after the last id they saw (api.profile_reaper_events): ids are drawn under a lock held to commit, so their order is commit order. Trimmed after the retention in silo.settings (reaper.event_retention).';
COMMENT ON COLUMN profile.reaper_events.id IS 'Event id, increasing in commit order: the resume position of consumers.';
COMMENT ON COLUMN profile.reaper_events.kind IS 'ttl: the grain was deleted because inserted + ttl passed; ttn: notification that inserted + ttn passed (the grain stays).';
COMMENT ON COLUMN profile.reaper_events.correlation_id IS 'The grain''s correlation ID.';
COMMENT ON COLUMN profile.reaper_events.profile_type IS 'The grain''s profile type.';
COMMENT ON COLUMN profile.reaper_events.path IS 'The grain''s path, e.g. /a2/b1.';
COMMENT ON COLUMN profile.reaper_events.pit IS 'The grain''s point in time: _latest or a history pit.';
COMMENT ON COLUMN profile.reaper_events.grain_type IS 'The grain''s type: t text, a array, c counter.';
COMMENT ON COLUMN profile.reaper_events.inserted IS 'The grain''s insertion time, epoch milliseconds.';
COMMENT ON COLUMN profile.reaper_events.ttl IS 'The grain''s time to live (ISO 8601 duration).';
COMMENT ON COLUMN profile.reaper_events.ttn IS 'The grain''s time to notify (ISO 8601 duration).';
COMMENT ON COLUMN profile.reaper_events.reader IS 'The grain''s reader: who may see the event on the change channel.';
COMMENT ON COLUMN profile.reaper_events.origin IS 'The grain''s origin.';
COMMENT ON COLUMN profile.reaper_events.certainty IS 'The grain''s certainty.';
COMMENT ON COLUMN profile.reaper_events.due IS 'When the grain became due: inserted + ttl (kind ttl) or inserted + ttn (kind ttn).';
COMMENT ON COLUMN profile.reaper_events.created IS 'When the reaper recorded the event (its transaction''s start); the retention counts from here.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('reaper.batch_size', '1000', 'How many grains one reaper batch deletes (ttl) and notifies (ttn) at most, each batch in its own transaction (a positive integer). Read by api.profile_reap when called without a batch size.'),
    ('reaper.event_retention', '7 days', 'How long profile.reaper_events keeps the reaper''s events (a PostgreSQL interval); older ones are trimmed by api.profile_reaper_event_trim after every reaper run.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key IN ('reaper.batch_size', 'reaper.event_retention');
DROP TABLE profile.reaper_events;
-- Notified grains are due again under the old rule (notify_at always kept).
UPDATE profile.profilestore
SET notify_at = ((timestamp '1970-01-01' + inserted * interval '1 millisecond') + ttn::interval) AT TIME ZONE 'UTC'
WHERE notify_at IS NULL AND ttn <> 'P100Y';
ALTER TABLE profile.profilestore DROP CONSTRAINT profilestore_notify_check;
ALTER TABLE profile.profilestore ADD CONSTRAINT profilestore_notify_check CHECK ((notify_at IS NULL) = (ttn = 'P100Y'));
COMMENT ON COLUMN profile.profilestore.notify_at IS 'inserted + ttn, kept only when ttn is not the default P100Y (partial index for the reaper).';
