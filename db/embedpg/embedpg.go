// Package embedpg runs a private PostgreSQL cluster for Silo: the embedded default of `silo up`
// when DATABASE_URL is unset, and the throw-away cluster of the test harness.
//
// It owns one cluster directory: initdb on first start, then the postgres server on 127.0.0.1.
// Started as root, it runs initdb and the server as the operating-system user postgres (initdb
// refuses root).
//
// Any number of processes may use one cluster directory at once; the last one out stops the
// server. The directory holds, next to data/ and the server log:
//
//   - lease: every process (every Start) that uses the server holds a shared flock on it until
//     Stop. The kernel drops the lock of a process that dies, even by kill -9, so a dead process
//     never keeps the server alive.
//   - lock: an exclusive flock held while a process starts, joins or leaves the server. Leaving
//     under it is what makes "last one out" exact: Stop gives its lease up, then tries to take
//     the lease exclusively; only a process that finds no other lease stops the server, and two
//     processes leaving at once cannot both see the other one still there.
//   - port: the port of the server's last run. A new run takes it again when it is free, so
//     connection strings and pools keep working across a restart.
//   - keeper.pid: the keeper, a small process (this program started again, see keeper.go) that is
//     the server's parent. It runs in its own session, so a Ctrl-C meant for one Silo process never
//     reaches the server, and it stops the server once no lease is left: the last user stops it
//     at once in Stop, and the keeper covers users that died without calling Stop.
package embedpg

import (
	"bufio"
	"context"
	"encoding/json"
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
	// Settings are extra server settings (name → value), e.g. fsync=off for tests. They apply when
	// this call starts the server; a server already running keeps its own. When the server has
	// TimescaleDB installed, it is preloaded (shared_preload_libraries = timescaledb, telemetry
	// off) unless Settings names shared_preload_libraries itself ("" preloads nothing).
	Settings map[string]string
	// Log receives progress messages; nil discards them.
	Log func(format string, args ...any)
	// Port to listen on; 0 takes the port of the previous run when it is free, else a free one.
	Port int
}

// Cluster is this process's use of a running server, started or joined by Start.
type Cluster struct {
	opts    Options
	port    int
	pid     int  // the postmaster
	owned   bool // this Start started the server
	lease   *os.File
	keeper  *exec.Cmd // the keeper this Start spawned, if any
	kdone   chan struct{}
	once    sync.Once
	stopErr error
}

const (
	leaseFile  = "lease"
	lockFile   = "lock"
	portFile   = "port"
	keeperFile = "keeper.pid"

	// lockTimeout bounds the wait for another process starting or stopping the server.
	lockTimeout = 2 * time.Minute
)

// Start initialises the cluster if its data directory is new, then starts the server, or joins
// the server already running in that data directory. It returns once the server accepts
// connections; the caller holds a lease on the server until Stop.
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

	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	lease, err := takeLease(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, lease: lease}
	ok := false
	defer func() {
		if !ok {
			c.abandon()
		}
	}()

	if pid, port, running := postmaster(dataDir); running {
		c.pid, c.port = pid, port
		if err := c.waitReady(ctx, 60*time.Second); err != nil {
			return nil, fmt.Errorf("a PostgreSQL server (pid %d) runs in %s but does not answer on port %d: %w", pid, dataDir, port, err)
		}
		opts.Log("using the PostgreSQL server already running in %s on port %d (pid %d)", dataDir, port, pid)
		ok = true
		return c, nil
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

	if c.port, err = choosePort(dir, opts.Port, opts.Log); err != nil {
		return nil, err
	}
	if _, set := opts.Settings["shared_preload_libraries"]; !set && TimescaleDBInstalled(opts.BinDir) {
		c.opts.Settings = withTimescaleDB(opts.Settings)
		opts.Log("preloading TimescaleDB")
	}
	if err := c.spawnKeeper(); err != nil {
		return nil, err
	}
	c.owned = true
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		return nil, fmt.Errorf("%w (server log: %s)", err, filepath.Join(dir, "log"))
	}
	if pid, _, running := postmaster(dataDir); running {
		c.pid = pid
	}
	opts.Log("started PostgreSQL (pid %d) on 127.0.0.1:%d", c.pid, c.port)
	ok = true
	return c, nil
}

// Port is the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// URL is a connection string for database dbname as user postgres.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, dbname)
}

// Owned reports whether this Start started the server (rather than joined a running one).
func (c *Cluster) Owned() bool { return c.owned }

// Pid is the postmaster's process id.
func (c *Cluster) Pid() int { return c.pid }

// Stop gives this process's lease up. The last user out stops the server (fast shutdown) and
// waits until it and its keeper have exited; otherwise the server is left to the others.
func (c *Cluster) Stop() error {
	c.once.Do(func() { c.stopErr = c.leave() })
	return c.stopErr
}

func (c *Cluster) leave() error {
	dir := c.opts.Dir
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		_ = c.lease.Close() // still leave: the keeper stops the server once no lease is left
		return err
	}
	defer unlock()
	_ = syscall.Flock(int(c.lease.Fd()), syscall.LOCK_UN)
	_ = c.lease.Close()

	last, err := os.OpenFile(filepath.Join(dir, leaseFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("error opening the lease file: %w", err)
	}
	defer last.Close()
	if err := syscall.Flock(int(last.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		c.opts.Log("left PostgreSQL running in %s: other processes use it", dir)
		return nil
	}
	pid, _, running := postmaster(filepath.Join(dir, "data"))
	if running {
		if err := stopServer(pid, nil); err != nil {
			return err
		}
		c.opts.Log("stopped PostgreSQL (pid %d)", pid)
	}
	c.waitKeeper(10 * time.Second)
	return nil
}

// abandon undoes a Start that failed: it stops the keeper it spawned, then gives the lease up.
func (c *Cluster) abandon() {
	if c.keeper != nil {
		_ = c.keeper.Process.Signal(syscall.SIGTERM) // the keeper stops the server, then exits
		select {
		case <-c.kdone:
		case <-time.After(60 * time.Second):
			_ = c.keeper.Process.Kill()
			<-c.kdone
		}
	}
	_ = c.lease.Close()
}

// waitKeeper waits until the keeper of the server just stopped has exited too.
func (c *Cluster) waitKeeper(timeout time.Duration) {
	if c.keeper != nil {
		select {
		case <-c.kdone:
		case <-time.After(timeout):
		}
		return
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pid, err := readPid(filepath.Join(c.opts.Dir, keeperFile))
		if err != nil || !Alive(pid) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spawnKeeper starts the keeper, which starts the server (keeper.go).
func (c *Cluster) spawnKeeper() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("error finding this program to run the PostgreSQL keeper: %w", err)
	}
	spec, err := json.Marshal(keeperSpec{Dir: c.opts.Dir, BinDir: c.opts.BinDir, Port: c.port, Settings: c.opts.Settings})
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(c.opts.Dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("error opening server log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(exe)
	// The arguments only name the process in ps: keeperEnv makes it the keeper before any flag or
	// command is read.
	cmd.Args = []string{exe, "postgresql-keeper", c.opts.Dir}
	cmd.Dir = c.opts.Dir
	cmd.Env = append(withoutKeeperEnv(os.Environ()), keeperEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = logFile, logFile // never the caller's: a pipe held open would hang its reader
	// Its own session: no signal meant for this process or its terminal reaches the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("error starting the PostgreSQL keeper: %w", err)
	}
	c.keeper, c.kdone = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(c.kdone)
	}()
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
		if c.kdone != nil {
			select {
			case <-c.kdone:
				return fmt.Errorf("postgres exited during start-up: %s", c.keeper.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres not ready on port %d: %w", c.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// choosePort picks the server's port and records it: the one asked for, else the previous run's
// when it is free, else a free one.
func choosePort(dir string, want int, log func(string, ...any)) (int, error) {
	path := filepath.Join(dir, portFile)
	port := want
	if port == 0 {
		if b, err := os.ReadFile(path); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 && p < 65536 {
				if portFree(p) {
					port = p
				} else {
					log("port %d of the previous run is taken: choosing another", p)
				}
			}
		}
	}
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return 0, err
		}
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
		return 0, fmt.Errorf("error recording the server's port: %w", err)
	}
	return port, nil
}

// FindBinDir locates the PostgreSQL server binaries.
func FindBinDir() (string, error) {
	if d := os.Getenv("SILO_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err != nil {
			return "", fmt.Errorf("SILO_PG_BIN=%s holds no postgres binary: set it to the bin directory of a PostgreSQL installation", d)
		}
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

// TimescaleDBInstalled reports whether the PostgreSQL of binDir has TimescaleDB installed: its
// loader library, timescaledb.so, in the server's library directory (pg_config --pkglibdir, else
// binDir/../lib or binDir/../lib/postgresql). Silo's migrations create the extension in a database
// only when the server preloads it.
func TimescaleDBInstalled(binDir string) bool {
	var dirs []string
	if out, err := exec.Command(filepath.Join(binDir, "pg_config"), "--pkglibdir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	dirs = append(dirs, filepath.Join(binDir, "..", "lib"), filepath.Join(binDir, "..", "lib", "postgresql"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "timescaledb.so")); err == nil {
			return true
		}
	}
	return false
}

// withTimescaleDB returns a copy of settings that preloads TimescaleDB with its telemetry off
// (nothing is sent anywhere), keeping a telemetry level the caller set.
func withTimescaleDB(settings map[string]string) map[string]string {
	out := make(map[string]string, len(settings)+2)
	for k, v := range settings {
		out[k] = v
	}
	out["shared_preload_libraries"] = "timescaledb"
	if _, set := out["timescaledb.telemetry_level"]; !set {
		out["timescaledb.telemetry_level"] = "off"
	}
	return out
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

// postmaster reads postmaster.pid of a live server in dataDir: its pid and port.
func postmaster(dataDir string) (pid, port int, ok bool) {
	f, err := os.Open(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if len(lines) < 4 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(strings.TrimSpace(lines[0]))
	port, err2 := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err1 != nil || err2 != nil || pid <= 0 || !Alive(pid) {
		return 0, 0, false
	}
	return pid, port, true
}

// stopServer asks the postmaster for a fast shutdown and waits until it has exited; after 30 s it
// asks for an immediate shutdown. done, when not nil, closes when the postmaster has exited.
func stopServer(pid int, done <-chan struct{}) error {
	gone := func(timeout time.Duration) bool {
		deadline := time.Now().Add(timeout)
		for {
			if done != nil {
				select {
				case <-done:
					return true
				default:
				}
			} else if !Alive(pid) {
				return true
			}
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("error stopping PostgreSQL (pid %d): %w", pid, err)
	}
	if gone(30 * time.Second) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGQUIT)
	if gone(30 * time.Second) {
		return nil
	}
	return fmt.Errorf("PostgreSQL (pid %d) did not stop", pid)
}

// Alive reports whether process pid exists and is not a zombie waiting for its parent (the tests
// of the cluster's sharing ask it of servers and keepers too).
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses and may hold anything.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("error finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
