package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"meshd/internal/testbin"
)

// A clean run logs its lifecycle at INFO: the only warning of the demo's
// daemon is the missing rollback witness (it has none, and that deserves
// one), the engine's start, health and stop are INFO with pid and port as
// fields, and the ledger's recovery is fields, not a struct dump.
func TestCleanRunLogLevels(t *testing.T) {
	bin := testbin.Build(t, "meshd/cmd/meshd")
	testbin.Build(t, "meshd/cmd/mesh-gguf") // beside meshd, where the demo finds it
	dir := t.TempDir()
	out, err := exec.Command(bin, "demo", "-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	logs, err := os.ReadFile(filepath.Join(dir, "meshd.log"))
	if err != nil {
		t.Fatal(err)
	}
	allowedWarn := []string{"no rollback witness"}
	var warns []string
	for line := range strings.Lines(string(logs)) {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		ok := false
		for _, a := range allowedWarn {
			ok = ok || strings.Contains(line, a)
		}
		if !ok {
			warns = append(warns, line)
		}
	}
	if len(warns) != 0 {
		t.Errorf("a clean run logged %d warnings or errors:\n%s", len(warns), strings.Join(warns, ""))
	}
	for _, re := range []string{
		`level=INFO msg="engine started" backend=gguf-synth runner=\S+ pid=\d+ port=\d+`,
		`level=INFO msg="engine healthy" backend=gguf-synth pid=\d+ recipe=gguf:[0-9a-f]+ context=512`,
		`level=INFO msg="engine stopped" backend=gguf-synth pid=\d+ exit="exit status 0"`,
		`level=INFO msg="grant ledger recovered" path=\S+ records=0 torn_bytes=0 settled=0 released=0 corrected=0`,
	} {
		if !regexp.MustCompile(re).Match(logs) {
			t.Errorf("log lacks %s:\n%s", re, logs)
		}
	}
	if bytes.Contains(logs, []byte("{Records:")) {
		t.Errorf("log holds a struct dump:\n%s", logs)
	}
}

// A daemon that cannot start says why once, not once logged and again on
// exit.
func TestFatalErrorPrintedOnce(t *testing.T) {
	bin := testbin.Build(t, "meshd/cmd/meshd")
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-model.gguf")
	cfg := fmt.Sprintf("[steward]\nstate_dir = %q\n\n[listen]\ntcp = [\"127.0.0.1:0\"]\n\n[[backend]]\nname = \"g\"\nkind = \"mesh-gguf\"\nmodel = %q\nfidelity = 2\nuj_per_token = 10\n",
		filepath.Join(dir, "state"), missing)
	path := filepath.Join(dir, "meshd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "serve", "-config", path)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve: %v, want exit 1\n%s", err, stderr.String())
	}
	n := 0
	for line := range strings.Lines(stderr.String()) {
		if strings.Contains(line, missing) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d lines name %s, want one:\n%s", n, missing, stderr.String())
	}
	// The missing model is found by the start's configuration checks
	// (the same as check-config's), before anything opens: reported as
	// the config's problem, with its line and key.
	if first, _, _ := strings.Cut(stderr.String(), "\n"); !strings.HasPrefix(first, "meshd: ") || !strings.Contains(first, " in "+path) ||
		!strings.Contains(stderr.String(), path+":10:1: backend[0].model: ") {
		t.Errorf("stderr lacks the fatal line:\n%s", stderr.String())
	}
}
