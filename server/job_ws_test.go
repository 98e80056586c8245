package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

// The job service's state changes over a real websocket: an admin subscribed to jobs:{topic} hears
// its jobs scheduled, superseded, deduplicated, done and failed, ids only; a token that is no admin's
// subscribed to the same channel hears none of them.
func TestJobWS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	hub := startHub(t, pool)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
	t.Cleanup(srv.Close)
	var admin, reader string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('admin', '{}', true, true)`).Scan(&admin))
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('reader', '{}', false, false)`).Scan(&reader))
	_, err := pool.Exec(ctx, `CREATE FUNCTION public.metrics_hook(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		IF p -> 'payload' ? 'fail' THEN RAISE EXCEPTION 'hook failed'; END IF;
		RETURN NULL;
	END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT api.job_config_load($1)`, jobMetricsConfig)
	require.NoError(t, err)
	awaitHub(t, hub)

	type message struct {
		Type, Channel, Kind string
		Payload             struct{ IDs []int64 }
	}
	dial := func(token, query string) *websocket.Conn {
		t.Helper()
		conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws"+query,
			http.Header{"Authorization": {"Bearer " + token}})
		require.NoError(t, err)
		resp.Body.Close()
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var m message
		require.NoError(t, conn.ReadJSON(&m))
		require.Equal(t, "ready", m.Type)
		return conn
	}
	adm := dial(admin, "?channel=jobs:m")
	rd := dial(reader, "?channels=jobs:*,ops:mark")

	q := db.New(pool)
	ingest := func(events string) []int64 {
		t.Helper()
		rows, err := q.JobEventIngest(ctx, json.RawMessage(events))
		require.NoError(t, err)
		var ids []int64
		for _, r := range rows {
			ids = append(ids, r.JobIds...)
		}
		return ids
	}
	a := ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 1}, "resource_url": "/p/1"}`)
	b := ingest(`{"resource_type": "Post", "action_type": "Update", "payload": {"v": 2}, "resource_url": "/p/1"}`)
	c := ingest(`[{"resource_type": "Post", "action_type": "Create", "payload": {"d": 1}},
	              {"resource_type": "Post", "action_type": "Create", "payload": {"d": 1}},
	              {"resource_type": "Post", "action_type": "Create", "payload": {"fail": 1}}]`)
	_, err = q.JobDispatch(ctx, db.JobDispatchParams{Topic: "m", Lo: 0, Hi: 9, MaxJobs: 100})
	require.NoError(t, err)

	// In commit order: each intake's scheduled (and the second's superseded), then the step's
	// deduplicated, done and failed.
	want := []string{
		"scheduled " + ids(a), "scheduled " + ids(b), "superseded " + ids(a), "scheduled " + ids(c),
		"deduplicated " + ids(c[1:2]), "done " + ids(append(b, c[0])), "failed " + ids(c[2:]),
	}
	var got []string
	for len(got) < len(want) {
		var m message
		require.NoError(t, adm.ReadJSON(&m), "after %v", got)
		if m.Type == "change" {
			require.Equal(t, "jobs:m", m.Channel)
			got = append(got, m.Kind+" "+ids(m.Payload.IDs))
		}
	}
	// Within one transaction the order of kinds is not promised: compare each transaction's set.
	require.Equal(t, want[0], got[0])
	require.ElementsMatch(t, want[1:3], got[1:3])
	require.Equal(t, want[3], got[3])
	require.ElementsMatch(t, want[4:], got[4:])

	// The reader's first change is the mark published after all of them: jobs are for admins.
	_, err = pool.Exec(ctx, `SELECT api.change_publish('ops:mark', 'now', '{}', '{_all}')`)
	require.NoError(t, err)
	for {
		var m message
		require.NoError(t, rd.ReadJSON(&m))
		if m.Type == "change" {
			require.Equal(t, "ops:mark", m.Channel)
			break
		}
	}
}

func ids(v []int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
