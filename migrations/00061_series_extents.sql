-- +goose Up
-- The latest time each series has held a point at, kept by the metadata updater: with the series'
-- pending update (series.pending_updates) it bounds the series' stored points from above, so that
-- a write after all of them (a feed appending, the usual call) need not probe the points for
-- earlier writes at its times, a probe whose cost grows with the compressed batches the series
-- has in its chunk.
CREATE TABLE series.extents (
    series_id bigint PRIMARY KEY,
    last_at   timestamptz NOT NULL
);
COMMENT ON TABLE series.extents IS 'The latest point time of each series as of its last metadata flush (api.series_metadata_flush merges each flushed update''s data_max; never lowered, so deleted points leave it as it was): with series.pending_updates.data_max, written by every write since, an upper bound of the series'' stored points'' times (series_private.claim). A series with neither has no points. Rows go with their series (api.series_cleanup).';
COMMENT ON COLUMN series.extents.series_id IS 'The series (account.events.series_id).';
COMMENT ON COLUMN series.extents.last_at IS 'At or after the time of every point the series held when its metadata was last flushed.';
-- The series written before: their latest points, and their pending updates' extents, which the
-- next flush merges.
INSERT INTO series.extents (series_id, last_at)
SELECT p.series_id, max(p.at) FROM series.points p GROUP BY p.series_id;

-- +goose Down
DROP TABLE series.extents;
