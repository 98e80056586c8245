-- +goose Up
-- One retention mechanism for Silo's time-ordered data: a registry of what is trimmed, each with
-- its retention setting in silo.settings and the function that applies it. api.retention_run
-- (sql/purge/05_retention.sql), run by silo work's retention job, applies every target; a domain
-- joins by adding its row in its own migration and a trim function api.<domain>_trim(p_retention
-- interval DEFAULT NULL, p_now timestamptz DEFAULT now()) that drops whole partitions or chunks
-- of its time-partitioned tables through partition_private.drop_older (never a row-by-row delete of
-- a partition's worth of data). Series points join so: a row ('series', 'series.retention', ...,
-- 'api.series_trim') whose function may read per-user or per-series retentions of its own.
CREATE TABLE purge.retention_targets (
    name          text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]*$'),
    setting       text        NOT NULL,
    default_value text        NOT NULL,
    trim_function text        NOT NULL CHECK (trim_function ~ '^api\.[a-z][a-z0-9_]*$'),
    description   text        NOT NULL,
    enabled       boolean     NOT NULL DEFAULT true,
    last_run_at   timestamptz,
    last_result   jsonb,
    last_error    text
);
COMMENT ON TABLE purge.retention_targets IS 'What silo work''s retention job keeps bounded, one row per kind of time-ordered data: the silo.settings key of its retention, the function that trims it, and the last run''s outcome. Read by api.retention_run; a DBA may disable a target.';
COMMENT ON COLUMN purge.retention_targets.name IS 'The target''s name (event, change, idempotency, ...).';
COMMENT ON COLUMN purge.retention_targets.setting IS 'The silo.settings key that holds its retention (a PostgreSQL interval).';
COMMENT ON COLUMN purge.retention_targets.default_value IS 'The retention used when silo.settings has no such key.';
COMMENT ON COLUMN purge.retention_targets.trim_function IS 'The function that applies the retention: api.<name>(p_retention interval, p_now timestamptz), called with the setting''s value and the run''s time; its result (any type) is recorded as JSON.';
COMMENT ON COLUMN purge.retention_targets.description IS 'What is trimmed and how.';
COMMENT ON COLUMN purge.retention_targets.enabled IS 'Whether the retention job applies it (default true).';
COMMENT ON COLUMN purge.retention_targets.last_run_at IS 'When it was last applied.';
COMMENT ON COLUMN purge.retention_targets.last_result IS 'The trim function''s result at the last run, as JSON (NULL when it failed).';
COMMENT ON COLUMN purge.retention_targets.last_error IS 'Why the last run failed (SQLSTATE and message), NULL when it did not.';
INSERT INTO purge.retention_targets (name, setting, default_value, trim_function, description) VALUES
    ('event', 'event.retention', '90 days', 'api.event_trim',
     'The event store: partitions or chunks of event.events older than the retention dropped whole, with the ids and pending deliveries of their events.'),
    ('change', 'change_retention', '24 hours', 'api.change_trim',
     'The change log: changes sequenced longer ago than the retention deleted (a small table: rows, not partitions), the trim horizon moved.'),
    ('idempotency', 'idempotency.window', '24 hours', 'api.idempotency_trim',
     'Idempotency keys older than their window deleted (a small table: rows, not partitions); such a key counts as new anyway.');

-- +goose Down
DROP TABLE purge.retention_targets;
