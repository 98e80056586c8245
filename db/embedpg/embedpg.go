// Package embedpg runs a private PostgreSQL cluster for Silo: the embedded default of `silo up`
// when DATABASE_URL is unset, and the throw-away cluster of the test harness.
//
// It owns one data directory: initdb on first start, then the postgres server on 127.0.0.1 and a
// free port. Started as root, it runs initdb and the server as the operating-system user postgres
// (initdb refuses root). The server runs in its own process group and is stopped by its pid with a
// fast shutdown; a cluster that is already running in the same data directory is reused, not
// started twice, and left running when this process stops.
package embedpg

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure a cluster.
type Options struct {
	// Dir holds the cluster: Dir/data is the data directory, Dir/log the server log.
	Dir string
	// BinDir holds initdb and postgres. Empty: $SILO_PG_BIN, else the newest
	// /usr/lib/postgresql/*/bin, else the directory of `pg_config --bindir`.
	BinDir string
	// Settings are extra server settings (name → value), e.g. fsync=off for tests.
	Settings map[string]string
	// Log receives progress messages; nil discards them.
	Log func(format string, args ...any)
	// Port to listen on; 0 picks a free one. A restart on the port of the previous run keeps the
	// URLs that clients hold valid.
	Port int
}

// Cluster is a running (or reused) server.
type Cluster struct {
	opts  Options
	port  int
	cmd   *exec.Cmd
	owned bool
	done  chan struct{}
	err   error
	once  sync.Once
}

// Start initialises the cluster if its data directory is new, then starts the server, or attaches
// to the server already running in that data directory. It returns once the server accepts
// connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("error resolving cluster directory: %w", err)
	}
	opts.Dir = dir
	if opts.BinDir == "" {
		if opts.BinDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, cred); err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "data")

	if port, ok := runningPort(dataDir); ok {
		c := &Cluster{opts: opts, port: port, done: make(chan struct{})}
		if err := c.waitReady(ctx, 10*time.Second); err == nil {
			opts.Log("reusing the PostgreSQL server already running in %s on port %d", dataDir, port)
			return c, nil
		}
	}

	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		opts.Log("initialising a PostgreSQL cluster in %s", dataDir)
		initdb := exec.CommandContext(ctx, filepath.Join(opts.BinDir, "initdb"),
			"-D", dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		initdb.Dir = dir
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("error running initdb: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}

	port := opts.Port
	if port == 0 {
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	args := []string{"-D", dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
	}
	keys := make([]string, 0, len(opts.Settings))
	for k := range opts.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+opts.Settings[k])
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("error opening server log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(opts.BinDir, "postgres"), args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a Ctrl-C reaches Silo, which stops the server after its own shutdown.
	// Pdeathsig: should Silo die without stopping it, the server still gets a fast shutdown.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("error starting postgres: %w", err)
	}
	c := &Cluster{opts: opts, port: port, cmd: cmd, owned: true, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	opts.Log("started PostgreSQL (pid %d) on 127.0.0.1:%d", cmd.Process.Pid, port)
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("%w (server log: %s)", err, filepath.Join(dir, "log"))
	}
	return c, nil
}

// Port is the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// URL is a connection string for database dbname as user postgres.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, dbname)
}

// Owned reports whether this process started the server (and so stops it).
func (c *Cluster) Owned() bool { return c.owned }

// Pid is the postmaster's process id, 0 for a reused server.
func (c *Cluster) Pid() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Stop shuts a server this process started down (fast shutdown by its pid) and waits for it to
// exit; a reused server is left running.
func (c *Cluster) Stop() error {
	if !c.owned {
		return nil
	}
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	var exitErr *exec.ExitError
	if c.err != nil && !errors.As(c.err, &exitErr) {
		return c.err
	}
	return nil
}

func (c *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, c.URL("postgres"))
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited during start-up: %v", c.err)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres not ready on port %d: %w", c.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FindBinDir locates the PostgreSQL server binaries.
func FindBinDir() (string, error) {
	if d := os.Getenv("SILO_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found: install PostgreSQL (Debian: apt-get install postgresql) or set SILO_PG_BIN")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// serverCredential is the user the server runs as: postgres when we are root, else ourselves.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root, but there is no postgres user to run the server as (initdb refuses root)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func prepareDir(dir string, cred *syscall.Credential) error {
	// Parents are created searchable, so the postgres user can reach the cluster directory.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("error creating cluster directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("error creating cluster directory: %w", err)
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("error handing %s to the postgres user: %w", dir, err)
	}
	// The postgres user must be able to reach the directory through every ancestor.
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != cred.Uid && fi.Mode().Perm()&0o001 == 0 && !(st.Gid == cred.Gid && fi.Mode().Perm()&0o010 != 0) {
			return fmt.Errorf("the postgres user cannot reach %s (directory %s is not searchable by others): set SILO_DATA_DIR to a directory outside it", dir, d)
		}
		if d == "/" {
			return nil
		}
	}
}

// runningPort reads postmaster.pid of a live server in dataDir.
func runningPort(dataDir string) (int, bool) {
	f, err := os.Open(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if len(lines) < 4 {
		return 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	return port, true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("error finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
