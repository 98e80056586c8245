package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
	"github.com/silo-db/silo/worker"
)

func TestProfileUpdatesAsync(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `[{"_id":"007","_path":["a"],"_value":{"_v":"1"}},{"_id":"007","_path":["a"],"_value":{"_v":"2"}}]`

	code, out := b.do(t, "POST", "/profile-updates?mode=async", "", body)
	require.Equal(t, 401, code)
	code, out = b.do(t, "POST", "/profile-updates?mode=async", "Bearer "+b.reader, body)
	require.Equal(t, 403, code, out)
	code, out = b.do(t, "POST", "/profile-updates?mode=async", "Bearer "+b.writer, `"nope"`)
	require.Equal(t, 400, code)
	require.Equal(t, "invalid-request-structure", errID(out))
	code, out = b.do(t, "POST", "/profile-updates?mode=async&priority=urgent", "Bearer "+b.writer, body)
	require.Equal(t, 400, code, out)
	code, out = b.do(t, "POST", "/profile-updates?mode=later", "Bearer "+b.writer, body)
	require.Equal(t, 400, code, out)

	code, out = b.do(t, "POST", "/profile-updates?mode=async", "Bearer "+b.writer, body)
	require.Equal(t, 202, code, out)
	require.EqualValues(t, 2, out["accepted"])
	require.Equal(t, "high", out["priority"])
	require.Equal(t, out["firstId"].(float64)+1, out["lastId"])
	code, out = b.do(t, "POST", "/profile-updates?mode=async&priority=low", "Bearer "+b.writer, `{"_id":"008","_path":["a"],"_value":{"_v":"x"}}`)
	require.Equal(t, 202, code, out)
	require.EqualValues(t, 1, out["accepted"])
	require.Equal(t, "low", out["priority"])
}

// /metrics shows the inbox backlog per priority and, where the updater runs in the process, the
// per-operation execution times.
func TestUpdaterMetrics(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	reg := prometheus.NewRegistry()
	u := worker.NewUpdater(pool, worker.UpdaterConfig{Workers: 1, Registerer: reg})
	srv := server.New(server.Config{Pool: pool, Registry: reg})
	_, err := pool.Exec(context.Background(), `SELECT api.profile_enqueue('[{"_id":"m","_path":["a"],"_value":{"_v":"1"}}, {"_operation":"_inc","_id":"m","_path":["c"],"_value":{"_v":"0|1|1"}}]')`)
	require.NoError(t, err)
	scrape := func() string {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	require.Contains(t, scrape(), `silo_profile_inbox_backlog{priority="high"} 2`)
	u.Start(context.Background())
	t.Cleanup(func() { require.NoError(t, u.Stop(context.Background())) })
	require.Eventually(t, func() bool {
		m := scrape()
		return strings.Contains(m, `silo_profile_inbox_backlog{priority="high"} 0`) &&
			strings.Contains(m, `silo_profile_update_apply_seconds_count{operation="_inc"} 1`) &&
			strings.Contains(m, `silo_profile_update_apply_seconds_count{operation="_set"} 1`) &&
			strings.Contains(m, `silo_profile_updater_updates_total{priority="high",status="ok"} 2`)
	}, 20*time.Second, 50*time.Millisecond)
}
