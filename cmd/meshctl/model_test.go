package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// TestModelSynthEveryType synthesises a small model of every type and
// mixture through the command line, then reads it back with model info:
// the file must hold the types the preset assigns.
func TestModelSynthEveryType(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		typ   string
		label string
		types []string // tensor types model info must list
	}{
		{"f32", "f32", []string{"f32"}},
		{"q4_0", "q4_0", []string{"q4_0"}},
		{"q4_1", "q4_1", []string{"q4_1"}},
		{"q5_0", "q5_0", []string{"q5_0"}},
		{"q5_1", "q5_1", []string{"q5_1"}},
		{"q4_k", "q4_k", []string{"q4_k"}},
		{"q5_k", "q5_k", []string{"q5_k"}},
		{"q6_k", "q6_k", []string{"q6_k"}},
		{"q4_k_m", "q4_k_m", []string{"q4_k", "q6_k"}},
		{"q5_k_m", "q5_k_m", []string{"q5_k", "q6_k"}},
	} {
		path := filepath.Join(dir, tc.typ+".gguf")
		var out, errb bytes.Buffer
		args := []string{"model", "synth", "-o", path, "-layers", "2", "-dim", "256", "-heads", "4", "-kv-heads", "2", "-ff", "512", "-vocab", "300", "-ctx", "64", "-type", tc.typ}
		if err := run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%s: %v\n%s", tc.typ, err, errb.String())
		}
		if !strings.Contains(out.String(), ", "+tc.label+",") {
			t.Errorf("%s: synth said %q", tc.typ, out.String())
		}
		out.Reset()
		if err := run(context.Background(), []string{"model", "info", path}, &out, &errb); err != nil {
			t.Fatalf("%s info: %v", tc.typ, err)
		}
		for _, ty := range tc.types {
			if !strings.Contains(out.String(), "\n  "+ty+" ") {
				t.Errorf("%s: info lists no %s tensors:\n%s", tc.typ, ty, out.String())
			}
		}
	}
}

// TestModelSynthRejects: unknown types and shapes a type cannot hold
// are usage errors, and no file is left behind.
func TestModelSynthRejects(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-type", "q3_k_m"},
		{"-type", "q4_k", "-dim", "288", "-heads", "4", "-kv-heads", "2"}, // pure K-quant needs dim % 256
	} {
		path := filepath.Join(dir, "bad.gguf")
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"model", "synth", "-o", path, "-vocab", "300"}, args...), &out, &errb)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
		if _, err := gguf.Open(path); err == nil {
			t.Errorf("%v: left a file", args)
		}
	}
}
