-- +goose Up
-- The job service's sources: series writes and purge reports besides the profile store's writes
-- (sql/job/06_sources.sql).
COMMENT ON COLUMN job.config.sources IS 'sources: Silo''s own changes that become events of the job service: profile_updates (every write of the profile store), series_writes (every append of series points), purge_reports (the purge''s reports started, advanced and finished); sql/job/06_sources.sql.';

-- The canonical texts of the unique hash and the work key are in sql/job/02_key.sql.
COMMENT ON COLUMN job.config_enrich.key_fields IS 'The job fields whose values form the unique hash (sql/job/02_key.sql gives the canonical form).';
COMMENT ON COLUMN job.jobs.unique_hash IS 'The unique hash over the rule''s key_fields (hex SHA-256 of the canonical form, sql/job/02_key.sql): the deduplication key and the HTTP hook''s Idempotency-Key.';
COMMENT ON COLUMN job.jobs.work_key IS 'What "the same work" is for superseding: hex SHA-256 of topic, job_type, resource_type, resource_url and the payload''s access_token (sql/job/02_key.sql).';

-- +goose Down
COMMENT ON COLUMN job.config_enrich.key_fields IS 'The job fields whose values form the unique hash (sql/job/02_enrich.sql gives the canonical form).';
COMMENT ON COLUMN job.jobs.unique_hash IS 'The unique hash over the rule''s key_fields (hex SHA-256 of the canonical form, sql/job/02_enrich.sql): the deduplication key and the HTTP hook''s Idempotency-Key.';
COMMENT ON COLUMN job.jobs.work_key IS 'What "the same work" is for superseding: hex SHA-256 of topic, job_type, resource_type, resource_url and the payload''s access_token (sql/job/02_enrich.sql).';
COMMENT ON COLUMN job.config.sources IS 'sources: Silo''s own changes that become events of the job service (profile_updates: every write of the profile store, sql/job/06_sources.sql).';
