package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/db/embedpg"
)

// unreachableDB is a DATABASE_URL nobody answers on.
const unreachableDB = "postgres://silo@127.0.0.1:1/silo?sslmode=disable"

type result struct {
	code           int
	stdout, stderr string
}

// cleanEnv is the test's environment without Silo's settings, plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SILO_") && !strings.HasPrefix(kv, "SILO_TEST_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		out = append(out, kv)
	}
	// No MQTT broker unless a test asks for one: the default address (:8883) is one per machine.
	out = append(out, "SILO_MQTT_ADDR=off")
	return append(out, env...)
}

// runSilo runs the binary to its end, within timeout.
func runSilo(t *testing.T, bin string, env []string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "silo %s did not end within %s; stderr: %s", strings.Join(args, " "), timeout, stderr.String())
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		r.code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}

// A workspace whose database does not answer and whose data directory does not exist yet: a
// command that only prints its help leaves both untouched.
func untouchedEnv(t *testing.T) (env []string, dataDir string) {
	base := t.TempDir()
	dataDir = filepath.Join(base, "data")
	return cleanEnv("DATABASE_URL="+unreachableDB, "SILO_DATA_DIR="+dataDir, "SILO_ADDR="+freeAddr(t)), dataDir
}

func requireNoDir(t *testing.T, dir string) {
	t.Helper()
	_, err := os.Stat(dir)
	require.True(t, os.IsNotExist(err), "%s was created: the command did more than print", dir)
}

func TestHelp(t *testing.T) {
	bin := buildSilo(t)
	env, dataDir := untouchedEnv(t)

	// Each command's --help and -h print its usage to stdout, naming its flags and the
	// environment it reads, and do nothing else.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"up", "--help"}, []string{"Usage: silo up", "DATABASE_URL", "SILO_ADDR", "SILO_DATA_DIR", "SILO_UPDATER_WORKERS", "SILO_REAPER_INTERVAL"}},
		{[]string{"up", "-h"}, []string{"Usage: silo up"}},
		{[]string{"migrate", "--help"}, []string{"Usage: silo migrate", "DATABASE_URL", "SILO_DATA_DIR", "SILO_PG_BIN"}},
		{[]string{"migrate", "-h"}, []string{"Usage: silo migrate"}},
		{[]string{"serve", "--help"}, []string{"Usage: silo serve", "DATABASE_URL", "SILO_ADDR", "SILO_MQTT_ADDR", "SILO_MQTT_CERT", "SILO_MQTT_PLAIN"}},
		{[]string{"work", "-h"}, []string{"Usage: silo work", "DATABASE_URL", "SILO_METRICS_ADDR", "SILO_UPDATER_WORKERS"}},
		{[]string{"work", "--help"}, []string{"Usage: silo work"}},
		{[]string{"token", "--help"}, []string{"Usage: silo token", "silo token create", "silo token revoke"}},
		{[]string{"token", "create", "--help"}, []string{"Usage: silo token create", "--name", "--roles", "--write", "--admin", "DATABASE_URL"}},
		{[]string{"token", "revoke", "-h"}, []string{"Usage: silo token revoke", "--name", "DATABASE_URL"}},
		{[]string{"user", "--help"}, []string{"Usage: silo user", "silo user create"}},
		{[]string{"user", "create", "--help"}, []string{"Usage: silo user create", "--access-name", "USERNAME", "DATABASE_URL"}},
		{[]string{"psql", "--help"}, []string{"Usage: silo psql", "DATABASE_URL", "SILO_DATA_DIR"}},
		{[]string{"psql", "-c", "select 1", "-h"}, []string{"Usage: silo psql"}},
		{[]string{"tempdb", "--help"}, []string{"Usage: silo tempdb", "SILO_TEST_DATABASE_URL", "SILO_TEMPDB_DURABLE", "SILO_PG_BIN"}},
		{[]string{"version", "--help"}, []string{"Usage: silo version"}},
		{[]string{"help", "migrate"}, []string{"Usage: silo migrate"}},
		{[]string{"help", "token", "create"}, []string{"Usage: silo token create", "--name"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			start := time.Now()
			r := runSilo(t, bin, env, 10*time.Second, tc.args...)
			require.Equal(t, 0, r.code, r.stderr)
			require.Empty(t, r.stderr)
			for _, w := range tc.want {
				require.Contains(t, r.stdout, w)
			}
			require.Contains(t, r.stdout, "-h, --help")
			require.Less(t, time.Since(start), 5*time.Second, "help must not wait for a database")
			requireNoDir(t, dataDir)
		})
	}

	// silo --help, -h and help list every command.
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runSilo(t, bin, env, 10*time.Second, args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr)
		for _, c := range []string{"up", "migrate", "serve", "work", "token create", "token revoke", "user create", "psql", "tempdb", "version"} {
			require.Contains(t, r.stdout, "  "+strings.SplitN(c, " ", 2)[0]+" ", "%v lists %s", args, c)
			require.Contains(t, r.stdout, c)
		}
	}
	requireNoDir(t, dataDir)
}

// A bad command line prints the usage to stderr and exits 2, running nothing.
func TestUsageErrors(t *testing.T) {
	bin := buildSilo(t)
	env, dataDir := untouchedEnv(t)
	for _, tc := range []struct {
		args      []string
		msg, want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, "Usage: silo COMMAND"},
		{[]string{"--bogus"}, "unknown flag --bogus", "Usage: silo COMMAND"},
		{[]string{"migrate", "--bogus"}, "flag provided but not defined: -bogus", "Usage: silo migrate"},
		{[]string{"up", "-x"}, "flag provided but not defined: -x", "Usage: silo up"},
		{[]string{"serve", "now"}, `unexpected argument "now"`, "Usage: silo serve"},
		{[]string{"token"}, "token needs a command", "Usage: silo token"},
		{[]string{"token", "frob"}, `unknown command "token frob"`, "Usage: silo token"},
		{[]string{"token", "create"}, "--name is required", "Usage: silo token create"},
		{[]string{"token", "revoke", "--name", "x", "--admin"}, "flag provided but not defined: -admin", "Usage: silo token revoke"},
		{[]string{"user"}, "user needs a command", "Usage: silo user"},
		{[]string{"user", "frob"}, `unknown command "user frob"`, "Usage: silo user"},
		{[]string{"user", "create"}, "user create needs one USERNAME", "Usage: silo user create"},
		{[]string{"user", "create", "alice", "bob"}, "user create needs one USERNAME", "Usage: silo user create"},
		{[]string{"tempdb"}, "tempdb needs a command", "Usage: silo tempdb"},
		{[]string{"tempdb", "--bogus", "true"}, "flag provided but not defined: -bogus", "Usage: silo tempdb"},
		{[]string{"help", "frob"}, `unknown command "frob"`, "Usage: silo help"},
		{[]string{"ws"}, "ws needs one URL", "Usage: silo ws"},
		{[]string{"ws", "-H", "no-colon", "ws://localhost:1/"}, `-H "no-colon": want 'Name: value'`, "Usage: silo ws"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runSilo(t, bin, env, 10*time.Second, tc.args...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Empty(t, r.stdout)
			require.Contains(t, r.stderr, tc.msg)
			require.Contains(t, r.stderr, tc.want)
			requireNoDir(t, dataDir)
		})
	}
}

func TestVersion(t *testing.T) {
	bin := buildSilo(t)
	a := runSilo(t, bin, cleanEnv(), 10*time.Second, "version")
	b := runSilo(t, bin, cleanEnv(), 10*time.Second, "--version")
	require.Equal(t, 0, a.code)
	require.Equal(t, 0, b.code)
	require.Equal(t, a.stdout, b.stdout)
	if err := exec.Command("git", "rev-parse", "HEAD").Run(); err != nil {
		// Not a git checkout: the binary has no commit to name, and says so.
		require.Equal(t, "silo (devel: built without version control information, as with -buildvcs=false)\n", a.stdout)
		return
	}
	require.NotContains(t, a.stdout, "devel")
	// A build from a checkout that is not at a tag: the commit, its time, and "dirty" when the
	// work tree had changes.
	m := regexp.MustCompile(`^silo ([0-9a-f]{12}) \((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)(, dirty)?\)\n$`).FindStringSubmatch(a.stdout)
	if m == nil {
		require.Regexp(t, `^silo v\d+\.\d+\.\d+\S*\n$`, a.stdout, "neither a commit nor a release version")
		return
	}
	out, err := exec.Command("git", "cat-file", "-t", m[1]).Output()
	require.NoError(t, err, "%s is not a commit of this repository", m[1])
	require.Equal(t, "commit", strings.TrimSpace(string(out)))
	out, err = exec.Command("git", "show", "-s", "--format=%cI", m[1]).Output()
	require.NoError(t, err)
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	require.NoError(t, err)
	require.Equal(t, at.UTC().Format(time.RFC3339), m[2])
}

// Startup fails at once, with one line naming the setting to change and exit status 1.
func TestStartupFailsFast(t *testing.T) {
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	for _, tc := range []struct {
		name     string
		args     []string
		env      []string
		contains []string
	}{
		{"malformed SILO_ADDR", []string{"up"}, []string{"SILO_ADDR=nonsense", "DATABASE_URL=" + dbURL},
			[]string{`SILO_ADDR="nonsense" is not a listen address`}},
		{"SILO_ADDR in use, up", []string{"up"}, []string{"SILO_ADDR=" + taken.Addr().String(), "DATABASE_URL=" + dbURL},
			[]string{"SILO_ADDR=" + taken.Addr().String(), "already in use"}},
		{"SILO_ADDR in use, serve", []string{"serve"}, []string{"SILO_ADDR=" + taken.Addr().String(), "DATABASE_URL=" + dbURL},
			[]string{"SILO_ADDR=" + taken.Addr().String(), "already in use"}},
		{"SILO_METRICS_ADDR in use", []string{"work"}, []string{"SILO_METRICS_ADDR=" + taken.Addr().String(), "DATABASE_URL=" + dbURL},
			[]string{"SILO_METRICS_ADDR=" + taken.Addr().String(), "already in use"}},
		{"SILO_ADDR in use, embedded database", []string{"up"}, []string{"SILO_ADDR=" + taken.Addr().String()},
			[]string{"SILO_ADDR=" + taken.Addr().String(), "already in use"}},
		{"DATABASE_URL unreachable, up", []string{"up"}, []string{"SILO_ADDR=" + freeAddr(t), "DATABASE_URL=" + unreachableDB},
			[]string{"DATABASE_URL", "cannot connect", "connection refused"}},
		{"DATABASE_URL unreachable, work", []string{"work"}, []string{"DATABASE_URL=" + unreachableDB},
			[]string{"DATABASE_URL", "cannot connect"}},
		{"DATABASE_URL unreachable, migrate", []string{"migrate"}, []string{"DATABASE_URL=" + unreachableDB},
			[]string{"DATABASE_URL", "cannot connect"}},
		{"SILO_PG_BIN without postgres", []string{"migrate"}, []string{"SILO_PG_BIN=/nonexistent"},
			[]string{"SILO_PG_BIN=/nonexistent holds no postgres binary"}},
		{"SILO_MQTT_ADDR in use", []string{"serve"}, []string{"SILO_ADDR=" + freeAddr(t), "SILO_MQTT_ADDR=" + taken.Addr().String(), "DATABASE_URL=" + dbURL},
			[]string{"SILO_MQTT_ADDR=" + taken.Addr().String(), "already in use"}},
		{"plain MQTT off loopback", []string{"serve"}, []string{"SILO_ADDR=" + freeAddr(t), "SILO_MQTT_ADDR=0.0.0.0:18830", "SILO_MQTT_PLAIN=1", "DATABASE_URL=" + dbURL},
			[]string{"SILO_MQTT_PLAIN=1", "loopback address only"}},
		{"MQTT certificate without key", []string{"up"}, []string{"SILO_ADDR=" + freeAddr(t), "SILO_MQTT_ADDR=127.0.0.1:18831", "SILO_MQTT_CERT=/etc/hostname", "DATABASE_URL=" + dbURL},
			[]string{"SILO_MQTT_CERT and SILO_MQTT_KEY go together"}},
		{"DATABASE_URL malformed", []string{"serve"}, []string{"SILO_ADDR=" + freeAddr(t), "DATABASE_URL=postgres://silo:s3cret@host:notaport/silo"},
			[]string{"DATABASE_URL is not a valid PostgreSQL connection string", "invalid port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			r := runSilo(t, bin, cleanEnv(append(tc.env, "SILO_DATA_DIR="+dataDir)...), 30*time.Second, tc.args...)
			require.Equal(t, 1, r.code, r.stderr)
			require.Empty(t, r.stdout)
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line, not a log of what started anyway:\n%s", r.stderr)
			require.True(t, strings.HasPrefix(lines[0], "silo: "), lines[0])
			for _, c := range tc.contains {
				require.Contains(t, lines[0], c)
			}
			require.NotContains(t, lines[0], "s3cret")
			requireNoDir(t, dataDir) // the embedded cluster was not started either
		})
	}
}

// Two Silo processes on one embedded cluster: stopping the one that started the server leaves it
// to the other; the last one out stops it, and the next start takes the same port again.
func TestSharedEmbeddedCluster(t *testing.T) {
	bin := buildSilo(t)
	base, err := os.MkdirTemp("", "silo-shared-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	pgDir := filepath.Join(base, "data", "pg")
	t.Cleanup(func() {
		stopLeftovers(t, pgDir)
		os.RemoveAll(base)
	})
	env := cleanEnv("SILO_DATA_DIR="+filepath.Join(base, "data"), "SILO_LOG_LEVEL=warn")

	type proc struct {
		cmd    *exec.Cmd
		addr   string
		done   chan struct{}
		stderr bytes.Buffer
	}
	start := func(command string) *proc {
		p := &proc{addr: freeAddr(t), done: make(chan struct{})}
		p.cmd = exec.Command(bin, command)
		p.cmd.Env = append(env, "SILO_ADDR="+p.addr)
		p.cmd.Stderr = &p.stderr
		require.NoError(t, p.cmd.Start())
		go func() {
			_ = p.cmd.Wait()
			close(p.done)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.done
		})
		return p
	}
	readyz := func(p *proc) int {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + p.addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitProc := func(p *proc) {
		deadline := time.Now().Add(120 * time.Second)
		for readyz(p) != 200 {
			select {
			case <-p.done:
				t.Fatalf("%s exited: %s", p.cmd.Args[1], p.stderr.String())
			default:
			}
			require.True(t, time.Now().Before(deadline), "%s not ready: %s", p.cmd.Args[1], p.stderr.String())
			time.Sleep(100 * time.Millisecond)
		}
	}
	interrupt := func(p *proc) {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		select {
		case <-p.done:
			require.True(t, p.cmd.ProcessState.Success(), "%s: %s", p.cmd.ProcessState, p.stderr.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop on SIGINT", p.cmd.Args[1])
		}
	}
	port := func() string {
		r := runSilo(t, bin, env, 60*time.Second, "psql", "-XAtc", "SHOW port")
		require.Equal(t, 0, r.code, r.stderr)
		require.Empty(t, r.stderr, "silo psql must print psql's output only")
		return strings.TrimSpace(r.stdout)
	}

	a := start("up")
	waitProc(a)
	b := start("serve")
	waitProc(b)
	before := port()
	pid, err := postmasterPid(pgDir)
	require.NoError(t, err)

	interrupt(a)
	// Longer than the keeper takes to notice a server without users.
	for i := 0; i < 4; i++ {
		require.Equal(t, 200, readyz(b), "silo serve lost the database when silo up stopped")
		time.Sleep(500 * time.Millisecond)
	}
	require.True(t, embedpg.Alive(pid), "the server stopped under silo serve")

	interrupt(b)
	requireServerStopped(t, pgDir, pid)

	require.Equal(t, before, port(), "the server must come back on its port")
	requireServerStopped(t, pgDir, 0)
}

func postmasterPid(pgDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(pgDir, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
}

// requireServerStopped checks that neither the server (pid, when known) nor its keeper runs for
// the cluster in pgDir.
func requireServerStopped(t *testing.T, pgDir string, pid int) {
	t.Helper()
	_, err := os.Stat(filepath.Join(pgDir, "data", "postmaster.pid"))
	require.True(t, os.IsNotExist(err), "postmaster.pid left: the server still runs")
	_, err = os.Stat(filepath.Join(pgDir, "keeper.pid"))
	require.True(t, os.IsNotExist(err), "keeper.pid left: the keeper still runs")
	if pid > 0 {
		require.False(t, embedpg.Alive(pid), "postgres (pid %d) still runs", pid)
	}
}

// stopLeftovers stops, by pid, a server or keeper a failed test left behind in pgDir.
func stopLeftovers(t *testing.T, pgDir string) {
	for _, f := range []string{"data/postmaster.pid", "keeper.pid"} {
		b, err := os.ReadFile(filepath.Join(pgDir, f))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil && pid > 0 {
			t.Logf("stopping %s (pid %d) left behind", f, pid)
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
}
