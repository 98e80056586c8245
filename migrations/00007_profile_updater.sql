-- +goose Up
-- The inbox of the asynchronous profile updater: accepted update messages waiting to be applied.
-- Like the partitions of a Kafka topic keyed by _id, every message goes to a lane chosen by its
-- _id; a worker applies a lane's messages in id order while it holds the lane's row lock, so the
-- updates of one correlation id are applied in the order they were accepted, and different lanes
-- are applied in parallel by any number of workers and processes.
CREATE TABLE profile.inbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    priority    smallint    NOT NULL,
    lane        integer     NOT NULL,
    message     jsonb       NOT NULL,
    accepted    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inbox_priority_check CHECK (priority IN (0, 1))
);
CREATE INDEX inbox_lane_idx ON profile.inbox (priority, lane, id);
-- A queue table: rows come and go fast. Vacuum and analyze early, so that dead rows do not pile up
-- in front of the lanes and the planner knows how full the lanes are.
ALTER TABLE profile.inbox SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01,
                               autovacuum_vacuum_insert_scale_factor = 0.01);
COMMENT ON TABLE profile.inbox IS 'Profile update messages accepted by api.profile_enqueue and not applied yet; api.profile_inbox_process applies and deletes them lane by lane, in id order. Its depth per priority is the updater''s backlog.';
COMMENT ON COLUMN profile.inbox.id IS 'Acceptance order: a lane is applied in id order.';
COMMENT ON COLUMN profile.inbox.priority IS '0 high, 1 low: two streams, the low one throttled while the high one''s backlog is above updater.lag_barrier.';
COMMENT ON COLUMN profile.inbox.lane IS 'hashtext(_id) modulo the lane count (0 for a message without a string _id): all updates of one correlation id share a lane.';
COMMENT ON COLUMN profile.inbox.message IS 'The update message exactly as accepted.';
COMMENT ON COLUMN profile.inbox.accepted IS 'When the message was accepted.';

CREATE TABLE profile.inbox_lanes (
    priority      smallint    NOT NULL,
    lane          integer     NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    retry_at      timestamptz,
    last_error    text,
    last_sqlstate text,
    last_failed   timestamptz,
    CONSTRAINT inbox_lanes_pkey PRIMARY KEY (priority, lane)
);
COMMENT ON TABLE profile.inbox_lanes IS 'One row per lane and priority. A worker locks a lane''s row (FOR UPDATE SKIP LOCKED) while it applies the lane''s messages. After an unexpected error (retry mode) the lane waits until retry_at with exponential back-off: like a Kafka partition it blocks rather than reorder. SELECT * FROM profile.inbox_lanes WHERE attempts > 0 shows blocked lanes.';
COMMENT ON COLUMN profile.inbox_lanes.priority IS '0 high, 1 low.';
COMMENT ON COLUMN profile.inbox_lanes.lane IS 'Lane number, 0 to the lane count - 1.';
COMMENT ON COLUMN profile.inbox_lanes.attempts IS 'Failed attempts in a row of the lane''s oldest messages (0: healthy).';
COMMENT ON COLUMN profile.inbox_lanes.retry_at IS 'The lane is not applied before this time (exponential back-off after a failure).';
COMMENT ON COLUMN profile.inbox_lanes.last_error IS 'Message of the last unexpected error.';
COMMENT ON COLUMN profile.inbox_lanes.last_sqlstate IS 'SQLSTATE of the last unexpected error.';
COMMENT ON COLUMN profile.inbox_lanes.last_failed IS 'When the last unexpected error happened.';

INSERT INTO profile.inbox_lanes (priority, lane)
SELECT p, l FROM generate_series(0, 1) AS p, generate_series(0, 63) AS l;

INSERT INTO silo.settings (key, value, description) VALUES
    ('updater.lanes', '64', 'Lanes per priority (1 to 1024): the most workers that can apply one stream at once. Updates of one _id always share a lane. Changing it re-lanes the waiting messages (their order per _id is kept) and adds or removes rows of profile.inbox_lanes.'),
    ('updater.batch_size', '500', 'Most updates one step of a worker applies in one transaction.'),
    ('updater.lanes_per_step', '8', 'Most lanes one step claims; a lane is applied by one worker at a time.'),
    ('updater.unexpected_errors', 'retry', 'What an unexpected (non-validation) error does: retry (the lane waits with exponential back-off and tries again, forever) or dead_letter (the message that raised it goes to the dead letter table, the others apply).'),
    ('updater.retry_base_ms', '100', 'First back-off after an unexpected error, doubled per attempt.'),
    ('updater.retry_max_ms', '60000', 'Longest back-off between attempts.'),
    ('updater.throttle_enabled', 'true', 'Throttle the low priority stream while the high one''s backlog is above updater.lag_barrier.'),
    ('updater.lag_barrier', '100', 'High priority backlog (messages) above which the low priority stream is throttled.'),
    ('updater.check_interval_ms', '60000', 'How often a worker of the low priority stream checks the high priority backlog.'),
    ('updater.wait_time_ms', '1000', 'While throttled, the low priority stream waits this long per message.'),
    ('updater.long_running_ms', '1000', 'A step whose apply takes longer is logged as a warning.');

-- +goose Down
DELETE FROM silo.settings WHERE key LIKE 'updater.%';
DROP TABLE profile.inbox_lanes;
DROP TABLE profile.inbox;
