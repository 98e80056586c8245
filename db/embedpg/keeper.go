package embedpg

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The keeper is the server's parent process. Start runs this program again with keeperEnv set;
// the package's init then runs keep instead of the program (the re-exec pattern: it works the same
// for the silo binary and for test binaries). It starts postgres and waits:
//
//   - postgres exits (the last user stopped it in Stop, or it failed): the keeper exits;
//   - no lease is left (its users died without Stop, kill -9 included): the keeper stops postgres
//     (fast shutdown) and exits;
//   - the keeper gets SIGTERM or SIGINT: it stops postgres and exits (it ignores SIGHUP).
//
// Should the keeper itself be killed, postgres gets SIGINT from the kernel (Pdeathsig), so no
// server outlives both its users and its keeper.
const keeperEnv = "SILO_EMBEDPG_KEEPER"

// keeperInterval is how often the keeper looks for leases left.
const keeperInterval = 500 * time.Millisecond

type keeperSpec struct {
	Dir      string            `json:"dir"`
	BinDir   string            `json:"bin_dir"`
	Port     int               `json:"port"`
	Settings map[string]string `json:"settings,omitempty"`
}

func init() {
	if spec := os.Getenv(keeperEnv); spec != "" {
		os.Exit(keep(spec))
	}
}

func keep(specJSON string) int {
	// Pdeathsig follows the thread that started the child: keep that thread for the whole run.
	runtime.LockOSThread()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s silo keeper[%d]: %s\n", time.Now().UTC().Format(time.RFC3339), os.Getpid(), fmt.Sprintf(format, args...))
	}
	var spec keeperSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		logf("bad %s: %v", keeperEnv, err)
		return 2
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	signal.Ignore(syscall.SIGHUP)

	pidPath := filepath.Join(spec.Dir, keeperFile)
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		logf("error writing %s: %v", pidPath, err)
		return 1
	}
	defer func() {
		if pid, err := readPid(pidPath); err == nil && pid == os.Getpid() {
			_ = os.Remove(pidPath)
		}
	}()

	cred, err := serverCredential()
	if err != nil {
		logf("%v", err)
		return 1
	}
	dataDir := filepath.Join(spec.Dir, "data")
	args := []string{"-D", dataDir, "-p", strconv.Itoa(spec.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
	}
	keys := make([]string, 0, len(spec.Settings))
	for k := range spec.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+spec.Settings[k])
	}
	cmd := exec.Command(filepath.Join(spec.BinDir, "postgres"), args...)
	cmd.Dir = spec.Dir
	cmd.Env = serverEnv(withoutKeeperEnv(os.Environ()))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // the server log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT}
	if err := cmd.Start(); err != nil {
		logf("error starting postgres: %v", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	stop := func(why string) int {
		logf("%s: stopping PostgreSQL (pid %d)", why, cmd.Process.Pid)
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
			return 0
		case <-time.After(30 * time.Second):
		}
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		return 0
	}
	ticker := time.NewTicker(keeperInterval)
	defer ticker.Stop()
	for {
		select {
		case err := <-done:
			var exitErr *exec.ExitError
			if err != nil && !(errors.As(err, &exitErr) && exitErr.ExitCode() == 0) {
				logf("postgres exited: %v", err)
				return 1
			}
			return 0
		case sig := <-signals:
			return stop("got " + sig.String())
		case <-ticker.C:
			if unused(spec.Dir) {
				return stop("no process uses the cluster any more")
			}
		}
	}
}

// unused reports whether no process holds a lease on the cluster. It looks under the directory's
// lock, so it never races a process that starts, joins or leaves; when the lock is busy it says
// no and the keeper looks again later. On yes the keeper holds the lock until it exits, so nobody
// joins a server it is stopping.
func unused(dir string) bool {
	lock, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	if tryFlock(lock, syscall.LOCK_EX) != nil {
		lock.Close()
		return false
	}
	lease, err := os.OpenFile(filepath.Join(dir, leaseFile), os.O_RDWR, 0)
	if err != nil {
		lock.Close()
		return false
	}
	if tryFlock(lease, syscall.LOCK_EX) != nil {
		lease.Close()
		lock.Close()
		return false
	}
	return true // both stay locked until the keeper exits
}

// MallocTunables is the server's glibc malloc setting, unless GLIBC_TUNABLES is set already.
//
// Why: by default glibc gives memory back to the kernel as soon as 128 kB lie free at the top of
// a process's heap, and serves every allocation of 128 kB or more (up to a threshold it raises
// as it goes) from a mapping of its own, unmapped on free. A backend that allocates and frees the
// same memory over and over then takes a page fault for every page, every time. TimescaleDB's
// compressor does exactly that for every compressed batch it writes (one compressor per column of
// series.points, freed after each batch): writing 100 series of 100 points straight into
// compressed batches cost 2.0 µs a point of CPU, three quarters of it in the kernel, and 0.65 µs
// with this setting. A backend keeps at most 8 MB of freed memory for its next allocations.
// A DBA running Silo on a server of their own sets the same in the server's environment.
const MallocTunables = "glibc.malloc.mmap_threshold=1048576:glibc.malloc.trim_threshold=8388608"

// serverEnv is the environment PostgreSQL runs with: env, and MallocTunables unless env sets
// GLIBC_TUNABLES itself.
func serverEnv(env []string) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GLIBC_TUNABLES=") {
			return env
		}
	}
	return append(env, "GLIBC_TUNABLES="+MallocTunables)
}

func withoutKeeperEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, keeperEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}
