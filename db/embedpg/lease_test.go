package embedpg_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/embedpg"
)

// holderEnv makes this test binary a lease holder (holdLease) for the cluster in that directory.
const holderEnv = "SILO_EMBEDPG_TEST_HOLDER"

var fastSettings = map[string]string{"fsync": "off"}

// TestMain runs the tests, or, in a process started by startHolder, holds a lease instead.
func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		holdLease(dir)
	}
	os.Exit(m.Run())
}

// holdLease joins (or starts) the cluster in dir, prints its port and pid, and keeps its lease until
// stdin closes; then it leaves and the process exits.
func holdLease(dir string) {
	c, err := embedpg.Start(context.Background(), embedpg.Options{Dir: dir, Settings: fastSettings})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready", c.Port(), c.Pid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = c.Stop()
	os.Exit(0)
}

type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	port  int
	pid   int // the postmaster
	done  chan struct{}
}

// startHolder runs a lease holder in its own process and waits until it holds its lease.
func startHolder(t *testing.T, dir string) *holder {
	t.Helper()
	h := &holder{done: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	h.cmd.Stderr = os.Stderr
	var err error
	h.stdin, err = h.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := h.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, h.cmd.Start())
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		<-h.done
	})
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "ready ") || strings.HasPrefix(s.Text(), "error ") {
				lines <- s.Text()
			}
		}
		_ = h.cmd.Wait()
		close(h.done)
	}()
	select {
	case line := <-lines:
		f := strings.Fields(line)
		require.Equal(t, "ready", f[0], line)
		h.port, _ = strconv.Atoi(f[1])
		h.pid, _ = strconv.Atoi(f[2])
	case <-h.done:
		t.Fatal("the lease holder exited before it was ready")
	case <-time.After(90 * time.Second):
		t.Fatal("the lease holder did not get ready")
	}
	return h
}

func newClusterDir(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "silo-embedpg-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "pg")
	t.Cleanup(func() {
		stopLeftovers(t, dir)
		os.RemoveAll(base)
	})
	return dir
}

// stopLeftovers stops, by pid, a server or keeper a failed test left behind in dir.
func stopLeftovers(t *testing.T, dir string) {
	for _, f := range []string{"data/postmaster.pid", "keeper.pid"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil && pid > 0 {
			t.Logf("stopping %s (pid %d) left behind", f, pid)
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
}

// requireStopped checks that no server and no keeper run for dir any more, waiting up to timeout.
func requireStopped(t *testing.T, dir string, pid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, errPid := os.Stat(filepath.Join(dir, "data", "postmaster.pid"))
		_, errKeeper := os.Stat(filepath.Join(dir, "keeper.pid"))
		if !embedpg.Alive(pid) && os.IsNotExist(errPid) && os.IsNotExist(errKeeper) {
			return
		}
		require.True(t, time.Now().Before(deadline), "server (pid %d) or keeper still running for %s", pid, dir)
		time.Sleep(50 * time.Millisecond)
	}
}

func requireAnswers(t *testing.T, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.Ping(ctx))
}

// The server keeps its port across restarts, so the URLs and pools of its users stay valid; when
// another program took the port meanwhile, it picks a free one.
func TestPortKeptAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	dir := newClusterDir(t)
	opts := embedpg.Options{Dir: dir, Settings: fastSettings}
	c, err := embedpg.Start(ctx, opts)
	require.NoError(t, err)
	port := c.Port()
	require.NoError(t, c.Stop())

	c, err = embedpg.Start(ctx, opts)
	require.NoError(t, err)
	require.True(t, c.Owned())
	require.Equal(t, port, c.Port(), "a restart must keep the port")
	require.NoError(t, c.Stop())

	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	require.NoError(t, err)
	defer l.Close()
	c, err = embedpg.Start(ctx, opts)
	require.NoError(t, err)
	require.NotEqual(t, port, c.Port())
	requireAnswers(t, c.Port())
	require.NoError(t, c.Stop())
}

// A process that started the server leaves (or dies): the others keep it; the last one stops it.
func TestServerOutlivesTheProcessThatStartedIt(t *testing.T) {
	ctx := context.Background()
	dir := newClusterDir(t)
	for _, how := range []string{"stdin closed (Stop)", "kill -9"} {
		t.Run(how, func(t *testing.T) {
			a := startHolder(t, dir)
			b, err := embedpg.Start(ctx, embedpg.Options{Dir: dir})
			require.NoError(t, err)
			require.False(t, b.Owned())
			require.Equal(t, a.port, b.Port())
			require.Equal(t, a.pid, b.Pid())

			if how == "kill -9" {
				require.NoError(t, a.cmd.Process.Kill())
			} else {
				require.NoError(t, a.stdin.Close())
			}
			select {
			case <-a.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the first process did not exit")
			}
			// Longer than the keeper's look for leases left: the dead process's lease is gone, B's holds.
			time.Sleep(1500 * time.Millisecond)
			requireAnswers(t, b.Port())
			require.True(t, embedpg.Alive(a.pid), "the server stopped under the process still using it")

			require.NoError(t, b.Stop())
			requireStopped(t, dir, a.pid, 0)
		})
	}
}

// Every user is killed: no lease is left, so the keeper stops the server by itself.
func TestKeeperStopsTheServerOfDeadUsers(t *testing.T) {
	dir := newClusterDir(t)
	a := startHolder(t, dir)
	b := startHolder(t, dir)
	require.Equal(t, a.pid, b.pid)
	require.NoError(t, a.cmd.Process.Kill())
	<-a.done
	time.Sleep(1500 * time.Millisecond)
	requireAnswers(t, b.port)
	require.NoError(t, b.cmd.Process.Kill())
	<-b.done
	requireStopped(t, dir, a.pid, 30*time.Second)
}

// Users leaving at the same moment never leave the server running without users.
func TestUsersLeavingAtOnce(t *testing.T) {
	ctx := context.Background()
	dir := newClusterDir(t)
	opts := embedpg.Options{Dir: dir, Settings: fastSettings}
	for round := 0; round < 3; round++ {
		first, err := embedpg.Start(ctx, opts)
		require.NoError(t, err)
		clusters := []*embedpg.Cluster{first}
		for i := 0; i < 3; i++ {
			c, err := embedpg.Start(ctx, opts)
			require.NoError(t, err)
			require.False(t, c.Owned())
			clusters = append(clusters, c)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(clusters))
		for i, c := range clusters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = c.Stop()
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		requireStopped(t, dir, first.Pid(), 0)
	}
}
