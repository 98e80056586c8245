package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// beltSetup creates, on pool, SQL belt name of event type typ with callback body (a SQL function
// (h jsonb, p jsonb) returning jsonb) and the extraEnv settings env, and returns its id.
func beltSetup(t *testing.T, pool *pgxpool.Pool, name, typ, body string, env map[string]string) int64 {
	t.Helper()
	ctx := context.Background()
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE FUNCTION public.%s(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $f$ %s $f$`, name, body))
	require.NoError(t, err)
	var extra []map[string]string
	for k, v := range env {
		extra = append(extra, map[string]string{"name": k, "value": v})
	}
	doc, err := json.Marshal(map[string]any{"name": name, "eventTypes": []string{typ}, "sqlCallback": name, "extraEnv": extra})
	require.NoError(t, err)
	raw, err := db.New(pool).BeltCreate(ctx, doc)
	require.NoError(t, err)
	var d struct{ ID, Status string }
	require.NoError(t, json.Unmarshal(raw, &d))
	require.Equal(t, "RUNNING", d.Status)
	var id int64
	_, err = fmt.Sscan(d.ID, &id)
	require.NoError(t, err)
	return id
}

func beltIngest(t *testing.T, pool *pgxpool.Pool, typ string, events ...[2]string) {
	t.Helper()
	var arr []map[string]any
	for _, ev := range events {
		arr = append(arr, map[string]any{
			"event_headers": map[string]any{"grnry-event-id": ev[0], "grnry-event-type": typ, "grnry-correlation-id": ev[0]},
			"event_payload": json.RawMessage(ev[1])})
	}
	raw, err := json.Marshal(arr)
	require.NoError(t, err)
	_, err = db.New(pool).EventIngest(context.Background(), raw)
	require.NoError(t, err)
}

func grainsAt(t *testing.T, pool *pgxpool.Pool, path string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM profile.profilestore WHERE path = $1 AND pit = '_latest'`, path).Scan(&n))
	return n
}

// A SQL callback that runs past CALLBACK_TIMEOUT_SEC: the workers find the event among the step's
// lanes, record its timeout (RETRY_MAX_RETRIES 1: one retry, then the dead letters) and process the
// belt's other events meanwhile.
func TestBeltsFindTheEventThatTimesOut(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	belt := beltSetup(t, pool, "sleepy", "tick",
		`SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{done}'), 'yes')
		 FROM (SELECT pg_sleep(CASE WHEN p ? 'slow' THEN 30 ELSE 0 END)) s`,
		map[string]string{"CALLBACK_TIMEOUT_SEC": "0.5", "RETRY_MAX_RETRIES": "1", "RETRY_BACK_OFF_INITIAL_INTERVAL_SEC": "0.2"})
	beltIngest(t, pool, "tick", [2]string{"a", `{}`}, [2]string{"slow", `{"slow": true}`}, [2]string{"b", `{}`}, [2]string{"c", `{}`})

	reg := prometheus.NewRegistry()
	b := NewBelts(pool, BeltConfig{Workers: 1, Registerer: reg, IdleMax: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	b.Start(ctx)
	defer func() { require.NoError(t, b.Stop(ctx)) }()

	var dl struct {
		Error, SQLState string
	}
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT error, sqlstate FROM belt.dead_letters WHERE belt_id = $1`, belt).Scan(&dl.Error, &dl.SQLState)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "SBRTX", dl.SQLState)
	require.Equal(t, "retries exhausted after 1 retries: the callback ran longer than CALLBACK_TIMEOUT_SEC (0.5 s)", dl.Error)
	require.Eventually(t, func() bool { return grainsAt(t, pool, "/done") == 3 }, 10*time.Second, 20*time.Millisecond)
	var doc struct{ Failed, Retried, DeadLettered, LongRunning, Processed int }
	require.NoError(t, pool.QueryRow(ctx, `SELECT api.belt_get($1)`, belt).Scan(&doc))
	require.Equal(t, 3, doc.Processed)
	require.Equal(t, 2, doc.Failed, "two timeouts")
	require.Equal(t, 1, doc.Retried)
	require.Equal(t, 1, doc.DeadLettered)
	require.Equal(t, 2, doc.LongRunning)
	require.GreaterOrEqual(t, counterValue(b.steps.WithLabelValues("timeout")), 2.0)
	require.Equal(t, 3.0, counterValue(b.events.WithLabelValues(fmt.Sprint(belt), "processed")))
}

// An idle worker is woken by the notification of the ingest that starts a lane's backlog, long
// before its poll would come.
func TestBeltsWakeOnIngest(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	beltSetup(t, pool, "awake", "knock", `SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{heard}'), 'yes')`, nil)
	b := NewBelts(pool, BeltConfig{Workers: 1, IdleMax: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	b.Start(ctx)
	defer func() { require.NoError(t, b.Stop(ctx)) }()
	// Let the worker go idle: its first look finds nothing, then it sleeps for up to an hour.
	require.Eventually(t, func() bool { return counterValue(b.steps.WithLabelValues("idle")) >= 3 }, 10*time.Second, 5*time.Millisecond)
	beltIngest(t, pool, "knock", [2]string{"k1", `{}`})
	require.Eventually(t, func() bool { return grainsAt(t, pool, "/heard") == 1 }, 10*time.Second, 10*time.Millisecond)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
