package steward

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The receipt log's lock is on its directory: deleting every file whose
// name holds "lock" while a writer has the log open leaves a second
// writer refused, naming the holder's pid, and the first writer appends on.
func TestLogLockSurvivesDeletedLockFiles(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "receipts")
	st, l, _ := openTestLog(t, dir, k, LogOptions{})
	defer l.Close()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, e := range ents {
		if strings.Contains(strings.ToLower(e.Name()), "lock") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no lock file in %s to delete: %v", dir, ents)
	}
	_, _, err = OpenLog(bg, dir, LogOptions{Key: k})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open after deleting the lock files = %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("lock error %q does not name the holder (%s)", err, want)
	}
	if _, err := RepairLog(bg, dir, k.Public(), false); !errors.Is(err, ErrLocked) {
		t.Fatalf("repair while open = %v, want ErrLocked", err)
	}
	if _, err := st.Seal(bg, draft(1)); err != nil {
		t.Fatalf("the holder can no longer append: %v", err)
	}
}

// Whatever the umask, and whoever made the directory, an opened log is
// 0700 with 0600 files.
func TestLogFilesPrivate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		umask   int
		premade bool // the directory and a segment exist, world-readable
	}{
		{"umask 0", 0, false},
		{"umask 077", 0o077, false},
		{"umask 0, made 0755 by another", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := syscall.Umask(tc.umask)
			defer syscall.Umask(old)
			k := testKey(t)
			dir := filepath.Join(t.TempDir(), "receipts")
			if tc.premade {
				_, l, _ := openTestLog(t, dir, k, LogOptions{})
				l.Close()
				filepath.WalkDir(dir, func(p string, d fs.DirEntry, _ error) error {
					if d.IsDir() {
						return os.Chmod(p, 0o755)
					}
					return os.Chmod(p, 0o644)
				})
			}
			st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: 1})
			if _, err := st.Seal(bg, draft(1)); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			n := 0
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				fi, _ := d.Info()
				want := fs.FileMode(0o600)
				if d.IsDir() {
					want = 0o700
				}
				if fi.Mode().Perm() != want {
					t.Errorf("%s is %04o, want %04o", p, fi.Mode().Perm(), want)
				}
				n++
				return nil
			})
			if n < 4 { // the directory, a segment, checkpoints, the pid file
				t.Fatalf("only %d entries under %s", n, dir)
			}
		})
	}
}
