package framelog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The lock is the directory's: deleting the pid file beside it, or every
// file in the directory, leaves a second locker refused, and the refusal
// still names the holder (from the kernel's lock table, or the pid file).
func TestLockDirSurvivesDeletedFiles(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(t *testing.T, dir string)
	}{
		{"nothing deleted", func(*testing.T, string) {}},
		{"pid file deleted", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "LOCK")); err != nil {
				t.Fatal(err)
			}
		}},
		{"pid file replaced", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "LOCK"), []byte("1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := LockDir(dir, "LOCK")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			if b, err := os.ReadFile(filepath.Join(dir, "LOCK")); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
				t.Fatalf("pid file %q, %v; want our pid %d", b, err, os.Getpid())
			}
			tc.remove(t, dir)
			_, err = LockDir(dir, "LOCK")
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("second lock = %v, want ErrLocked naming %s", err, dir)
			}
			// The kernel's table names the holder where it can see it; a
			// pid file that lies is what remains otherwise.
			if pid := lockHolder(statOf(t, dir)); pid != 0 && !strings.Contains(err.Error(), fmt.Sprintf("held by pid %d)", os.Getpid())) {
				t.Fatalf("second lock = %v, want it to name pid %d", err, os.Getpid())
			} else if pid == 0 && tc.name == "nothing deleted" && !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
				t.Fatalf("second lock = %v, want it to name pid %d", err, os.Getpid())
			}
			l.Release()
			l2, err := LockDir(dir, "LOCK")
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			l2.Release()
		})
	}
}

func statOf(t *testing.T, path string) (dev, ino uint64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Dev), st.Ino
}

// A data file's own lock: a second opener of the same inode is refused;
// the Lock does not close the file it locks.
func TestLockOpen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data")
	f, err := OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	l, err := LockOpen(f, path, path+".pid")
	if err != nil {
		t.Fatal(err)
	}
	g, err := OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := LockOpen(g, path, path+".pid"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock = %v, want ErrLocked", err)
	}
	l.Release()
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatalf("Release closed the locked file: %v", err)
	}
	f.Close()
	if _, err := LockOpen(g, path, ""); err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
}

// Files are created private and Private tightens what exists, whatever
// the umask; links are not followed.
func TestPrivate(t *testing.T) {
	for _, mask := range []int{0, 0o022, 0o077} {
		t.Run(fmt.Sprintf("umask %04o", mask), func(t *testing.T) {
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			dir := t.TempDir()
			f, err := OpenFile(filepath.Join(dir, "new"), true)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if fi, _ := os.Stat(filepath.Join(dir, "new")); fi.Mode().Perm() != 0o600 {
				t.Fatalf("created %v, want 0600", fi.Mode().Perm())
			}
			sub := filepath.Join(dir, "sub")
			os.Mkdir(sub, 0o755)
			os.Chmod(sub, 0o755)
			os.WriteFile(filepath.Join(sub, "old"), nil, 0o666)
			os.Chmod(filepath.Join(sub, "old"), 0o666)
			outside := filepath.Join(t.TempDir(), "target")
			os.WriteFile(outside, nil, 0o644)
			os.Chmod(outside, 0o644)
			os.Symlink(outside, filepath.Join(dir, "link"))
			os.Chmod(dir, 0o755)
			if err := Private(dir); err != nil {
				t.Fatal(err)
			}
			for path, want := range map[string]os.FileMode{dir: 0o700, sub: 0o700, filepath.Join(sub, "old"): 0o600, outside: 0o644} {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s: %v (%v), want %v", path, fi.Mode().Perm(), err, want)
				}
			}
		})
	}
}
