package server_test

// The job service over HTTP: POST /job-events (tokens that may write; one or many events; the
// Idempotency-Key), GET /jobs, /jobs/{id}, /jobs/stats (admin tokens), the statuses of refused
// input, the counters on /metrics. The rules are tested in SQL (db/job_test.go).

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
	"github.com/silo-db/silo/worker"
)

func TestJobAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, a := "Bearer "+b.writer, "Bearer "+b.admin
	ev := `{"resource_type": "Post", "action_type": "Update", "payload": {"id": 1}, "resource_url": "/posts/1"}`

	// Before any configuration: 409.
	status, body := b.do(t, "POST", "/job-events", w, ev)
	require.Equal(t, 409, status)
	require.Equal(t, "job-service-not-configured", errID(body))

	_, err := b.pool.Exec(context.Background(), `SELECT api.job_config_load('{
		"job_scheduler": {"job_rules": [{"action_type": "^Update$", "resource_type": "^Post$", "topic": "cache"}]},
		"job_consumers": [{"name": "c", "topics": ["cache"], "hook": "mock", "priority_ranges": [{"range": [0, 9], "pool_size": 1}]}]}')`)
	require.NoError(t, err)

	// Reading tokens may not post; admins only read jobs.
	status, _ = b.do(t, "POST", "/job-events", "Bearer "+b.reader, ev)
	require.Equal(t, 403, status)
	status, _ = b.do(t, "GET", "/jobs", w, "")
	require.Equal(t, 403, status)

	req := func(body, key string) (int, string, http.Header) {
		t.Helper()
		r, err := http.NewRequest("POST", b.srv.URL+"/job-events", strings.NewReader(body))
		require.NoError(t, err)
		r.Header.Set("Authorization", w)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw), resp.Header
	}
	code, out, _ := req(ev, "")
	require.Equal(t, 200, code, out)
	require.Contains(t, out, `"status":"scheduled"`)
	code, out, _ = req(`[`+ev+`, {"resource_type": "Post"}, {"resource_type": "Comment", "action_type": "Update"}]`, "")
	require.Equal(t, 207, code, out)
	require.Contains(t, out, `"status":"refused"`)
	require.Contains(t, out, `action_type is required`)
	require.Contains(t, out, `"status":"unrouted"`)
	code, _, _ = req(`[{"resource_type": "Post"}]`, "")
	require.Equal(t, 422, code)
	code, out, _ = req(`"not an event"`, "")
	require.Equal(t, 400, code, out)

	// The same Idempotency-Key: the first answer, nothing scheduled again.
	code, first, _ := req(`{"resource_type": "Post", "action_type": "Update", "payload": 9}`, "key-1")
	require.Equal(t, 200, code)
	code, again, hdr := req(`{"resource_type": "Post", "action_type": "Update", "payload": 9}`, "key-1")
	require.Equal(t, 200, code)
	require.Equal(t, first, again)
	require.Equal(t, "true", hdr.Get("Idempotent-Replayed"))
	code, _, _ = req(`{"resource_type": "Post", "action_type": "Update", "payload": 10}`, "key-1")
	require.Equal(t, 422, code)

	status, body = b.do(t, "GET", "/jobs?state=pending&topic=cache&limit=2", a, "")
	require.Equal(t, 200, status)
	jobs := body["jobs"].([]any)
	require.Len(t, jobs, 2)
	require.NotNil(t, body["next"])
	id := jsonNum(jobs[0].(map[string]any)["id"].(float64))
	status, body = b.do(t, "GET", "/jobs/"+id, a, "")
	require.Equal(t, 200, status)
	require.Equal(t, "cache", body["topic"])
	require.NotContains(t, body, "work_key")
	status, body = b.do(t, "GET", "/jobs/999999999", a, "")
	require.Equal(t, 404, status)
	status, _ = b.do(t, "GET", "/jobs/abc", a, "")
	require.Equal(t, 404, status)
	status, body = b.do(t, "GET", "/jobs?state=bogus", a, "")
	require.Equal(t, 400, status, body)
	status, _ = b.do(t, "GET", "/jobs?limit=0", a, "")
	require.Equal(t, 400, status)
	status, body = b.do(t, "GET", "/jobs/stats", a, "")
	require.Equal(t, 200, status)
	topics := body["topics"].([]any)
	require.Equal(t, "cache", topics[0].(map[string]any)["topic"])
	require.Equal(t, 3.0, topics[0].(map[string]any)["scheduled"])
}

// jobMetricsConfig: topic m with a SQL hook that fails a job whose payload says fail and makes a
// child of a job whose payload says spawn (beyond generations_limit 1: discarded); Update jobs are
// superceedable, Expire jobs expire at once, no retries.
const jobMetricsConfig = `{
	"job_scheduler": {"job_rules": [{"action_type": ".", "resource_type": "^Post$", "topic": "m"}]},
	"topics": {"m": [{"match": {"action_type": "Update"}, "key_fields": ["payload"], "job_properties": {"superceedable": true}},
	                 {"match": {"action_type": "Expire"}, "key_fields": ["payload"], "job_properties": {"expires": 0}}]},
	"defaults": {"job_properties": {"retry_limit": 0}},
	"job_publisher": {"generations_limit": 1},
	"job_consumers": [{"name": "m", "topics": ["m"], "hook": "sql:public.metrics_hook", "priority_ranges": [{"range": [0, 9], "pool_size": 1}]}]}`

// The job service's counters on /metrics (worker.NewJobStatsCollector on the server's registry, as
// silo serve has it): each appears with its topic and moves with what happens to the jobs.
func TestJobMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(worker.NewJobStatsCollector(pool))
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Registry: reg}))
	t.Cleanup(srv.Close)
	_, err := pool.Exec(ctx, `CREATE FUNCTION public.metrics_hook(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		IF p -> 'payload' ? 'fail' THEN RAISE EXCEPTION 'hook failed'; END IF;
		IF p -> 'payload' ? 'spawn' THEN RETURN '[{"topic": "m", "update_fields": {}}]'; END IF;
		RETURN NULL;
	END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT api.job_config_load($1)`, jobMetricsConfig)
	require.NoError(t, err)
	q := db.New(pool)
	counters := func() map[string]string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		out := map[string]string{}
		for _, l := range strings.Split(string(raw), "\n") {
			for _, name := range []string{`silo_job_counter_total{counter="`, `silo_jobs_waiting{state="`} {
				if rest, ok := strings.CutPrefix(l, name); ok {
					k, v, _ := strings.Cut(rest, `",topic="m"} `)
					out[k] = v
				}
			}
		}
		return out
	}
	require.Empty(t, counters(), "no job yet, no topic")

	ingest := func(events string) {
		t.Helper()
		_, err := q.JobEventIngest(ctx, json.RawMessage(events))
		require.NoError(t, err)
	}
	ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 1}, "resource_url": "/p/1"}`)
	require.Equal(t, map[string]string{"scheduled": "1", "deduplicated": "0", "superseded": "0", "expired": "0", "dispatched": "0",
		"failed": "0", "retried": "0", "discarded_generation": "0", "pending": "1", "running": "0"}, counters())

	ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 2}, "resource_url": "/p/1"}`) // supersedes v 1
	ingest(`[{"resource_type": "Post", "action_type": "Expire", "payload": 1},
	         {"resource_type": "Post", "action_type": "Create", "payload": {"d": 1}},
	         {"resource_type": "Post", "action_type": "Create", "payload": {"d": 1}},
	         {"resource_type": "Post", "action_type": "Create", "payload": {"fail": 1}},
	         {"resource_type": "Post", "action_type": "Create", "payload": {"spawn": 1}}]`)
	for {
		r, err := q.JobDispatch(ctx, db.JobDispatchParams{Topic: "m", Lo: 0, Hi: 9, MaxJobs: 100})
		require.NoError(t, err)
		if *r.Taken == 0 {
			break
		}
	}
	require.Equal(t, map[string]string{"scheduled": "7", "deduplicated": "1", "superseded": "1", "expired": "1", "dispatched": "3",
		"failed": "1", "retried": "0", "discarded_generation": "1", "pending": "0", "running": "0"}, counters())
}
