package server_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// seriesSetup: alice with stream heart and a series:mass/kg holder at time 1000.
func seriesSetup(t *testing.T) (*accountBundle, string) {
	t.Helper()
	b := accountSetup(t)
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/alice/streams", b.token, `{"id": "heart", "name": "Heart"}`).status)
	a := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["heart"], "type": "series:mass/kg", "time": 1000}`)
	require.Equal(t, http.StatusCreated, a.status)
	return b, a.object("event")["id"].(string)
}

// raw sends a request and returns its status, Content-Type and body as text.
func (b *accountBundle) raw(t *testing.T, method, path string, header map[string]string, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "1.9.0", resp.Header.Get("API-Version"))
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(out)
}

func TestSeriesHTTP(t *testing.T) {
	t.Parallel()
	b, id := seriesSetup(t)
	path := "/alice/events/" + id + "/series"

	a := b.do(t, "POST", path, b.token, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 70.25], [1, 70.5], [2, 70.75]]}`)
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, "ok", a.body["status"])
	// The seed's timestamp column, and CSV.
	a = b.do(t, "POST", path, b.token, `{"format": "flatJSON", "fields": ["timestamp", "value"], "points": [[1003, 71]]}`)
	require.Equal(t, http.StatusOK, a.status, a.body)
	status, _, body := b.raw(t, "POST", path, map[string]string{"Authorization": b.token, "Content-Type": "text/csv"}, "deltaTime,value\n4,-71.5\n5,\"72\"\n")
	require.Equal(t, http.StatusOK, status, body)

	a = b.do(t, "GET", path+"?fromDeltaTime=1&toDeltaTime=5", b.token, "")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, "flatJSON", a.body["format"])
	require.Equal(t, []any{"deltaTime", "value"}, a.body["fields"])
	require.Equal(t, []any{[]any{1.0, 70.5}, []any{2.0, 70.75}, []any{3.0, 71.0}, []any{4.0, -71.5}}, a.body["points"])

	// The seed's absolute range; CSV out.
	status, ctype, body := b.raw(t, "GET", path+"?fromTime=1004&toTime=1006", map[string]string{"Authorization": b.token, "Accept": "text/csv"}, "")
	require.Equal(t, http.StatusOK, status, body)
	require.True(t, strings.HasPrefix(ctype, "text/csv"), ctype)
	require.Equal(t, "timestamp,value\n1004,-71.5\n1005,72\n", body)

	// Downsampled: buckets of 2 s from the event's time, the average of each.
	a = b.do(t, "GET", path+"?interval=2&aggregate=avg&toDeltaTime=4", b.token, "")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, []any{"deltaTime", "value"}, a.body["fields"])
	require.Equal(t, []any{[]any{0.0, 70.375}, []any{2.0, 70.875}}, a.body["points"])
	a = b.do(t, "GET", path+"?aggregate=avg", b.token, "")
	require.Equal(t, 400, a.status, a.body)
	require.Equal(t, "invalid-parameters-format", a.errID())

	// Range delete keeps the event.
	a = b.do(t, "DELETE", path+"?fromDeltaTime=0&toDeltaTime=2", b.token, "")
	require.Equal(t, http.StatusOK, a.status, a.body)
	require.Equal(t, 2.0, a.body["deleted"])
	a = b.do(t, "GET", path, b.token, "")
	require.Len(t, a.body["points"], 4)
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/alice/events/"+id, b.token, "").status)

	// Errors, in Pryv's ids and statuses.
	for _, c := range []struct {
		method, path, auth, body string
		status                   int
		id                       string
	}{
		{"POST", path, b.token, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": []}`, 400, "invalid-request-structure"},
		{"POST", path, b.token, `{"format": "json", "fields": ["deltaTime", "value"], "points": [[0, 1]]}`, 400, "invalid-request-structure"},
		{"POST", path, b.token, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [1, 2]}`, 400, "invalid-request-structure"},
		{"POST", path, b.token, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1e1000000]]}`, 400, "invalid-parameters-format"},
		{"POST", path, b.token, `not json`, 400, "invalid-request-structure"},
		{"POST", path, "", `{}`, 401, "missing-header"},
		{"POST", path, "cwrongwrongwrongwrongwrongwrongwrongwrongwrongwrongwrongwrongwrongw", `{}`, 403, "invalid-access-token"},
		{"POST", "/alice/events/cmissingmissingmissing000/series", b.token, `{}`, 404, "unknown-resource"},
		{"POST", "/nobody/events/" + id + "/series", b.token, `{}`, 404, "unknown-resource"},
		{"GET", path + "?fromDeltaTime=x", b.token, ``, 400, "invalid-parameters-format"},
		{"GET", path + "?fromDeltaTime=5&toDeltaTime=1", b.token, ``, 400, "invalid-parameters-format"},
		{"GET", path + "?fromTime=5&toDeltaTime=1", b.token, ``, 400, "invalid-parameters-format"},
		{"GET", path + "?fields=weight", b.token, ``, 400, "invalid-parameters-format"},
		{"POST", "/alice/series/batch", b.token, `{"format": "seriesBatch", "data": [{"eventId": 1}]}`, 400, "invalid-request-structure"},
		{"POST", "/alice/series/batch", b.token, `{"format": "flatJSON"}`, 400, "invalid-request-structure"},
	} {
		a := b.do(t, c.method, c.path, c.auth, c.body)
		require.Equal(t, c.status, a.status, "%s %s %s: %v", c.method, c.path, c.body, a.body)
		require.Equal(t, c.id, a.errID(), "%s %s %s", c.method, c.path, c.body)
	}

	// A non-series event.
	note := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["heart"], "type": "note/txt", "content": "x"}`).object("event")["id"].(string)
	a = b.do(t, "POST", "/alice/events/"+note+"/series", b.token, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]}`)
	require.Equal(t, 400, a.status)
	require.Equal(t, "invalid-operation", a.errID())

	// Batch, all or nothing.
	a = b.do(t, "POST", "/alice/series/batch", b.token, `{"format": "seriesBatch", "data": [
		{"eventId": "`+id+`", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10, 1]]}},
		{"eventId": "`+note+`", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10, 1]]}}]}`)
	require.Equal(t, 400, a.status, a.body)
	require.Len(t, b.do(t, "GET", path+"?fromDeltaTime=10", b.token, "").body["points"], 0)
	a = b.do(t, "POST", "/alice/series/batch", b.token, `{"format": "seriesBatch", "data": [
		{"eventId": "`+id+`", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10, 1]]}}]}`)
	require.Equal(t, 200, a.status, a.body)
	require.Len(t, b.do(t, "GET", path+"?fromDeltaTime=10", b.token, "").body["points"], 1)
}

// Pryv's token forms and the create-only rule over HTTP; an Idempotency-Key repeats the answer.
func TestSeriesHTTPAccess(t *testing.T) {
	t.Parallel()
	b, id := seriesSetup(t)
	path := "/alice/events/" + id + "/series"
	a := b.do(t, "POST", "/alice/accesses", b.token, `{"name": "sensor", "permissions": [{"streamId": "heart", "level": "create-only"}]}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	sensor := a.object("access")["token"].(string)
	body := `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]}`
	require.Equal(t, 200, b.do(t, "POST", path+"?auth="+sensor, "", body).status)
	require.Equal(t, 200, b.do(t, "POST", path, "Bearer "+sensor, body).status)
	a = b.do(t, "GET", path, sensor, "")
	require.Equal(t, 403, a.status)
	require.Equal(t, "forbidden", a.errID())
	require.Equal(t, 200, b.do(t, "GET", path+"?auth="+b.token, "", "").status)

	for i := range 2 {
		status, _, out := b.raw(t, "POST", path, map[string]string{"Authorization": b.token, "Idempotency-Key": "k1"},
			`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[7, 7]]}`)
		require.Equal(t, 200, status, "attempt %d: %s", i, out)
	}
	status, _, out := b.raw(t, "POST", path, map[string]string{"Authorization": b.token, "Idempotency-Key": "k1"},
		`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[8, 8]]}`)
	require.Equal(t, 422, status, out)
	require.Contains(t, out, "idempotency-key-reused")
}

// A range larger than a page is streamed whole, in order.
func TestSeriesHTTPLargeRead(t *testing.T) {
	t.Parallel()
	b, id := seriesSetup(t)
	path := "/alice/events/" + id + "/series"
	const n = 25000
	var sb strings.Builder
	sb.WriteString(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "[%d,%d.%02d]", i, 20+i%7, i%100)
	}
	sb.WriteString("]}")
	a := b.do(t, "POST", path, b.token, sb.String())
	require.Equal(t, 200, a.status, a.body)
	a = b.do(t, "GET", path, b.token, "")
	points := a.body["points"].([]any)
	require.Len(t, points, n)
	for i, p := range points {
		require.Equal(t, float64(i), p.([]any)[0])
	}
	require.Equal(t, []any{24999.0, 22.99}, points[n-1])
}
