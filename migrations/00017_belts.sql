-- +goose Up
-- Belts: callbacks that turn events into profile updates (Granary's Belt framework). A belt is an
-- event consumer (event.consumers) with a callback, either a SQL function or Python source run
-- by PL/Python, and the settings Granary users gave as environment variables. Its events are
-- processed from event.deliveries, lane by lane; what a callback could not process goes to
-- belt.dead_letters. Code: sql/belt/.
--
-- PL/Python (plpython3u) is an untrusted language: its code runs as the server's OS user. It is
-- created here when the server has it and the migrating role may create it; otherwise Python belts
-- are refused with the reason and SQL belts work alone. A DBA who adds it later runs
-- CREATE EXTENSION plpython3u; and silo migrate again.
CREATE SCHEMA belt;
COMMENT ON SCHEMA belt IS 'Belts: registered callbacks (SQL or Python) that turn events of the event store into profile updates, and their dead letters. Code: sql/belt/ (api.belt_*).';

-- +goose StatementBegin
DO $plpython$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'plpython3u') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS plpython3u;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'plpython3u not created, Python belts are refused: %', SQLERRM
                USING HINT = 'A superuser can run CREATE EXTENSION plpython3u; in this database, then silo migrate.';
        END;
    END IF;
END
$plpython$;
-- +goose StatementEnd

CREATE TABLE belt.belts (
    id                       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                     text        NOT NULL,
    description              text,
    author                   text,
    labels                   jsonb       NOT NULL DEFAULT '{}',
    version                  integer     NOT NULL DEFAULT 1,
    consumer_id              bigint      NOT NULL REFERENCES event.consumers (id),
    language                 text        NOT NULL CHECK (language IN ('sql', 'python')),
    sql_callback             text,
    extractor_fn             text,
    fetch_profile            text        NOT NULL DEFAULT 'FALSE' CHECK (fetch_profile IN ('FALSE', 'TRUE', 'LAZY')),
    profile_type             text        NOT NULL DEFAULT '_d',
    extra_env                jsonb       NOT NULL DEFAULT '[]',
    callback_timeout_sec     numeric     NOT NULL DEFAULT 300,
    callback_longrunning_sec numeric     NOT NULL DEFAULT 180,
    retry_initial_sec        numeric     NOT NULL DEFAULT 1,
    retry_max_sec            numeric     NOT NULL DEFAULT 60,
    retry_multiplier         numeric     NOT NULL DEFAULT 2.0,
    retry_max_retries        integer     NOT NULL DEFAULT -1,
    status                   text        NOT NULL DEFAULT 'RUNNING' CHECK (status IN ('RUNNING', 'STOPPED', 'FAILED')),
    status_reason            text,
    created                  timestamptz NOT NULL DEFAULT now(),
    updated                  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT belts_name_key UNIQUE (name),
    CONSTRAINT belts_consumer_key UNIQUE (consumer_id),
    CONSTRAINT belts_callback_check CHECK (
        (language = 'sql' AND sql_callback IS NOT NULL) OR (language = 'python' AND extractor_fn IS NOT NULL))
);
COMMENT ON TABLE belt.belts IS 'Registered belts (api.belt_create, api.belt_update, api.belt_delete; HTTP /belts). Each is the event consumer consumer_id, whose event types it processes. The retry and timeout columns are the settings Granary users gave in extraEnv, parsed from extra_env when the belt is written.';
COMMENT ON COLUMN belt.belts.id IS 'The belt''s id: its updates'' default _origin is /belts/{id}.';
COMMENT ON COLUMN belt.belts.name IS 'A unique name.';
COMMENT ON COLUMN belt.belts.description IS 'Free text.';
COMMENT ON COLUMN belt.belts.author IS 'Free text: who wrote it.';
COMMENT ON COLUMN belt.belts.labels IS 'Free labels (a JSON object).';
COMMENT ON COLUMN belt.belts.version IS '1 when created, one more at each update.';
COMMENT ON COLUMN belt.belts.consumer_id IS 'Its event consumer (event.consumers: the event types, the lanes, the counters).';
COMMENT ON COLUMN belt.belts.language IS 'sql: sql_callback names a function; python: extractor_fn is Python source run by PL/Python.';
COMMENT ON COLUMN belt.belts.sql_callback IS 'For a SQL belt: the callback function (a name or signature, as to_regprocedure reads it) taking (event_headers jsonb, event_payload jsonb[, profile jsonb]) and returning the updates.';
COMMENT ON COLUMN belt.belts.extractor_fn IS 'For a Python belt: the source of callback.py, with its execute(event_headers, event_payload[, profile]).';
COMMENT ON COLUMN belt.belts.fetch_profile IS 'FALSE: no profile; TRUE: the current profile of the event''s correlation id is the callback''s third argument; LAZY: the callback fetches profiles itself (Python: profileClient.getProfile).';
COMMENT ON COLUMN belt.belts.profile_type IS 'The profile type fetched (PROFILE_TYPE), default _d.';
COMMENT ON COLUMN belt.belts.extra_env IS 'The settings as given ([{"name", "value"}]): CALLBACK_TIMEOUT_SEC, CALLBACK_LONGRUNNING_SEC, RETRY_BACK_OFF_INITIAL_INTERVAL_SEC, RETRY_BACK_OFF_INTERVAL_MAX_SEC, RETRY_BACK_OFF_MULTIPLIER, RETRY_MAX_RETRIES (the columns below), FETCH_PROFILE and PROFILE_TYPE; other names are kept and passed to a Python callback as os.environ.';
COMMENT ON COLUMN belt.belts.callback_timeout_sec IS 'CALLBACK_TIMEOUT_SEC (default 300): a callback running longer is stopped, and its event retried.';
COMMENT ON COLUMN belt.belts.callback_longrunning_sec IS 'CALLBACK_LONGRUNNING_SEC (default 180): a callback running longer is logged and counted as long-running.';
COMMENT ON COLUMN belt.belts.retry_initial_sec IS 'RETRY_BACK_OFF_INITIAL_INTERVAL_SEC (default 1): the first wait before a retry.';
COMMENT ON COLUMN belt.belts.retry_max_sec IS 'RETRY_BACK_OFF_INTERVAL_MAX_SEC (default 60): the longest wait before a retry.';
COMMENT ON COLUMN belt.belts.retry_multiplier IS 'RETRY_BACK_OFF_MULTIPLIER (default 2.0): each wait is the previous one times this.';
COMMENT ON COLUMN belt.belts.retry_max_retries IS 'RETRY_MAX_RETRIES (default -1: unlimited; 0: no retry): after this many retries the event is dead-lettered.';
COMMENT ON COLUMN belt.belts.status IS 'RUNNING (its events are processed), STOPPED (they wait), FAILED (the callback did not validate: status_reason says why; they wait).';
COMMENT ON COLUMN belt.belts.status_reason IS 'Why the belt is FAILED, NULL otherwise.';
COMMENT ON COLUMN belt.belts.created IS 'When it was created.';
COMMENT ON COLUMN belt.belts.updated IS 'When it was last changed (definition or status).';

CREATE TABLE belt.dead_letters (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    belt_id        bigint      NOT NULL REFERENCES belt.belts (id) ON DELETE CASCADE,
    belt_version   integer     NOT NULL,
    event_id       text        NOT NULL,
    event_at       timestamptz NOT NULL,
    correlation_id text        NOT NULL,
    event_type     text        NOT NULL,
    headers        jsonb       NOT NULL,
    payload        jsonb       NOT NULL,
    error          text        NOT NULL,
    traceback      text,
    sqlstate       text,
    retries        integer     NOT NULL DEFAULT 0,
    created        timestamptz NOT NULL DEFAULT now(),
    replayed       timestamptz
);
CREATE INDEX dead_letters_belt_idx ON belt.dead_letters (belt_id, id);
COMMENT ON TABLE belt.dead_letters IS 'Events a belt could not process (Granary''s grnry_belt_dlq_<belt-id>, one table for every belt): the callback raised an error other than a retry, or its retries ran out. Each row keeps the event whole, so it can be replayed (api.belt_dead_letter_replay) after the callback is fixed.';
COMMENT ON COLUMN belt.dead_letters.id IS 'The dead letter''s id.';
COMMENT ON COLUMN belt.dead_letters.belt_id IS 'The belt.';
COMMENT ON COLUMN belt.dead_letters.belt_version IS 'The belt''s version that failed.';
COMMENT ON COLUMN belt.dead_letters.event_id IS 'The event''s grnry-event-id.';
COMMENT ON COLUMN belt.dead_letters.event_at IS 'The event''s time.';
COMMENT ON COLUMN belt.dead_letters.correlation_id IS 'The event''s correlation id.';
COMMENT ON COLUMN belt.dead_letters.event_type IS 'The event''s type.';
COMMENT ON COLUMN belt.dead_letters.headers IS 'The event''s headers, as the callback received them.';
COMMENT ON COLUMN belt.dead_letters.payload IS 'The event''s payload.';
COMMENT ON COLUMN belt.dead_letters.error IS 'The error: for Python the exception''s type and message, for SQL the message.';
COMMENT ON COLUMN belt.dead_letters.traceback IS 'Python''s traceback, or SQL''s context, when there is one.';
COMMENT ON COLUMN belt.dead_letters.sqlstate IS 'The SQLSTATE of a SQL error (SBRTX when retries ran out), NULL for a Python exception.';
COMMENT ON COLUMN belt.dead_letters.retries IS 'How many times the event had been retried.';
COMMENT ON COLUMN belt.dead_letters.created IS 'When it was dead-lettered.';
COMMENT ON COLUMN belt.dead_letters.replayed IS 'When it was replayed (delivered to the belt again), NULL until then.';

INSERT INTO silo.settings (key, value, description) VALUES
    ('belt.batch_size', '500', 'Events a belt processing step takes at most (over all the lanes it holds), processed set-based in one transaction.'),
    ('belt.lanes_per_step', '8', 'Lanes a belt processing step holds at most: workers of one belt share its lanes, each step locking up to this many ready ones.')
ON CONFLICT (key) DO NOTHING;

-- +goose Down
DELETE FROM silo.settings WHERE key IN ('belt.batch_size', 'belt.lanes_per_step');
DROP TABLE belt.dead_letters;
DROP TABLE belt.belts;
DROP SCHEMA belt;
