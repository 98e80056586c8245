package embedpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockDir takes the cluster directory's lock (exclusive), waiting while another process starts,
// joins or leaves the server. The returned func releases it.
func lockDir(ctx context.Context, dir string) (func(), error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("error opening %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	for {
		err := tryFlock(f, syscall.LOCK_EX)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("error locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another process holds %s (it is starting or stopping the server): %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// takeLease takes this process's shared lock on the lease file; it is held until the file is
// closed. Callers hold the directory's lock, under which nobody holds the lease exclusively.
func takeLease(dir string) (*os.File, error) {
	path := filepath.Join(dir, leaseFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("error opening %s: %w", path, err)
	}
	if err := tryFlock(f, syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("error taking a lease on %s: %w", path, err)
	}
	return f, nil
}

// tryFlock takes a flock without waiting; EWOULDBLOCK means another holder conflicts.
func tryFlock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
