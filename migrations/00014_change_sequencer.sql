-- +goose Up
-- Whether a websocket hub is awake and sequencing changes by itself, so that a writer need not
-- notify silo_change_pending (sql/change/02_sequence.sql describes the protocol). A sequence
-- rather than a table: its value is read and written outside transactions, so a writer sees the
-- state of the moment whatever its snapshot (a REPEATABLE READ writer would see a table row as of
-- its start). Unlogged: it changes often and means nothing after a crash, where it restarts at 0
-- (asleep: writers notify).
CREATE UNLOGGED SEQUENCE silo.change_sequencer_awake MINVALUE 0 START 0 NO CYCLE;
COMMENT ON SEQUENCE silo.change_sequencer_awake IS 'Whether a websocket hub sequences changes by itself, so that writers need not notify silo_change_pending: last_value is (until when, in epoch milliseconds) × 1,000,000 + (the hub''s number, 1 to 999,999); 0 or a time past: no hub is awake, writers notify. Set only by api.change_sequencer_wake and api.change_sequencer_sleep (sql/change/02_sequence.sql); read by the trigger of silo.change_pending.';

-- The sequencer inserts every change once, and only the periodic trim looks changes up by when
-- they were sequenced: a BRIN index (the column grows with the ids) costs each insert a fraction of
-- a B-tree's.
DROP INDEX silo.changes_sequenced_idx;
CREATE INDEX changes_sequenced_idx ON silo.changes USING brin (sequenced) WITH (autosummarize = on);

-- +goose Down
DROP INDEX silo.changes_sequenced_idx;
CREATE INDEX changes_sequenced_idx ON silo.changes (sequenced);
DROP SEQUENCE silo.change_sequencer_awake;
