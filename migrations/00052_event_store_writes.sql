-- +goose Up
-- Event store: cheaper writes for the same reads.
--
-- * The ids (event id, correlation id, event type) compare bytewise (COLLATE "C") rather than by
--   the database's collation: every ingested event enters B-tree indexes keyed on them, and a
--   bytewise comparison costs a fraction of a locale's. Equality is the same; order is the order
--   of their UTF-8 bytes (which C.UTF-8 and most collations give for ids of ASCII letters and
--   digits anyway). The deliveries' copies of them take the same collation, so that the joins of
--   deliveries with their events compare one collation.
-- * event.events has no primary key: event.event_ids' primary key makes each event id unique
--   already, and the key (correlation_id, at, event_id) cost a uniqueness check per event. A plain
--   index on the same columns, events_correlation_at_idx, serves what the key served: the reads by
--   correlation id and time range in order, one event found by its time (from event.event_ids),
--   a belt's deliveries joined to their events (events sent without a time share the time of
--   their ingest: the event id tells them apart in the index).
-- * event.deliveries has no foreign key to event.consumers: the key's check ran a query per
--   delivery. Ingest locks the consumers it delivers to once per call (FOR KEY SHARE), and
--   dropping a consumer deletes its deliveries itself (sql/event/01_consumer.sql).
ALTER TABLE event.deliveries DROP CONSTRAINT deliveries_consumer_id_fkey;
ALTER TABLE event.deliveries
    ALTER COLUMN correlation_id TYPE text COLLATE "C",
    ALTER COLUMN event_cid TYPE text COLLATE "C",
    ALTER COLUMN event_id TYPE text COLLATE "C";

ALTER TABLE event.event_ids
    ALTER COLUMN event_id TYPE text COLLATE "C",
    ALTER COLUMN correlation_id TYPE text COLLATE "C";

ALTER TABLE event.events DROP CONSTRAINT events_pkey;
ALTER TABLE event.events
    ALTER COLUMN event_id TYPE text COLLATE "C",
    ALTER COLUMN event_type TYPE text COLLATE "C",
    ALTER COLUMN correlation_id TYPE text COLLATE "C";
CREATE INDEX events_correlation_at_idx ON event.events (correlation_id, at, event_id);

-- +goose Down
DROP INDEX event.events_correlation_at_idx;
ALTER TABLE event.events
    ALTER COLUMN event_id TYPE text COLLATE "default",
    ALTER COLUMN event_type TYPE text COLLATE "default",
    ALTER COLUMN correlation_id TYPE text COLLATE "default";
ALTER TABLE event.events ADD CONSTRAINT events_pkey PRIMARY KEY (correlation_id, at, event_id);

ALTER TABLE event.event_ids
    ALTER COLUMN event_id TYPE text COLLATE "default",
    ALTER COLUMN correlation_id TYPE text COLLATE "default";

ALTER TABLE event.deliveries
    ALTER COLUMN correlation_id TYPE text COLLATE "default",
    ALTER COLUMN event_cid TYPE text COLLATE "default",
    ALTER COLUMN event_id TYPE text COLLATE "default";
DELETE FROM event.deliveries d WHERE NOT EXISTS (SELECT FROM event.consumers c WHERE c.id = d.consumer_id);
ALTER TABLE event.deliveries ADD CONSTRAINT deliveries_consumer_id_fkey
    FOREIGN KEY (consumer_id) REFERENCES event.consumers (id) ON DELETE CASCADE;
