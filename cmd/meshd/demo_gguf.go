package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/wire"
)

// demoShape is small enough to synthesise and load in a second, large
// enough that every token is real model arithmetic.
var demoShape = gguf.Shape{Layers: 4, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 512, Ctx: 512, Type: gguf.Q8_0}

// startDemoGGUF synthesises a model (once per demo directory) and starts
// mesh-gguf on it as a supervised subprocess. It returns nil, nil when the
// runner is not installed, saying so, so the demo still runs from `go run`.
func startDemoGGUF(ctx context.Context, dir string, stdout io.Writer) (*subprocess.Engine, error) {
	runner, err := findRunner()
	if err != nil {
		fmt.Fprintf(stdout, "note: %v; serving without the GGUF engine (`make demo` builds it)\n", err)
		return nil, nil
	}
	model := filepath.Join(dir, "demo-synth-q8_0.gguf")
	if _, err := os.Stat(model); errors.Is(err, os.ErrNotExist) {
		if err := writeModel(model); err != nil {
			return nil, err
		}
	}
	e, err := subprocess.New(ctx, subprocess.Config{
		Name:        "gguf-synth",
		Runner:      runner,
		Model:       model,
		ContextSize: 512,
		Fidelity:    wire.F2,
		UJPerToken:  120,
	})
	if err != nil {
		return nil, err
	}
	if err := e.Start(ctx); err != nil {
		return nil, fmt.Errorf("demo: start the GGUF engine: %w", err)
	}
	fmt.Fprintf(stdout, "GGUF engine: mesh-gguf pid %d on %s (%s)\n", e.PID(), filepath.Base(model), e.Recipe())
	return e, nil
}

func findRunner() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), subprocess.DefaultRunner)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(subprocess.DefaultRunner)
	if err != nil {
		return "", fmt.Errorf("%s not found next to meshd or on PATH", subprocess.DefaultRunner)
	}
	return p, nil
}

func writeModel(path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := gguf.Synth(f, demoShape, 1); err != nil {
		f.Close()
		return fmt.Errorf("demo: synthesise model: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
