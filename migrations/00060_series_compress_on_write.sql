-- +goose Up
-- On TimescaleDB, points are written straight into compressed batches (direct compression) when
-- a call brings enough of them: about a fifth of the work of a row-by-row insert into
-- an indexed chunk, and the points take their compressed size from the start. TimescaleDB does
-- so only for a hypertable without a primary key or unique index, so there the key becomes a plain
-- index: one row per series and time is kept by the writers instead (sql/series/08_store.sql:
-- the writers of a series take turns, and a point written at a stored point's time replaces it).
-- Native partitions keep their primary key.
-- +goose StatementBegin
DO $points$
BEGIN
    IF (SELECT t.backend FROM partition.tables t WHERE t.relation = 'series.points'::regclass) = 'timescaledb' THEN
        ALTER TABLE series.points DROP CONSTRAINT points_pkey;
        CREATE INDEX points_series_at_idx ON series.points (series_id, at);
    END IF;
END
$points$;
-- +goose StatementEnd
COMMENT ON TABLE series.points IS 'The points of every series: one row per series and time (a second write at the same time replaces the point: last write wins). Field p of the series type (account.series_type_fields.position) is in n<p>, s<p> and t<p>. Time-partitioned (partition domain): a compressed hypertable on TimescaleDB (segmented by series_id, ordered by at; calls of series.compress_on_write points or more are written straight into compressed batches, and a plain index on (series_id, at) serves the rows written uncompressed; one row per series and time is kept by the writers, which take turns per series), native partitions otherwise (primary key series_id, at). Read it through api.series_read and api.series_read_columns, which decode the columns.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('series.compress_on_write', '500', 'On TimescaleDB: a call that writes at least this many points, and at least a tenth of that per series on average, writes them straight into compressed batches rather than as rows that the compression policy compresses later (the policy still recompresses such chunks once they are past their write window, merging small batches). 0: never. An integer.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key = 'series.compress_on_write';
-- +goose StatementBegin
DO $points$
BEGIN
    IF (SELECT t.backend FROM partition.tables t WHERE t.relation = 'series.points'::regclass) = 'timescaledb' THEN
        DROP INDEX series.points_series_at_idx;
        ALTER TABLE series.points ADD CONSTRAINT points_pkey PRIMARY KEY (series_id, at);
    END IF;
END
$points$;
-- +goose StatementEnd
