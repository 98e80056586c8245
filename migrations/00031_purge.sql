-- +goose Up
-- Purge of the operational data store: its configuration (one row, the seed's keys and defaults,
-- which a DBA reads and changes with plain SQL or an admin over HTTP) and one report per execution
-- date, created at the day's first run and updated by every batch.
CREATE SCHEMA purge;
COMMENT ON SCHEMA purge IS 'Purge of the operational data store and retention of Silo''s other time-ordered data: configuration, daily reports, retention targets. Code: sql/purge/ (api.purge_*, api.retention_*).';

CREATE TABLE purge.config (
    singleton                        boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    enabled                          boolean     NOT NULL DEFAULT false,
    mode                             text        NOT NULL DEFAULT 'STANDARD' CHECK (mode IN ('STANDARD', 'TTL')),
    retention_period                 text        NOT NULL DEFAULT '2Y',
    terminal_unit_of_works_only      boolean     NOT NULL DEFAULT false,
    archived_dependent_journey_types text[]      NOT NULL DEFAULT '{}'
        CHECK (archived_dependent_journey_types <@ ARRAY['PAYMENT', 'RECALL', 'BULK', 'BATCH']
               AND array_position(archived_dependent_journey_types, NULL) IS NULL),
    frequency                        text        NOT NULL DEFAULT '1s',
    fetch_size                       integer     NOT NULL DEFAULT 16 CHECK (fetch_size BETWEEN 1 AND 100000),
    parallelism                      integer     NOT NULL DEFAULT 8 CHECK (parallelism BETWEEN 1 AND 64),
    ttl_expire_after_seconds         bigint      NOT NULL DEFAULT 63072000 CHECK (ttl_expire_after_seconds > 0),
    updated                          timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE purge.config IS 'The purge configuration: one row (the seed''s ods.purging keys, with - written _). Read at every run, so an UPDATE takes effect at the next one; periods are checked by a trigger (sql/purge/). Read and changed over HTTP with GET/PUT /purge/config (admins) or api.purge_config and api.purge_config_set.';
COMMENT ON COLUMN purge.config.singleton IS 'Always true: the table has one row.';
COMMENT ON COLUMN purge.config.enabled IS 'enabled: whether silo work runs the purge (default false). api.purge_run from psql runs whatever this says.';
COMMENT ON COLUMN purge.config.mode IS 'mode: STANDARD (batched deletes of the units of work outside the retention period) or TTL (units of work expire when not modified for ttl_expire_after_seconds or their own ttl).';
COMMENT ON COLUMN purge.config.retention_period IS 'retention-period: a date-based period as written: nY, nM, nW, nD (also the seed''s Spanish letters A = year, S = week) or ISO-8601 (P2Y, P1M, P1W, P1Y6M); default 2Y.';
COMMENT ON COLUMN purge.config.terminal_unit_of_works_only IS 'terminal-unit-of-works-only: when true only finished units of work are purged; when false an unfinished one is purged when it started before the lower bound (default false).';
COMMENT ON COLUMN purge.config.archived_dependent_journey_types IS 'archived-dependent-journey-types: journey types (PAYMENT, RECALL, BULK, BATCH) whose units of work must be archived before they are purged (default none).';
COMMENT ON COLUMN purge.config.frequency IS 'frequency: how often a recurring run starts, a time-based amount as written: ns, nm, nh, nms (the seed also writes 2S, 1M) or ISO-8601 (PT1S, PT0.5S); default 1s.';
COMMENT ON COLUMN purge.config.fetch_size IS 'fetch-size: units of work deleted per run at most (default 16).';
COMMENT ON COLUMN purge.config.parallelism IS 'parallelism: how many batches a run splits its units of work into, deleted concurrently (default 8).';
COMMENT ON COLUMN purge.config.ttl_expire_after_seconds IS 'TTL mode''s table-wide expiry (the seed''s expireAfterSeconds): a unit of work not modified for this many seconds expires with its summary and objects, unless its own ttl says otherwise (default 63072000, two years of 365 days).';
COMMENT ON COLUMN purge.config.updated IS 'When the configuration was last changed.';
INSERT INTO purge.config DEFAULT VALUES;

CREATE TABLE purge.reports (
    execution_date                   date        PRIMARY KEY,
    mode                             text        NOT NULL,
    retention_period                 text        NOT NULL,
    retention_period_lower_bound     timestamptz NOT NULL,
    terminal_unit_of_works_only      boolean     NOT NULL,
    archived_dependent_journey_types text[]      NOT NULL,
    unit_of_works_to_delete          bigint      NOT NULL,
    unit_of_works_deleted            bigint      NOT NULL DEFAULT 0,
    summaries_deleted                bigint      NOT NULL DEFAULT 0,
    objects_deleted                  bigint      NOT NULL DEFAULT 0,
    dropped_partitions               integer     NOT NULL DEFAULT 0,
    postponed                        bigint,
    expiring_next_day                bigint,
    started_at                       timestamptz NOT NULL,
    finished_at                      timestamptz,
    duration                         interval    GENERATED ALWAYS AS (finished_at - started_at) STORED,
    runs                             bigint      NOT NULL DEFAULT 0,
    last_run_at                      timestamptz,
    progress_published_at            timestamptz
);
COMMENT ON TABLE purge.reports IS 'The PurgeReport: one per execution date (a UTC day), created by the day''s first run with what is to be deleted and the configuration it runs with, updated in the transaction of every batch, closed with finishedAt when nothing is left. Read with api.purge_reports and api.purge_report, or GET /purge/reports.';
COMMENT ON COLUMN purge.reports.execution_date IS 'executionDate: the UTC date of the purge; unique.';
COMMENT ON COLUMN purge.reports.mode IS 'The purge mode of this execution: STANDARD or TTL.';
COMMENT ON COLUMN purge.reports.retention_period IS 'retentionPeriod: the configured retention period, in ISO-8601 (P2Y).';
COMMENT ON COLUMN purge.reports.retention_period_lower_bound IS 'retentionPeriodLowerBound: the execution date minus the retention period, at the start of that day in UTC (STANDARD). In TTL mode, the expiry cutoff of the table-wide ttl at the report''s creation.';
COMMENT ON COLUMN purge.reports.terminal_unit_of_works_only IS 'terminalUnitOfWorksOnly: the configured flag for this execution.';
COMMENT ON COLUMN purge.reports.archived_dependent_journey_types IS 'archivedDependentJourneyTypes: the configured journey types for this execution.';
COMMENT ON COLUMN purge.reports.unit_of_works_to_delete IS 'unitOfWorksToDelete: units of work identified for deletion when the report was created (raised when more are deleted, so it never reads less than unitOfWorksDeleted).';
COMMENT ON COLUMN purge.reports.unit_of_works_deleted IS 'unitOfWorksDeleted: units of work deleted so far, counted in the transaction that deleted them (never twice, never for a rolled-back batch).';
COMMENT ON COLUMN purge.reports.summaries_deleted IS 'summariesDeleted: Summary rows deleted with them (the seed''s class counts summaries; one per unit of work).';
COMMENT ON COLUMN purge.reports.objects_deleted IS 'MDS, PDS, Process and Custom objects deleted with them (rows deleted or dropped with their partitions).';
COMMENT ON COLUMN purge.reports.dropped_partitions IS 'Partitions or chunks of ods.objects dropped whole (TTL mode).';
COMMENT ON COLUMN purge.reports.postponed IS 'TTL mode: units of work past their expiry whose expiry is postponed (unfinished while terminal-unit-of-works-only, or of an archived-dependent journey type and not archived), at the last run; NULL in STANDARD mode.';
COMMENT ON COLUMN purge.reports.expiring_next_day IS 'TTL mode: units of work that will expire in the 24 hours after the last run (the next day''s expiry); NULL in STANDARD mode.';
COMMENT ON COLUMN purge.reports.started_at IS 'startedAt: when purging began for this date (the first run''s time).';
COMMENT ON COLUMN purge.reports.finished_at IS 'finishedAt: when everything to delete for this date was deleted (the first run that found nothing left); NULL while it goes on.';
COMMENT ON COLUMN purge.reports.duration IS 'duration: finishedAt - startedAt (NULL while not finished); answered in ISO-8601 (PT32M1.01S).';
COMMENT ON COLUMN purge.reports.runs IS 'Batches (or TTL runs) for this date that deleted or dropped something.';
COMMENT ON COLUMN purge.reports.last_run_at IS 'When the last batch that deleted something, the last TTL run, or the run that closed the report ran: silo work starts the next run a frequency later.';
COMMENT ON COLUMN purge.reports.progress_published_at IS 'When progress was last published on the purge channel (at most once a second while batches run).';

-- +goose Down
DROP TABLE purge.reports;
DROP TABLE purge.config;
DROP SCHEMA purge;
