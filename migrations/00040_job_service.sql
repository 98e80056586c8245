-- +goose Up
-- The job service: events become jobs (routing rules, enrichment rules), jobs are dispatched to
-- hooks by worker pools per topic and priority range, after expiry, deduplication and superseding.
-- The configuration (silo jobs load-config, api.job_config_load) lives in the job.config_* tables
-- so that a DBA reads it with psql; every process reads it from there. Code: sql/job/.
CREATE SCHEMA job;
COMMENT ON SCHEMA job IS 'The job service: its configuration (routing, enrichment, deduplication, generations, consumers and their pools, hooks), its jobs and their deduplication claims. Code: sql/job/ (api.job_*).';

CREATE TABLE job.config (
    id                 boolean     PRIMARY KEY DEFAULT true CHECK (id),
    version            integer     NOT NULL,
    loaded_at          timestamptz NOT NULL DEFAULT now(),
    document           jsonb       NOT NULL,
    unique_id_expiry   bigint      NOT NULL CHECK (unique_id_expiry >= 0),
    generations_limit  integer     NOT NULL CHECK (generations_limit >= 0),
    feed_worker_url    text,
    affected_url       text,
    defaults           jsonb       NOT NULL,
    sources            text[]      NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE job.config IS 'The job service''s configuration as last loaded (one row): the whole document and its scalar settings; the rules are in job.config_routes, job.config_enrich, job.config_pools and job.config_generations.';
COMMENT ON COLUMN job.config.id IS 'Always true: the table holds one row.';
COMMENT ON COLUMN job.config.version IS 'How many configurations were loaded, this one included; processes reload when it changes.';
COMMENT ON COLUMN job.config.loaded_at IS 'When this configuration was loaded.';
COMMENT ON COLUMN job.config.document IS 'The configuration document as loaded (YAML read as JSON).';
COMMENT ON COLUMN job.config.unique_id_expiry IS 'deduper.unique_id_expiry: how long, in milliseconds, a dispatched job''s unique hash blocks jobs with the same hash.';
COMMENT ON COLUMN job.config.generations_limit IS 'job_publisher.generations_limit: the highest generation a job may have; a hook''s job beyond it is discarded and counted.';
COMMENT ON COLUMN job.config.feed_worker_url IS 'feed_manager.worker_url: the URL template of the HTTP hook ({type} and {id} replaced by the job''s resource type and id).';
COMMENT ON COLUMN job.config.affected_url IS 'cache_manager.ppro_user_id/token_endpoint: the URL template of the endpoint that lists the users affected by an invalidation ({type} and {id}).';
COMMENT ON COLUMN job.config.sources IS 'sources: Silo''s own changes that become events of the job service (profile_updates: every write of the profile store, sql/job/06_sources.sql).';
COMMENT ON COLUMN job.config.defaults IS 'The enricher''s defaults.job_properties, completed with Silo''s own defaults (job_type invalidate, priority 1, due 0, expires 5, superceedable false, retry_limit 3).';

CREATE TABLE job.config_routes (
    ord            integer PRIMARY KEY,
    action_type    text    NOT NULL,
    resource_type  text    NOT NULL,
    topic          text    NOT NULL
);
COMMENT ON TABLE job.config_routes IS 'job_scheduler.job_rules: the router''s rules, in order. An event makes a job on the topic of every rule whose two regular expressions match its action and resource types.';
COMMENT ON COLUMN job.config_routes.ord IS 'The rule''s position in job_rules, from 1.';
COMMENT ON COLUMN job.config_routes.action_type IS 'A regular expression (PostgreSQL ~, unanchored unless written with ^ and $) on the event''s action_type.';
COMMENT ON COLUMN job.config_routes.resource_type IS 'A regular expression on the event''s resource_type.';
COMMENT ON COLUMN job.config_routes.topic IS 'The topic of the job the rule makes.';

CREATE TABLE job.config_enrich (
    ord             integer PRIMARY KEY,
    topic           text,
    action_type     text,
    resource_type   text,
    job_type        text,
    key_fields      text[]  NOT NULL,
    job_properties  jsonb   NOT NULL
);
COMMENT ON TABLE job.config_enrich IS 'The enricher''s rules: topics.<topic> (topic set) and common (topic NULL), in order, topic rules first. A job takes the first rule of its topic that matches, else the first common rule that matches; its properties are the rule''s job_properties over the defaults.';
COMMENT ON COLUMN job.config_enrich.ord IS 'The rule''s position: topic rules in document order, then common rules.';
COMMENT ON COLUMN job.config_enrich.topic IS 'The topic the rule is for; NULL for a common rule (any topic).';
COMMENT ON COLUMN job.config_enrich.action_type IS 'match.action_type: the event''s action_type must equal it (NULL: any).';
COMMENT ON COLUMN job.config_enrich.resource_type IS 'match.resource_type: the event''s resource_type must equal it (NULL: any).';
COMMENT ON COLUMN job.config_enrich.job_type IS 'match.job_type: for a hook''s jobs, the parent''s job_type must equal it (NULL: any).';
COMMENT ON COLUMN job.config_enrich.key_fields IS 'The job fields whose values form the unique hash (sql/job/02_enrich.sql gives the canonical form).';
COMMENT ON COLUMN job.config_enrich.job_properties IS 'The properties the rule sets (superceedable, job_type, priority, due, expires, retry_limit), over the defaults.';

CREATE TABLE job.config_pools (
    consumer   text    NOT NULL,
    topic      text    NOT NULL,
    hook       text    NOT NULL,
    lo         integer NOT NULL,
    hi         integer NOT NULL CHECK (hi >= lo),
    pool_size  integer NOT NULL CHECK (pool_size BETWEEN 1 AND 1000),
    PRIMARY KEY (topic, lo)
);
COMMENT ON TABLE job.config_pools IS 'job_consumers: one row per topic of a consumer and priority range, the worker pool that dispatches that topic''s jobs of that range to the consumer''s hook.';
COMMENT ON COLUMN job.config_pools.consumer IS 'The consumer''s name.';
COMMENT ON COLUMN job.config_pools.topic IS 'The topic its workers take jobs from.';
COMMENT ON COLUMN job.config_pools.hook IS 'The hook: http (feed_manager.worker_url), cache (the cache hook), mock (completes the job, does nothing) or sql:<function> (a SQL function (jsonb) RETURNS jsonb).';
COMMENT ON COLUMN job.config_pools.lo IS 'The lowest priority of the range (lower numbers are more urgent).';
COMMENT ON COLUMN job.config_pools.hi IS 'The highest priority of the range.';
COMMENT ON COLUMN job.config_pools.pool_size IS 'How many workers each process runs for the range.';

CREATE TABLE job.config_generations (
    ord            integer PRIMARY KEY,
    action_type    text,
    resource_type  text,
    job_type       text,
    jobs           jsonb   NOT NULL
);
COMMENT ON TABLE job.config_generations IS 'cache_manager rules: the jobs the cache hook makes from a job it ran, by the job''s action, resource and job types; the first matching rule applies.';
COMMENT ON COLUMN job.config_generations.ord IS 'The rule''s position, from 1.';
COMMENT ON COLUMN job.config_generations.action_type IS 'match.action_type (NULL: any).';
COMMENT ON COLUMN job.config_generations.resource_type IS 'match.resource_type (NULL: any).';
COMMENT ON COLUMN job.config_generations.job_type IS 'match.job_type (NULL: any).';
COMMENT ON COLUMN job.config_generations.jobs IS 'The rule''s jobs, a JSON array of {others_affected, entity_type, entity_id_offset, params, topic, update_fields}.';

CREATE TABLE job.jobs (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic          text        NOT NULL,
    state          text        NOT NULL DEFAULT 'pending'
                               CHECK (state IN ('pending', 'running', 'done', 'expired', 'deduplicated', 'superseded', 'failed', 'discarded')),
    job_type       text        NOT NULL,
    priority       integer     NOT NULL,
    superceedable  boolean     NOT NULL,
    retry_limit    integer     NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    generation     integer     NOT NULL DEFAULT 1,
    parent_id      bigint,
    unique_hash    text        NOT NULL,
    work_key       text        NOT NULL,
    resource_type  text        NOT NULL,
    action_type    text        NOT NULL,
    resource_url   text,
    payload        jsonb,
    event_ts       timestamptz,
    properties     jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    due_at         timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    leased_until   timestamptz,
    finished_at    timestamptz,
    superseded_by  bigint,
    last_error     text,
    last_sqlstate  text
);
COMMENT ON TABLE job.jobs IS 'Jobs, from their publication to their end: pending (waiting in its topic, due at due_at), running (taken by an HTTP or cache hook''s worker until leased_until), and the end states done, expired, deduplicated, superseded, failed (retries exhausted or a permanent error: the dead letters) and discarded (never stored: see job.counters).';
COMMENT ON COLUMN job.jobs.id IS 'The job''s id.';
COMMENT ON COLUMN job.jobs.topic IS 'Its topic (the seed''s Kafka topic): the pools of job.config_pools take it.';
COMMENT ON COLUMN job.jobs.state IS 'pending, running, done, expired, deduplicated, superseded or failed.';
COMMENT ON COLUMN job.jobs.job_type IS 'job_properties.job_type.';
COMMENT ON COLUMN job.jobs.priority IS 'job_properties.priority: lower numbers are more urgent; the pool whose range holds it takes it.';
COMMENT ON COLUMN job.jobs.superceedable IS 'job_properties.superceedable: a newer job with the same work_key replaces it while it is pending.';
COMMENT ON COLUMN job.jobs.retry_limit IS 'job_properties.retry_limit: how often a failed dispatch is retried.';
COMMENT ON COLUMN job.jobs.attempts IS 'Dispatches that failed so far.';
COMMENT ON COLUMN job.jobs.generation IS '1 for a job made from an event; a hook''s job has its parent''s generation + 1.';
COMMENT ON COLUMN job.jobs.parent_id IS 'The job whose hook made this one (NULL for a job made from an event).';
COMMENT ON COLUMN job.jobs.unique_hash IS 'The unique hash over the rule''s key_fields (hex SHA-256 of the canonical form, sql/job/02_enrich.sql): the deduplication key and the HTTP hook''s Idempotency-Key.';
COMMENT ON COLUMN job.jobs.work_key IS 'What "the same work" is for superseding: hex SHA-256 of topic, job_type, resource_type, resource_url and the payload''s access_token (sql/job/02_enrich.sql).';
COMMENT ON COLUMN job.jobs.resource_type IS 'The event''s resource_type.';
COMMENT ON COLUMN job.jobs.action_type IS 'The event''s action_type.';
COMMENT ON COLUMN job.jobs.resource_url IS 'The event''s resource_url (NULL when it had none).';
COMMENT ON COLUMN job.jobs.payload IS 'The event''s payload.';
COMMENT ON COLUMN job.jobs.event_ts IS 'The event''s timestamp (NULL when it had none).';
COMMENT ON COLUMN job.jobs.properties IS 'Its job_properties as enriched (superceedable, job_type, priority, due, expires, retry_limit and any other the rule set).';
COMMENT ON COLUMN job.jobs.created_at IS 'When it was published.';
COMMENT ON COLUMN job.jobs.due_at IS 'When it may be dispatched: publication + due minutes, later after a failed dispatch (back-off).';
COMMENT ON COLUMN job.jobs.expires_at IS 'When it expires: publication + expires minutes. An expired job is dropped before dispatch.';
COMMENT ON COLUMN job.jobs.leased_until IS 'For a running job: when its worker''s lease ends; a job whose lease passed is taken again (its worker died).';
COMMENT ON COLUMN job.jobs.finished_at IS 'When it reached its end state.';
COMMENT ON COLUMN job.jobs.superseded_by IS 'For a superseded job: the job that replaced it.';
COMMENT ON COLUMN job.jobs.last_error IS 'The error of its last failed dispatch.';
COMMENT ON COLUMN job.jobs.last_sqlstate IS 'The SQLSTATE of its last failed dispatch (HTTP for an HTTP status, NET for a network error).';
CREATE INDEX jobs_ready_idx ON job.jobs (topic, priority, due_at, id) WHERE state = 'pending';
CREATE INDEX jobs_lease_idx ON job.jobs (leased_until) WHERE state = 'running';
CREATE INDEX jobs_work_idx ON job.jobs (work_key) WHERE state = 'pending' AND superceedable;
CREATE INDEX jobs_finished_idx ON job.jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE job.dedup (
    unique_hash  text        PRIMARY KEY,
    job_id       bigint      NOT NULL,
    expires_at   timestamptz NOT NULL
);
COMMENT ON TABLE job.dedup IS 'The deduper''s claims (the seed''s Redis keys): a dispatched job''s unique hash, until expires_at (dispatch + unique_id_expiry ms). Inserted in the transaction that completes the job, so a worker that dies claims nothing.';
COMMENT ON COLUMN job.dedup.unique_hash IS 'The job''s unique hash.';
COMMENT ON COLUMN job.dedup.job_id IS 'The job that claimed it.';
COMMENT ON COLUMN job.dedup.expires_at IS 'When the claim ends; a later job with the hash is dispatched again.';
CREATE INDEX dedup_expires_idx ON job.dedup (expires_at);

CREATE TABLE job.counters (
    topic    text   NOT NULL,
    counter  text   NOT NULL,
    shard    smallint NOT NULL DEFAULT 0,
    n        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, counter, shard)
);
COMMENT ON TABLE job.counters IS 'Counters per topic that outlive the jobs they count: scheduled, deduplicated, superseded, expired, dispatched, failed, retried, discarded_generation (a hook''s job beyond generations_limit).';
COMMENT ON COLUMN job.counters.topic IS 'The topic.';
COMMENT ON COLUMN job.counters.counter IS 'The counter''s name.';
COMMENT ON COLUMN job.counters.shard IS 'A writer adds to one of 16 rows per counter (the backend''s pid mod 16), so concurrent workers do not queue on one row lock; a count is the sum of its shards.';
COMMENT ON COLUMN job.counters.n IS 'This shard''s count since the database was created.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('job.retention', '7 days', 'How long finished jobs are kept in job.jobs (a PostgreSQL interval, default 7 days): silo work deletes older ones.')
ON CONFLICT (key) DO NOTHING;

INSERT INTO account.reserved_usernames (username, reason) VALUES
    ('jobs', 'the job service, GET /jobs/...'),
    ('job-events', 'POST /job-events')
ON CONFLICT DO NOTHING;

-- +goose Down
DELETE FROM account.reserved_usernames WHERE username IN ('jobs', 'job-events');
DELETE FROM silo.settings WHERE key = 'job.retention';
DROP SCHEMA job CASCADE;
