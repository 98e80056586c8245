-- The job service, scheduler: an event ({"resource_type", "action_type", "payload", "resource_url",
-- "timestamp"}) is routed (job.config_routes: every rule whose two regular expressions match gives
-- a topic, each topic once), enriched (job.config_enrich) and published (a row of job.jobs in its
-- topic, due and expiring in minutes from now), in the caller's transaction: the intake and its
-- jobs commit together. One statement does it for a whole batch of events.
--
-- Enrichment, in order of precedence: the first rule of the job's topic whose match holds, else
-- the first common rule whose match holds; its job_properties over the defaults (job.config.defaults:
-- the configuration's defaults.job_properties over Silo's own). A match holds when each field it
-- names equals the event's (job_type: the job's, for the jobs of hooks). Without a rule, the
-- defaults, and the key fields topic, job_type, resource_type, action_type, resource_url, payload.
--
-- The unique hash and the work key (superseding): sql/job/02_key.sql.

CREATE TYPE job_private.draft AS (
    ord           integer,
    topic         text,
    resource_type text,
    action_type   text,
    resource_url  text,
    payload       jsonb,
    ts            jsonb,
    event_ts      timestamptz,
    props         jsonb,
    key_fields    text[],
    generation    integer,
    parent_id     bigint
);
COMMENT ON TYPE job_private.draft IS
    'A job about to be published: ord (the event''s or child''s position in its call), topic, the event''s resource_type, action_type, resource_url, payload, ts (its timestamp as given) and event_ts (read), props (job_properties as enriched), key_fields, generation, parent_id (the job whose hook made it).';

CREATE FUNCTION job_private.default_key_fields()
RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ARRAY['topic', 'job_type', 'resource_type', 'action_type', 'resource_url', 'payload'];
$$;
COMMENT ON FUNCTION job_private.default_key_fields() IS
    'The key fields of a job no enrichment rule matches: topic, job_type, resource_type, action_type, resource_url, payload. Raises nothing.';

CREATE FUNCTION job_private.count(p_topics text[], p_counters text[], p_ns bigint[])
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    INSERT INTO job.counters AS c (topic, counter, shard, n)
    SELECT x.topic, x.counter, pg_backend_pid() % 16, sum(x.n)
    FROM unnest(p_topics, p_counters, p_ns) AS x(topic, counter, n)
    WHERE x.n > 0
    GROUP BY x.topic, x.counter
    ORDER BY x.topic, x.counter
    ON CONFLICT (topic, counter, shard) DO UPDATE SET n = c.n + excluded.n;
$$;
COMMENT ON FUNCTION job_private.count(text[], text[], bigint[]) IS
    'Adds p_ns[i] to counter p_counters[i] of topic p_topics[i] in job.counters (this backend''s shard). Raises nothing.';

-- Superseding probes jobs_work_idx (pending superceedable jobs by work_key and id) once per work
-- key of the call for jobs older than the call's newest of that key (OFFSET 0 keeps each probe a
-- probe rather than a join that reads every pending job); a call with nothing to replace costs
-- those probes and nothing else. The plan is pinned to that: made for each call on the table as
-- it is (force_custom_plan), with sequential scans off (jit off, so that the planner's penalty for
-- them never turns JIT on). Left to the planner, a probe read the pending jobs whole for every key
-- (a plan made once when the table was empty, after a TRUNCATE, kept as it grew; and even planned
-- per call, in the bench's dispatch runs): one call of 1,000 events ran for minutes with 1,000
-- jobs pending. The probes are made once (MATERIALIZED): inlined into the UPDATE, they could be
-- redone for every row of the table. The changes are made from what the UPDATE returns.
CREATE FUNCTION job_private.supersede(p_keys text[], p_ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_n bigint;
BEGIN
    WITH newest AS MATERIALIZED (SELECT k.key, max(k.id) AS id FROM unnest(p_keys, p_ids) AS k(key, id) GROUP BY k.key),
    older AS MATERIALIZED (
        SELECT o.id, n.id AS newer
        FROM newest n
        CROSS JOIN LATERAL (SELECT j.id FROM job.jobs j
                            WHERE j.work_key = n.key AND j.state = 'pending' AND j.superceedable AND j.id < n.id
                            OFFSET 0) o),
    sup AS (
        UPDATE job.jobs j SET state = 'superseded', superseded_by = o.newer, finished_at = now()
        FROM older o
        WHERE j.id = o.id AND j.state = 'pending'
        RETURNING j.id, j.topic),
    cnt AS (
        SELECT job_private.count(array_agg(s.topic), array_fill('superseded'::text, ARRAY[count(*)::integer]), array_fill(1::bigint, ARRAY[count(*)::integer]))
        FROM sup s HAVING count(*) > 0),
    chg AS (
        INSERT INTO change_private.outbox (channel, kind, payload, readers)
        SELECT 'jobs:' || s.topic, 'superseded', jsonb_build_object('ids', jsonb_agg(s.id ORDER BY s.id)), '{}'
        FROM sup s GROUP BY s.topic
        RETURNING 1)
    SELECT (SELECT count(*) FROM sup) INTO v_n
    FROM (SELECT count(*) FROM cnt) c1, (SELECT count(*) FROM chg) c2;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION job_private.supersede(text[], bigint[]) IS
    'Supersedes, for each work key of p_keys, the pending superceedable jobs older than the newest of the jobs p_ids (zipped by position with p_keys) that has it: state superseded, superseded_by that job. Counts superseded in job.counters and publishes kind superseded on channels jobs:{topic} (payload {"ids"}). Returns how many jobs it superseded. Raises nothing of its own.';

-- One INSERT for all the drafts, one statement for superseding (job_private.supersede), the
-- counters and one change per topic and call.
CREATE FUNCTION job_private.insert_jobs(p_drafts job_private.draft[])
RETURNS TABLE (ord integer, topic text, id bigint)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    v_limit integer := coalesce((SELECT c.generations_limit FROM job.config c), 3);
    v_ids   bigint[];
    v_keys  text[];
BEGIN
    -- What depends on a draft's properties and key fields alone is computed once per distinct
    -- pair of the call (a rule's jobs share theirs): the typed properties, the due and expiry
    -- times, the key's field flags.
    WITH kinds AS MATERIALIZED (
        SELECT k.props, k.key_fields, job_private.key_flags(k.key_fields) AS flags,
               k.props ->> 'job_type' AS job_type, (k.props ->> 'priority')::integer AS priority,
               (k.props ->> 'superceedable')::boolean AS superceedable, (k.props ->> 'retry_limit')::integer AS retry_limit,
               now() + (k.props ->> 'due')::numeric * interval '1 minute' AS due_at,
               now() + (k.props ->> 'expires')::numeric * interval '1 minute' AS expires_at
        FROM (SELECT DISTINCT d.props, d.key_fields FROM unnest(p_drafts) d WHERE d.generation <= v_limit) k),
    ins AS (
        INSERT INTO job.jobs (topic, job_type, priority, superceedable, retry_limit, generation, parent_id, unique_hash,
                              work_key, resource_type, action_type, resource_url, payload, event_ts, properties,
                              due_at, expires_at)
        SELECT d.topic, k.job_type, k.priority, k.superceedable, k.retry_limit, d.generation, d.parent_id,
               encode(sha256(convert_to(job_private.key_text(k.flags, d.topic, d.props, d.resource_type, d.action_type,
                                                             d.resource_url, d.payload, d.ts, d.generation), 'UTF8')), 'hex'),
               encode(sha256(convert_to(job_private.work_text(d.topic, k.job_type, d.resource_type, d.resource_url,
                                                              CASE WHEN jsonb_typeof(d.payload -> 'access_token') = 'string'
                                                                   THEN d.payload ->> 'access_token' END), 'UTF8')), 'hex'),
               d.resource_type, d.action_type, d.resource_url, d.payload, d.event_ts, d.props, k.due_at, k.expires_at
        FROM unnest(p_drafts) d
        JOIN kinds k ON k.props = d.props AND k.key_fields = d.key_fields
        WHERE d.generation <= v_limit
        ORDER BY d.ord, d.topic
        RETURNING job.jobs.id, job.jobs.work_key)
    SELECT array_agg(i.id ORDER BY i.id), array_agg(i.work_key ORDER BY i.id)
    INTO v_ids, v_keys
    FROM ins i;

    IF v_ids IS NOT NULL THEN
        PERFORM job_private.supersede(v_keys, v_ids);
    END IF;

    PERFORM job_private.count(array_agg(t.topic), array_agg(t.counter), array_agg(t.n))
    FROM (SELECT d.topic, CASE WHEN d.generation <= v_limit THEN 'scheduled' ELSE 'discarded_generation' END AS counter,
                 count(*) AS n
          FROM unnest(p_drafts) d GROUP BY 1, 2) t;
    IF v_ids IS NOT NULL THEN
        -- The ids by topic from the drafts (inserted in (ord, topic) order, they got ascending ids).
        INSERT INTO change_private.outbox (channel, kind, payload, readers)
        SELECT 'jobs:' || x.topic, 'scheduled', jsonb_build_object('ids', jsonb_agg(x.id ORDER BY x.id)), '{}'
        FROM (SELECT d.topic, v_ids[row_number() OVER (ORDER BY d.ord, d.topic)] AS id
              FROM unnest(p_drafts) d WHERE d.generation <= v_limit) x
        GROUP BY x.topic;
        -- Idle pools are woken: one notification per call, not per job.
        PERFORM pg_notify('silo_job', '');
    END IF;

    -- The ids by draft: the drafts inserted, in (ord, topic) order, got ascending ids (one INSERT
    -- ... SELECT ... ORDER BY draws its identities in that order).
    RETURN QUERY
    SELECT d.ord, d.topic, x.id
    FROM (SELECT d.ord, d.topic, row_number() OVER (ORDER BY d.ord, d.topic) AS k
          FROM unnest(p_drafts) d WHERE d.generation <= v_limit) d
    JOIN (SELECT u.id, u.k FROM unnest(v_ids) WITH ORDINALITY AS u(id, k)) x ON x.k = d.k;
END
$$;
COMMENT ON FUNCTION job_private.insert_jobs(job_private.draft[]) IS
    'Publishes the drafts p_drafts as pending jobs (those beyond job.config.generations_limit are discarded and counted as discarded_generation), supersedes the older pending superceedable jobs of the same work, counts scheduled and superseded in job.counters, publishes kinds scheduled and superseded on channels jobs:{topic} (payload {"ids"}) and notifies silo_job. Returns (ord, topic, id) for each draft published; a draft is known by (ord, topic). Raises nothing of its own.';
CREATE TYPE job_private.scheduled AS (
    ord      integer,
    status   text,
    job_ids  bigint[],
    topics   text[],
    sqlstate text,
    reason   text
);
COMMENT ON TYPE job_private.scheduled IS
    'The answer for one event: ord (its position, from 1), status (scheduled: it made jobs; unrouted: no routing rule matched; refused: sqlstate and reason say why), job_ids and topics (of its jobs, in order).';

CREATE TYPE job_private.event_in AS (
    ord      integer,
    rt       text,
    at       text,
    url      text,
    payload  jsonb,
    ts       jsonb,
    event_ts timestamptz,
    problem  text
);
COMMENT ON TYPE job_private.event_in IS
    'One event of a schedule call as read: ord (its position), rt and at (resource and action types), url (resource_url), payload, ts (timestamp as given), event_ts (read), problem (why it is refused; NULL when it is valid).';

CREATE FUNCTION job_private.schedule(p_events jsonb)
RETURNS SETOF job_private.scheduled
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_defaults jsonb := (SELECT c.defaults FROM job.config c);
    v_in       job_private.event_in[];
    v_drafts   job_private.draft[];
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) NOT IN ('object', 'array') THEN
        RAISE EXCEPTION 'events must be a JSON object (one event) or an array of events'
            USING ERRCODE = 'SLINV', DETAIL = format('got %s', coalesce(jsonb_typeof(p_events), 'NULL'));
    END IF;
    IF v_defaults IS NULL THEN
        RAISE EXCEPTION 'the job service has no configuration' USING ERRCODE = 'SJNCF',
            HINT = 'Load one with silo jobs load-config FILE, or SELECT api.job_config_load(...).';
    END IF;

    v_in := ARRAY(
    SELECT ROW(x.ord, x.rt, x.at, x.url, x.payload, x.ts, x.event_ts,
           CASE WHEN jsonb_typeof(x.e) <> 'object' THEN 'an event must be a JSON object, got ' || jsonb_typeof(x.e)
                WHEN x.rt IS NULL OR x.rt = '' THEN 'resource_type is required: a non-empty string'
                WHEN x.at IS NULL OR x.at = '' THEN 'action_type is required: a non-empty string'
                WHEN x.e ? 'resource_url' AND jsonb_typeof(x.e -> 'resource_url') NOT IN ('string', 'null')
                    THEN 'resource_url must be a string, got ' || jsonb_typeof(x.e -> 'resource_url')
                WHEN x.ts IS NOT NULL AND x.ts <> 'null' AND x.event_ts IS NULL
                    THEN 'timestamp must be epoch milliseconds or an ISO 8601 date-time, got ' || left(x.ts::text, 100)
                WHEN x.e - '{resource_type,action_type,payload,resource_url,timestamp}'::text[] <> '{}'
                    THEN 'unknown field ' || (SELECT min(k) FROM jsonb_object_keys(x.e) k WHERE k NOT IN ('resource_type', 'action_type', 'payload', 'resource_url', 'timestamp'))
                         || ' (known: resource_type, action_type, payload, resource_url, timestamp)'
           END)::job_private.event_in
    FROM (SELECT a.n::integer AS ord, a.e,
                 CASE WHEN jsonb_typeof(a.e -> 'resource_type') = 'string' THEN a.e ->> 'resource_type' END AS rt,
                 CASE WHEN jsonb_typeof(a.e -> 'action_type') = 'string' THEN a.e ->> 'action_type' END AS at,
                 CASE WHEN jsonb_typeof(a.e -> 'resource_url') = 'string' THEN a.e ->> 'resource_url' END AS url,
                 CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e -> 'payload' END AS payload,
                 CASE WHEN jsonb_typeof(a.e) = 'object' THEN a.e -> 'timestamp' END AS ts,
                 CASE WHEN jsonb_typeof(a.e) = 'object' AND a.e -> 'timestamp' IS NOT NULL AND a.e -> 'timestamp' <> 'null'
                      THEN event_private.timestamp_of(a.e -> 'timestamp') END AS event_ts
          FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_events) = 'array' THEN p_events ELSE jsonb_build_array(p_events) END)
               WITH ORDINALITY AS a(e, n)) x
    ORDER BY x.ord);

    -- Route and enrich: one draft per event and topic. The rules are matched once per distinct
    -- pair of resource and action types of the call (the regular expressions and the rule lookup do
    -- not run per event), and the events joined to their pair's topics and properties.
    WITH kinds AS MATERIALIZED (
        SELECT t.rt, t.at, t.topic, t.first, v_defaults || coalesce(c.job_properties, '{}') AS props,
               coalesce(c.key_fields, job_private.default_key_fields()) AS key_fields
        FROM (SELECT k.rt, k.at, rr.topic, min(rr.ord) AS first
              FROM (SELECT DISTINCT e.rt, e.at FROM unnest(v_in) e WHERE e.problem IS NULL) k
              JOIN job.config_routes rr ON k.at ~ rr.action_type AND k.rt ~ rr.resource_type
              GROUP BY k.rt, k.at, rr.topic) t
        LEFT JOIN LATERAL (
            SELECT c.job_properties, c.key_fields FROM job.config_enrich c
            WHERE (c.topic = t.topic OR c.topic IS NULL)
              AND (c.action_type IS NULL OR c.action_type = t.at)
              AND (c.resource_type IS NULL OR c.resource_type = t.rt)
              AND c.job_type IS NULL
            ORDER BY c.topic IS NULL, c.ord
            LIMIT 1) c ON true)
    SELECT array_agg(ROW(e.ord, k.topic, e.rt, e.at, e.url, e.payload, e.ts, e.event_ts, k.props, k.key_fields, 1, NULL)::job_private.draft
                     ORDER BY e.ord, k.first)
    INTO v_drafts
    FROM unnest(v_in) e
    JOIN kinds k ON k.rt = e.rt AND k.at = e.at
    WHERE e.problem IS NULL;

    RETURN QUERY
    SELECT e.ord,
           CASE WHEN e.problem IS NOT NULL THEN 'refused' WHEN j.ids IS NULL THEN 'unrouted' ELSE 'scheduled' END,
           coalesce(j.ids, '{}'), coalesce(j.topics, '{}'),
           CASE WHEN e.problem IS NOT NULL THEN 'SJEVT' END, e.problem
    FROM unnest(v_in) e
    LEFT JOIN (SELECT p.ord, array_agg(p.id ORDER BY p.id) AS ids, array_agg(p.topic ORDER BY p.id) AS topics
               FROM job_private.insert_jobs(coalesce(v_drafts, '{}')) p
               GROUP BY p.ord) j ON j.ord = e.ord
    ORDER BY e.ord;
END
$$;
COMMENT ON FUNCTION job_private.schedule(jsonb) IS
    'Routes, enriches and publishes the events p_events (one event object or an array) in the caller''s transaction: one job per event and topic its routing rules give. Returns one job_private.scheduled per event, in order. An event is refused (SJEVT) when it is no object, lacks resource_type or action_type (non-empty strings), has a resource_url that is no string, a timestamp that is neither epoch milliseconds nor an ISO 8601 date-time, or an unknown field. Raises SLINV when p_events is neither an object nor an array, SJNCF when no configuration was loaded.';

CREATE VIEW api.job_event_results AS
SELECT NULL::integer AS request, NULL::integer AS ord, NULL::text AS status, NULL::bigint[] AS job_ids,
       NULL::text[] AS topics, NULL::text AS sqlstate, NULL::text AS reason, NULL::boolean AS replayed
WHERE false;
COMMENT ON VIEW api.job_event_results IS
    'Always empty: the row type of api.job_event_ingest and api.job_event_ingest_requests. request: the request''s position in the call (1 for api.job_event_ingest); ord: the event''s position in its request, from 1 (NULL for a refused request); status: scheduled, unrouted or refused; job_ids and topics: the jobs it made; sqlstate and reason: why it was refused; replayed: the answer of an earlier request with the same idempotency key.';

CREATE FUNCTION api.job_event_ingest(p_events jsonb)
RETURNS SETOF api.job_event_results
LANGUAGE sql VOLATILE
AS $$
    SELECT 1, s.ord, s.status, s.job_ids, s.topics, s.sqlstate, s.reason, false FROM job_private.schedule(p_events) s;
$$;
COMMENT ON FUNCTION api.job_event_ingest(jsonb) IS
    'Schedules jobs from events, as psql''s counterpart of POST /job-events. p_events (no default): one event {"resource_type": string, "action_type": string, "payload": any JSON, "resource_url": string (optional), "timestamp": epoch milliseconds or ISO 8601 (optional)} or a JSON array of them. Each event is routed (job_scheduler.job_rules: a job per matching topic), enriched (topic rules, then common, then defaults) and published in this transaction (sql/job/02_enrich.sql: precedence; sql/job/02_key.sql: the unique hash''s canonical form, superseding). Returns one row per event: status scheduled (job_ids, topics), unrouted (no rule matched) or refused (sqlstate SJEVT and reason). Publishes kinds scheduled and superseded on channels jobs:{topic}; notifies silo_job. Raises SLINV when p_events is neither an object nor an array, SJNCF when no configuration is loaded; transient errors roll back the whole call.';

CREATE FUNCTION api.job_event_ingest_requests(p_requests jsonb)
RETURNS SETOF api.job_event_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims idempotency_private.claimed[];
    v_res    api.job_event_results[];
BEGIN
    v_claims := idempotency_private.claim_requests(p_requests, 'POST /job-events', 'events', '{object,array}');
    -- The events of the requests to apply, one schedule in request order, renumbered back.
    WITH ev AS (
        SELECT c.request, x.n::integer AS n, x.m, row_number() OVER (ORDER BY c.request, x.n)::integer AS g
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(c.body) = 'object' THEN jsonb_build_array(c.body) ELSE c.body END)
                           WITH ORDINALITY AS x(m, n)
        WHERE c.outcome IN ('fresh', 'new'))
    SELECT array_agg(ROW(ev.request, ev.n, s.status, s.job_ids, s.topics, s.sqlstate, s.reason, false)::api.job_event_results ORDER BY ev.g)
    INTO v_res
    FROM job_private.schedule(coalesce((SELECT jsonb_agg(ev.m ORDER BY ev.g) FROM ev), '[]')) s
    JOIN ev ON ev.g = s.ord;

    IF EXISTS (SELECT FROM unnest(v_claims) AS c WHERE c.outcome IN ('new', 'repeat')) THEN
        v_claims := idempotency_private.record_answers(v_claims, to_jsonb(v_res), 'POST /job-events');
    END IF;

    RETURN QUERY
    SELECT x.* FROM (
        SELECT r.* FROM unnest(v_res) AS r
        UNION ALL
        SELECT c.request, p.ord, p.status, p.job_ids, p.topics, p.sqlstate, p.reason, true
        FROM unnest(v_claims) AS c
        CROSS JOIN LATERAL jsonb_populate_recordset(NULL::api.job_event_results,
            CASE WHEN c.outcome = 'replay' THEN c.answer ELSE v_claims[c.repeats].answer END) AS p
        WHERE c.outcome IN ('replay', 'repeat')
        UNION ALL
        SELECT c.request, NULL, 'refused', NULL, NULL, c.sqlstate, c.reason, false
        FROM unnest(v_claims) AS c
        WHERE c.outcome = 'refused'
    ) x
    ORDER BY x.request, x.ord;
END
$$;
COMMENT ON FUNCTION api.job_event_ingest_requests(jsonb) IS
    'Schedules the events of several requests in one transaction, as HTTP''s POST /job-events does (it joins concurrent requests into one call). p_requests (no default): a JSON array of requests {"events": one event or an array as api.job_event_ingest takes them, "token_id": optional (scopes idempotency keys), "idempotency_key": optional}. A request whose key was used within silo.settings idempotency.window for the same body gets its first answer, marked replayed, and schedules nothing again. Returns api.job_event_results rows by request and ord, as api.job_event_ingest; a request not applied gets one refused row (ord NULL): SLINV, SLIDK (invalid key) or SLIDM (key used for another body). Raises SLINV when p_requests is not a JSON array, SJNCF when no configuration is loaded; transient errors roll back the whole call. Waits for another transaction that claimed one of its keys.';
