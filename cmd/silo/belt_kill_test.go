package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// silo work processes that are killed with SIGKILL while they run a belt lose no event and apply
// none twice: each correlation id's counter ends at exactly its number of events, and its
// appended sequence is in the order the events were stored.
func TestBeltWorkersKilledMidDrain(t *testing.T) {
	t.Parallel()
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)

	// A callback slow enough (2 ms an event) that a kill lands mid-step.
	_, err = conn.Exec(ctx, `CREATE FUNCTION public.tally(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $f$
		SELECT jsonb_build_array(
			api.set_value(api.update(h ->> 'grnry-correlation-id', '{n}', '_inc'), '0|1|1'),
			api.set_value(api.update(h ->> 'grnry-correlation-id', '{seq}', '_array_append'), jsonb_build_array(p ->> 'i')))
		FROM (SELECT pg_sleep(0.002)) s $f$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT api.belt_create('{"name": "tally", "eventTypes": ["hit"], "sqlCallback": "tally"}')`)
	require.NoError(t, err)
	const ids, per = 30, 40
	var events []map[string]any
	for i := range per {
		for c := range ids {
			events = append(events, map[string]any{
				"event_headers": map[string]any{"grnry-event-id": fmt.Sprintf("h-%d-%d", c, i), "grnry-event-type": "hit",
					"grnry-correlation-id": fmt.Sprintf("k%02d", c)},
				"event_payload": map[string]any{"i": fmt.Sprintf("%03d", i)}})
		}
	}
	raw, err := json.Marshal(events)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT count(*) FROM api.event_ingest($1::jsonb)`, string(raw))
	require.NoError(t, err)

	left := func() int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM event.deliveries`).Scan(&n))
		return n
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "work")
		cmd.Env = cleanEnv("DATABASE_URL="+dbURL, "SILO_LOG_LEVEL=error", "SILO_BELT_WORKERS=2", "SILO_UPDATER_WORKERS=0",
			"SILO_REAPER_INTERVAL=0", "SILO_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	// Kill the workers whenever they have made some progress, until the belt is drained.
	total := left()
	kills := 0
	for deadline := time.Now().Add(3 * time.Minute); left() > 0; {
		require.True(t, time.Now().Before(deadline), "events left: %d", left())
		cmd := start()
		before := left()
		for time.Now().Before(deadline) && left() > max(before-total/6, 0) && left() > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(kills%3) * 15 * time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		kills++
	}
	require.GreaterOrEqual(t, kills, 3)
	t.Logf("%d kills of silo work while %d events were processed", kills, total)

	want := make([]string, per)
	for i := range per {
		want[i] = fmt.Sprintf("%03d", i)
	}
	for c := range ids {
		var n string
		var seq []string
		require.NoError(t, conn.QueryRow(ctx, `
			SELECT (SELECT value ->> '_current' FROM profile.profilestore WHERE correlation_id = $1 AND path = '/n' AND pit = '_latest'),
			       array(SELECT jsonb_array_elements_text(value) FROM profile.profilestore WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest')`,
			fmt.Sprintf("k%02d", c)).Scan(&n, &seq))
		require.Equal(t, fmt.Sprint(per), n, "k%02d: every event applied once (%d kills)", c, kills)
		require.Equal(t, want, seq, "k%02d: in order", c)
	}
	var processed int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (api.belt_get(id) ->> 'processed')::int FROM belt.belts WHERE name = 'tally'`).Scan(&processed))
	require.Equal(t, ids*per, processed)
}
