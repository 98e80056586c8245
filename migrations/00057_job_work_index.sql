-- +goose Up
-- Superseding in the job intake reads the pending superceedable jobs of the call's work keys and
-- keeps those older than the call's newest job of each key: with the id in the index, that is read
-- from the index (sql/job/02_enrich.sql, job_private.supersede).
DROP INDEX job.jobs_work_idx;
CREATE INDEX jobs_work_idx ON job.jobs (work_key, id) WHERE state = 'pending' AND superceedable;

-- +goose Down
DROP INDEX job.jobs_work_idx;
CREATE INDEX jobs_work_idx ON job.jobs (work_key) WHERE state = 'pending' AND superceedable;
