// Package testbin builds the project's commands for tests that run them as
// processes (the GGUF runner an engine supervises, the daemon a test kills),
// once per test binary.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	dir    string
	builds = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// Build returns the path of pkg (an import path such as
// "meshd/cmd/mesh-gguf") built into a directory shared by the test
// binary's tests; a failed build fails the test with the compiler's
// output. The directory outlives the tests that share it and is removed
// with the system's temporary files.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	mu.Lock()
	if dir == "" {
		d, err := os.MkdirTemp("", "meshd-testbin-")
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		dir = d
	}
	b := builds[pkg]
	if b == nil {
		b = &build{path: filepath.Join(dir, filepath.Base(pkg))}
		builds[pkg] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		b.out, b.err = exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, b.err, b.out)
	}
	return b.path
}
