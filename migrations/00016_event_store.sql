-- +goose Up
-- Event store: the events harvesters send (Granary's event headers and an arbitrary JSON payload),
-- kept by time for reading back by correlation id or type, and delivered to the consumers that
-- registered for their types (belts), each in lanes that keep the order of a correlation id.
--
-- Why three tables besides the events: event.events is time-partitioned, and a unique constraint
-- of a partitioned table must include its time column, so the event id that deduplicates lives in
-- event.event_ids (one row per id ever stored, trimmed with the events it names). Consumers do not
-- scan the store: ingest copies a small reference of each event into event.deliveries for every
-- consumer of its type, and a consumer deletes its deliveries in the transaction that processes
-- them, so nothing is skipped whatever order concurrent ingests commit in, and nothing is
-- processed twice. event.consumer_lanes holds each lane's retry state and counters.
CREATE SCHEMA event;
COMMENT ON SCHEMA event IS 'Event store: events (time-partitioned), their ids for deduplication, and their delivery to consumers (belts) in ordered lanes. Code: sql/event/ (api.event_*).';

CREATE TABLE event.events (
    at             timestamptz NOT NULL,
    event_id       text        NOT NULL,
    event_type     text        NOT NULL,
    correlation_id text        NOT NULL,
    harvester_name text,
    type_version   text,
    headers        jsonb       NOT NULL,
    payload        jsonb       NOT NULL,
    received       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_pkey PRIMARY KEY (correlation_id, at, event_id)
) PARTITION BY RANGE (at);
COMMENT ON TABLE event.events IS 'Stored events, one row per grnry-event-id, time-partitioned on at (a TimescaleDB hypertable when the database has TimescaleDB, native range partitions made by pg_partman otherwise: partition.tables says which). Written by api.event_ingest; read by api.event_list and api.event_get.';
COMMENT ON COLUMN event.events.at IS 'The event''s time: header grnry-event-timestamp (milliseconds since the epoch, or an ISO-8601 time), the time of ingest when absent. The partitioning column; reads select half-open ranges of it.';
COMMENT ON COLUMN event.events.event_id IS 'Header grnry-event-id: the id that deduplicates (event.event_ids holds every stored id).';
COMMENT ON COLUMN event.events.event_type IS 'Header grnry-event-type: which consumers (belts) receive the event.';
COMMENT ON COLUMN event.events.correlation_id IS 'Header grnry-correlation-id: the tracking entity (profile) the event belongs to, as sent.';
COMMENT ON COLUMN event.events.harvester_name IS 'Header grnry-harvester-name, when sent.';
COMMENT ON COLUMN event.events.type_version IS 'Header grnry-event-type-version, when sent.';
COMMENT ON COLUMN event.events.headers IS 'Every header as sent (a JSON object of strings, the grnry-* ones included): what a callback receives as event_headers.';
COMMENT ON COLUMN event.events.payload IS 'The event payload as sent (any JSON value): what a callback receives as event_payload.';
COMMENT ON COLUMN event.events.received IS 'When Silo stored the event (the ingesting transaction''s start).';
SELECT partition.create_time_partitioned('event.events', 'at', interval '1 day');
CREATE INDEX events_type_at_idx ON event.events (event_type, at);

CREATE TABLE event.event_ids (
    event_id       text        NOT NULL,
    at             timestamptz NOT NULL,
    correlation_id text        NOT NULL,
    received       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT event_ids_pkey PRIMARY KEY (event_id)
);
CREATE INDEX event_ids_at_idx ON event.event_ids (at);
COMMENT ON TABLE event.event_ids IS 'Every grnry-event-id in event.events, with where its event is: an event sent again with a stored id is neither stored nor delivered again (api.event_ingest answers duplicate). Rows go when their events are dropped by retention.';
COMMENT ON COLUMN event.event_ids.event_id IS 'The event id (header grnry-event-id).';
COMMENT ON COLUMN event.event_ids.at IS 'The stored event''s time (event.events.at).';
COMMENT ON COLUMN event.event_ids.correlation_id IS 'The stored event''s correlation id (event.events.correlation_id): with at and event_id, its primary key.';
COMMENT ON COLUMN event.event_ids.received IS 'When the event was first stored.';

CREATE TABLE event.consumers (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text        NOT NULL,
    event_types text[]      NOT NULL,
    lanes       smallint    NOT NULL DEFAULT 64 CHECK (lanes BETWEEN 1 AND 1024),
    created     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT consumers_name_key UNIQUE (name)
);
COMMENT ON TABLE event.consumers IS 'Who receives events: every event stored after a consumer is created and whose type is in its event_types is delivered to it (event.deliveries). A belt is a consumer (belt.belts.consumer_id).';
COMMENT ON COLUMN event.consumers.id IS 'The consumer''s id.';
COMMENT ON COLUMN event.consumers.name IS 'A unique name: belt:{belt id} for a belt.';
COMMENT ON COLUMN event.consumers.event_types IS 'The event types (grnry-event-type) delivered to it.';
COMMENT ON COLUMN event.consumers.lanes IS 'How many lanes its deliveries are spread over (by correlation id): events of one correlation id share a lane and are processed in order; different lanes are processed in parallel.';
COMMENT ON COLUMN event.consumers.created IS 'When it was created: earlier events are not delivered to it.';

CREATE TABLE event.consumer_lanes (
    consumer_id   bigint      NOT NULL REFERENCES event.consumers (id) ON DELETE CASCADE,
    lane          smallint    NOT NULL,
    not_before    timestamptz NOT NULL DEFAULT '-infinity',
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    processed     bigint      NOT NULL DEFAULT 0,
    failed        bigint      NOT NULL DEFAULT 0,
    retried       bigint      NOT NULL DEFAULT 0,
    dead_lettered bigint      NOT NULL DEFAULT 0,
    long_running  bigint      NOT NULL DEFAULT 0,
    CONSTRAINT consumer_lanes_pkey PRIMARY KEY (consumer_id, lane)
);
COMMENT ON TABLE event.consumer_lanes IS 'One row per lane of each consumer: the row a processing step locks (FOR UPDATE SKIP LOCKED) to own the lane, its retry state, and its counters (a consumer''s totals are the sums over its lanes, so concurrent steps never update one row).';
COMMENT ON COLUMN event.consumer_lanes.consumer_id IS 'The consumer.';
COMMENT ON COLUMN event.consumer_lanes.lane IS 'The lane, 0 to lanes - 1.';
COMMENT ON COLUMN event.consumer_lanes.not_before IS 'The lane is not processed before this time (a retry''s back-off); -infinity when it is ready.';
COMMENT ON COLUMN event.consumer_lanes.attempts IS 'Retries so far of the delivery at the head of the lane (0 when it has not failed).';
COMMENT ON COLUMN event.consumer_lanes.last_error IS 'Why the head of the lane was last retried, NULL when it was not.';
COMMENT ON COLUMN event.consumer_lanes.processed IS 'Deliveries processed (their updates applied) in this lane.';
COMMENT ON COLUMN event.consumer_lanes.failed IS 'Deliveries whose processing raised an error (each is dead-lettered or retried).';
COMMENT ON COLUMN event.consumer_lanes.retried IS 'Retries scheduled in this lane.';
COMMENT ON COLUMN event.consumer_lanes.dead_lettered IS 'Deliveries sent to the consumer''s dead letter table.';
COMMENT ON COLUMN event.consumer_lanes.long_running IS 'Deliveries whose processing took longer than the consumer''s long-running limit.';

CREATE TABLE event.deliveries (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_id    bigint      NOT NULL REFERENCES event.consumers (id) ON DELETE CASCADE,
    lane           smallint    NOT NULL,
    correlation_id text        NOT NULL,
    event_cid      text        NOT NULL,
    event_at       timestamptz NOT NULL,
    event_id       text        NOT NULL,
    delivered      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deliveries_lane_idx ON event.deliveries (consumer_id, lane, id);
COMMENT ON TABLE event.deliveries IS 'Events waiting for a consumer, in order of id within each lane. Written by api.event_ingest for every consumer of the event''s type, deleted by the consumer in the transaction that processes them.';
COMMENT ON COLUMN event.deliveries.id IS 'Delivery order: within a lane, smaller ids are processed first.';
COMMENT ON COLUMN event.deliveries.consumer_id IS 'The consumer.';
COMMENT ON COLUMN event.deliveries.lane IS 'The lane: hashtext(correlation_id) modulo the consumer''s lanes.';
COMMENT ON COLUMN event.deliveries.correlation_id IS 'The correlation id whose order the delivery keeps: the event''s, or, when the profile store links it to another id (a profile_link grain), the id it links to at ingest, so that events of old and new ids share the new id''s lane.';
COMMENT ON COLUMN event.deliveries.event_cid IS 'The event''s own correlation id (event.events.correlation_id), for finding it.';
COMMENT ON COLUMN event.deliveries.event_at IS 'The event''s time (event.events.at), for finding it.';
COMMENT ON COLUMN event.deliveries.event_id IS 'The event''s id (event.events.event_id).';
COMMENT ON COLUMN event.deliveries.delivered IS 'When the delivery was made (the event''s ingest).';

INSERT INTO silo.settings (key, value, description) VALUES
    ('event.retention', '90 days', 'How long events are kept (a PostgreSQL interval, default 90 days): silo work drops the partitions of events older than that, with their ids (an event sent again after that is new) and their pending deliveries.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key = 'event.retention';
DROP TABLE event.deliveries;
DROP TABLE event.consumer_lanes;
DROP TABLE event.consumers;
DROP TABLE event.event_ids;
SELECT partition.drop_time_partitioned('event.events');
DROP SCHEMA event;
