package server_test

// Idempotency-Key on POST /profile-updates (both modes): a client that cannot tell whether a
// request committed (an error, a timeout, a dropped connection) repeats it with the same key and
// the update counts once.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// post sends a write with an Idempotency-Key (none when key is nil) and returns the status, the
// Idempotent-Replayed header and the body.
func (b *testBundle) post(t *testing.T, path, token string, key *string, body string, timeout time.Duration) (int, string, map[string]any, error) {
	t.Helper()
	req, err := http.NewRequest("POST", b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if key != nil {
		req.Header.Set("Idempotency-Key", *key)
	}
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), out, nil
}

func (b *testBundle) counter(t *testing.T, id string) string {
	t.Helper()
	code, body := b.do(t, "GET", "/profiles/_d/"+id+"/grain/n?withHistory=false", "Bearer "+b.admin, "")
	if code == 404 {
		return "none"
	}
	require.Equal(t, 200, code)
	return fmt.Sprint(body["jsonPayload"].(map[string]any)["n"].(map[string]any)["_latest"].(map[string]any)["_v"].(map[string]any)["_current"])
}

func inc(id string) string {
	return fmt.Sprintf(`{"_id":%q,"_path":["n"],"_operation":"_inc","_value":{"_v":"0|1|1"}}`, id)
}

func TestIdempotencyKeyHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := "order-7"
	code, replayed, first, err := b.post(t, "/profile-updates", b.writer, &key, inc("i1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Empty(t, replayed)
	code, replayed, again, err := b.post(t, "/profile-updates", b.writer, &key, inc("i1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Equal(t, "true", replayed)
	require.Equal(t, first, again)
	require.Equal(t, "1", b.counter(t, "i1"))

	// Another body under the same key: 422, nothing applied.
	code, _, body, err := b.post(t, "/profile-updates", b.writer, &key, inc("i2"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 422, code)
	require.Equal(t, "idempotency-key-reused", errID(body))
	require.Equal(t, "none", b.counter(t, "i2"))

	// Keys are per token.
	code, replayed, _, err = b.post(t, "/profile-updates", b.admin, &key, inc("i1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Empty(t, replayed)
	require.Equal(t, "2", b.counter(t, "i1"))

	// An empty key is refused rather than ignored.
	empty := ""
	code, _, body, err = b.post(t, "/profile-updates", b.writer, &empty, inc("i1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 400, code)
	require.Equal(t, "invalid-idempotency-key", errID(body))

	// The async mode: the same inbox ids again, enqueued once.
	akey := "async-1"
	code, replayed, a1, err := b.post(t, "/profile-updates?mode=async", b.writer, &akey, "["+inc("i3")+","+inc("i3")+"]", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 202, code)
	require.Empty(t, replayed)
	code, replayed, a2, err := b.post(t, "/profile-updates?mode=async", b.writer, &akey, "["+inc("i3")+","+inc("i3")+"]", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 202, code)
	require.Equal(t, "true", replayed)
	require.Equal(t, a1, a2)
	require.EqualValues(t, 2, a1["accepted"])
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM profile.inbox`).Scan(&n))
	require.Equal(t, 2, n)
	// The same key and body in the other mode is another request.
	code, _, body, err = b.post(t, "/profile-updates", b.writer, &akey, "["+inc("i3")+","+inc("i3")+"]", 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 422, code, body)
}

// lockCounter holds a row lock on the counter's grain, so that a write of it waits; release ends
// the holding transaction.
func (b *testBundle) lockCounter(t *testing.T, id string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM profile.profilestore WHERE correlation_id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Commit(ctx) }) }
	t.Cleanup(release) // a failing test must not leave the lock (and its connection) behind
	return release
}

// waitForBlockedWrite waits until a write of the server waits for a lock and returns its backend.
func (b *testBundle) waitForBlockedWrite(t *testing.T) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		err := b.pool.QueryRow(context.Background(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND query LIKE '%api.profile_apply_requests%' LIMIT 1`).Scan(&pid)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	return pid
}

// The client gives up while its request waits in the database; the request commits after all.
// Repeated with its key, it is not applied again.
func TestIdempotencyKeyAfterTheClientGaveUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := "gave-up"
	code, _, _, err := b.post(t, "/profile-updates", b.writer, nil, inc("g1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)

	release := b.lockCounter(t, "g1")
	ctx, giveUp := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", b.srv.URL+"/profile-updates", strings.NewReader(inc("g1")))
		req.Header.Set("Authorization", "Bearer "+b.writer)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	b.waitForBlockedWrite(t)
	giveUp()
	require.Error(t, <-gaveUp, "the client gave up")
	release()

	code, replayed, body, err := b.post(t, "/profile-updates", b.writer, &key, inc("g1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	require.Equal(t, "true", replayed, "the first attempt committed")
	require.Equal(t, "2", b.counter(t, "g1"), "counted once")
}

// The server's database connection drops while the request waits: 503, nothing committed, and
// the retry with the key applies it, once.
func TestIdempotencyKeyAfterTheConnectionDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := "dropped"
	code, _, _, err := b.post(t, "/profile-updates", b.writer, nil, inc("d1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)

	release := b.lockCounter(t, "d1")
	type answer struct {
		code int
		body map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		code, _, body, _ := b.post(t, "/profile-updates", b.writer, &key, inc("d1"), 10*time.Second)
		done <- answer{code, body}
	}()
	pid := b.waitForBlockedWrite(t)
	_, err = b.pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	got := <-done
	require.Equal(t, 503, got.code, got.body)
	release()

	code, replayed, body, err := b.post(t, "/profile-updates", b.writer, &key, inc("d1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	require.Empty(t, replayed, "the first attempt did not commit")
	code, replayed, _, err = b.post(t, "/profile-updates", b.writer, &key, inc("d1"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Equal(t, "true", replayed)
	require.Equal(t, "2", b.counter(t, "d1"), "counted once")
}
