package server_test

// The ODS and its purge over HTTP: process-flow events and objects in (207 and 422 for refused
// items, Idempotency-Key), a unit of work whole out, archiving, the purge's reports (any token) and
// configuration (admins), and progress on the websocket channel purge.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

// raw sends a request and returns the status and the body as sent.
func (b *testBundle) raw(t *testing.T, method, path, auth, body string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out), resp.Header
}

func TestODSAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer, reader := "Bearer "+b.writer, "Bearer "+b.reader

	status, body, _ := b.raw(t, "POST", "/ods/process-flow-events", reader, `{"unitOfWorkId": "u1", "globalStatus": "PENDING"}`)
	require.Equal(t, 403, status, body)
	status, body, _ = b.raw(t, "POST", "/ods/process-flow-events", "", `{"unitOfWorkId": "u1", "globalStatus": "PENDING"}`)
	require.Equal(t, 401, status, body)

	status, body, _ = b.raw(t, "POST", "/ods/process-flow-events", writer, `[
		{"unitOfWorkId": "u1", "journeyType": "PAYMENT", "globalStatus": "PENDING", "name": "Initiated", "createdAt": "2021-05-16T10:00:00Z"},
		{"unitOfWorkId": "u1", "globalStatus": "COMPLETED", "name": "Done", "createdAt": "2021-05-16T11:00:00Z"}]`)
	require.Equal(t, 200, status, body)
	var results []struct {
		UnitOfWorkID string `json:"unitOfWorkId"`
		Status       string
		Error        *struct{ ID, Message string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &results))
	require.Len(t, results, 2)
	require.Equal(t, "stored", results[1].Status)

	// Some refused: 207; all refused: 422, each with its error.
	status, body, _ = b.raw(t, "POST", "/ods/objects", writer, `[
		{"unitOfWorkId": "u1", "kind": "MDS", "type": "pacs.008", "payload": {"amount": 10}},
		{"unitOfWorkId": "u1", "kind": "XXX", "type": "t", "payload": 1}]`)
	require.Equal(t, 207, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &results))
	require.Equal(t, "invalid-ods-item", results[1].Error.ID)
	status, body, _ = b.raw(t, "POST", "/ods/process-flow-events", writer, `{"unitOfWorkId": "u1", "globalStatus": "NOPE"}`)
	require.Equal(t, 422, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &results))
	require.Equal(t, "unknown-global-status", results[0].Error.ID)
	// Not JSON, or neither object nor array: 400.
	for _, bad := range []string{`nope`, `"text"`, `{"a":`} {
		status, body, _ = b.raw(t, "POST", "/ods/objects", writer, bad)
		require.Equal(t, 400, status, body)
	}

	// Idempotency-Key: the repeat is answered from the first answer.
	ev := `{"unitOfWorkId": "u2", "globalStatus": "PENDING"}`
	status, _, _ = b.raw(t, "POST", "/ods/process-flow-events", writer, ev, "Idempotency-Key", "k-1")
	require.Equal(t, 200, status)
	status, _, h := b.raw(t, "POST", "/ods/process-flow-events", writer, ev, "Idempotency-Key", "k-1")
	require.Equal(t, 200, status)
	require.Equal(t, "true", h.Get("Idempotent-Replayed"))
	status, body, _ = b.raw(t, "POST", "/ods/process-flow-events", writer, `{"unitOfWorkId": "u3", "globalStatus": "PENDING"}`, "Idempotency-Key", "k-1")
	require.Equal(t, 422, status, body)
	require.Contains(t, body, "idempotency-key-reused")

	// Archive, then read back whole.
	status, body, _ = b.raw(t, "POST", "/ods/unit-of-works/u1/archive", writer, "")
	require.Equal(t, 200, status, body)
	status, body, _ = b.raw(t, "GET", "/ods/unit-of-works/u1", reader, "")
	require.Equal(t, 200, status, body)
	var uow struct {
		StartedAt, FinishedAt, ArchivedAt *string
		ProcessObjects, MdsObjects        []json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(body), &uow))
	require.Equal(t, "2021-05-16T10:00:00.000Z", *uow.StartedAt)
	require.Equal(t, "2021-05-16T11:00:00.000Z", *uow.FinishedAt)
	require.NotNil(t, uow.ArchivedAt)
	require.Len(t, uow.ProcessObjects, 2)
	require.Len(t, uow.MdsObjects, 1)
	status, body, _ = b.raw(t, "GET", "/ods/unit-of-works/none", reader, "")
	require.Equal(t, 404, status, body)
	status, body, _ = b.raw(t, "POST", "/ods/unit-of-works/none/archive", writer, "")
	require.Equal(t, 404, status, body)
}

func TestPurgeAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admin, writer, reader := "Bearer "+b.admin, "Bearer "+b.writer, "Bearer "+b.reader

	hub := startHub(t, b.pool)
	b.srv = httptest.NewServer(server.New(server.Config{Pool: b.pool, Version: "test", Hub: hub}))
	t.Cleanup(b.srv.Close)
	awaitHub(t, hub)

	// Configuration: admins only.
	for _, auth := range []string{writer, reader} {
		status, _, _ := b.raw(t, "GET", "/purge/config", auth, "")
		require.Equal(t, 403, status)
		status, _, _ = b.raw(t, "PUT", "/purge/config", auth, `{"enabled": true}`)
		require.Equal(t, 403, status)
	}
	status, body, _ := b.raw(t, "GET", "/purge/config", admin, "")
	require.Equal(t, 200, status)
	require.Contains(t, body, `"retention-period":"2Y"`)
	status, body, _ = b.raw(t, "PUT", "/purge/config", admin, `{"fetch-size": 1, "parallelism": 1}`)
	require.Equal(t, 200, status, body)
	require.Contains(t, body, `"fetch-size":1`)
	for bad, id := range map[string]string{`{"frequency": "often"}`: "invalid-period", `{"mode": "FAST"}`: "invalid-purge-configuration",
		`{"archived-dependent-journey-types": ["X"]}`: "invalid-purge-configuration", `[1]`: "invalid-purge-configuration"} {
		status, body, _ = b.raw(t, "PUT", "/purge/config", admin, bad)
		require.Equal(t, 400, status, bad)
		require.Contains(t, body, `"id":"`+id+`"`, bad)
	}

	url := "ws" + strings.TrimPrefix(b.srv.URL, "http") + "/ws?channel=purge"
	conn, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {admin}})
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	type message struct {
		Type, Channel, Kind string
		Payload             struct {
			ExecutionDate       string `json:"executionDate"`
			UnitOfWorksToDelete int64  `json:"unitOfWorksToDelete"`
			UnitOfWorksDeleted  int64  `json:"unitOfWorksDeleted"`
		}
	}
	// next skips kind config: the configuration changed above may be numbered, and so sent, after
	// the subscription.
	next := func(typ string) message {
		t.Helper()
		for {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var m message
			require.NoError(t, conn.ReadJSON(&m))
			if m.Type == typ && m.Kind != "config" {
				return m
			}
		}
	}
	next("subscribed")

	_, err = b.pool.Exec(ctx, `SELECT * FROM api.ods_ingest('[{"unitOfWorkId": "a", "globalStatus": "PENDING", "createdAt": "2021-01-01T00:00:00Z"},
		{"unitOfWorkId": "a", "globalStatus": "COMPLETED", "createdAt": "2021-01-01T00:00:01Z"},
		{"unitOfWorkId": "b", "globalStatus": "PENDING", "createdAt": "2021-01-01T00:00:00Z"}]')`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `SELECT api.purge_run('2023-05-17T00:00:02.170Z')`)
	require.NoError(t, err)
	m := next("change")
	require.Equal(t, "purge", m.Channel)
	require.Equal(t, "started", m.Kind)
	require.Equal(t, int64(2), m.Payload.UnitOfWorksToDelete)
	m = next("change")
	require.Equal(t, "progress", m.Kind)
	require.Equal(t, int64(1), m.Payload.UnitOfWorksDeleted)

	status, body, _ = b.raw(t, "GET", "/purge/reports/2023-05-17", reader, "")
	require.Equal(t, 200, status, body)
	require.Contains(t, body, `"unitOfWorksDeleted":1`)
	require.Contains(t, body, `"retentionPeriodLowerBound":"2021-05-17T00:00:00.000Z"`)
	status, body, _ = b.raw(t, "GET", "/purge/reports?limit=5", reader, "")
	require.Equal(t, 200, status, body)
	require.True(t, strings.HasPrefix(body, "[{"), body)
	for path, want := range map[string]int{"/purge/reports/2023-05-18": 404, "/purge/reports/someday": 400,
		"/purge/reports?limit=0": 400, "/purge/reports?before=x": 400} {
		status, body, _ = b.raw(t, "GET", path, reader, "")
		require.Equal(t, want, status, "%s: %s", path, body)
	}
	status, _, _ = b.raw(t, "GET", "/purge/reports", "", "")
	require.Equal(t, 401, status)
}
