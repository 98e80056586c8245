-- +goose Up
-- The Summary of a unit of work moves into the unit of work's row, and the row counts its
-- objects. Why: the Summary is one per unit of work, written in the same statement as it and
-- deleted with it, so as a row of its own it cost every ingest a second upsert and every purge a
-- second delete by id; in the unit of work's row it is written and deleted with it, whole. The
-- count of objects, kept by ingest in the upsert it makes anyway, tells TTL mode how many objects
-- it dropped with whole partitions or chunks without scanning them. ods.summaries stays, as a
-- view, for whoever reads it.
ALTER TABLE ods.unit_of_works
    ADD COLUMN summary_events     integer     NOT NULL DEFAULT 0,
    ADD COLUMN summary_last_event text,
    ADD COLUMN summary_updated    timestamptz,
    ADD COLUMN object_count       bigint      NOT NULL DEFAULT 0 CHECK (object_count >= 0);
COMMENT ON COLUMN ods.unit_of_works.summary_events IS 'Summary: how many process-flow events were ingested for it.';
COMMENT ON COLUMN ods.unit_of_works.summary_last_event IS 'Summary: the name of the last process-flow event ingested.';
COMMENT ON COLUMN ods.unit_of_works.summary_updated IS 'Summary: lastUpdated, when the Summary was last written (every ingest of the unit of work); NULL when it has no Summary.';
COMMENT ON COLUMN ods.unit_of_works.object_count IS 'How many objects (ods.objects) the unit of work has: counted by ingest as it stores them, so the purge knows how many it drops with whole partitions without scanning them.';
UPDATE ods.unit_of_works u
SET summary_events = s.events, summary_last_event = s.last_event, summary_updated = s.last_updated
FROM ods.summaries s WHERE s.unit_of_work_id = u.id;
UPDATE ods.unit_of_works u SET object_count = o.n
FROM (SELECT o.unit_of_work_id, count(*) AS n FROM ods.objects o GROUP BY o.unit_of_work_id) o
WHERE o.unit_of_work_id = u.id;
DROP TABLE ods.summaries;
CREATE VIEW ods.summaries AS
SELECT u.id AS unit_of_work_id, u.journey_type, u.global_status, u.summary_events AS events,
       u.summary_last_event AS last_event, u.summary_updated AS last_updated
FROM ods.unit_of_works u
WHERE u.summary_updated IS NOT NULL;
COMMENT ON VIEW ods.summaries IS 'One Summary per unit of work: what its process-flow events add up to. Held in the unit of work''s row (ods.unit_of_works.summary_*), written with it by api.ods_ingest and api.ods_append and deleted with it by the purge; this view reads it as a table of its own.';
COMMENT ON COLUMN ods.summaries.unit_of_work_id IS 'The unit of work (ods.unit_of_works.id).';
COMMENT ON COLUMN ods.summaries.journey_type IS 'Its journey type, as in ods.unit_of_works.';
COMMENT ON COLUMN ods.summaries.global_status IS 'Its global status, as in ods.unit_of_works.';
COMMENT ON COLUMN ods.summaries.events IS 'How many process-flow events were ingested for it.';
COMMENT ON COLUMN ods.summaries.last_event IS 'The name of the last process-flow event ingested.';
COMMENT ON COLUMN ods.summaries.last_updated IS 'lastUpdated: when the summary was last written.';
COMMENT ON TABLE ods.unit_of_works IS 'One row per unit-of-work id: the UnitOfWork of the ODS, with its Summary (summary_*; read as ods.summaries) and the count of its objects. Written by api.ods_ingest (process-flow events), api.ods_append (objects) and api.ods_unit_of_work_archive; deleted whole, after its objects, by the purge (api.purge_batch, api.purge_ttl_run).';
COMMENT ON COLUMN purge.reports.summaries_deleted IS 'summariesDeleted: the Summaries deleted with them (the seed''s class counts summaries; one per unit of work, held in its row).';
COMMENT ON COLUMN purge.reports.objects_deleted IS 'MDS, PDS, Process and Custom objects deleted with them: rows deleted, and those dropped with whole partitions or chunks, counted from their units of work''s object_count.';

-- +goose Down
COMMENT ON COLUMN purge.reports.summaries_deleted IS 'summariesDeleted: Summary rows deleted with them (the seed''s class counts summaries; one per unit of work).';
COMMENT ON COLUMN purge.reports.objects_deleted IS 'MDS, PDS, Process and Custom objects deleted with them (rows deleted or dropped with their partitions).';
DROP VIEW ods.summaries;
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
INSERT INTO ods.summaries (unit_of_work_id, journey_type, global_status, events, last_event, last_updated)
SELECT u.id, u.journey_type, u.global_status, u.summary_events, u.summary_last_event, u.summary_updated
FROM ods.unit_of_works u WHERE u.summary_updated IS NOT NULL;
ALTER TABLE ods.unit_of_works DROP COLUMN summary_events, DROP COLUMN summary_last_event, DROP COLUMN summary_updated,
    DROP COLUMN object_count;
COMMENT ON TABLE ods.unit_of_works IS 'One row per unit-of-work id: the UnitOfWork of the ODS. Written by api.ods_ingest (process-flow events), api.ods_append (objects of a unit of work not seen yet) and api.ods_unit_of_work_archive; deleted, after its summary and objects, by the purge (api.purge_batch, api.purge_ttl_run).';
