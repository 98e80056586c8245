package server_test

// The job service over HTTP: POST /job-events (tokens that may write; one or many events; the
// Idempotency-Key), GET /jobs, /jobs/{id}, /jobs/stats (admin tokens), the statuses of refused
// input. The rules are tested in SQL (db/job_test.go).

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
