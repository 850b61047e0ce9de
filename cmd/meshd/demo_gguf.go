package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"meshd/agent/config"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
)

// demoShape is small enough to synthesise and load in a second, large
// enough that every token is real model arithmetic.
var demoShape = gguf.Shape{Layers: 4, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 512, Ctx: 512, Type: gguf.Q8_0}

// demoChatTemplate is the synthetic model's chat template (ChatML, as
// Qwen and SmolLM use): a synthesised GGUF carries none, and a real model's
// own template is what the engine renders in production.
const demoChatTemplate = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"

// demoGGUF synthesises a model (once per demo directory) and returns the
// backend that runs mesh-gguf on it. It returns nil, nil when the runner
// is not installed, saying so, so the demo still runs from `go run`.
func demoGGUF(dir string, stdout io.Writer) (*config.Backend, error) {
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
	return &config.Backend{Name: "gguf-synth", Kind: "mesh-gguf", Runner: runner, Model: model, Context: 512,
		Fidelity: 2, UJPerToken: 120, ExtraArgs: []string{"--chat-template", demoChatTemplate}}, nil
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
