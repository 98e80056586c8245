-- +goose Up
-- Event store: event.event_ids loses its index on at, which every ingested event paid for and only
-- retention read. api.event_trim (sql/event/04_trim.sql) now finds the ids of the events it drops
-- from the events themselves, read before their partitions go, and deletes them by primary key.
DROP INDEX event.event_ids_at_idx;

-- +goose Down
CREATE INDEX event_ids_at_idx ON event.event_ids (at);
