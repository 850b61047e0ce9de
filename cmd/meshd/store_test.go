package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/internal/testbin"
)

// The built daemon and meshctl, black-box: a second daemon on the same
// state directory is refused, naming the first's pid, after every lock and
// pid file is deleted, while the first serves on; a state directory made
// by another hand under umask 0 ends with no file group or others can
// read; meshctl verify refuses an empty directory and the state directory
// with its "not a log" status and verifies the log itself.
func TestStateLockAndPrivateFiles(t *testing.T) {
	bin := buildMeshd(t)
	meshctl := testbin.Build(t, "meshd/cmd/meshctl")
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	// Made by another hand, readable by all, as an installer would.
	if err := os.MkdirAll(filepath.Join(state, "receipts"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(state, 0o755)
	os.Chmod(filepath.Join(state, "receipts"), 0o755)
	if err := os.WriteFile(filepath.Join(state, "notes"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(state, "notes"), 0o644)
	cfgPath := filepath.Join(dir, "meshd.toml")
	cfg := fmt.Sprintf("[steward]\nstate_dir = %q\ncheckpoint_every = 2\n\n[listen]\ntcp = [\"127.0.0.1:0\"]\n\n[log]\nformat = \"json\"\n%s", state, loadBackends)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The child inherits umask 0: every file it creates is private only
	// because it asks for that mode.
	old := syscall.Umask(0)
	a := startChild(t, bin, cfgPath)
	syscall.Umask(old)
	serve := func(i int) {
		t.Helper()
		resp, err := http.Post(a.base+"/v1/serve", "application/json", strings.NewReader(fmt.Sprintf(`{"prompt":"lock %d","max_tokens":4}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("serve %d: status %d", i, resp.StatusCode)
		}
	}
	for i := range 3 {
		serve(i)
	}

	var deleted []string
	filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.Contains(strings.ToLower(d.Name()), "lock") || strings.HasSuffix(d.Name(), ".pid")) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			deleted = append(deleted, strings.TrimPrefix(p, state+"/"))
		}
		return nil
	})
	if len(deleted) < 3 {
		t.Fatalf("deleted %v, want meshd.pid, receipts/LOCK and ledger.lock at least", deleted)
	}

	// The second daemon must exit refused; it is never ready. The
	// timeout only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	b := exec.CommandContext(ctx, bin, "serve", "-config", cfgPath)
	b.Stdout, b.Stderr = &out, &out
	err := b.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("second daemon after deleting %v: %v, want a refusal\n%s", deleted, err, out.String())
	}
	for _, want := range []string{"already open by another writer", fmt.Sprintf("pid %d", a.cmd.Process.Pid), state} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second daemon's refusal does not say %q:\n%s", want, out.String())
		}
	}
	t.Logf("second daemon refused: %s", strings.TrimSpace(out.String()))
	if strings.Contains(out.String(), `"msg":"listening"`) {
		t.Errorf("the second daemon listened:\n%s", out.String())
	}
	for i := 3; i < 6; i++ {
		serve(i)
	}
	a.terminate()

	// No file under the state directory is readable by group or others.
	n := 0
	filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, err := d.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %#o after a serve: group or others may read it", p, fi.Mode().Perm())
		}
		n++
		return nil
	})
	if n < 7 { // state, receipts, notes, a segment, checkpoints, ledger, key
		t.Fatalf("only %d entries under %s", n, state)
	}

	verify := func(path string) (int, string) {
		out, err := exec.Command(meshctl, "verify", "-q", path).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("meshctl verify %s: %v", path, err)
		return 0, ""
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		path string
		code int
		says string
	}{
		{empty, 5, "not a log: " + empty},
		{state, 5, filepath.Join(state, "receipts")},
		{filepath.Join(state, "receipts"), 0, "log OK: 6 receipts"},
	} {
		if code, out := verify(tc.path); code != tc.code || !strings.Contains(out, tc.says) {
			t.Errorf("meshctl verify %s: exit %d, want %d saying %q:\n%s", tc.path, code, tc.code, tc.says, out)
		}
	}
}
