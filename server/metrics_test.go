package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// No label value of the profile update metrics comes from a client: 1,000 distinct bogus
// operations are counted as invalid, and the calls of api.profile_apply_batch are timed, whether
// a request is applied on its own or joined with others.
func TestMetricsTakeNoLabelFromTheClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(New(Config{Pool: pool, Version: "test", Registry: reg}))
	t.Cleanup(srv.Close)
	var writer string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('metrics-writer', '{}', true, false)`).Scan(&writer))
	post := func(body string) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+"/profile-updates", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+writer)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	updates := make([]string, 1000)
	for i := range updates {
		updates[i] = fmt.Sprintf(`{"_operation":"bogus-%d","_id":"m","_path":["a"],"_value":{"_v":"1"}}`, i)
	}
	post("[" + strings.Join(updates, ",") + "]")                                  // on its own: over 100 updates
	post(`{"_operation":"_set_max","_id":"m","_path":["n"],"_value":{"_v":"1"}}`) // through the batcher
	post(`{"_operation":17,"_id":"m","_path":["n"],"_value":{"_v":"1"}}`)         // not a string

	families, err := reg.Gather()
	require.NoError(t, err)
	allowed := append(slices.Clone(profileOperations), "invalid")
	count := map[string]float64{}
	var series int
	var calls, batches uint64
	var callSeconds, batchUpdates float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "silo_profile_updates_total":
				require.Contains(t, allowed, labels["operation"])
				require.Contains(t, updateStatuses, labels["status"])
				count[labels["operation"]+" "+labels["status"]] = m.GetCounter().GetValue()
				series++
			case "silo_profile_apply_batch_seconds":
				if labels["outcome"] == "ok" {
					calls, callSeconds = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			case "silo_profile_apply_batch_updates":
				batches, batchUpdates = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	require.Equal(t, len(allowed)*len(updateStatuses), series)
	require.Equal(t, 1001.0, count["invalid dead_letter"])
	require.Equal(t, 1.0, count["_set_max ok"])
	require.Equal(t, uint64(3), calls)
	require.Positive(t, callSeconds)
	require.Equal(t, uint64(3), batches)
	require.Equal(t, 1002.0, batchUpdates)
}

// The operations the metrics know are exactly those of the SQL (profile_private.op_class).
func TestMetricsKnowTheOperationsOfTheSQL(t *testing.T) {
	t.Parallel()
	var def string
	require.NoError(t, dbtest.Tx(t).QueryRow(context.Background(),
		`SELECT pg_get_functiondef('profile_private.op_class(text)'::regprocedure)`).Scan(&def))
	var sqlOps []string
	for _, m := range regexp.MustCompile(`WHEN '(_[a-z_]+)'`).FindAllStringSubmatch(def, -1) {
		sqlOps = append(sqlOps, m[1])
	}
	require.Len(t, sqlOps, 21)
	require.ElementsMatch(t, sqlOps, profileOperations)
}
