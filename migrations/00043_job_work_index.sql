-- +goose Up
-- The superseding probe of the job intake looks for a pending superceedable job of a work key older
-- than a given id: with the id in the index, the call's own new jobs are passed over in the index,
-- without reading their rows (sql/job/02_enrich.sql, job_private.insert_jobs).
DROP INDEX job.jobs_work_idx;
CREATE INDEX jobs_work_idx ON job.jobs (work_key, id) WHERE state = 'pending' AND superceedable;

-- +goose Down
DROP INDEX job.jobs_work_idx;
CREATE INDEX jobs_work_idx ON job.jobs (work_key) WHERE state = 'pending' AND superceedable;
