-- +goose Up
-- Finished jobs and ended deduplication claims join the retention registry: the retention job
-- deletes the jobs finished longer ago than job.retention and the claims that ended (small
-- tables: rows, not partitions).
INSERT INTO purge.retention_targets (name, setting, default_value, trim_function, description) VALUES
    ('job', 'job.retention', '7 days', 'api.job_trim',
     'The job service: jobs finished longer ago than the retention, and deduplication claims that ended (an ended claim no longer deduplicates; it is replaced in place when its work comes again), deleted as rows.')
ON CONFLICT (name) DO NOTHING;

-- +goose Down
DELETE FROM purge.retention_targets WHERE name = 'job';
