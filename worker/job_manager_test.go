package worker

// The job manager end to end, on a database of its own: pools from the configuration, reloaded
// without a restart; a worker killed mid-job (the job is done once, not lost); the HTTP hook
// (placeholders, Idempotency-Key, retries); the cache hook (affected users, children,
// invalidation); a flood of low-priority jobs does not hold up a high-priority one.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func jobsLoad(t *testing.T, pool *pgxpool.Pool, yaml string) {
	t.Helper()
	doc, err := db.ConfigJSON([]byte(yaml))
	require.NoError(t, err)
	_, err = db.New(pool).JobConfigLoad(context.Background(), doc)
	require.NoError(t, err)
}

func jobsIngest(t *testing.T, pool *pgxpool.Pool, events string) []db.APIJobEventResult {
	t.Helper()
	rows, err := db.New(pool).JobEventIngest(context.Background(), json.RawMessage(events))
	require.NoError(t, err)
	return rows
}

func scalar(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&s))
	return s
}

func startJobs(t *testing.T, pool *pgxpool.Pool, cfg JobConfig) *Jobs {
	t.Helper()
	j := NewJobs(pool, cfg)
	j.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, j.Stop(ctx))
	})
	return j
}

func TestJobManagerPoolsReloadAndDispatch(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE public.job_log (id bigint, gen int);
		CREATE FUNCTION public.job_log_hook(p jsonb) RETURNS jsonb LANGUAGE sql AS $$
			INSERT INTO public.job_log VALUES ((p ->> 'id')::bigint, (p ->> 'generation')::int) RETURNING NULL::jsonb $$`)
	require.NoError(t, err)
	cfg := `
job_scheduler:
  job_rules:
    - { action_type: ".", resource_type: "^Post$", topic: "t" }
job_consumers:
  - name: c
    topics: [t]
    hook: 'sql:public.job_log_hook'
    priority_ranges:
      - {range: [0, 9], pool_size: 2}
`
	jobsLoad(t, pool, cfg)
	j := startJobs(t, pool, JobConfig{IdleMax: 50 * time.Millisecond})
	require.Eventually(t, func() bool { return slices.Equal(j.Pools(), []string{"t 0-9 sql:public.job_log_hook x2"}) }, 5*time.Second, 10*time.Millisecond)
	var evs []string
	for i := range 500 {
		evs = append(evs, fmt.Sprintf(`{"resource_type": "Post", "action_type": "Update", "payload": %d}`, i))
	}
	jobsIngest(t, pool, "["+strings.Join(evs, ",")+"]")
	require.Eventually(t, func() bool { return scalar(t, pool, `SELECT count(*)::text FROM public.job_log`) == "500" },
		10*time.Second, 20*time.Millisecond)
	require.Equal(t, "500", scalar(t, pool, `SELECT count(DISTINCT id)::text FROM public.job_log`))
	require.Equal(t, "500 0", scalar(t, pool, `SELECT dispatched || ' ' || pending FROM api.job_stats WHERE topic = 't'`))

	// A new configuration: another pool size and a second range, taken without a restart.
	jobsLoad(t, pool, strings.Replace(cfg, "{range: [0, 9], pool_size: 2}", "{range: [0, 4], pool_size: 3}\n      - {range: [5, 9], pool_size: 1}", 1))
	require.Eventually(t, func() bool {
		p := j.Pools()
		slices.Sort(p)
		return slices.Equal(p, []string{"t 0-4 sql:public.job_log_hook x3", "t 5-9 sql:public.job_log_hook x1"})
	}, 5*time.Second, 10*time.Millisecond)
}

func TestJobManagerWorkerKilledMidJob(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	// The hook waits for the test's signal (a row of job_go), then records the job.
	_, err := pool.Exec(context.Background(), `CREATE TABLE public.job_done (id bigint); CREATE TABLE public.job_go (ok boolean);
		CREATE FUNCTION public.job_slow_hook(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
		BEGIN
			WHILE NOT EXISTS (SELECT FROM public.job_go) LOOP PERFORM pg_sleep(0.02); END LOOP;
			INSERT INTO public.job_done VALUES ((p ->> 'id')::bigint);
			RETURN NULL;
		END $$`)
	require.NoError(t, err)
	jobsLoad(t, pool, `
job_scheduler:
  job_rules: [{ action_type: ".", resource_type: ".", topic: "t" }]
job_consumers:
  - {name: c, topics: [t], hook: 'sql:public.job_slow_hook', priority_ranges: [{range: [0, 9], pool_size: 1}]}
`)
	id := jobsIngest(t, pool, `{"resource_type": "Post", "action_type": "Update", "payload": 1}`)[0].JobIds[0]
	startJobs(t, pool, JobConfig{IdleMax: 50 * time.Millisecond})
	// The worker is inside the hook: kill its backend (as a crash or an OOM kill would).
	require.Eventually(t, func() bool {
		return scalar(t, pool, `SELECT count(*)::text FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'silo jobs' AND query LIKE '%job_dispatch%' AND state = 'active') x`) == "1"
	}, 10*time.Second, 10*time.Millisecond)
	// Nothing of the killed step stayed: the job is pending, its hash unclaimed.
	require.Equal(t, "pending 0", scalar(t, pool, `SELECT j.state || ' ' || (SELECT count(*) FROM job.dedup) FROM job.jobs j WHERE j.id = $1`, id))
	_, err = pool.Exec(context.Background(), `INSERT INTO public.job_go VALUES (true)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return scalar(t, pool, `SELECT state FROM job.jobs WHERE id = $1`, id) == "done" },
		10*time.Second, 20*time.Millisecond)
	require.Equal(t, "1", scalar(t, pool, `SELECT count(*)::text FROM public.job_done`))
	require.Equal(t, "1", scalar(t, pool, `SELECT count(*)::text FROM job.dedup`))
}

func TestJobManagerHTTPHook(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	var mu sync.Mutex
	var calls []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var job struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal(body, &job)
		mu.Lock()
		calls = append(calls, r.URL.RawQuery+" "+r.Header.Get("Idempotency-Key"))
		n := len(calls)
		mu.Unlock()
		switch {
		case strings.Contains(r.URL.RawQuery, "id=flaky") && n == 1:
			w.WriteHeader(503) // the first call fails, the retry succeeds
		case strings.Contains(r.URL.RawQuery, "id=bad"):
			w.WriteHeader(400)
		default:
			_, _ = w.Write([]byte(`{"jobs": [{"topic": "after", "update_fields": {"job_type": "feed"}}]}`))
		}
	}))
	t.Cleanup(hook.Close)
	jobsLoad(t, pool, `
job_scheduler:
  job_rules: [{ action_type: ".", resource_type: ".", topic: "t" }]
defaults:
  job_properties: { retry_limit: 2 }
feed_manager:
  worker_url: '`+hook.URL+`/feed?type={type}&id={id}'
job_consumers:
  - {name: c, topics: [t], hook: http, priority_ranges: [{range: [0, 9], pool_size: 1}]}
`)
	flaky := jobsIngest(t, pool, `{"resource_type": "Post Type", "action_type": "Update", "payload": {"id": "flaky"}}`)[0].JobIds[0]
	startJobs(t, pool, JobConfig{IdleMax: 50 * time.Millisecond})
	// The 503 was a failed attempt: pending again after a back-off of 1 s.
	require.Eventually(t, func() bool { return scalar(t, pool, `SELECT state FROM job.jobs WHERE id = $1`, flaky) == "done" },
		10*time.Second, 20*time.Millisecond)
	hash := scalar(t, pool, `SELECT unique_hash FROM job.jobs WHERE id = $1`, flaky)
	mu.Lock()
	require.Equal(t, []string{"type=Post+Type&id=flaky " + hash, "type=Post+Type&id=flaky " + hash}, calls)
	mu.Unlock()
	require.Equal(t, "1 HTTP 503", scalar(t, pool, `SELECT attempts || ' ' || last_sqlstate FROM job.jobs WHERE id = $1`, flaky))
	// The hook's answer made a job, one generation further.
	require.Equal(t, "after feed 2", scalar(t, pool, `SELECT concat_ws(' ', topic, job_type, generation) FROM job.jobs WHERE parent_id = $1`, flaky))
	bad := jobsIngest(t, pool, `{"resource_type": "Post", "action_type": "Update", "payload": {"id": "bad"}}`)[0].JobIds[0]
	require.Eventually(t, func() bool { return scalar(t, pool, `SELECT state FROM job.jobs WHERE id = $1`, bad) == "failed" },
		10*time.Second, 20*time.Millisecond)
}

func TestJobManagerCacheHook(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	var asked []string
	var mu sync.Mutex
	affected := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RawQuery)
		mu.Unlock()
		_, _ = w.Write([]byte(`["tok-a", {"access_token": "tok-b"}]`))
	}))
	t.Cleanup(affected.Close)
	// The seed's rules, with the affected-users endpoint of the test.
	jobsLoad(t, pool, `
job_scheduler:
  job_rules: [{ action_type: "^Update$", resource_type: "^PostsById$", topic: "pp-cache" }]
topics:
  pp-cache:
    - match: { action_type: "Update", resource_type: "PostsById" }
      key_fields: [payload, job_type]
      job_properties: { superceedable: True, job_type: 'invalidate', priority: 1, due: 0, expires: 5 }
cache_manager:
  ppro_user_id/token_endpoint: '`+affected.URL+`/affected?type={type}&id={id}'
rules:
- match: { action_type: "Update", resource_type: "PostsById", job_type: 'invalidate' }
  jobs:
    - { others_affected: True, entity_type: 'Post', entity_id_offset: 1, params: {type: 'type', id: 'entity'}, topic: 'pp-cache', update_fields: { job_type: 'invalidate', priority: 1 } }
job_consumers:
  - {name: cache, topics: [pp-cache], hook: cache, priority_ranges: [{range: [0, 9], pool_size: 1}]}
`)
	// Cached responses of /posts/42 for two sessions and for everyone.
	_, err := pool.Exec(context.Background(), `SELECT api.cache_config_load('{"GET/posts/{id}": {"defaults": {"action": "cache", "expires": 60000}}}');
		SELECT api.cache_put(k, '/posts/42', s, 200, 'application/json', '\x7b7d', '"e"', 60000, now())
		FROM (VALUES ('k-shared', ''), ('k-a', encode(sha256('tok-a'), 'hex')), ('k-c', encode(sha256('tok-c'), 'hex'))) v(k, s)`)
	require.NoError(t, err)
	parent := jobsIngest(t, pool, `{"resource_type": "PostsById", "action_type": "Update", "payload": {"id": 42}, "resource_url": "/posts/42"}`)[0].JobIds[0]
	startJobs(t, pool, JobConfig{IdleMax: 50 * time.Millisecond})
	ok := assert.Eventually(t, func() bool {
		return scalar(t, pool, `SELECT count(*) FILTER (WHERE state = 'done')::text FROM job.jobs`) == "3"
	}, 10*time.Second, 20*time.Millisecond)
	require.True(t, ok, scalar(t, pool, `SELECT string_agg(concat_ws(' ', id, state, resource_type, generation, payload, last_error), '|') FROM job.jobs`))
	mu.Lock()
	require.Equal(t, []string{"type=Post&id=42"}, asked)
	mu.Unlock()
	// One child per affected user, its payload naming the user's token; the parent's invalidation
	// dropped every entry of the path.
	require.Equal(t, "tok-a 2|tok-b 2", scalar(t, pool, `SELECT string_agg(payload ->> 'access_token' || ' ' || generation, '|' ORDER BY id) FROM job.jobs WHERE parent_id = $1`, parent))
	require.Equal(t, "0", scalar(t, pool, `SELECT count(*)::text FROM cache.entries`))
}

func TestJobManagerPriorityUnderLoad(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), `CREATE FUNCTION public.job_busy(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
		BEGIN IF (p ->> 'priority')::int > 5 THEN PERFORM pg_sleep(0.01); END IF; RETURN NULL; END $$`)
	require.NoError(t, err)
	jobsLoad(t, pool, `
job_scheduler:
  job_rules: [{ action_type: ".", resource_type: ".", topic: "t" }]
topics:
  t:
    - { match: { action_type: "Low" }, key_fields: [payload], job_properties: { priority: 8 } }
    - { match: { action_type: "High" }, key_fields: [payload], job_properties: { priority: 1 } }
job_consumers:
  - {name: c, topics: [t], hook: 'sql:public.job_busy', priority_ranges: [{range: [0, 5], pool_size: 2}, {range: [6, 10], pool_size: 1}]}
`)
	var evs []string
	for i := range 3000 {
		evs = append(evs, fmt.Sprintf(`{"resource_type": "X", "action_type": "Low", "payload": %d}`, i))
	}
	jobsIngest(t, pool, "["+strings.Join(evs, ",")+"]")
	startJobs(t, pool, JobConfig{IdleMax: 20 * time.Millisecond, Batch: 20})
	time.Sleep(200 * time.Millisecond) // the flood is being worked
	high := jobsIngest(t, pool, `{"resource_type": "X", "action_type": "High", "payload": "urgent"}`)[0].JobIds[0]
	require.Eventually(t, func() bool { return scalar(t, pool, `SELECT state FROM job.jobs WHERE id = $1`, high) == "done" },
		5*time.Second, 10*time.Millisecond)
	// The urgent job was done while most of the flood still waited.
	var pending int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM job.jobs WHERE state = 'pending' AND priority = 8`).Scan(&pending))
	require.Greater(t, pending, 1000)
}
