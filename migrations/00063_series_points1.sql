-- +goose Up
-- The points of series whose type has one field (mass/kg, count/steps, temperature/c: most series
-- types) get a table of that field's columns alone. The insert and TimescaleDB's compressor handle
-- every column of every row, NULL or not: a point of such a series cost about a third more to
-- write into the 26 columns of series.points than into these 5 (1.4 µs against 1.05 a point of a
-- 100-series batch, on one backend). Writers choose the table by the series' type
-- (sql/series/08_store.sql); readers read both (series.points_all), so points written before this
-- table existed, or under a type whose fields a DBA changed since, are read and replaced alike.
CREATE TABLE series.points1 (
    series_id bigint      NOT NULL,
    at        timestamptz NOT NULL,
    n1 bigint, s1 smallint, t1 text,
    CONSTRAINT points1_pkey PRIMARY KEY (series_id, at)
) PARTITION BY RANGE (at);
COMMENT ON TABLE series.points1 IS 'The points of the series whose type has one field, as series.points keeps those of the others (its first position''s columns alone; read both through series.points_all): one row per series and time. Time-partitioned as series.points: a compressed hypertable on TimescaleDB (segmented by series_id, ordered by at, a plain index on (series_id, at); calls of series.compress_on_write points or more written straight into compressed batches), native partitions otherwise (primary key series_id, at).';
COMMENT ON COLUMN series.points1.series_id IS 'The series (account.events.series_id of its holder), as series.points.series_id.';
COMMENT ON COLUMN series.points1.at IS 'The point''s time, to the microsecond, as series.points.at.';
COMMENT ON COLUMN series.points1.n1 IS 'The field''s digits of a number (value = n1 / 10^s1), an integer, or a boolean as 0 or 1, as series.points.n1.';
COMMENT ON COLUMN series.points1.s1 IS 'The field''s decimal scale, as series.points.s1.';
COMMENT ON COLUMN series.points1.t1 IS 'The field''s string value, as series.points.t1.';
SELECT partition.create_time_partitioned('series.points1', 'at', interval '1 day');

-- TimescaleDB: as series.points (migrations 00023 and 00060): compressed past the write window,
-- one segment per series, a plain index where native partitions keep the primary key.
-- +goose StatementBegin
DO $compress$
DECLARE
    v_ext name;
BEGIN
    IF (SELECT t.backend FROM partition.tables t WHERE t.relation = 'series.points1'::regclass) = 'timescaledb' THEN
        SELECT e.extnamespace::regnamespace::name INTO v_ext FROM pg_catalog.pg_extension e WHERE e.extname = 'timescaledb';
        ALTER TABLE series.points1 DROP CONSTRAINT points1_pkey;
        CREATE INDEX points1_series_at_idx ON series.points1 (series_id, at);
        ALTER TABLE series.points1 SET (timescaledb.compress, timescaledb.compress_segmentby = 'series_id',
                                        timescaledb.compress_orderby = 'at');
        EXECUTE format('SELECT %I.add_compression_policy(%L::regclass, compress_after => interval %L)',
                       v_ext, 'series.points1', '2 days');
    END IF;
END
$compress$;
-- +goose StatementEnd

CREATE VIEW series.points_all AS
    SELECT p.series_id, p.at, p.n1, p.s1, p.t1, p.n2, p.s2, p.t2, p.n3, p.s3, p.t3, p.n4, p.s4, p.t4,
           p.n5, p.s5, p.t5, p.n6, p.s6, p.t6, p.n7, p.s7, p.t7, p.n8, p.s8, p.t8
    FROM series.points p
    UNION ALL
    SELECT q.series_id, q.at, q.n1, q.s1, q.t1, NULL::bigint, NULL::smallint, NULL::text, NULL::bigint, NULL::smallint, NULL::text,
           NULL::bigint, NULL::smallint, NULL::text, NULL::bigint, NULL::smallint, NULL::text, NULL::bigint, NULL::smallint, NULL::text,
           NULL::bigint, NULL::smallint, NULL::text, NULL::bigint, NULL::smallint, NULL::text
    FROM series.points1 q;
COMMENT ON VIEW series.points_all IS 'Every stored point, as series.points'' columns: the rows of series.points and of series.points1 (its positions 2 to 8 NULL). What readers read: a filter on series_id and at reaches both tables'' indexes.';
COMMENT ON TABLE series.points IS 'The points of the series whose type has more than one field (those of one field: series.points1; both: series.points_all), and the points written before series.points1 existed: one row per series and time (a second write at the same time replaces the point: last write wins). Field p of the series type (account.series_type_fields.position) is in n<p>, s<p> and t<p>. Time-partitioned (partition domain): a compressed hypertable on TimescaleDB (segmented by series_id, ordered by at; calls of series.compress_on_write points or more are written straight into compressed batches, and a plain index on (series_id, at) serves the rows written uncompressed; one row per series and time is kept by the writers, which take turns per series), native partitions otherwise (primary key series_id, at). Read it through api.series_read and api.series_read_columns, which decode the columns.';

-- +goose Down
COMMENT ON TABLE series.points IS 'The points of every series: one row per series and time (a second write at the same time replaces the point: last write wins). Field p of the series type (account.series_type_fields.position) is in n<p>, s<p> and t<p>. Time-partitioned (partition domain): a compressed hypertable on TimescaleDB (segmented by series_id, ordered by at; calls of series.compress_on_write points or more are written straight into compressed batches, and a plain index on (series_id, at) serves the rows written uncompressed; one row per series and time is kept by the writers, which take turns per series), native partitions otherwise (primary key series_id, at). Read it through api.series_read and api.series_read_columns, which decode the columns.';
DROP VIEW series.points_all;
INSERT INTO series.points (series_id, at, n1, s1, t1) SELECT q.series_id, q.at, q.n1, q.s1, q.t1 FROM series.points1 q;
SELECT partition.drop_time_partitioned('series.points1');
