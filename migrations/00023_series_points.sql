-- +goose Up
-- High-frequency series (Pryv's HF design): the points of every series holder event
-- (account.events.series_id), the metadata updates waiting to be written to their holders, and the
-- per-user notification throttle. sql/series/ holds the rules.
--
-- Why the points are shaped so: one row per point, typed columns, not one jsonb per point, so that
-- TimescaleDB's column compression sees a run of similar integers per column. A series type has at
-- most 8 fields (account.series_type_fields.position 1 to 8); field p of a point lives in the
-- columns of position p:
--   * a number as a decimal: n<p> its digits (a bigint), s<p> its scale (value = n / 10^s), so
--     12.34 is (1234, 2) and 1e300 is (1, -300). Every number of up to 18 significant digits is
--     kept exactly, every double exactly through its shortest decimal form: lossless, and a
--     1 Hz 2-decimal feed compresses to small deltas of n and a constant s.
--   * an integer: n<p> with s<p> = 0; a boolean: n<p> 0 or 1, s<p> NULL; a string: t<p>.
--   * NULL columns: the field is absent from the point (an optional field).
-- Time: at, microseconds (timestamptz). A point given as deltaTime is stored at the holder's time
-- plus deltaTime, so the series is partitioned and retained by real time.
CREATE SCHEMA series;
COMMENT ON SCHEMA series IS 'High-frequency series (sql/series/): the points of series holder events (account.events with type series:*), pending metadata updates, notification throttle, retention.';

CREATE TABLE series.points (
    series_id bigint      NOT NULL,
    at        timestamptz NOT NULL,
    n1 bigint, s1 smallint, t1 text,
    n2 bigint, s2 smallint, t2 text,
    n3 bigint, s3 smallint, t3 text,
    n4 bigint, s4 smallint, t4 text,
    n5 bigint, s5 smallint, t5 text,
    n6 bigint, s6 smallint, t6 text,
    n7 bigint, s7 smallint, t7 text,
    n8 bigint, s8 smallint, t8 text,
    CONSTRAINT points_pkey PRIMARY KEY (series_id, at)
) PARTITION BY RANGE (at);
COMMENT ON TABLE series.points IS 'The points of every series: one row per series and time (a second write at the same time replaces the point: last write wins). Field p of the series type (account.series_type_fields.position) is in n<p>, s<p> and t<p>. Time-partitioned (partition domain): a compressed hypertable on TimescaleDB (segmented by series_id, ordered by at), native partitions otherwise. Read it through api.series_get / api.series_read, which decode the columns.';
COMMENT ON COLUMN series.points.series_id IS 'The series (account.events.series_id of its holder; never reused, so a deleted holder''s points are never read by a new one).';
COMMENT ON COLUMN series.points.at IS 'The point''s time, to the microsecond: the timestamp given, or the holder''s time plus the deltaTime given.';
COMMENT ON COLUMN series.points.n1 IS 'Field 1: the digits of a number (value = n1 / 10^s1), an integer, or a boolean as 0 or 1; NULL when the field is a string or absent.';
COMMENT ON COLUMN series.points.s1 IS 'Field 1: the decimal scale of a number (digits after the point; negative for trailing zeros), 0 for an integer; NULL for a boolean, a string or an absent field.';
COMMENT ON COLUMN series.points.t1 IS 'Field 1: a string value; NULL otherwise.';
COMMENT ON COLUMN series.points.n2 IS 'Field 2, as n1.';
COMMENT ON COLUMN series.points.s2 IS 'Field 2, as s1.';
COMMENT ON COLUMN series.points.t2 IS 'Field 2, as t1.';
COMMENT ON COLUMN series.points.n3 IS 'Field 3, as n1.';
COMMENT ON COLUMN series.points.s3 IS 'Field 3, as s1.';
COMMENT ON COLUMN series.points.t3 IS 'Field 3, as t1.';
COMMENT ON COLUMN series.points.n4 IS 'Field 4, as n1.';
COMMENT ON COLUMN series.points.s4 IS 'Field 4, as s1.';
COMMENT ON COLUMN series.points.t4 IS 'Field 4, as t1.';
COMMENT ON COLUMN series.points.n5 IS 'Field 5, as n1.';
COMMENT ON COLUMN series.points.s5 IS 'Field 5, as s1.';
COMMENT ON COLUMN series.points.t5 IS 'Field 5, as t1.';
COMMENT ON COLUMN series.points.n6 IS 'Field 6, as n1.';
COMMENT ON COLUMN series.points.s6 IS 'Field 6, as s1.';
COMMENT ON COLUMN series.points.t6 IS 'Field 6, as t1.';
COMMENT ON COLUMN series.points.n7 IS 'Field 7, as n1.';
COMMENT ON COLUMN series.points.s7 IS 'Field 7, as s1.';
COMMENT ON COLUMN series.points.t7 IS 'Field 7, as t1.';
COMMENT ON COLUMN series.points.n8 IS 'Field 8, as n1.';
COMMENT ON COLUMN series.points.s8 IS 'Field 8, as s1.';
COMMENT ON COLUMN series.points.t8 IS 'Field 8, as t1.';
SELECT partition.create_time_partitioned('series.points', 'at', interval '1 day');

-- TimescaleDB: compress chunks past their write window, one segment per series, points in time
-- order (what the reads and the delta encodings want). Natively nothing is compressed.
-- +goose StatementBegin
DO $compress$
DECLARE
    v_ext name;
BEGIN
    IF (SELECT t.backend FROM partition.tables t WHERE t.relation = 'series.points'::regclass) = 'timescaledb' THEN
        SELECT e.extnamespace::regnamespace::name INTO v_ext FROM pg_catalog.pg_extension e WHERE e.extname = 'timescaledb';
        ALTER TABLE series.points SET (timescaledb.compress, timescaledb.compress_segmentby = 'series_id',
                                       timescaledb.compress_orderby = 'at');
        EXECUTE format('SELECT %I.add_compression_policy(%L::regclass, compress_after => interval %L)',
                       v_ext, 'series.points', '2 days');
    END IF;
END
$compress$;
-- +goose StatementEnd

CREATE TABLE series.pending_updates (
    series_id  bigint PRIMARY KEY,
    user_id    bigint NOT NULL,
    event_id   text NOT NULL,
    author     text NOT NULL,
    updated    double precision NOT NULL,
    data_min   timestamptz NOT NULL,
    data_max   timestamptz NOT NULL,
    deadline   timestamptz NOT NULL,
    flush_idle timestamptz NOT NULL
);
CREATE INDEX pending_updates_due_idx ON series.pending_updates ((least(deadline, flush_idle)));
COMMENT ON TABLE series.pending_updates IS 'Metadata updates of series holders waiting to be written (seed 001, "Metadata Update"): one row per series with data appended since its last flush, merged at every append (latest author, latest time, union of the data extent, earliest deadline, latest flushIdle) and flushed to account.events (duration, modified, modifiedBy) once least(deadline, flush_idle) has passed (api.series_metadata_flush, run by silo work). Kept in PostgreSQL, not in a process: a restart loses none and every server process shares them.';
COMMENT ON COLUMN series.pending_updates.series_id IS 'The series (account.events.series_id).';
COMMENT ON COLUMN series.pending_updates.user_id IS 'The holder''s user (account.users.id).';
COMMENT ON COLUMN series.pending_updates.event_id IS 'The holder event''s id.';
COMMENT ON COLUMN series.pending_updates.author IS 'The access id of the latest append (becomes modifiedBy; never a token).';
COMMENT ON COLUMN series.pending_updates.updated IS 'When the latest append happened, seconds since the epoch (becomes modified).';
COMMENT ON COLUMN series.pending_updates.data_min IS 'The earliest point time appended since the last flush.';
COMMENT ON COLUMN series.pending_updates.data_max IS 'The latest point time appended since the last flush (the holder''s duration grows to reach it).';
COMMENT ON COLUMN series.pending_updates.deadline IS 'First append plus the series.stale_limit setting: flushed by then whatever comes in between (earliest wins).';
COMMENT ON COLUMN series.pending_updates.flush_idle IS 'Latest append plus the series.cooldown setting: flushed then when no append comes in between (latest wins).';

CREATE TABLE series.notify_throttle (
    user_id   bigint PRIMARY KEY,
    published timestamptz NOT NULL,
    pending   text[] NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE series.notify_throttle IS 'Debounce of the data-change notifications of each user (at most one per series.notify_interval per user, the seed''s filter): when the user''s last notification is older than the interval an append publishes at once; otherwise it adds its event id to pending, which api.series_metadata_flush publishes once the interval has passed.';
COMMENT ON COLUMN series.notify_throttle.user_id IS 'The user (account.users.id).';
COMMENT ON COLUMN series.notify_throttle.published IS 'When the user''s last series notification was published.';
COMMENT ON COLUMN series.notify_throttle.pending IS 'Ids of events whose data changed since then, not yet notified.';

CREATE TABLE series.retention (
    user_id   bigint NOT NULL REFERENCES account.users (id) ON DELETE CASCADE,
    series_id bigint NOT NULL DEFAULT 0,
    keep      interval NOT NULL CONSTRAINT retention_keep_check CHECK (keep > interval '0'),
    CONSTRAINT retention_pkey PRIMARY KEY (user_id, series_id)
);
COMMENT ON TABLE series.retention IS 'How long points are kept, per user (series_id 0: every series of the user) or per series (its own row wins over the user''s). Without a row, the series.retention setting (empty: forever). Applied by api.series_retain (silo work): whole chunks or partitions go when every point in them is past its retention, rows of shorter-lived series are deleted from the chunks that stay.';
COMMENT ON COLUMN series.retention.user_id IS 'The user (account.users.id).';
COMMENT ON COLUMN series.retention.series_id IS 'The series (account.events.series_id), or 0 for the user''s default.';
COMMENT ON COLUMN series.retention.keep IS 'Points older than now minus keep are removed.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('series.cooldown', '10 seconds', 'Metadata updater: a series holder''s duration, modified and modifiedBy are written this long after the latest append to it (seed 001''s cooldown), unless series.stale_limit comes first. An interval.'),
    ('series.stale_limit', '300 seconds', 'Metadata updater: a series holder''s metadata is written at the latest this long after the first append since its last write, however often it is appended to (seed 001''s staleLimit). An interval.'),
    ('series.notify_interval', '200 milliseconds', 'Data-change notifications of series are published at most once per this interval per user (later ones are merged and published when it has passed). An interval.'),
    ('series.retention', '', 'How long points are kept when neither the series nor its user has a row in series.retention: an interval, or empty for forever.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key IN ('series.cooldown', 'series.stale_limit', 'series.notify_interval', 'series.retention');
SELECT partition.drop_time_partitioned('series.points');
DROP SCHEMA series CASCADE;
