package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"meshd/steward"
	"meshd/wire"
)

func serveOne(t *testing.T, n *Node) {
	t.Helper()
	p := []byte("hello there")
	req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 1, JouleCeilingUJ: 1e6}
	if _, err := n.Agent.Serve(context.Background(), req, p); err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// A second node on the same state directory is refused, naming the
// holder's pid, even after every file whose name holds "lock" (or "pid")
// is deleted.
func TestSecondNodeRefusedAfterDeletingLockFiles(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := Open(ctx, parse(t, dir, two), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	deleted := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.Contains(strings.ToLower(d.Name()), "lock") || strings.HasSuffix(d.Name(), ".pid")) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
		return nil
	})
	if deleted < 3 { // meshd.pid, receipts/LOCK, ledger.lock
		t.Fatalf("deleted %d lock files, want at least 3", deleted)
	}
	_, err = Open(ctx, parse(t, dir, two), Options{})
	if !errors.Is(err, steward.ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second open = %v, want ErrLocked naming %s and pid %d", err, dir, os.Getpid())
	}
	serveOne(t, n)
}

// With the key gone and a log present, the node refuses to start, names
// the missing key, and writes no new one.
func TestMissingKeyBesideLogNotCreated(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := Open(ctx, parse(t, dir, two), Options{})
	if err != nil {
		t.Fatal(err)
	}
	serveOne(t, n)
	n.Close(ctx)
	key := filepath.Join(dir, "steward.key")
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, parse(t, dir, two), Options{})
	if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("open without the key = %v, want a refusal naming %s", err, key)
	}
	if _, err := os.Lstat(key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a key was created beside the existing log: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), "steward.key") {
			t.Fatalf("stray key file %s left behind", e.Name())
		}
	}
}

// A state directory (or key) others may write to is refused with its path
// and mode; one others may only read is made private with all in it,
// whatever the umask.
func TestStateDirPermissions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		umask   int
		dirMode os.FileMode
		keyMode os.FileMode // 0: leave the key as created
		refused string
	}{
		{"umask 0, readable dir made private", 0, 0o755, 0, ""},
		{"umask 077", 0o077, 0o700, 0, ""},
		{"group-writable dir refused", 0o022, 0o775, 0, "mode 0775"},
		{"world-writable dir refused", 0, 0o777, 0, "mode 0777"},
		{"group-writable key refused", 0, 0o700, 0o620, "too open"},
		{"world-readable key refused", 0, 0o700, 0o644, "too open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := syscall.Umask(tc.umask)
			defer syscall.Umask(old)
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "state")
			n, err := Open(ctx, parse(t, dir, two), Options{})
			if err != nil {
				t.Fatal(err)
			}
			serveOne(t, n)
			n.Close(ctx)
			// Another hand loosens what exists, as an installer or a
			// unit's StateDirectory= would.
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, _ error) error {
				switch {
				case d.IsDir():
					os.Chmod(p, 0o755)
				case d.Name() != "steward.key":
					os.Chmod(p, 0o644)
				}
				return nil
			})
			os.Chmod(dir, tc.dirMode)
			if tc.keyMode != 0 {
				os.Chmod(filepath.Join(dir, "steward.key"), tc.keyMode)
			}
			n, err = Open(ctx, parse(t, dir, two), Options{})
			if tc.refused != "" {
				if err == nil {
					n.Close(ctx)
				}
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("open = %v, want a refusal naming %s and %q", err, dir, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			serveOne(t, n)
			n.Close(ctx)
			checkPrivate(t, dir)
		})
	}
}

// checkPrivate fails unless every directory under dir is 0700 and every
// file 0600.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
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
			t.Errorf("%s is %#o, want %#o", p, fi.Mode().Perm(), want)
		}
		n++
		return nil
	})
	if n < 7 { // state, receipts, a segment, checkpoints, LOCK, ledger, key
		t.Fatalf("only %d entries under %s", n, dir)
	}
}
