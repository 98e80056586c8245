package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// Two silo work processes purge one ODS: River's leader alone schedules the purge, and killing
// the processes with SIGKILL while batches run leaves no unit of work half-deleted and a report
// that counts exactly what was deleted; the processes started again finish the day's purge, even
// after the killed process's purge job was left looking running.
func TestPurgeAcrossKilledWorkProcesses(t *testing.T) {
	t.Parallel()
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)

	const n = 2000
	_, err = conn.Exec(ctx, `
		SELECT * FROM api.ods_ingest((SELECT jsonb_agg(e) FROM (
			SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'PENDING', 'createdAt', now() - interval '3 years') e
			FROM generate_series(1, $1) i
			UNION ALL
			SELECT jsonb_build_object('unitOfWorkId', 'u' || i, 'globalStatus', 'COMPLETED', 'createdAt', now() - interval '3 years')
			FROM generate_series(1, $1) i) x))`, n)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT * FROM api.ods_append((SELECT jsonb_agg(jsonb_build_object('unitOfWorkId', 'u' || i, 'kind', 'MDS',
		'type', 't', 'createdAt', now() - interval '3 years', 'payload', i)) FROM generate_series(1, $1) i))`, n)
	require.NoError(t, err)
	// Small, frequent batches, so that kills land between and inside them.
	_, err = conn.Exec(ctx, `SELECT api.purge_config_set('{"enabled": true, "fetch-size": 16, "parallelism": 4, "frequency": "50ms"}')`)
	require.NoError(t, err)

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "work")
		cmd.Env = cleanEnv("DATABASE_URL="+dbURL, "SILO_LOG_LEVEL=error", "SILO_BELT_WORKERS=0", "SILO_UPDATER_WORKERS=0",
			"SILO_REAPER_INTERVAL=0", "SILO_JOB_RESCUE_AFTER=2s", "SILO_DATA_DIR="+filepath.Join(t.TempDir(), "data"))
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	left := func() int {
		var k int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM ods.unit_of_works`).Scan(&k))
		return k
	}
	// consistent: no summary or object without its unit of work, and the report counts every
	// unit of work that is gone, read in one snapshot: a killed process's last call may still be
	// committing on its backend while this reads.
	consistent := func() {
		var orphans, deleted, remaining int
		require.NoError(t, conn.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM ods.objects o WHERE NOT EXISTS (SELECT FROM ods.unit_of_works u WHERE u.id = o.unit_of_work_id))
			     + (SELECT count(*) FROM ods.summaries s WHERE NOT EXISTS (SELECT FROM ods.unit_of_works u WHERE u.id = s.unit_of_work_id)),
			       coalesce((SELECT unit_of_works_deleted FROM purge.reports WHERE execution_date = (now() AT TIME ZONE 'UTC')::date), 0),
			       (SELECT count(*) FROM ods.unit_of_works)`).
			Scan(&orphans, &deleted, &remaining))
		require.Zero(t, orphans, "a unit of work half-deleted")
		require.Equal(t, n-remaining, deleted, "the report counts what was deleted")
	}

	a, b := start(), start()
	kills := 0
	for deadline := time.Now().Add(3 * time.Minute); left() > 0; {
		require.True(t, time.Now().Before(deadline), "the purge did not finish: %d left", left())
		before := left()
		for time.Now().Before(deadline) && left() > 0 && left() > before-n/8 {
			time.Sleep(20 * time.Millisecond)
		}
		if left() == 0 || kills == 2 {
			continue
		}
		// Both processes die mid-run: one of them held the purge job, which now looks running.
		require.NoError(t, a.Process.Signal(syscall.SIGKILL))
		require.NoError(t, b.Process.Signal(syscall.SIGKILL))
		_, _ = a.Wait(), b.Wait()
		kills++
		consistent()
		a, b = start(), start()
	}
	consistent()
	require.Equal(t, 2, kills)
	var toDelete, overlaps int
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT (SELECT unit_of_works_to_delete FROM purge.reports WHERE execution_date = (now() AT TIME ZONE 'UTC')::date),
		       (SELECT count(*) FROM river_job x JOIN river_job y ON x.id < y.id
		         WHERE x.kind = 'purge' AND y.kind = 'purge' AND x.state = 'completed' AND y.state = 'completed'
		           AND tstzrange(x.attempted_at, x.finalized_at) && tstzrange(y.attempted_at, y.finalized_at))`).Scan(&toDelete, &overlaps))
	require.Equal(t, n, toDelete)
	require.Zero(t, overlaps, "two purge jobs ran at once")
}
