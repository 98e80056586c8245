-- +goose Up
-- The change log behind change notifications.
--
-- Writers insert into silo.change_pending in the transaction of the change (by trigger or by the
-- api.* function that makes the change). Identity values are handed out in insert order, not in
-- commit order, so they cannot serve as resume positions: a transaction that took a smaller id could
-- commit after a larger id was delivered, and a client resuming from the larger id would miss it.
-- The sequencer (api.change_sequence, one at a time under an advisory lock) moves committed pending
-- rows into silo.changes and numbers them from silo.change_id_seq: the order of silo.changes.id is
-- the order in which changes became visible, and "every change after id N" is exact.
CREATE TABLE silo.change_pending (
    pending_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel     text        NOT NULL,
    kind        text        NOT NULL,
    payload     jsonb       NOT NULL DEFAULT '{}',
    readers     text[]      NOT NULL DEFAULT '{}',
    created     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE silo.change_pending IS 'Changes committed (or about to be) and not yet numbered: api.change_sequence moves them into silo.changes in commit order. Written in the transaction of each change.';
COMMENT ON COLUMN silo.change_pending.channel IS 'Channel of the change, e.g. profile:customer:0815, dead-letters, reaper. profile:* marks the changes of one statement on profile.profilestore in compact form (aligned arrays in payload), which api.change_sequence expands into one change per profile and reader; api.changes_pending() shows them expanded.';
COMMENT ON COLUMN silo.change_pending.kind IS 'What happened, e.g. changed, deleted, dead_letter, ttl, ttn.';
COMMENT ON COLUMN silo.change_pending.payload IS 'The minimum a subscriber needs to act (ids, paths, metadata), never grain values.';
COMMENT ON COLUMN silo.change_pending.readers IS 'Who may see the change: subscribers whose readers (_all, _auth, roles) overlap it; admins see every change; empty means admins only.';

CREATE SEQUENCE silo.change_id_seq;
COMMENT ON SEQUENCE silo.change_id_seq IS 'Change ids, drawn only by api.change_sequence so that their order is commit order.';

CREATE TABLE silo.changes (
    id          bigint      PRIMARY KEY,
    channel     text        NOT NULL,
    kind        text        NOT NULL,
    payload     jsonb       NOT NULL,
    readers     text[]      NOT NULL,
    created     timestamptz NOT NULL,
    sequenced   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX changes_sequenced_idx ON silo.changes (sequenced);
COMMENT ON TABLE silo.changes IS 'The change log: every change in the order it became visible, kept for the retention in silo.settings (change_retention). A websocket client resumes with the last id it saw and receives every later change from here.';
COMMENT ON COLUMN silo.changes.id IS 'Change id: increasing in commit order, the resume position of subscribers.';
COMMENT ON COLUMN silo.changes.channel IS 'Channel of the change, e.g. profile:customer:0815, dead-letters, reaper.';
COMMENT ON COLUMN silo.changes.kind IS 'What happened, e.g. changed, deleted, dead_letter, ttl, ttn.';
COMMENT ON COLUMN silo.changes.payload IS 'The minimum a subscriber needs to act (ids, paths, metadata), never grain values.';
COMMENT ON COLUMN silo.changes.readers IS 'Who may see the change: subscribers whose readers (_all, _auth, roles) overlap it; admins see every change; empty means admins only.';
COMMENT ON COLUMN silo.changes.created IS 'When the change was written (its transaction''s start).';
COMMENT ON COLUMN silo.changes.sequenced IS 'When the sequencer numbered it; the retention counts from here.';

-- How far the change log has been trimmed: a client resuming from an id below trimmed_through
-- may have missed changes, and is told so (api.change_resume, api.changes_since).
CREATE TABLE silo.change_horizon (
    singleton       boolean PRIMARY KEY DEFAULT true CONSTRAINT change_horizon_singleton_check CHECK (singleton),
    trimmed_through bigint  NOT NULL DEFAULT 0
);
INSERT INTO silo.change_horizon DEFAULT VALUES;
COMMENT ON TABLE silo.change_horizon IS 'One row: how far api.change_trim has trimmed silo.changes. Resuming after an id below trimmed_through would miss trimmed changes.';
COMMENT ON COLUMN silo.change_horizon.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN silo.change_horizon.trimmed_through IS 'Highest change id trimmed so far (0: nothing trimmed). Every change with a higher id is still in silo.changes.';

-- Settings a DBA reads and changes with plain SQL; each domain adds its keys.
CREATE TABLE silo.settings (
    key         text PRIMARY KEY,
    value       text NOT NULL,
    description text NOT NULL
);
COMMENT ON TABLE silo.settings IS 'Runtime settings a DBA may read and change with UPDATE: each row says what it does. Values are text, interpreted by the functions that read them.';
INSERT INTO silo.settings (key, value, description) VALUES
    ('change_retention', '24 hours', 'How long the change log keeps changes (a PostgreSQL interval): a websocket client that resumes from an older id is told it missed changes.');

-- +goose Down
DROP TABLE silo.settings;
DROP TABLE silo.change_horizon;
DROP TABLE silo.changes;
DROP SEQUENCE silo.change_id_seq;
DROP TABLE silo.change_pending;
