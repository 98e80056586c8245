package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// buildSilo builds the silo binary, stamped with the version control information of the
// checkout when there is one (whatever GOFLAGS says).
func buildSilo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "silo")
	out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// waitReady waits until the Silo serving on addr answers /readyz with 200, at most 60 s; exited,
// when not nil, is closed when the process has exited, which fails the test at once.
func waitReady(t *testing.T, addr string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("silo on %s exited before it was ready", addr)
		default:
		}
		require.True(t, time.Now().Before(deadline), "silo on %s not ready within 60 s", addr)
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func TestCommands(t *testing.T) {
	bin := buildSilo(t)

	t.Run("up serves, migrates, and stops on SIGTERM", func(t *testing.T) {
		addr := freeAddr(t)
		env := append(os.Environ(), "DATABASE_URL="+dbtest.URL(t), "SILO_ADDR="+addr, "SILO_MQTT_ADDR=off")
		up := exec.Command(bin, "up")
		up.Env = env
		require.NoError(t, up.Start())
		defer up.Process.Kill()

		waitReady(t, addr, nil)

		tok := exec.Command(bin, "token", "create", "--name", "cli", "--write")
		tok.Env = env
		out, err := tok.Output()
		require.NoError(t, err)
		token := strings.TrimSpace(string(out))
		require.True(t, strings.HasPrefix(token, "silo_"), token)

		req, _ := http.NewRequest("POST", "http://"+addr+"/profile-updates",
			strings.NewReader(`{"_id":"cli","_path":["a"],"_value":{"_v":"x"}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)

		psql := exec.Command(bin, "psql", "-XAtc", "SELECT value_text FROM api.profilestore_latest WHERE correlation_id = 'cli'")
		psql.Env = env
		out, err = psql.Output()
		require.NoError(t, err)
		require.Equal(t, "x", strings.TrimSpace(string(out)))

		require.NoError(t, up.Process.Signal(syscall.SIGTERM))
		done := make(chan error, 1)
		go func() { done <- up.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "silo up must exit cleanly on SIGTERM")
		case <-time.After(30 * time.Second):
			t.Fatal("silo up did not stop on SIGTERM")
		}
	})

	t.Run("embedded cluster is started and stopped around a command", func(t *testing.T) {
		base, err := os.MkdirTemp("", "silo-cli-")
		require.NoError(t, err)
		defer os.RemoveAll(base)
		require.NoError(t, os.Chmod(base, 0o755))
		env := append(os.Environ(), "DATABASE_URL=", "SILO_DATA_DIR="+filepath.Join(base, "data"))
		for i := 0; i < 2; i++ { // the second run reuses the cluster made by the first
			cmd := exec.Command(bin, "migrate")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			// A one-shot command's output is its own: the embedded cluster's start and stop are
			// logged at debug only.
			require.NotContains(t, string(out), "PostgreSQL", string(out))
		}
		cmd := exec.Command(bin, "psql", "-XAtc", "SELECT count(*) FROM silo.api_code")
		cmd.Env = env
		out, err := cmd.Output()
		require.NoError(t, err)
		require.Equal(t, "1", strings.TrimSpace(string(out)))
		// Nothing left running on that data directory.
		_, err = os.Stat(filepath.Join(base, "data", "pg", "data", "postmaster.pid"))
		require.True(t, os.IsNotExist(err), "postmaster.pid left behind: server still running")
	})

	t.Run("user create prints the personal token of a new user", func(t *testing.T) {
		env := append(os.Environ(), "DATABASE_URL="+dbtest.URL(t))
		run := func(args ...string) (string, string, int) {
			cmd := exec.Command(bin, args...)
			cmd.Env = env
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			} else {
				require.NoError(t, err)
			}
			return stdout.String(), stderr.String(), code
		}
		_, stderr, code := run("migrate")
		require.Equal(t, 0, code, stderr)
		out, stderr, code := run("user", "create", "--access-name", "cli", "alice")
		require.Equal(t, 0, code, stderr)
		token := strings.TrimSpace(out)
		require.Regexp(t, `^c[0-9a-f]{64}$`, token)
		out, stderr, code = run("psql", "-XAtc", "SELECT a.access_type || ' ' || x.name FROM api.account_authenticate('alice', '"+token+"') a JOIN api.account_accesses x ON x.id = a.access_id")
		require.Equal(t, 0, code, stderr)
		require.Equal(t, "personal cli", strings.TrimSpace(out))

		for _, tc := range []struct{ name, msg string }{
			{"alice", `user "alice" already exists`},
			{"events", "reserved"},
			{"Bob", "a username is 5 to 60 lowercase letters"},
		} {
			out, stderr, code := run("user", "create", tc.name)
			require.Equal(t, 1, code, tc.name)
			require.Empty(t, out, tc.name)
			require.Contains(t, stderr, tc.msg, tc.name)
		}
	})

	t.Run("version and unknown commands", func(t *testing.T) {
		out, err := exec.Command(bin, "version").Output()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(out), "silo "))
		err = exec.Command(bin, "frobnicate").Run()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr)
		require.Equal(t, 2, exitErr.ExitCode(), strconv.Itoa(exitErr.ExitCode()))
	})
}
