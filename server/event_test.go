package server_test

// The event store's HTTP routes (server/event.go): POST /events with one event, an array or
// NDJSON, answered per event with 200, 207 or 422; Granary's reads; who may; the routes beside the
// per-user routes /{username}/events.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

func evJSON(id, typ, cid string, ts int64, payload string) string {
	return fmt.Sprintf(`{"event_headers": {"grnry-event-id": %q, "grnry-event-type": %q, "grnry-correlation-id": %q, "grnry-event-timestamp": "%d"}, "event_payload": %s}`,
		id, typ, cid, ts, payload)
}

// postEvents sends body with content type ct and returns the status, the results (nil when the
// answer is no array) and the raw answer.
func (b *testBundle) postEvents(t *testing.T, token, ct, body string, header ...string) (int, []map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/events", strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out []map[string]any
	if len(raw) > 0 && raw[0] == '[' {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out, string(raw)
}

func resultStatuses(res []map[string]any) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r["status"].(string)
		if e, ok := r["error"].(map[string]any); ok {
			out[i] += "/" + e["id"].(string)
		}
	}
	return out
}

func TestEventIngestHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC).UnixMilli()

	// One event.
	code, res, raw := b.postEvents(t, b.writer, "application/json", evJSON("h1", "click", "c1", t0, `{"n": 1}`))
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, []string{"stored"}, resultStatuses(res))
	require.Equal(t, "h1", res[0]["eventId"])
	require.NotEmpty(t, res[0]["firstStored"])
	// No event refused: the answer is the text PostgreSQL wrote, as an encoder of the rows would.
	require.Regexp(t, `^\[\{"eventId":"h1","status":"stored","firstStored":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"\}\]\n$`, raw)

	// An array: the duplicate says so, the refused one gets its error; 207.
	code, res, raw = b.postEvents(t, b.writer, "application/json", "["+evJSON("h1", "click", "c1", t0, "1")+","+
		evJSON("h2", "click", "c1", t0+1, "2")+`, {"event_headers": {}, "event_payload": 3}]`)
	require.Equal(t, http.StatusMultiStatus, code, raw)
	require.Equal(t, []string{"duplicate", "stored", "refused/invalid-event-header"}, resultStatuses(res))
	require.NotEmpty(t, res[0]["firstStored"])
	e := res[2]["error"].(map[string]any)
	require.Equal(t, "SEHDR", e["data"].(map[string]any)["sqlstate"])
	require.Equal(t, "grnry-event-id is required", e["message"])

	// NDJSON, by Content-Type: a line that is no JSON is refused alone; blank lines are skipped.
	nd := evJSON("h3", "click", "c2", t0+2, "3") + "\n\n{not json\r\n" + evJSON("h4", "view", "c2", t0+3, "4") + "\n"
	code, res, raw = b.postEvents(t, b.writer, "application/x-ndjson", nd)
	require.Equal(t, http.StatusMultiStatus, code, raw)
	require.Equal(t, []string{"stored", "refused/invalid-event", "stored"}, resultStatuses(res))
	require.Contains(t, res[1]["error"].(map[string]any)["message"], "line 2 is not valid JSON")

	// Lines PostgreSQL cannot take as text or JSON (not UTF-8, a NUL byte, the escape \u0000) are
	// refused alone too.
	nd = "{\"a\": \"\xff\"}\n" + evJSON("n1", "click", "c2", t0+6, "7") + "\n{\"a\": 1,\x00}\n{\"a\": \"\\u0000\"}\n"
	code, res, raw = b.postEvents(t, b.writer, "application/x-ndjson", nd)
	require.Equal(t, http.StatusMultiStatus, code, raw)
	require.Equal(t, []string{"refused/invalid-event", "stored", "refused/invalid-event", "refused/invalid-event"}, resultStatuses(res))

	// NDJSON detected without its Content-Type.
	code, res, raw = b.postEvents(t, b.writer, "application/json", evJSON("h5", "click", "c2", t0+4, "5")+"\n"+evJSON("h6", "click", "c2", t0+5, "6"))
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, []string{"stored", "stored"}, resultStatuses(res))

	// Every event refused: 422.
	code, res, raw = b.postEvents(t, b.writer, "", `[1, {"event_headers": {}}]`)
	require.Equal(t, http.StatusUnprocessableEntity, code, raw)
	require.Equal(t, []string{"refused/invalid-event", "refused/invalid-event"}, resultStatuses(res))

	// Nothing to read: 400.
	for _, body := range []string{"", "42", "not json", `"x"`, `{"a": "\u0000"}`} {
		code, _, raw = b.postEvents(t, b.writer, "", body)
		require.Equal(t, http.StatusBadRequest, code, "%q: %s", body, raw)
	}
	// An empty array: nothing to do.
	code, res, _ = b.postEvents(t, b.writer, "", `[]`)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, res)

	// Idempotency keys: a repeat gets its first answer.
	code, res, _ = b.postEvents(t, b.writer, "", evJSON("h7", "click", "c3", t0, "7"), "Idempotency-Key", "k-1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, []string{"stored"}, resultStatuses(res))
	req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/events", strings.NewReader(evJSON("h7", "click", "c3", t0, "7")))
	req.Header.Set("Authorization", b.writer)
	req.Header.Set("Idempotency-Key", "k-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw2, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Contains(t, string(raw2), `"status":"stored"`)

	// Who may: a writer or an admin; not a reader, not without a token.
	code, _, _ = b.postEvents(t, b.admin, "", evJSON("h8", "click", "c3", t0, "8"))
	require.Equal(t, http.StatusOK, code)
	code, _, _ = b.postEvents(t, b.reader, "", evJSON("h9", "click", "c3", t0, "9"))
	require.Equal(t, http.StatusForbidden, code)
	code, _, _ = b.postEvents(t, "", "", evJSON("h9", "click", "c3", t0, "9"))
	require.Equal(t, http.StatusUnauthorized, code)
}

// A body is read whole up to the limit, with a Content-Length or without one (chunked); a larger
// one is refused with 413 either way.
func TestEventIngestBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewServer(server.New(server.Config{Pool: b.pool, Version: "test", MaxBodyBytes: 1000}))
	t.Cleanup(srv.Close)
	post := func(body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/events", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+b.writer)
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(raw)
	}
	// chunked hides a reader's length from the client, which then sends no Content-Length.
	type chunked struct{ io.Reader }
	t0 := time.Date(2024, 5, 2, 10, 0, 0, 0, time.UTC).UnixMilli()
	small := evJSON("lim1", "click", "c1", t0, "1") + "\n" + evJSON("lim2", "click", "c1", t0, "2") + "\n"
	code, raw := post(strings.NewReader(small))
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, 2, strings.Count(raw, `"status":"stored"`), raw)
	code, raw = post(chunked{strings.NewReader(strings.ReplaceAll(small, "lim", "limc"))})
	require.Equal(t, http.StatusOK, code, raw)
	require.Equal(t, 2, strings.Count(raw, `"status":"stored"`), raw)
	large := strings.Repeat(evJSON("lim3", "click", "c1", t0, "3")+"\n", 10)
	code, raw = post(strings.NewReader(large))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, raw)
	code, raw = post(chunked{strings.NewReader(large)})
	require.Equal(t, http.StatusRequestEntityTooLarge, code, raw)
}

func TestEventReadsHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	var nd []string
	for i := range 25 {
		nd = append(nd, evJSON(fmt.Sprintf("r%02d", i), []string{"click", "view"}[i%2], "cookie/123", t0.Add(time.Duration(i)*time.Minute).UnixMilli(), fmt.Sprintf(`{"i": %d}`, i)))
	}
	code, _, raw := b.postEvents(t, b.writer, "application/x-ndjson", strings.Join(nd, "\n"))
	require.Equal(t, http.StatusOK, code, raw)

	auth := "Bearer " + b.reader
	// Defaults: 20 events, ascending, no message, no total; a next link.
	code, out := b.do(t, "GET", "/events/cookie%2F123", auth, "")
	require.Equal(t, http.StatusOK, code, out)
	evs := out["events"].([]any)
	require.Len(t, evs, 20)
	first := evs[0].(map[string]any)
	require.Equal(t, "r00", first["eventId"])
	require.Equal(t, "cookie/123", first["correlationId"])
	require.Equal(t, "2024-05-01T10:00:00.000Z", first["created"])
	require.Nil(t, first["message"])
	require.Nil(t, out["totalCount"])
	require.Equal(t, "/events/cookie%2F123/r00", first["_links"].(map[string]any)["self"].(map[string]any)["href"])
	links := out["_links"].(map[string]any)
	require.Contains(t, links["next"].(map[string]any)["href"], "offset=20")

	// A range [from, to), a page, expanded.
	code, out = b.do(t, "GET", "/events/cookie%2F123?from=2024-05-01T10:05:00Z&to=2024-05-01T10:10:00.000Z&pagesize=3&offset=1&expand=message,totalCount", auth, "")
	require.Equal(t, http.StatusOK, code, out)
	require.EqualValues(t, 5, out["totalCount"])
	evs = out["events"].([]any)
	require.Len(t, evs, 3)
	require.Equal(t, "r06", evs[0].(map[string]any)["eventId"])
	msg := evs[0].(map[string]any)["message"].(map[string]any)
	require.EqualValues(t, 6, msg["event_payload"].(map[string]any)["i"])
	require.Equal(t, "r06", msg["event_headers"].(map[string]any)["grnry-event-id"])
	require.Contains(t, out["_links"].(map[string]any)["next"].(map[string]any)["href"], "offset=4")
	// The last page has no next link.
	code, out = b.do(t, "GET", "/events/cookie%2F123?from=2024-05-01T10:05:00Z&to=2024-05-01T10:10:00Z&pagesize=3&offset=3&expand=totalCount", auth, "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, out["events"], 2)
	require.Nil(t, out["_links"].(map[string]any)["next"])

	// By type, epoch milliseconds accepted.
	code, out = b.do(t, "GET", fmt.Sprintf("/events?eventType=view&from=%d&pagesize=100", t0.Add(10*time.Minute).UnixMilli()), auth, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Len(t, out["events"], 7) // r11, r13, ..., r23
	require.Equal(t, "r11", out["events"].([]any)[0].(map[string]any)["eventId"])

	// One event.
	code, out = b.do(t, "GET", "/events/cookie%2F123/r07", auth, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "r07", out["eventId"])
	require.EqualValues(t, 7, out["message"].(map[string]any)["event_payload"].(map[string]any)["i"])

	// Nothing found: 404.
	for _, path := range []string{"/events/nobody", "/events/cookie%2F123/r99", "/events/other/r07", "/events?eventType=none",
		"/events/cookie%2F123?from=2030-01-01T00:00:00Z"} {
		code, out = b.do(t, "GET", path, auth, "")
		require.Equal(t, http.StatusNotFound, code, path)
		require.Equal(t, "unknown-resource", errID(out), path)
	}
	// Bad parameters: 400.
	for _, path := range []string{"/events/c?pagesize=0", "/events/c?pagesize=1001", "/events/c?offset=-1", "/events/c?from=yesterday",
		"/events/c?expand=everything", "/events", "/events?eventType=view&to=x"} {
		code, out = b.do(t, "GET", path, auth, "")
		require.Equal(t, http.StatusBadRequest, code, path)
		require.Equal(t, "invalid-parameters-format", errID(out), path)
	}
	// No route: the route table's answers.
	code, out = b.do(t, "GET", "/events/a/b/c", auth, "")
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, "unknown-resource", errID(out))
	code, out = b.do(t, "DELETE", "/events/a", auth, "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	require.Equal(t, "method-not-allowed", errID(out))

	// Reads need a token, anonymous reads or not.
	b.anonymousReads(t, true)
	code, _ = b.do(t, "GET", "/events/cookie%2F123", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = b.do(t, "GET", "/events/cookie%2F123/r07", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
}

// FuzzEventBody feeds arbitrary bodies to POST /events' reader. A body it takes is valid JSON for
// PostgreSQL: one object or array as sent, or text of one JSON line per non-blank NDJSON line,
// whose unreadable lines are null placeholders listed with their reasons.
//
//	go test ./server/ -run '^$' -fuzz FuzzEventBody -fuzztime 60s
func FuzzEventBody(f *testing.F) {
	for _, s := range []string{
		`{"event_headers": {}, "event_payload": 1}`,
		`[{"event_headers": {}, "event_payload": 1}, 2]`,
		"{\"a\": 1}\n\n{bad\r\n[1]\n",
		"{\"a\": \"\\u0000\"}\n{\"b\": \"\\\\u0000\"}",
		"{\"a\": \"\xff\"}\n{}",
		"",
	} {
		f.Add("", []byte(s))
		f.Add("application/x-ndjson", []byte(s))
	}
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		events, text, invalid, n, err := server.EventBody(ct, body, true)
		if text != nil {
			// Unchecked, the same text, and no more lines named unreadable.
			_, unchecked, uninvalid, un, _ := server.EventBody(ct, body, false)
			require.Equal(t, text, unchecked)
			require.Equal(t, n, un)
			require.LessOrEqual(t, len(uninvalid), len(invalid))
		}
		if err != nil {
			require.Nil(t, events)
			require.Nil(t, text)
			return
		}
		if n < 0 {
			require.True(t, json.Valid(events), "%q", events)
			require.Nil(t, text)
			require.Nil(t, invalid)
			return
		}
		require.Nil(t, events)
		var elems []string
		if n > 0 {
			elems = strings.Split(string(text), "\n")
		}
		require.Len(t, elems, n)
		var bad map[string]string
		if invalid != nil {
			require.NoError(t, json.Unmarshal(invalid, &bad))
		}
		for i, l := range elems {
			require.True(t, utf8.ValidString(l), "%q", l)
			require.NotContains(t, l, "\x00")
			if _, named := bad[strconv.Itoa(i+1)]; !named {
				require.True(t, json.Valid([]byte(l)), "%q", l)
			}
		}
		for k := range bad {
			var i int
			_, err := fmt.Sscan(k, &i)
			require.NoError(t, err)
			require.LessOrEqual(t, i, n)
		}
	})
}

// Concurrent small requests are joined into one call (group commit); each gets its own answer,
// and an id sent by several of them is stored once.
func TestEventIngestJoinedRequestsGetTheirOwnAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const clients, each = 8, 15
	var wg sync.WaitGroup
	stored := make([]int, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("j-%d-%d", c, i)
				body := "[" + evJSON(id, "t", "c", int64(1000+i), "1") + "," + evJSON("shared", "t", "c", 1, "1") + "]"
				req, _ := http.NewRequest(http.MethodPost, b.srv.URL+"/events", strings.NewReader(body))
				req.Header.Set("Authorization", b.writer)
				resp, err := http.DefaultClient.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				var res []map[string]any
				assert.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
				resp.Body.Close()
				if assert.Len(t, res, 2) {
					assert.Equal(t, id, res[0]["eventId"])
					assert.Equal(t, "stored", res[0]["status"])
					assert.Equal(t, "shared", res[1]["eventId"])
					if res[1]["status"] == "stored" {
						stored[c]++
					} else {
						assert.Equal(t, "duplicate", res[1]["status"])
					}
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range stored {
		total += n
	}
	require.Equal(t, 1, total)
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM event.events`).Scan(&n))
	require.Equal(t, clients*each+1, n)
}
