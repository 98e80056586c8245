-- The job service, manager: a worker of a pool (a topic and a priority range of job.config_pools)
-- takes the most urgent due jobs of its range (priority, then due time, then age; FOR UPDATE SKIP
-- LOCKED: no two workers take one job), drops the expired ones, drops the duplicates, dispatches
-- the rest to the pool's hook and records each outcome, in the shape of the belts' steps.
--
-- Why topics are not River queues (the seed's Kafka topics): the claim of a job's unique hash and
-- its completion must commit together, which on River takes a transaction per job (the claim, the
-- hook, river.JobCompleteTx) and a WAL flush per job; a step here takes a hundred jobs in one.
-- Measured on the same 20,000 no-op SQL hook jobs (BENCHMARKS.md, workload 12): River so, 400
-- workers, 700 to 1,000 jobs/s; these steps, 4 workers, 6,000 to 6,500 jobs/s.
--
-- Deduplication (the seed's deduper; its Redis keys are rows of job.dedup): a job whose unique
-- hash is claimed by another job until later than now is deduplicated; so is a job of a step
-- behind an older job of the same step with the same hash. Otherwise the job claims its hash for
-- unique_id_expiry ms in the transaction that records its completion. The seed's three causes:
-- * a publisher that repeats a job (an HTTP client retrying POST /job-events without an
--   Idempotency-Key, a psql user running a call twice): the copies have one hash; the first
--   dispatched claims it, the others are deduplicated;
-- * a consumer that crashes: a SQL or mock hook runs in the step's transaction, so a step that dies
--   commits nothing: neither the claim nor the completion, and the job is pending for the next
--   step. An HTTP or cache hook's job is taken with a lease (running until leased_until); a worker
--   that dies leaves it running, and once the lease has passed the job is taken again; the
--   receiver sees the same Idempotency-Key (the unique hash) twice, and the claim is made only
--   when the completion is recorded;
-- * identical events: they make jobs with one hash, deduplicated as copies are.
--
-- Outcomes: ok (done; a hook's jobs are published, one generation further); error (attempts + 1:
-- pending again after a back-off of 2^(attempts-1) seconds, at most 5 minutes, or failed when
-- retry_limit retries were made; failed jobs are the service's dead letters, with their error);
-- transient (api.error_class says so: pending again after 1 s, no attempt used). A failed
-- dispatch releases its claim.

CREATE FUNCTION job_private.backoff(p_attempts integer)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(power(2, greatest(p_attempts - 1, 0)), 300) * interval '1 second';
$$;
COMMENT ON FUNCTION job_private.backoff(integer) IS
    'The wait before the next dispatch of a job whose p_attempts-th dispatch failed: 2^(p_attempts-1) seconds, at most 5 minutes. Raises nothing.';

CREATE FUNCTION job_private.lock(p_topic text, p_lo integer, p_hi integer, p_max integer, p_leased boolean)
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH a AS (
        SELECT j.id, j.priority, j.due_at FROM job.jobs j
        WHERE j.topic = p_topic AND j.state = 'pending' AND j.priority BETWEEN p_lo AND p_hi AND j.due_at <= now()
        ORDER BY j.topic, j.priority, j.due_at, j.id
        LIMIT p_max
        FOR UPDATE SKIP LOCKED),
    b AS (
        SELECT j.id, j.priority, j.due_at FROM job.jobs j
        WHERE p_leased AND j.state = 'running' AND j.leased_until < now()
          AND j.topic = p_topic AND j.priority BETWEEN p_lo AND p_hi
        LIMIT p_max
        FOR UPDATE SKIP LOCKED)
    SELECT coalesce(array_agg(x.id ORDER BY x.priority, x.due_at, x.id), '{}')
    FROM (SELECT * FROM a UNION ALL SELECT * FROM b) x;
$$;
COMMENT ON FUNCTION job_private.lock(text, integer, integer, integer, boolean) IS
    'Locks (FOR UPDATE SKIP LOCKED, until commit) up to p_max due pending jobs of topic p_topic with a priority from p_lo to p_hi, most urgent first (priority, due_at, id), and with p_leased also running jobs of the range whose lease passed (their worker died); returns their ids in that order. Raises nothing.';

-- Expired, then duplicates; counts and publishes both. Returns the ids left, in order.
CREATE FUNCTION job_private.screen(p_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_left bigint[];
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN p_ids;
    END IF;
    WITH j AS (
        SELECT j.id, j.topic, j.expires_at <= now() AS expired,
               j.expires_at > now() AND (
                   EXISTS (SELECT FROM job.dedup d WHERE d.unique_hash = j.unique_hash AND d.expires_at > now() AND d.job_id <> j.id)
                   OR j.id <> min(j.id) FILTER (WHERE j.expires_at > now()) OVER (PARTITION BY j.unique_hash)) AS dup
        FROM job.jobs j WHERE j.id = ANY (p_ids)),
    upd AS (
        UPDATE job.jobs t SET state = CASE WHEN j.expired THEN 'expired' ELSE 'deduplicated' END,
                              finished_at = now(), leased_until = NULL
        FROM j WHERE t.id = j.id AND (j.expired OR j.dup)
        RETURNING t.id, t.topic, t.state),
    cnt AS (
        SELECT job_private.count(array_agg(u.topic), array_agg(u.state), array_fill(1::bigint, ARRAY[count(*)::integer]))
        FROM upd u HAVING count(*) > 0),
    chg AS (
        INSERT INTO change_private.outbox (channel, kind, payload, readers)
        SELECT 'jobs:' || u.topic, u.state, jsonb_build_object('ids', jsonb_agg(u.id ORDER BY u.id)), '{}'
        FROM upd u GROUP BY u.topic, u.state
        RETURNING 1)
    SELECT ARRAY(SELECT x.id FROM unnest(p_ids) WITH ORDINALITY AS x(id, k)
                 WHERE NOT EXISTS (SELECT FROM upd u WHERE u.id = x.id) ORDER BY x.k)
    INTO v_left
    FROM (SELECT count(*) FROM cnt) c1, (SELECT count(*) FROM chg) c2;
    RETURN v_left;
END
$$;
COMMENT ON FUNCTION job_private.screen(bigint[]) IS
    'Drops the jobs p_ids (locked by the caller) that expired (state expired) or are duplicates (state deduplicated: their unique hash is claimed in job.dedup by another job until later than now, or an older job of p_ids has the same hash), counts them in job.counters, publishes kinds expired and deduplicated on channels jobs:{topic}, and returns the other ids in the order of p_ids. Raises nothing.';

-- Claims the hashes of jobs about to complete. A claim committed by another transaction since the
-- screen (a concurrent step of another pool) makes the job a duplicate: the insert waits for that
-- transaction and then sees its row.
CREATE FUNCTION job_private.claim(p_ids bigint[])
RETURNS bigint[]
LANGUAGE sql VOLATILE
AS $$
    WITH c AS (
        INSERT INTO job.dedup AS d (unique_hash, job_id, expires_at)
        SELECT j.unique_hash, j.id, clock_timestamp() + (SELECT cf.unique_id_expiry FROM job.config cf) * interval '1 millisecond'
        FROM job.jobs j WHERE j.id = ANY (p_ids)
        ORDER BY j.unique_hash
        ON CONFLICT (unique_hash) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
        WHERE d.expires_at <= now() OR d.job_id = excluded.job_id
        RETURNING d.job_id)
    SELECT coalesce(array_agg(c.job_id), '{}') FROM c;
$$;
COMMENT ON FUNCTION job_private.claim(bigint[]) IS
    'Claims the unique hashes of jobs p_ids (distinct hashes) in job.dedup until now + unique_id_expiry ms, replacing claims that ended; returns the ids that got their claim (the others are claimed by another job). Waits for a concurrent transaction that claims the same hash. Raises nothing.';

CREATE TYPE job_private.settled AS (
    id    bigint,
    topic text,
    state text
);
COMMENT ON TYPE job_private.settled IS 'A job whose outcome job_private.settle recorded: id, topic, and its new state (done, failed, or pending for a retry).';

-- p_outcomes: ok, error, fail, transient, zipped with p_ids, p_errors, p_sqlstates by position;
-- p_children: the jobs each ok job's hook made (a JSON array per job, or NULL).
CREATE FUNCTION job_private.settle(p_ids bigint[], p_outcomes text[], p_errors text[], p_sqlstates text[], p_children jsonb[])
RETURNS TABLE (done integer, failed integer, retried integer, children integer)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_drafts job_private.draft[];
    v_set    job_private.settled[];
BEGIN
    WITH o AS (SELECT * FROM unnest(p_ids, p_outcomes, p_errors, p_sqlstates) AS o(id, outcome, error, sqlstate)),
    upd AS (
        UPDATE job.jobs j
        SET state = CASE WHEN o.outcome = 'ok' THEN 'done'
                         WHEN o.outcome = 'fail' OR (o.outcome = 'error' AND j.attempts + 1 > j.retry_limit) THEN 'failed'
                         ELSE 'pending' END,
            attempts = j.attempts + CASE WHEN o.outcome IN ('error', 'fail') THEN 1 ELSE 0 END,
            finished_at = CASE WHEN o.outcome IN ('ok', 'fail') OR (o.outcome = 'error' AND j.attempts + 1 > j.retry_limit) THEN now() END,
            due_at = CASE WHEN o.outcome = 'error' THEN now() + job_private.backoff(j.attempts + 1)
                          WHEN o.outcome = 'transient' THEN now() + interval '1 second' ELSE j.due_at END,
            leased_until = NULL,
            last_error = CASE WHEN o.outcome = 'ok' THEN j.last_error ELSE o.error END,
            last_sqlstate = CASE WHEN o.outcome = 'ok' THEN j.last_sqlstate ELSE o.sqlstate END
        FROM o WHERE j.id = o.id
        RETURNING j.id, j.topic, j.state)
    SELECT array_agg(ROW(u.id, u.topic, u.state)::job_private.settled) INTO v_set FROM upd u;

    -- A failed dispatch gives its claim back.
    IF EXISTS (SELECT FROM unnest(v_set) s WHERE s.state <> 'done') THEN
        DELETE FROM job.dedup d USING unnest(v_set) s, job.jobs j
        WHERE s.state <> 'done' AND j.id = s.id AND d.unique_hash = j.unique_hash AND d.job_id = s.id;
    END IF;

    PERFORM job_private.count(array_agg(t.topic), array_agg(t.counter), array_agg(t.n))
    FROM (SELECT s.topic, CASE s.state WHEN 'done' THEN 'dispatched' WHEN 'failed' THEN 'failed' ELSE 'retried' END AS counter,
                 count(*) AS n
          FROM unnest(v_set) s GROUP BY 1, 2) t;
    INSERT INTO change_private.outbox (channel, kind, payload, readers)
    SELECT 'jobs:' || s.topic, CASE s.state WHEN 'pending' THEN 'retry' ELSE s.state END,
           jsonb_build_object('ids', jsonb_agg(s.id ORDER BY s.id)), '{}'
    FROM unnest(v_set) s GROUP BY s.topic, s.state;

    -- The hooks' jobs: the parent's attributes, the child's update_fields over its properties, one
    -- generation further; generation joins the key fields, so a child never duplicates its parent.
    IF EXISTS (SELECT FROM unnest(p_children) c WHERE jsonb_typeof(c) = 'array' AND jsonb_array_length(c) > 0) THEN
        SELECT array_agg(ROW(x.k, x.topic, x.rt, x.at, x.url, x.payload, x.ts, x.event_ts, x.props,
                             (SELECT array_agg(DISTINCT f) FROM unnest(coalesce(r.key_fields, job_private.default_key_fields()) || 'generation'::text) f),
                             x.generation, x.parent_id)::job_private.draft ORDER BY x.k)
        INTO v_drafts
        FROM (SELECT row_number() OVER (ORDER BY j.id, c.n)::integer AS k,
                     c.spec ->> 'topic' AS topic,
                     coalesce(c.spec ->> 'resource_type', j.resource_type) AS rt,
                     coalesce(c.spec ->> 'action_type', j.action_type) AS at,
                     CASE WHEN c.spec ? 'resource_url' THEN c.spec ->> 'resource_url' ELSE j.resource_url END AS url,
                     CASE WHEN c.spec ? 'payload' THEN c.spec -> 'payload' ELSE j.payload END AS payload,
                     NULL::jsonb AS ts, j.event_ts,
                     j.properties || job_private.child_props(c.spec -> 'update_fields') AS props,
                     j.generation + 1 AS generation, j.id AS parent_id
              FROM unnest(p_ids, p_outcomes, p_children) AS o(id, outcome, kids)
              JOIN job.jobs j ON j.id = o.id
              CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN o.outcome = 'ok' AND jsonb_typeof(o.kids) = 'array' THEN o.kids ELSE '[]' END)
                                 WITH ORDINALITY AS c(spec, n)
              WHERE jsonb_typeof(c.spec) = 'object' AND jsonb_typeof(c.spec -> 'topic') = 'string') x
        LEFT JOIN LATERAL (
            SELECT e.key_fields FROM job.config_enrich e
            WHERE (e.topic = x.topic OR e.topic IS NULL)
              AND (e.action_type IS NULL OR e.action_type = x.at) AND (e.resource_type IS NULL OR e.resource_type = x.rt)
              AND (e.job_type IS NULL OR e.job_type = x.props ->> 'job_type')
            ORDER BY e.topic IS NULL, e.ord LIMIT 1) r ON true;
    END IF;
    IF v_drafts IS NOT NULL THEN
        SELECT count(*)::integer INTO children FROM job_private.insert_jobs(v_drafts);
    ELSE
        children := 0;
    END IF;
    SELECT count(*) FILTER (WHERE s.state = 'done'), count(*) FILTER (WHERE s.state = 'failed'),
           count(*) FILTER (WHERE s.state = 'pending')
    INTO done, failed, retried
    FROM unnest(v_set) s;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION job_private.settle(bigint[], text[], text[], text[], jsonb[]) IS
    'Records the outcomes of dispatched jobs p_ids (zipped by position with p_outcomes ok, error, fail or transient, p_errors, p_sqlstates and p_children): ok is done; error uses an attempt and is pending again after job_private.backoff, or failed once retry_limit retries were made; fail is failed at once (a permanent error); transient is pending again after 1 s. A failed dispatch releases its claim in job.dedup. Counts dispatched, failed and retried, publishes kinds done, failed and retry on channels jobs:{topic}, and publishes the jobs the hooks of ok jobs made (p_children: JSON arrays of {"topic", "update_fields", and optionally "payload", "resource_url", "resource_type", "action_type"}; others are skipped): the parent''s attributes with update_fields over its properties, generation + 1 (beyond generations_limit: discarded and counted). Returns the counts done, failed, retried and children (published). Raises nothing of its own.';

CREATE FUNCTION job_private.child_props(p_fields jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
    FROM jsonb_each(CASE WHEN jsonb_typeof(p_fields) = 'object' THEN p_fields ELSE '{}' END) e
    WHERE CASE e.key
              WHEN 'superceedable' THEN jsonb_typeof(e.value) = 'boolean'
              WHEN 'job_type' THEN jsonb_typeof(e.value) = 'string' AND e.value <> '""'
              WHEN 'priority' THEN jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^[0-9]{1,6}$'
              WHEN 'retry_limit' THEN jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^[0-9]{1,6}$'
              WHEN 'due' THEN jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^[0-9]{1,7}(\.[0-9]+)?$'
              WHEN 'expires' THEN jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^[0-9]{1,7}(\.[0-9]+)?$'
              ELSE true END;
$$;
COMMENT ON FUNCTION job_private.child_props(jsonb) IS
    'The update_fields p_fields of a hook''s job that are valid job properties (as job_private.props_check has them; invalid values are left out, keeping the parent''s). Raises nothing.';

-- One statement over the step's jobs; only when it raises, one subtransaction per job.
CREATE FUNCTION job_private.run_sql_hook(p_fn text, p_ids bigint[],
                                         OUT o_outcomes text[], OUT o_errors text[], OUT o_sqlstates text[], OUT o_children jsonb[])
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_id    bigint;
    v_r     jsonb;
    v_state text;
    v_msg   text;
BEGIN
    BEGIN
        EXECUTE format($q$
            SELECT array_agg('ok' ORDER BY x.k), array_agg(NULL::text ORDER BY x.k), array_agg(NULL::text ORDER BY x.k),
                   array_agg(CASE jsonb_typeof(x.r) WHEN 'array' THEN x.r WHEN 'object' THEN x.r -> 'jobs' END ORDER BY x.k)
            FROM (SELECT i.k, %s(to_jsonb(j)) AS r
                  FROM unnest($1) WITH ORDINALITY AS i(id, k) JOIN job.jobs j ON j.id = i.id
                  OFFSET 0) x
        $q$, p_fn) INTO o_outcomes, o_errors, o_sqlstates, o_children USING p_ids;
        RETURN;
    EXCEPTION WHEN OTHERS THEN
        o_outcomes := '{}'; o_errors := '{}'; o_sqlstates := '{}'; o_children := '{}';
    END;
    FOREACH v_id IN ARRAY p_ids LOOP
        BEGIN
            EXECUTE format('SELECT %s(to_jsonb(j)) FROM job.jobs j WHERE j.id = $1', p_fn) INTO v_r USING v_id;
            o_outcomes := o_outcomes || 'ok'::text;
            o_errors := o_errors || NULL::text;
            o_sqlstates := o_sqlstates || NULL::text;
            o_children := o_children || CASE jsonb_typeof(v_r) WHEN 'array' THEN v_r WHEN 'object' THEN v_r -> 'jobs' END;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
            o_outcomes := o_outcomes || CASE WHEN api.error_class(v_state) = 'transient' THEN 'transient' ELSE 'error' END;
            o_errors := o_errors || v_msg;
            o_sqlstates := o_sqlstates || v_state;
            o_children := o_children || NULL::jsonb;
        END;
    END LOOP;
END
$$;
COMMENT ON FUNCTION job_private.run_sql_hook(text, bigint[]) IS
    'Runs SQL hook p_fn (a function (jsonb) returning NULL, an array of jobs or {"jobs": [...]}) over the jobs p_ids (each as to_jsonb of its job.jobs row), first in one statement, and when that raises job by job, each in a subtransaction. Returns, by position of p_ids: o_outcomes (ok, error, or transient as api.error_class has the SQLSTATE), o_errors, o_sqlstates and o_children (the jobs each hook made). A cancel (statement_timeout) is not caught.';

CREATE VIEW api.job_dispatched AS
SELECT NULL::integer AS taken, NULL::integer AS expired_or_duplicate, NULL::integer AS done, NULL::integer AS failed,
       NULL::integer AS retried, NULL::integer AS children, NULL::boolean AS more
WHERE false;
COMMENT ON VIEW api.job_dispatched IS
    'Always empty: the row type of api.job_dispatch. taken: jobs locked by the step; expired_or_duplicate: of those, dropped before dispatch; done, failed, retried: outcomes of the dispatched ones; children: jobs their hooks published; more: the step took as many as it could (another may find work).';

CREATE FUNCTION api.job_dispatch(p_topic text, p_lo integer, p_hi integer, p_max integer DEFAULT 100)
RETURNS SETOF api.job_dispatched
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_hook  text;
    v_ids   bigint[];
    v_run   bigint[];
    v_ok    bigint[];
    v_out   text[];
    v_err   text[];
    v_st    text[];
    v_kids  jsonb[];
    v_set   record;
BEGIN
    IF p_max IS NULL OR p_max < 1 THEN
        RAISE EXCEPTION 'p_max must be at least 1' USING ERRCODE = 'SLINV';
    END IF;
    SELECT p.hook INTO v_hook FROM job.config_pools p WHERE p.topic = p_topic AND p.lo = p_lo AND p.hi = p_hi;
    IF v_hook IS NULL THEN
        RAISE EXCEPTION 'no pool for topic % and priorities % to %', p_topic, p_lo, p_hi USING ERRCODE = 'SLNFD';
    END IF;
    IF v_hook NOT IN ('mock') AND v_hook NOT LIKE 'sql:%' THEN
        RAISE EXCEPTION 'the pool of topic % dispatches to hook %: use api.job_take and api.job_finish', p_topic, v_hook
            USING ERRCODE = 'SLINV';
    END IF;
    v_ids := job_private.lock(p_topic, p_lo, p_hi, p_max, false);
    IF cardinality(v_ids) = 0 THEN
        RETURN QUERY SELECT 0, 0, 0, 0, 0, 0, false;
        RETURN;
    END IF;
    -- What the hooks write is no new event (sql/job/06_sources.sql): a hook's jobs are generations.
    PERFORM set_config('silo.job_hook', 'on', true);
    v_run := job_private.screen(v_ids);
    v_ok := job_private.claim(v_run);
    IF cardinality(v_ok) < cardinality(v_run) THEN
        -- Claimed meanwhile by a concurrent step: duplicates.
        WITH d AS (UPDATE job.jobs j SET state = 'deduplicated', finished_at = now()
                   WHERE j.id = ANY (v_run) AND NOT j.id = ANY (v_ok) RETURNING j.id, j.topic)
        SELECT job_private.count(array_agg(d.topic), array_fill('deduplicated'::text, ARRAY[count(*)::integer]),
                                 array_fill(1::bigint, ARRAY[count(*)::integer]))
        INTO v_set FROM d;
        v_run := ARRAY(SELECT x FROM unnest(v_run) WITH ORDINALITY AS u(x, k) WHERE x = ANY (v_ok) ORDER BY k);
    END IF;
    IF cardinality(v_run) = 0 THEN
        RETURN QUERY SELECT cardinality(v_ids), cardinality(v_ids), 0, 0, 0, 0, cardinality(v_ids) >= p_max;
        RETURN;
    END IF;
    IF v_hook = 'mock' THEN
        v_out := array_fill('ok'::text, ARRAY[cardinality(v_run)]);
        v_err := array_fill(NULL::text, ARRAY[cardinality(v_run)]);
        v_st := v_err;
        v_kids := array_fill(NULL::jsonb, ARRAY[cardinality(v_run)]);
    ELSE
        SELECT h.o_outcomes, h.o_errors, h.o_sqlstates, h.o_children INTO v_out, v_err, v_st, v_kids
        FROM job_private.run_sql_hook(to_regprocedure(substr(v_hook, 5) || '(jsonb)')::regproc::text, v_run) h;
    END IF;
    SELECT * INTO v_set FROM job_private.settle(v_run, v_out, v_err, v_st, v_kids);
    RETURN QUERY SELECT cardinality(v_ids), cardinality(v_ids) - cardinality(v_run), v_set.done, v_set.failed,
                        v_set.retried, v_set.children, cardinality(v_ids) >= p_max;
END
$$;
COMMENT ON FUNCTION api.job_dispatch(text, integer, integer, integer) IS
    'One dispatch step of the pool of topic p_topic and priorities p_lo to p_hi (job.config_pools) whose hook runs in the database (mock or sql:<function>), in one transaction: locks up to p_max (default 100) of its most urgent due pending jobs, drops the expired and the duplicates, claims the unique hashes of the others for unique_id_expiry ms, runs the hook over them and records the outcomes (sql/job/03_dispatch.sql: deduplication, retries, generations). A step that dies commits nothing: its jobs stay pending and unclaimed. Returns one api.job_dispatched row. Publishes on channels jobs:{topic} (kinds expired, deduplicated, done, failed, retry, scheduled for the hooks'' jobs). Raises SLINV for p_max below 1 or a pool whose hook is http or cache (api.job_take), SLNFD when the configuration has no such pool.';
