package embedpg_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/embedpg"
)

func TestClusterLifecycle(t *testing.T) {
	ctx := context.Background()
	base, err := os.MkdirTemp("", "silo-embedpg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "nested", "pg")
	opts := embedpg.Options{Dir: dir, Settings: map[string]string{"fsync": "off"}}

	c, err := embedpg.Start(ctx, opts)
	require.NoError(t, err)
	require.True(t, c.Owned())
	pid := c.Pid()
	require.Positive(t, pid)
	write := func(c *embedpg.Cluster, sql string) {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	write(c, `CREATE TABLE kept (x int); INSERT INTO kept VALUES (1)`)

	// A second start on the same data directory reuses the running server and leaves it running.
	c2, err := embedpg.Start(ctx, opts)
	require.NoError(t, err)
	require.False(t, c2.Owned())
	require.Equal(t, c.Port(), c2.Port())
	require.NoError(t, c2.Stop())
	require.NoError(t, syscall.Kill(pid, 0), "the owner's server must still run")

	// Stopping the owner stops the server, by its pid.
	require.NoError(t, c.Stop())
	require.Error(t, syscall.Kill(pid, 0), "server process still alive after Stop")

	// Starting again reuses the cluster (no new initdb): the data is there.
	c3, err := embedpg.Start(ctx, opts)
	require.NoError(t, err)
	defer c3.Stop()
	require.True(t, c3.Owned())
	write(c3, `SELECT 1/x FROM kept`)

	// The server preloads TimescaleDB, telemetry off, exactly when it has it installed; the
	// caller's settings are left as they were.
	bin, err := embedpg.FindBinDir()
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, c3.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var preload, telemetry string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries'),
		coalesce(current_setting('timescaledb.telemetry_level', true), '')`).Scan(&preload, &telemetry))
	if embedpg.TimescaleDBInstalled(bin) {
		require.Equal(t, "timescaledb", preload)
		require.Equal(t, "off", telemetry)
	} else {
		require.Empty(t, preload)
	}
	require.Equal(t, map[string]string{"fsync": "off"}, opts.Settings)

	// The server runs with Silo's malloc setting, unless the caller's environment has its own.
	want := embedpg.MallocTunables
	if own, ok := os.LookupEnv("GLIBC_TUNABLES"); ok {
		want = own
	}
	environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c3.Pid()), "environ"))
	require.NoError(t, err)
	// (glibc cuts the variable at each ':' in place as it reads it, which /proc shows.)
	require.Contains(t, ":"+strings.ReplaceAll(string(environ), "\x00", ":")+":", ":GLIBC_TUNABLES="+want+":")
}
