package framelog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Lock is an exclusive, non-blocking flock on a store's directory or on
// the data file being written. The kernel drops it when the holder exits,
// however it exits. It is never held on a file of its own: a lock file can
// be deleted (a pid inside one invites a "stale lock" clean-up), and a
// second writer would then lock a new file beside the first writer's open
// one. A directory or a data file that is deleted takes the store with it.
type Lock struct {
	f   *os.File
	own bool // f was opened for the lock and is closed by Release
}

// LockDir takes the exclusive lock on the directory dir itself. A second
// LockDir of the same directory, from this process or another, fails with
// ErrLocked naming the holder's pid. If pidName is set, the holder writes
// its pid into dir/pidName (mode 0600): information for an operator only,
// whose deletion changes nothing.
func LockDir(dir, pidName string) (*Lock, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	pidPath := ""
	if pidName != "" {
		pidPath = filepath.Join(dir, pidName)
	}
	if err := flock(f, dir, pidPath); err != nil {
		f.Close()
		return nil, err
	}
	if pidPath != "" {
		WritePid(pidPath)
	}
	return &Lock{f: f, own: true}, nil
}

// LockOpen takes the exclusive lock on the open data file f (named path).
// The returned Lock lives as long as f: Release does not close it, and
// closing f releases the lock. A refusal names the holder, reading pidPath
// (if set) where the kernel's table does not say; the holder writes it
// with WritePid once it knows the lock is the one it wanted.
func LockOpen(f *os.File, path, pidPath string) (*Lock, error) {
	if err := flock(f, path, pidPath); err != nil {
		return nil, err
	}
	return &Lock{f: f}, nil
}

// Release drops the lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	var err error
	if l.own {
		err = l.f.Close()
	}
	l.f = nil
	return err
}

func flock(f *os.File, path, pidPath string) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return fmt.Errorf("%s: %w%s", path, ErrLocked, holder(f, pidPath))
	default:
		return fmt.Errorf("lock %s: %w", path, err)
	}
}

// holder names the process holding the lock on f: from the kernel's own
// table (/proc/locks), which cannot go stale, else from the pid file.
func holder(f *os.File, pidPath string) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil {
		if pid := lockHolder(uint64(st.Dev), st.Ino); pid > 0 {
			return fmt.Sprintf(" (held by pid %d)", pid)
		}
	}
	if pidPath != "" {
		if pid := readPid(pidPath); pid > 0 {
			return fmt.Sprintf(" (held by pid %d, as %s says)", pid, pidPath)
		}
	}
	return " (the holder's pid is unknown)"
}

// lockHolder returns the pid /proc/locks gives for the flock write lock on
// the inode (dev, ino), or 0. A line reads
//
//	1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF
//
// with the device as hexadecimal major:minor. Blocked waiters ("->") are
// skipped. Where the table is unreadable or the pid namespaces differ, the
// answer is 0 and the pid file speaks instead.
func lockHolder(dev, ino uint64) int {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" || fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

func readPid(path string) int {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// WritePid records the holder's pid at path, best effort: the file is
// information, not the lock, so failing to write it refuses nothing.
func WritePid(path string) {
	if err := RegularOrAbsent(path); err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_ = f.Chmod(0o600)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// Private takes group and other permissions off dir and everything under
// it: a store created under a lax umask, or by another program, becomes
// 0700/0600 when it is opened for writing. Symbolic links are not followed
// (a chmod would act on their target) and other kinds of file are left
// alone.
func Private(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(path, perm&^0o077); err != nil {
				return fmt.Errorf("make %s private: %w", path, err)
			}
		}
		return nil
	})
}
