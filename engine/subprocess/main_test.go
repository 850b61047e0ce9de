//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/wire"
)

// fakeBin is the fake runner, built once for the package's tests.
var fakeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fakeengine")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeBin = filepath.Join(dir, "fakeengine")
	out, err := exec.Command("go", "build", "-o", fakeBin, "meshd/engine/subprocess/internal/fakeengine").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake engine: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// noLeaks fails the test if goroutines started during it outlive it. It
// must be called before anything registers a cleanup that ends them.
// Goroutines that are ending (connection loops, process reapers) give no
// event to wait on, so the count is polled; the deadline only bounds how
// long a real leak takes to report, and is generous for a loaded machine.
func noLeaks(t *testing.T) {
	t.Helper()
	base := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for runtime.NumGoroutine() > base {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines leaked: %d now, %d before\n%s", runtime.NumGoroutine(), base, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

func writeModel(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testConfig is a Config for the fake runner with short timings.
func testConfig(t *testing.T, fakeArgs ...string) Config {
	return Config{
		Runner:            fakeBin,
		Model:             writeModel(t, "model.gguf", "weights of "+t.Name()),
		Fidelity:          wire.F1,
		UJPerToken:        1000,
		HealthTimeout:     10 * time.Second,
		HealthInterval:    10 * time.Millisecond,
		StopGrace:         3 * time.Second,
		RestartBackoff:    20 * time.Millisecond,
		MaxRestartBackoff: 200 * time.Millisecond,
		CrashWait:         3 * time.Second,
		ExtraArgs:         fakeArgs,
	}
}

// startEngine creates and starts an engine and stops it at cleanup.
func startEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	e, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	if err := e.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	return e
}

func request(prompt string, maxTokens uint32) (wire.ServeRequest, []byte) {
	p := []byte(prompt)
	return wire.ServeRequest{
		PromptHash:     wire.ContentOf(p),
		PromptTokens:   uint32(len(p)),
		MaxTokens:      maxTokens,
		FidelityFloor:  wire.F0,
		JouleCeilingUJ: 1 << 40,
	}, p
}

func serveCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// procState is a process's state letter from /proc, "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// groupMembers lists the live (non-zombie) processes in process group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		// f[0] state, f[1] ppid, f[2] pgrp
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// eventually polls cond, which must only ever turn true (a file appears, a
// process is gone), for up to 15s: the deadline reports a hang, it does not
// decide the outcome.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
