-- +goose Up
-- Belt processing: a replayed dead letter is delivered to its belt again as a delivery that names
-- the dead letter, whose copy of the event the processing step reads (the event may have left the
-- store by then). A lane remembers the SQLSTATE of its last retry, as the profile updater's lanes do.
ALTER TABLE event.deliveries ADD COLUMN dead_letter_id bigint;
COMMENT ON COLUMN event.deliveries.dead_letter_id IS 'For a replayed dead letter (api.belt_dead_letter_replay): its belt.dead_letters id, whose copy of the event (headers and payload) the step reads when the event is no longer in event.events; NULL for an event delivered at ingest.';

ALTER TABLE event.consumer_lanes ADD COLUMN last_sqlstate text;
COMMENT ON COLUMN event.consumer_lanes.last_sqlstate IS 'The SQLSTATE of the last retry of the head of the lane (SBRTY for a retry the callback asked for, 57014 for a timeout, a transient error''s own), NULL when it was not retried.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('belt.dead_letter_retention', '30 days', 'How long belt dead letters are kept (a PostgreSQL interval, default 30 days): silo work deletes older ones.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key = 'belt.dead_letter_retention';
ALTER TABLE event.consumer_lanes DROP COLUMN last_sqlstate;
ALTER TABLE event.deliveries DROP COLUMN dead_letter_id;
