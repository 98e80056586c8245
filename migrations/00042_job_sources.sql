-- +goose Up
-- The job service's sources: series writes and purge reports besides the profile store's writes
-- (sql/job/06_sources.sql).
COMMENT ON COLUMN job.config.sources IS 'sources: Silo''s own changes that become events of the job service: profile_updates (every write of the profile store), series_writes (every append of series points), purge_reports (the purge''s reports started, advanced and finished); sql/job/06_sources.sql.';

-- +goose Down
COMMENT ON COLUMN job.config.sources IS 'sources: Silo''s own changes that become events of the job service (profile_updates: every write of the profile store, sql/job/06_sources.sql).';
