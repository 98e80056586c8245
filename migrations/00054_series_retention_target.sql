-- +goose Up
-- Series points join the retention registry: the retention job applies their retention with the
-- other targets' (api.series_trim). The setting series.retention is the default; a user's or a
-- series' own row of series.retention overrides it; empty keeps points forever unless such a row
-- says otherwise (the trim function then gets NULL and reads no default).
INSERT INTO purge.retention_targets (name, setting, default_value, trim_function, description) VALUES
    ('series', 'series.retention', '', 'api.series_trim',
     'Series points: the setting is the default retention (empty: forever), overridden per user or per series by series.retention; partitions or chunks of series.points older than the longest retention in force dropped whole, the older points of series kept for less deleted as rows.')
ON CONFLICT (name) DO NOTHING;
COMMENT ON TABLE series.retention IS 'How long points are kept, per user (series_id 0: every series of the user) or per series (its own row wins over the user''s). Without a row, the series.retention setting (empty: forever). Applied by api.series_trim, which silo work''s retention job runs (purge.retention_targets, target series): whole chunks or partitions go when every point in them is past its retention, rows of shorter-lived series are deleted from the chunks that stay.';

-- +goose Down
DELETE FROM purge.retention_targets WHERE name = 'series';
COMMENT ON TABLE series.retention IS 'How long points are kept, per user (series_id 0: every series of the user) or per series (its own row wins over the user''s). Without a row, the series.retention setting (empty: forever). Applied by api.series_retain (silo work): whole chunks or partitions go when every point in them is past its retention, rows of shorter-lived series are deleted from the chunks that stay.';
