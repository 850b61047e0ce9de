package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The ledger's lock is on the ledger file itself: deleting the pid file
// beside it frees nothing, and neither does a compaction, which replaces
// the file by rename.
func TestLockSurvivesDeletedLockFileAndCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	log := &receipts{}
	l, _, err := Open(path, nil, Options{Anchor: log.anchor})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	refused := func(when string) {
		t.Helper()
		_, _, err := Open(path, log.all(), Options{})
		if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Fatalf("second open %s: %v, want ErrLocked naming %s and pid %d", when, err, path, os.Getpid())
		}
	}
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	refused("after deleting the lock file")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	log.serve(t, l, gid(1), 1000, 100, 40)
	if ok, err := l.Compact(log.anchor); !ok || err != nil {
		t.Fatalf("compact: %v, %v", ok, err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(before, after) {
		t.Fatal("compaction did not replace the file; the test proves nothing")
	}
	os.Remove(path + ".lock")
	refused("after a compaction")
	log.serve(t, l, gid(1), 1000, 100, 40)
	if b := balance(t, l, gid(1)); b.SpentUJ != 80 {
		t.Fatalf("balance %+v, want spent 80", b)
	}
}

// The ledger is 0600 whatever the umask, and one made world-readable by
// another hand is made private at open.
func TestLedgerPrivate(t *testing.T) {
	for _, mask := range []int{0, 0o077} {
		t.Run(fmt.Sprintf("umask %04o", mask), func(t *testing.T) {
			old := syscall.Umask(mask)
			defer syscall.Umask(old)
			path := filepath.Join(t.TempDir(), "ledger")
			log := &receipts{}
			l, _ := open(t, path, nil)
			log.serve(t, l, gid(1), 1000, 100, 40)
			if ok, err := l.Compact(log.anchor); !ok || err != nil {
				t.Fatalf("compact: %v, %v", ok, err)
			}
			l.Close()
			for _, p := range []string{path, path + ".lock"} {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v, %v; want 0600", p, fi.Mode().Perm(), err)
				}
			}
			os.Chmod(path, 0o644)
			l, _ = open(t, path, log.all())
			l.Close()
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Fatalf("reopened %s is %v, want 0600", path, fi.Mode().Perm())
			}
		})
	}
}
