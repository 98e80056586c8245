-- +goose Up
-- Operational data store (ODS): what a payment flow leaves behind, all of it hanging off one
-- unit-of-work id: the unit of work itself (when it started, finished, was archived), one Summary,
-- and any number of MDS, PDS, Process and Custom objects. The purge domain deletes it by unit of
-- work, whole: the Summary and the objects first, then the unit of work.
--
-- Why one objects table with a kind rather than four: the four kinds share every column and every
-- rule (appended, read by unit of work, deleted with it), and a purge deletes them in one statement
-- per batch instead of four. The objects are time-partitioned on created_at, so that TTL mode and
-- retention drop whole partitions or chunks when every unit of work in them has expired.
CREATE SCHEMA ods;
COMMENT ON SCHEMA ods IS 'Operational data store: units of work, their summaries and their MDS, PDS, Process and Custom objects, linked by the unit-of-work id. Code: sql/ods/ (api.ods_*); purged by sql/purge/ (api.purge_*).';

CREATE TABLE ods.global_statuses (
    status   text    PRIMARY KEY CHECK (status ~ '^[A-Z][A-Z0-9_]{0,63}$'),
    terminal boolean NOT NULL
);
COMMENT ON TABLE ods.global_statuses IS 'The global statuses a process-flow event may carry, and which are terminal: the first event with a terminal status sets its unit of work''s finishedAt. A DBA may add statuses; an event with a status not listed here is refused (SOSTA).';
COMMENT ON COLUMN ods.global_statuses.status IS 'The status, upper case (PENDING, COMPLETED, ...).';
COMMENT ON COLUMN ods.global_statuses.terminal IS 'Whether a unit of work that reaches it has finished.';
INSERT INTO ods.global_statuses (status, terminal) VALUES
    ('PENDING', false), ('ACCEPTED', false), ('SCHEDULED', false), ('MANUAL_ACTION_REQUIRED', false),
    ('COMPLETED', true), ('REJECTED', true), ('CANCELLED', true), ('TIMED_OUT', true);

CREATE TABLE ods.unit_of_works (
    id            text        PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 256),
    journey_type  text        CHECK (journey_type IN ('PAYMENT', 'RECALL', 'BULK', 'BATCH')),
    global_status text,
    started_at    timestamptz,
    finished_at   timestamptz,
    archived_at   timestamptz,
    first_seen    timestamptz NOT NULL,
    last_updated  timestamptz NOT NULL,
    ttl           integer     CHECK (ttl > 0)
);
COMMENT ON TABLE ods.unit_of_works IS 'One row per unit-of-work id: the UnitOfWork of the ODS. Written by api.ods_ingest (process-flow events), api.ods_append (objects of a unit of work not seen yet) and api.ods_unit_of_work_archive; deleted, after its summary and objects, by the purge (api.purge_batch, api.purge_ttl_run).';
COMMENT ON COLUMN ods.unit_of_works.id IS 'The unit-of-work id that links the unit of work, its summary and its objects (1 to 256 characters).';
COMMENT ON COLUMN ods.unit_of_works.journey_type IS 'PAYMENT, RECALL, BULK or BATCH, from its process-flow events (NULL until one says). The purge''s archived-dependent-journey-types name these.';
COMMENT ON COLUMN ods.unit_of_works.global_status IS 'The global status of the last process-flow event ingested (a terminal status, once reached, stays).';
COMMENT ON COLUMN ods.unit_of_works.started_at IS 'startedAt: the time of the first process-flow event ingested for the unit of work (NULL while none was).';
COMMENT ON COLUMN ods.unit_of_works.finished_at IS 'finishedAt: the time of the first ingested process-flow event whose global status is terminal (ods.global_statuses); NULL while the unit of work has not finished.';
COMMENT ON COLUMN ods.unit_of_works.archived_at IS 'archivedAt: when the unit of work and all its objects were archived (api.ods_unit_of_work_archive, the archiver''s call); NULL while not archived.';
COMMENT ON COLUMN ods.unit_of_works.first_seen IS 'The earliest time among its events and objects: no object of the unit of work is older, so TTL mode knows which object partitions hold only expired units of work.';
COMMENT ON COLUMN ods.unit_of_works.last_updated IS 'When the unit of work, its summary or one of its objects was last written (the ingesting transaction''s time): TTL mode expires a unit of work that has not been modified for expire-after-seconds.';
COMMENT ON COLUMN ods.unit_of_works.ttl IS 'Per-unit-of-work time to live in seconds (TTL mode): overrides the configured ttl-expire-after for it and its objects; NULL: the configured value.';
CREATE INDEX unit_of_works_finished_idx ON ods.unit_of_works (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX unit_of_works_unfinished_idx ON ods.unit_of_works (started_at) WHERE finished_at IS NULL;
CREATE INDEX unit_of_works_updated_idx ON ods.unit_of_works (last_updated);
CREATE INDEX unit_of_works_first_seen_idx ON ods.unit_of_works (first_seen);

CREATE TABLE ods.summaries (
    unit_of_work_id text        PRIMARY KEY,
    journey_type    text,
    global_status   text,
    events          integer     NOT NULL DEFAULT 0,
    last_event      text,
    last_updated    timestamptz NOT NULL
);
COMMENT ON TABLE ods.summaries IS 'One Summary per unit of work: what its process-flow events add up to. Written with the unit of work by api.ods_ingest, deleted before it by the purge.';
COMMENT ON COLUMN ods.summaries.unit_of_work_id IS 'The unit of work (ods.unit_of_works.id).';
COMMENT ON COLUMN ods.summaries.journey_type IS 'Its journey type, as in ods.unit_of_works.';
COMMENT ON COLUMN ods.summaries.global_status IS 'Its global status, as in ods.unit_of_works.';
COMMENT ON COLUMN ods.summaries.events IS 'How many process-flow events were ingested for it.';
COMMENT ON COLUMN ods.summaries.last_event IS 'The name of the last process-flow event ingested.';
COMMENT ON COLUMN ods.summaries.last_updated IS 'lastUpdated: when the summary was last written.';

CREATE TABLE ods.objects (
    unit_of_work_id text        NOT NULL,
    created_at      timestamptz NOT NULL,
    object_id       text        NOT NULL,
    kind            text        NOT NULL CHECK (kind IN ('MDS', 'PDS', 'PROCESS', 'CUSTOM')),
    type            text        NOT NULL,
    payload         jsonb       NOT NULL,
    stored          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT objects_pkey PRIMARY KEY (unit_of_work_id, created_at, object_id)
) PARTITION BY RANGE (created_at);
COMMENT ON TABLE ods.objects IS 'The MDS, PDS, Process and Custom objects of units of work (kind says which), time-partitioned on created_at (a TimescaleDB hypertable, or native partitions made by pg_partman: partition.tables says which). Process objects are the process-flow events ingested; the others are appended by api.ods_append. Deleted with their unit of work by the purge.';
COMMENT ON COLUMN ods.objects.unit_of_work_id IS 'The unit of work the object belongs to.';
COMMENT ON COLUMN ods.objects.created_at IS 'The object''s time (createdAt as sent, else the time of ingest): the partitioning column.';
COMMENT ON COLUMN ods.objects.object_id IS 'The object''s id as sent (id), or one made at ingest; unique within its unit of work and time.';
COMMENT ON COLUMN ods.objects.kind IS 'MDS, PDS, PROCESS or CUSTOM.';
COMMENT ON COLUMN ods.objects.type IS 'The object''s type as sent (an MDS message type, a PDS name, the process-flow event''s name, a custom type).';
COMMENT ON COLUMN ods.objects.payload IS 'The object as sent (any JSON value).';
COMMENT ON COLUMN ods.objects.stored IS 'When Silo stored it.';
SELECT partition.create_time_partitioned('ods.objects', 'created_at', interval '1 day');

-- +goose Down
SELECT partition.drop_time_partitioned('ods.objects');
DROP TABLE ods.summaries;
DROP TABLE ods.unit_of_works;
DROP TABLE ods.global_statuses;
DROP SCHEMA ods;
