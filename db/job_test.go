package db_test

// Tests of the job service's SQL (sql/job/): the configuration (the seed's example, errors naming
// the key), routing and enrichment precedence, the unique hash, publication, deduplication (its
// three causes), superseding, expiry, due times, priorities, retries, generations, leases and
// idempotent intake. Each test runs in its own rolled-back transaction: a configuration loaded there
// is the test's own. Inside one transaction now() does not move: a job due later is made due by
// moving its due_at back, as time would.

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

type jobEnv struct {
	t   *testing.T
	tx  pgx.Tx
	q   *db.Queries
	ctx context.Context
}

func newJobEnv(t *testing.T) *jobEnv {
	tx := dbtest.Tx(t)
	return &jobEnv{t: t, tx: tx, q: db.New(tx), ctx: context.Background()}
}

// load loads a YAML configuration.
func (e *jobEnv) load(yaml string) {
	e.t.Helper()
	doc, err := db.ConfigJSON([]byte(yaml))
	require.NoError(e.t, err)
	_, err = e.q.JobConfigLoad(e.ctx, doc)
	require.NoError(e.t, err)
}

// loadErr loads a YAML configuration that must be refused, and returns the error's message.
func (e *jobEnv) loadErr(yaml string) string {
	e.t.Helper()
	doc, err := db.ConfigJSON([]byte(yaml))
	require.NoError(e.t, err)
	err = dbtest.Savepoint(e.t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).JobConfigLoad(e.ctx, doc)
		return err
	})
	require.Error(e.t, err)
	require.Contains(e.t, err.Error(), "SJCFG")
	return err.Error()
}

func (e *jobEnv) ingest(events string) []db.APIJobEventResult {
	e.t.Helper()
	rows, err := e.q.JobEventIngest(e.ctx, json.RawMessage(events))
	require.NoError(e.t, err)
	return rows
}

func (e *jobEnv) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.tx.Exec(e.ctx, sql, args...)
	require.NoError(e.t, err)
}

func (e *jobEnv) str(sql string, args ...any) string {
	e.t.Helper()
	var s string
	require.NoError(e.t, e.tx.QueryRow(e.ctx, sql, args...).Scan(&s))
	return s
}

func (e *jobEnv) dispatch(topic string, lo, hi int32) db.APIJobDispatched {
	e.t.Helper()
	r, err := e.q.JobDispatch(e.ctx, db.JobDispatchParams{Topic: topic, Lo: lo, Hi: hi, MaxJobs: 100})
	require.NoError(e.t, err)
	return r
}

func (e *jobEnv) counter(topic, name string) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.tx.QueryRow(e.ctx, `SELECT coalesce(sum(n), 0) FROM job.counters WHERE topic = $1 AND counter = $2`, topic, name).Scan(&n))
	return n
}

// jobBase is a small configuration: topics t1 and t2 with mock hooks, one priority range each.
const jobBase = `
job_scheduler:
  job_rules:
    - { action_type: "^(Create|Update)$", resource_type: "^Post$", topic: "t1" }
    - { action_type: "^Update$", resource_type: "^Post", topic: "t2" }
    - { action_type: ".", resource_type: "^Heartbeat$", topic: "t1" }
topics:
  t1:
    - match: { action_type: "Update", resource_type: "Post" }
      key_fields: [payload, job_type]
      job_properties: { superceedable: True, job_type: 'invalidate', priority: 2, due: 0, expires: 5 }
common:
  - match: { action_type: "Update" }
    key_fields: [payload, topic]
    job_properties: { job_type: 'common', priority: 3 }
defaults:
  job_properties: { job_type: 'dflt', due: 0, expires: 5, priority: 1, superceedable: False, retry_limit: 2 }
deduper:
  unique_id_expiry: 60000
job_consumers:
  - name: mock
    topics: [t1, t2]
    hook: mock
    priority_ranges:
      - {range: [0, 5], pool_size: 2}
      - {range: [6, 10], pool_size: 1}
`

func TestJobConfigSeedExample(t *testing.T) {
	e := newJobEnv(t)
	raw, err := os.ReadFile("testdata/job_seed_config.yaml")
	require.NoError(t, err)
	doc, err := db.ConfigJSON(raw)
	require.NoError(t, err)
	v, err := e.q.JobConfigLoad(e.ctx, doc)
	require.NoError(t, err)
	require.GreaterOrEqual(t, v, int32(1))
	require.Equal(t, "1 pp-cache ^(Create|Update|Delete)$ PostsById", e.str(`SELECT string_agg(concat_ws(' ', ord, topic, action_type, resource_type), '|') FROM job.config_routes`))
	require.Equal(t, "pp-cache Update PostsById {payload,expires,due,priority,job_type}|- Read Heartbeat {timestamp,job_type}",
		e.str(`SELECT string_agg(concat_ws(' ', coalesce(topic, '-'), action_type, resource_type, key_fields::text), '|' ORDER BY ord) FROM job.config_enrich`))
	require.Equal(t, "60000 3 http://localhost:8000?type={type}&id={id}", e.str(`SELECT concat_ws(' ', unique_id_expiry, generations_limit, feed_worker_url) FROM job.config`))
	require.Equal(t, `{"due": 0, "expires": 5, "job_type": "invalidate", "priority": 1, "retry_limit": 3, "superceedable": false}`, e.str(`SELECT defaults::text FROM job.config`))
	require.Equal(t, "pp-mock 0-5 mock x5|pp-mock 6-10 mock x2|pp-mock 11-15 mock x1",
		e.str(`SELECT string_agg(format('%s %s-%s %s x%s', topic, lo, hi, hook, pool_size), '|' ORDER BY lo) FROM api.job_pools`))
	require.Equal(t, "2", e.str(`SELECT count(*)::text FROM job.config_generations`))

	// As written: an Update of PostsById makes a superceedable invalidate job on pp-cache, due now,
	// expiring in 5 minutes; a Create is routed too and takes the defaults.
	rows := e.ingest(`[{"resource_type": "PostsById", "action_type": "Update", "payload": {"id": 7}, "resource_url": "/posts/7"},
	                   {"resource_type": "PostsById", "action_type": "Create", "payload": {"id": 8}}]`)
	require.Equal(t, "scheduled", *rows[0].Status)
	require.Equal(t, []string{"pp-cache"}, rows[0].Topics)
	require.Equal(t, "invalidate true 1 5 min 0 min 3", e.str(`
		SELECT concat_ws(' ', job_type, superceedable::text, priority, round(extract(epoch FROM expires_at - created_at) / 60) || ' min',
		                 round(extract(epoch FROM due_at - created_at) / 60) || ' min', retry_limit)
		FROM job.jobs WHERE id = $1`, rows[0].JobIds[0]))
	require.Equal(t, "invalidate false 1", e.str(`SELECT concat_ws(' ', job_type, superceedable::text, priority) FROM job.jobs WHERE id = $1`, rows[1].JobIds[0]))
}

func TestJobConfigErrorsNameTheKey(t *testing.T) {
	e := newJobEnv(t)
	for _, c := range []struct{ yaml, key string }{
		{"bogus: 1", "bogus: unknown section"},
		{"job_scheduler: {job_rules: [{action_type: '(', resource_type: 'x', topic: t}]}", "job_scheduler.job_rules[1].action_type: invalid regular expression"},
		{"job_scheduler: {job_rules: [{action_type: 'a', resource_type: 'x'}]}", "job_scheduler.job_rules[1].topic: is required"},
		{"topics: {t: [{match: {action_type: A}, key_fields: [nope], job_properties: {}}]}", "topics.t[1].key_fields: unknown job field nope"},
		{"topics: {t: [{match: {action_type: A}, key_fields: [payload], job_properties: {priority: 'high'}}]}", "topics.t[1].job_properties.priority"},
		{"common: [{match: {colour: red}, key_fields: [payload]}]", "common[1].match.colour: unknown field"},
		{"defaults: {job_properties: {expires: -1}}", "defaults.job_properties.expires"},
		{"deduper: {unique_id_expiry: soon}", "deduper.unique_id_expiry"},
		{"job_publisher: {generations_limit: -2}", "job_publisher.generations_limit"},
		{"feed_manager: {worker_url: 'ftp://x'}", "feed_manager.worker_url"},
		{"rules: [{match: {action_type: A}, jobs: [{others_affected: True, topic: c}]}]", "rules[1].jobs[1]: others_affected needs params"},
		{"job_consumers: [{name: c, topics: [t], hook: mock, priority_ranges: [{range: [0, 5], pool_size: 0}]}]", "job_consumers[1].priority_ranges[1].pool_size"},
		{"job_consumers: [{name: c, topics: [t], hook: mock, priority_ranges: [{range: [0, 5], pool_size: 1}, {range: [5, 9], pool_size: 1}]}]", "job_consumers[1].priority_ranges[2].range: overlaps"},
		{"job_consumers: [{name: c, topics: [t], hook: 'sql:public.no_such_hook', priority_ranges: [{range: [0, 5], pool_size: 1}]}]", "job_consumers[1].hook: no SQL function"},
	} {
		require.Contains(t, e.loadErr(c.yaml), c.key, c.yaml)
	}
}

func TestJobRoutingAndEnrichmentPrecedence(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	rows := e.ingest(`[{"resource_type": "Post", "action_type": "Update", "payload": 1},
	                   {"resource_type": "Post", "action_type": "Create", "payload": 2},
	                   {"resource_type": "Postcard", "action_type": "Update", "payload": 3},
	                   {"resource_type": "Heartbeat", "action_type": "Read", "payload": 4},
	                   {"resource_type": "Comment", "action_type": "Update"},
	                   {"resource_type": "Post", "action_type": ""},
	                   {"resource_type": "Post", "action_type": "Update", "colour": "red"},
	                   {"resource_type": "Post", "action_type": "Update", "timestamp": "yesterday"}]`)
	got := make([]string, len(rows))
	for i, r := range rows {
		got[i] = *r.Status + " " + strings.Join(r.Topics, ",")
	}
	// An event makes a job on each topic its rules give, each topic once.
	require.Equal(t, []string{"scheduled t1,t2", "scheduled t1", "scheduled t2", "scheduled t1", "unrouted ", "refused ", "refused ", "refused "}, got)
	require.Contains(t, *rows[6].Reason, "unknown field colour")
	require.Contains(t, *rows[7].Reason, "timestamp")
	// Precedence: the topic's rule (t1 Update Post), else the first common rule that matches
	// (Update on t2), else the defaults.
	job := func(id int64) string {
		return e.str(`SELECT concat_ws(' ', job_type, priority, superceedable::text, retry_limit) FROM job.jobs WHERE id = $1`, id)
	}
	require.Equal(t, "invalidate 2 true 2", job(rows[0].JobIds[0]))
	require.Equal(t, "common 3 false 2", job(rows[0].JobIds[1]))
	require.Equal(t, "dflt 1 false 2", job(rows[1].JobIds[0]))
	require.Equal(t, "common 3 false 2", job(rows[2].JobIds[0]))
	require.Equal(t, "dflt 1 false 2", job(rows[3].JobIds[0]))
	require.Equal(t, int64(5), e.counter("t1", "scheduled")+e.counter("t2", "scheduled"))
}

func TestJobUniqueHashIsStable(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	// The same fields in another order and spacing give the same hash; so does api.job_unique_hash
	// over the documented form; a key field changed changes it, a field outside the key does not.
	rows := e.ingest(`[{"resource_type": "Post", "action_type": "Update", "payload": {"a": 1, "b": [1, 2]}, "resource_url": "/p/1"},
	                   {"payload": {"b": [1,2],   "a": 1}, "action_type": "Update", "resource_type": "Post", "resource_url": "/p/2"},
	                   {"resource_type": "Post", "action_type": "Update", "payload": {"a": 2, "b": [1, 2]}}]`)
	h := func(id int64) string { return e.str(`SELECT unique_hash FROM job.jobs WHERE id = $1`, id) }
	require.Equal(t, h(rows[0].JobIds[0]), h(rows[1].JobIds[0]))
	require.NotEqual(t, h(rows[0].JobIds[0]), h(rows[2].JobIds[0]))
	require.Equal(t, h(rows[0].JobIds[0]), e.str(`SELECT api.job_unique_hash('{"job_type": "invalidate", "payload": {"b": [1, 2], "a": 1}}', '{payload,job_type}')`))
	require.Equal(t, h(rows[0].JobIds[0]),
		e.str(`SELECT encode(sha256(convert_to('{"payload": {"a": 1, "b": [1, 2]}, "job_type": "invalidate"}', 'UTF8')), 'hex')`))

	// The scheduler writes the canonical text out field by field: it is jsonb's text of the object,
	// for every key list and for values that need escaping, nulls, numbers as written.
	require.Equal(t, "0", e.str(`
		WITH jobs (topic, props, rt, at, url, payload, ts, gen) AS (VALUES
			('t"1', '{"due": 0, "expires": 5.0, "job_type": "a\\b", "priority": 1, "retry_limit": 3, "superceedable": true}'::jsonb,
			 'Post', 'Up"date', '/p/é?x=1&y="2"', '{"b": [1, 2.50, null], "a": "\u0001 tab\t"}'::jsonb, '"2024-01-01T00:00:00Z"'::jsonb, 2),
			('t', '{"due": 1, "expires": 5, "job_type": "x", "priority": 3, "retry_limit": 0, "superceedable": false}', 'R', 'A', NULL, NULL, NULL, 1),
			('t', '{"due": 1, "expires": 5, "job_type": "x", "priority": 3, "retry_limit": 0, "superceedable": false}', 'R', 'A', '', '"s"', '1700000000000', 1)),
		lists (k) AS (SELECT job_private.job_fields() UNION ALL SELECT ARRAY[f] FROM unnest(job_private.job_fields()) f
		              UNION ALL VALUES ('{payload,job_type}'::text[]), ('{timestamp,job_type,payload,payload}'), ('{generation,resource_url,due}'))
		SELECT count(*)::text FROM jobs j CROSS JOIN lists l
		WHERE job_private.key_text(job_private.key_flags(l.k), j.topic, j.props, j.rt, j.at, j.url, j.payload, j.ts, j.gen)
		      IS DISTINCT FROM (SELECT jsonb_object_agg(f, coalesce(d -> f, 'null'))::text
		                        FROM (SELECT j.props || jsonb_build_object('topic', j.topic, 'resource_type', j.rt, 'action_type', j.at,
		                                     'resource_url', j.url, 'payload', j.payload, 'timestamp', j.ts, 'generation', j.gen) AS d) x,
		                             unnest(l.k) f)`))
	// So is the text of a work key, jsonb's text of its array.
	require.Equal(t, "0", e.str(`
		SELECT count(*)::text FROM (VALUES ('t"1', 'a\\b', 'Post', '/p/é?x="2"', 'tok\t'), ('t', 'x', 'R', NULL, NULL)) AS w (a, b, c, d, e)
		WHERE job_private.work_text(w.a, w.b, w.c, w.d, w.e) IS DISTINCT FROM jsonb_build_array(w.a, w.b, w.c, w.d, w.e)::text`))
}

func TestJobDeduplicationCauses(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	ev := `{"resource_type": "Post", "action_type": "Create", "payload": {"id": 1}}`
	// A publisher that repeats a job: the second copy, dispatched after the first, is a duplicate.
	first := e.ingest(ev)[0].JobIds[0]
	require.Equal(t, int32(1), *e.dispatch("t1", 0, 5).Done)
	second := e.ingest(ev)[0].JobIds[0]
	r := e.dispatch("t1", 0, 5)
	require.Equal(t, int32(0), *r.Done)
	require.Equal(t, int32(1), *r.ExpiredOrDuplicate)
	require.Equal(t, "done deduplicated", e.str(`SELECT string_agg(state, ' ' ORDER BY id) FROM job.jobs WHERE id IN ($1, $2)`, first, second))

	// Identical events in one call (and one step): one is dispatched.
	rows := e.ingest(`[{"resource_type": "Post", "action_type": "Create", "payload": {"id": 2}},
	                   {"resource_type": "Post", "action_type": "Create", "payload": {"id": 2}}]`)
	r = e.dispatch("t1", 0, 5)
	require.Equal(t, int32(1), *r.Done)
	require.Equal(t, int32(1), *r.ExpiredOrDuplicate)
	require.Equal(t, "done deduplicated", e.str(`SELECT string_agg(state, ' ' ORDER BY id) FROM job.jobs WHERE id IN ($1, $2)`, rows[0].JobIds[0], rows[1].JobIds[0]))
	require.Equal(t, int64(2), e.counter("t1", "deduplicated"))

	// A consumer that crashes mid-step: its transaction ends without commit, so neither the claim
	// nor the completion stays; the job is dispatched by the next step, not dropped as a duplicate.
	crashed := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": {"id": 3}}`)[0].JobIds[0]
	err := dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		r, err := db.New(tx).JobDispatch(e.ctx, db.JobDispatchParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 100})
		require.NoError(t, err)
		require.Equal(t, int32(1), *r.Done)
		_, err = tx.Exec(e.ctx, `SELECT 1/0`) // the worker dies before its commit
		return err
	})
	require.Error(t, err)
	require.Equal(t, "pending 0", e.str(`SELECT j.state || ' ' || (SELECT count(*) FROM job.dedup d WHERE d.job_id = j.id) FROM job.jobs j WHERE j.id = $1`, crashed))
	require.Equal(t, int32(1), *e.dispatch("t1", 0, 5).Done)
	require.Equal(t, "done", e.str(`SELECT state FROM job.jobs WHERE id = $1`, crashed))

	// A claim lasts unique_id_expiry ms: once it ended, the same job runs again.
	e.exec(`UPDATE job.dedup SET expires_at = now() - interval '1 ms'`)
	again := e.ingest(ev)[0].JobIds[0]
	require.Equal(t, int32(1), *e.dispatch("t1", 0, 5).Done)
	require.Equal(t, "done", e.str(`SELECT state FROM job.jobs WHERE id = $1`, again))
}

func TestJobSupersede(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	// The same work (topic, job_type, resource_type, resource_url): the newer superceedable job
	// replaces the pending older one; another resource url is other work.
	a := e.ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 1}, "resource_url": "/posts/1"}`)[0].JobIds[0]
	b := e.ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 2}, "resource_url": "/posts/1"}`)[0].JobIds[0]
	c := e.ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 3}, "resource_url": "/posts/2"}`)[0].JobIds[0]
	require.Equal(t, "superseded "+itoa(b)+"|pending |pending ", e.str(`
		SELECT string_agg(state || ' ' || coalesce(superseded_by::text, ''), '|' ORDER BY id) FROM job.jobs WHERE id IN ($1, $2, $3)`, a, b, c))
	require.Equal(t, int64(1), e.counter("t1", "superseded"))
	// A done job is not replaced; a job that is not superceedable (t2's common rule) is not either.
	e.dispatch("t1", 0, 5)
	d := e.ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 4}, "resource_url": "/posts/1"}`)[0]
	require.Equal(t, "done", e.str(`SELECT state FROM job.jobs WHERE id = $1`, b))
	require.Equal(t, "pending", e.str(`SELECT state FROM job.jobs WHERE id = $1`, d.JobIds[1]))
	e.ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 5}, "resource_url": "/posts/1"}`)
	require.Equal(t, "pending", e.str(`SELECT state FROM job.jobs WHERE id = $1`, d.JobIds[1]))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func jsonNum(n int64) string { return strconv.FormatInt(n, 10) }

func TestJobExpiryAndDue(t *testing.T) {
	e := newJobEnv(t)
	e.load(strings.Replace(jobBase, "defaults:\n  job_properties: { job_type: 'dflt', due: 0, expires: 5,",
		"defaults:\n  job_properties: { job_type: 'dflt', due: 0, expires: 0,", 1))
	// expires 0: expired at publication, dropped before dispatch and recorded as expired.
	x := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": 1}`)[0].JobIds[0]
	r := e.dispatch("t1", 0, 5)
	require.Equal(t, int32(1), *r.ExpiredOrDuplicate)
	require.Equal(t, "expired", e.str(`SELECT state FROM job.jobs WHERE id = $1`, x))
	require.Equal(t, int64(1), e.counter("t1", "expired"))

	e.load(strings.Replace(jobBase, "defaults:\n  job_properties: { job_type: 'dflt', due: 0,", "defaults:\n  job_properties: { job_type: 'dflt', due: 2,", 1))
	// due 2: not dispatched before two minutes have passed.
	y := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": 2}`)[0].JobIds[0]
	require.Equal(t, "120", e.str(`SELECT extract(epoch FROM due_at - created_at)::int::text FROM job.jobs WHERE id = $1`, y))
	require.Equal(t, int32(0), *e.dispatch("t1", 0, 5).Taken)
	e.exec(`UPDATE job.jobs SET due_at = now() WHERE id = $1`, y) // two minutes later
	require.Equal(t, int32(1), *e.dispatch("t1", 0, 5).Done)
}

func TestJobPriorityRanges(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase + `
  - name: prio
    topics: [p]
    hook: mock
    priority_ranges:
      - {range: [0, 5], pool_size: 3}
      - {range: [6, 10], pool_size: 1}
`)
	e.exec(`INSERT INTO job.config_routes VALUES (10, '.', '^Prio$', 'p')`)
	e.exec(`INSERT INTO job.config_enrich (ord, topic, action_type, resource_type, key_fields, job_properties)
	        VALUES (10, 'p', 'Low', NULL, '{payload}', '{"priority": 8}'), (11, 'p', 'High', NULL, '{payload}', '{"priority": 1}'),
	               (12, 'p', 'Mid', NULL, '{payload}', '{"priority": 4}')`)
	// A flood of low-priority jobs, then two urgent ones: the range 0-5 pool takes only its own,
	// most urgent first, whatever waits in the other range.
	var evs []string
	for i := range 300 {
		evs = append(evs, `{"resource_type": "Prio", "action_type": "Low", "payload": `+jsonNum(int64(i))+`}`)
	}
	e.ingest("[" + strings.Join(evs, ",") + "]")
	hi := e.ingest(`[{"resource_type": "Prio", "action_type": "Mid", "payload": "m"}, {"resource_type": "Prio", "action_type": "High", "payload": "h"}]`)
	r, err := e.q.JobDispatch(e.ctx, db.JobDispatchParams{Topic: "p", Lo: 0, Hi: 5, MaxJobs: 1})
	require.NoError(t, err)
	require.Equal(t, int32(1), *r.Done)
	require.Equal(t, "done", e.str(`SELECT state FROM job.jobs WHERE id = $1`, hi[1].JobIds[0]))
	require.Equal(t, int32(1), *e.dispatch("p", 0, 5).Done)
	require.Equal(t, "done", e.str(`SELECT state FROM job.jobs WHERE id = $1`, hi[0].JobIds[0]))
	require.Equal(t, int32(100), *e.dispatch("p", 6, 10).Done)
	require.Equal(t, "200", e.str(`SELECT count(*)::text FROM job.jobs WHERE topic = 'p' AND state = 'pending'`))
}

func TestJobRetriesAndFailures(t *testing.T) {
	e := newJobEnv(t)
	e.exec(`CREATE FUNCTION public.job_test_hook(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		IF p -> 'payload' ->> 'fail' = 'always' THEN RAISE EXCEPTION 'hook failed' USING ERRCODE = 'P0001'; END IF;
		IF p -> 'payload' ->> 'fail' = 'deadlock' THEN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END IF;
		INSERT INTO job_test_log VALUES (p ->> 'id');
		RETURN NULL;
	END $$`)
	e.exec(`CREATE TABLE public.job_test_log (id text)`)
	e.load(strings.Replace(jobBase, "hook: mock", "hook: 'sql:public.job_test_hook'", 1))
	rows := e.ingest(`[{"resource_type": "Post", "action_type": "Create", "payload": {"fail": "always"}},
	                   {"resource_type": "Post", "action_type": "Create", "payload": {"fail": "deadlock"}},
	                   {"resource_type": "Post", "action_type": "Create", "payload": {"ok": 1}}]`)
	bad, dead, ok := rows[0].JobIds[0], rows[1].JobIds[0], rows[2].JobIds[0]
	r := e.dispatch("t1", 0, 5)
	// One failing job costs the others nothing: the step is redone job by job.
	require.Equal(t, int32(1), *r.Done)
	require.Equal(t, int32(2), *r.Retried)
	require.Equal(t, itoa(ok), e.str(`SELECT string_agg(id, ',') FROM job_test_log`))
	require.Equal(t, "pending 1 hook failed P0001 1", e.str(`
		SELECT concat_ws(' ', state, attempts, last_error, last_sqlstate, extract(epoch FROM due_at - now())::int) FROM job.jobs WHERE id = $1`, bad))
	// A transient error uses no attempt.
	require.Equal(t, "pending 0 40P01", e.str(`SELECT concat_ws(' ', state, attempts, last_sqlstate) FROM job.jobs WHERE id = $1`, dead))
	// Back-off doubles; after retry_limit (2) retries the job fails, with its error kept.
	e.exec(`UPDATE job.jobs SET due_at = now() WHERE id = $1`, bad)
	e.dispatch("t1", 0, 5)
	require.Equal(t, "pending 2 2", e.str(`SELECT concat_ws(' ', state, attempts, extract(epoch FROM due_at - now())::int) FROM job.jobs WHERE id = $1`, bad))
	e.exec(`UPDATE job.jobs SET due_at = now() WHERE id = $1`, bad)
	e.dispatch("t1", 0, 5)
	require.Equal(t, "failed 3 hook failed", e.str(`SELECT concat_ws(' ', state, attempts, last_error) FROM job.jobs WHERE id = $1`, bad))
	require.Equal(t, int64(1), e.counter("t1", "failed"))
	require.Equal(t, int64(3), e.counter("t1", "retried"))
	require.Equal(t, "0", e.str(`SELECT count(*)::text FROM job.dedup WHERE job_id = $1`, bad))
}

func TestJobGenerations(t *testing.T) {
	e := newJobEnv(t)
	// The hook makes one child per job, on the same topic, with update_fields over the parent's.
	e.exec(`CREATE FUNCTION public.job_test_spawn(p jsonb) RETURNS jsonb LANGUAGE sql AS $$
		SELECT jsonb_build_array(jsonb_build_object('topic', 't1', 'update_fields', jsonb_build_object('priority', (p ->> 'generation')::int + 1)))
	$$`)
	e.load(strings.Replace(strings.Replace(jobBase, "hook: mock", "hook: 'sql:public.job_test_spawn'", 1), "deduper:", "job_publisher:\n  generations_limit: 3\ndeduper:", 1))
	root := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": {"id": 1}}`)[0].JobIds[0]
	for range 4 {
		e.dispatch("t1", 0, 5)
	}
	// Generations 1, 2, 3 ran; the fourth was discarded and counted.
	require.Equal(t, "1 done 1|2 done 2|3 done 3", e.str(`
		WITH RECURSIVE g AS (SELECT * FROM job.jobs WHERE id = $1 UNION ALL SELECT j.* FROM job.jobs j JOIN g ON j.parent_id = g.id)
		SELECT string_agg(concat_ws(' ', generation, state, priority), '|' ORDER BY generation) FROM g`, root))
	require.Equal(t, int64(1), e.counter("t1", "discarded_generation"))
	// A child inherits its parent's attributes (payload, resource type, job_type).
	require.Equal(t, `{"id": 1} Post dflt`, e.str(`SELECT concat_ws(' ', payload::text, resource_type, job_type) FROM job.jobs WHERE parent_id = $1`, root))
}

func TestJobLeasesForOutsideHooks(t *testing.T) {
	e := newJobEnv(t)
	e.load(strings.Replace(jobBase, "hook: mock", "hook: http", 1) + "feed_manager:\n  worker_url: 'http://hooks.example/feed?type={type}&id={id}'\n")
	id := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": {"id": 42}, "resource_url": "/posts/42"}`)[0].JobIds[0]
	taken, err := e.q.JobTake(e.ctx, db.JobTakeParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 10, LeaseSeconds: 60})
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, "Post 42 http://hooks.example/feed?type={type}&id={id}", *taken[0].ResourceType+" "+*taken[0].ResourceID+" "+*taken[0].URL)
	require.Equal(t, e.str(`SELECT unique_hash FROM job.jobs WHERE id = $1`, id), *taken[0].UniqueHash)
	// Leased: no other worker takes it until the lease passes (its worker died).
	again, err := e.q.JobTake(e.ctx, db.JobTakeParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 10, LeaseSeconds: 60})
	require.NoError(t, err)
	require.Empty(t, again)
	e.exec(`UPDATE job.jobs SET leased_until = now() - interval '1 s' WHERE id = $1`, id)
	again, err = e.q.JobTake(e.ctx, db.JobTakeParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 10, LeaseSeconds: 60})
	require.NoError(t, err)
	require.Len(t, again, 1)
	res, err := e.q.JobFinish(e.ctx, json.RawMessage(`[{"id": `+itoa(id)+`, "outcome": "ok"}]`))
	require.NoError(t, err)
	require.Equal(t, int32(1), *res.Done)
	require.Equal(t, "done 1", e.str(`SELECT j.state || ' ' || (SELECT count(*) FROM job.dedup d WHERE d.job_id = j.id) FROM job.jobs j WHERE j.id = $1`, id))
	// A late result for a job that is no longer running is ignored.
	res, err = e.q.JobFinish(e.ctx, json.RawMessage(`[{"id": `+itoa(id)+`, "outcome": "error", "error": "late"}]`))
	require.NoError(t, err)
	require.Equal(t, int32(0), *res.Failed+*res.Retried)
	// A permanent HTTP failure fails at once.
	id2 := e.ingest(`{"resource_type": "Post", "action_type": "Create", "payload": {"id": 43}}`)[0].JobIds[0]
	_, err = e.q.JobTake(e.ctx, db.JobTakeParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 10, LeaseSeconds: 60})
	require.NoError(t, err)
	_, err = e.q.JobFinish(e.ctx, json.RawMessage(`[{"id": `+itoa(id2)+`, "outcome": "fail", "error": "hook answered 400", "sqlstate": "HTTP 400"}]`))
	require.NoError(t, err)
	require.Equal(t, "failed HTTP 400", e.str(`SELECT state || ' ' || last_sqlstate FROM job.jobs WHERE id = $1`, id2))
	// A database hook's pool refuses api.job_take's use and the reverse.
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).JobDispatch(e.ctx, db.JobDispatchParams{Topic: "t1", Lo: 0, Hi: 5, MaxJobs: 10})
		return err
	})
	require.ErrorContains(t, err, "SLINV")
}

func TestJobEventRequestsIdempotency(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	req := `[{"events": {"resource_type": "Post", "action_type": "Create", "payload": 1}, "idempotency_key": "k-1"}]`
	first, err := e.q.JobEventIngestRequests(e.ctx, json.RawMessage(req))
	require.NoError(t, err)
	again, err := e.q.JobEventIngestRequests(e.ctx, json.RawMessage(req))
	require.NoError(t, err)
	require.Equal(t, first[0].JobIds, again[0].JobIds)
	require.True(t, *again[0].Replayed)
	require.Equal(t, "1", e.str(`SELECT count(*)::text FROM job.jobs`))
	other, err := e.q.JobEventIngestRequests(e.ctx, json.RawMessage(`[{"events": {"resource_type": "Post", "action_type": "Create", "payload": 2}, "idempotency_key": "k-1"}]`))
	require.NoError(t, err)
	require.Equal(t, "refused SLIDM", *other[0].Status+" "+*other[0].SQLState)
}

func TestJobSourcesProfileUpdates(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase + `
sources:
  profile_updates: True
`)
	e.exec(`INSERT INTO job.config_routes VALUES (20, '^(Update|Delete)$', '^Profile$', 'profiles')`)
	_, err := db.New(e.tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{
		Updates: json.RawMessage(`[{"_id": "c1", "_path": ["a"], "_value": {"_v": "1"}}, {"_id": "c1", "_path": ["b"], "_value": {"_v": "2"}}, {"_id": "c2", "_path": ["a"], "_value": {"_v": "3"}}]`)})
	require.NoError(t, err)
	require.Equal(t, "", e.str(`SELECT coalesce(string_agg(reason, '|'), '') FROM profile.dead_letters`))
	// One event per profile the write touched, routed as any event.
	require.Equal(t, "Update /profiles/_d/c1|Update /profiles/_d/c2", e.str(`SELECT string_agg(action_type || ' ' || resource_url, '|' ORDER BY resource_url) FROM job.jobs WHERE topic = 'profiles'`))
	// Off: nothing more.
	e.load(jobBase + "sources:\n  profile_updates: False\n")
	e.exec(`INSERT INTO job.config_routes VALUES (20, '^(Update|Delete)$', '^Profile$', 'profiles')`)
	_, err = db.New(e.tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[{"_id": "c3", "_path": ["a"], "_value": {"_v": "1"}}]`)})
	require.NoError(t, err)
	require.Equal(t, "2", e.str(`SELECT count(*)::text FROM job.jobs WHERE topic = 'profiles'`))
	require.Contains(t, e.loadErr("sources: {series: True}"), "sources.series: unknown source")
}

func TestJobStateChangesArePublished(t *testing.T) {
	e := newJobEnv(t)
	e.load(jobBase)
	rows := e.ingest(`[{"resource_type": "Post", "action_type": "Create", "payload": 1, "resource_url": "/posts/1"},
	                   {"resource_type": "Post", "action_type": "Create", "payload": 1, "resource_url": "/posts/1"}]`)
	e.dispatch("t1", 0, 5)
	// One change per topic, kind and statement, ids only, admins only (readers {}).
	require.Equal(t, "jobs:config loaded {}|jobs:t1 deduplicated ["+itoa(rows[1].JobIds[0])+"] {}|jobs:t1 done ["+itoa(rows[0].JobIds[0])+"] {}|jobs:t1 scheduled ["+itoa(rows[0].JobIds[0])+", "+itoa(rows[1].JobIds[0])+"] {}",
		e.str(`SELECT string_agg(concat_ws(' ', channel, kind, payload -> 'ids', readers::text), '|' ORDER BY channel, kind) FROM change_private.outbox WHERE channel LIKE 'jobs:%'`))
}

func TestJobSourcesSeriesWritesAndPurgeReports(t *testing.T) {
	b := accountSetup(t)
	b.tree(t)
	holder := b.seriesHolder(t, "position/wgs84")
	e := &jobEnv{t: t, tx: b.tx, q: b.q, ctx: b.ctx}
	routes := `INSERT INTO job.config_routes VALUES (20, '^Append$', '^Series$', 'series'), (21, '.', '^PurgeReport$', 'purge')`
	e.load(jobBase + "sources:\n  series_writes: True\n  purge_reports: True\n")
	e.exec(routes)
	jobs := func(topic string) string {
		return e.str(`SELECT coalesce(string_agg(concat_ws(' ', action_type, resource_url, payload ->> 'unit_of_works_deleted'), '|' ORDER BY id), '')
		              FROM job.jobs WHERE topic = $1`, topic)
	}

	// A series write: one event per series it wrote, whether its pending metadata update is new or
	// merged into one waiting.
	points := `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2], [1, 2, 3]]}`
	require.NoError(t, b.seriesAppend(t, b.personal, holder, points))
	require.NoError(t, b.seriesAppend(t, b.personal, holder, strings.ReplaceAll(points, "[0, 1, 2]", "[5, 1, 2]")))
	url := "/alice/events/" + holder + "/series"
	require.Equal(t, "Append "+url+"|Append "+url, jobs("series"))
	require.Equal(t, `{"event_id": "`+holder+`", "username": "alice"}`,
		e.str(`SELECT (payload - 'data_min' - 'data_max')::text FROM job.jobs WHERE topic = 'series' LIMIT 1`))

	// A purge: the report started, advanced by each batch that deleted something, finished.
	setPurgeConfig(t, b.tx, `{"fetch-size": 2, "parallelism": 1}`)
	for i := range 3 {
		seedUnitOfWork(t, b.tx, "old-"+itoa(int64(i)), "", "2021-01-01T00:00:00Z", "2021-01-02T00:00:00Z", "")
	}
	for _, d := range []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second} {
		_, err := b.q.PurgeBatch(b.ctx, db.PurgeBatchParams{Now: seedDay.Add(d), BatchLimit: 2})
		require.NoError(t, err)
	}
	r := "/purge/reports/2023-05-17"
	require.Equal(t, "Start "+r+" 0|Progress "+r+" 2|Progress "+r+" 3|Finish "+r+" 3", jobs("purge"))

	// Off: nothing more.
	e.load(jobBase)
	e.exec(routes)
	require.NoError(t, b.seriesAppend(t, b.personal, holder, strings.ReplaceAll(points, "[0, 1, 2]", "[9, 1, 2]")))
	_, err := b.q.PurgeBatch(b.ctx, db.PurgeBatchParams{Now: seedDay.Add(24 * time.Hour), BatchLimit: 2})
	require.NoError(t, err)
	require.Equal(t, "2 4", e.str(`SELECT (SELECT count(*) FROM job.jobs WHERE topic = 'series') || ' ' || (SELECT count(*) FROM job.jobs WHERE topic = 'purge')`))
}
