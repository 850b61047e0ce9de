package llama

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// variant turns a gguf.Synth llama model into another test model with the
// gguf writer: another architecture's metadata prefix, attention biases,
// rope frequency factors, extra metadata, or matrices re-encoded in
// another type (for types Synth cannot write yet).
type variant struct {
	arch        string              // "" keeps llama
	biases      bool                // attn_q/k/v biases (and attn_output for llama)
	ropeFactors []float32           // rope_freqs.weight, NRot/2 values
	kv          map[string]any      // set after renaming (keys without the arch prefix get none)
	retype      bool                // re-encode 2-D tensors as typ
	typ         gguf.TensorType     // with retype
	extra       map[string][]uint64 // F32 tensors added (zeros), by dims
}

func rewrite(t testing.TB, f *gguf.File, v variant, seed uint64) *gguf.File {
	t.Helper()
	arch := v.arch
	if arch == "" {
		arch = "llama"
	}
	var w gguf.Writer
	for _, kv := range f.KV {
		key := kv.Key
		if rest, ok := strings.CutPrefix(key, "llama."); ok {
			key = arch + "." + rest
		}
		val := kv.Value
		if key == "general.architecture" {
			val = arch
		}
		if _, over := v.kv[key]; over {
			continue
		}
		w.AddKV(key, val)
	}
	for k, val := range v.kv {
		w.AddKV(k, val)
	}
	var dim, kvDim uint64
	for _, ti := range f.Tensors {
		data := f.TensorData(ti)
		typ := ti.Type
		if v.retype && len(ti.Dims) == 2 {
			x, err := gguf.Decode(ti.Type, data, int(ti.Elements()))
			if err != nil {
				t.Fatal(err)
			}
			if data, err = gguf.Encode(v.typ, x); err != nil {
				t.Fatal(err)
			}
			typ = v.typ
		}
		switch {
		case ti.Name == "blk.0.attn_q.weight":
			dim = ti.Dims[0]
		case ti.Name == "blk.0.attn_k.weight":
			kvDim = ti.Dims[1]
		}
		w.AddTensor(ti.Name, typ, ti.Dims, func() ([]byte, error) { return data, nil })
	}
	rng := rand.New(rand.NewPCG(seed, 77))
	vector := func(name string, n uint64, std float64) {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * std)
		}
		data, _ := gguf.Encode(gguf.F32, x)
		w.AddTensor(name, gguf.F32, []uint64{n}, func() ([]byte, error) { return data, nil })
	}
	if v.biases {
		layers, _ := f.Uint("llama.block_count")
		for l := range int(layers) {
			p := fmt.Sprintf("blk.%d.", l)
			vector(p+"attn_q.bias", dim, 0.5)
			vector(p+"attn_k.bias", kvDim, 0.5)
			vector(p+"attn_v.bias", kvDim, 0.5)
			if arch == "llama" {
				vector(p+"attn_output.bias", dim, 0.5)
			}
		}
	}
	for name, dims := range v.extra {
		n := uint64(1)
		for _, d := range dims {
			n *= d
		}
		x := make([]float32, n)
		data, _ := gguf.Encode(gguf.F32, x)
		w.AddTensor(name, gguf.F32, dims, func() ([]byte, error) { return data, nil })
	}
	if v.ropeFactors != nil {
		data, _ := gguf.Encode(gguf.F32, v.ropeFactors)
		w.AddTensor("rope_freqs.weight", gguf.F32, []uint64{uint64(len(v.ropeFactors))}, func() ([]byte, error) { return data, nil })
	}
	var out bytes.Buffer
	if _, err := w.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// synthFile is gguf.Synth parsed.
func synthFile(t testing.TB, s gguf.Shape, seed uint64) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, s, seed); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// loadVariant builds and loads a variant of a synthetic model.
func loadVariant(t testing.TB, s gguf.Shape, seed uint64, v variant) (*Model, *gguf.File) {
	t.Helper()
	f := rewrite(t, synthFile(t, s, seed), v, seed)
	m, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

// relDiff is max |a−b| over max |b|.
func relDiff(a []float32, b []float64) float64 {
	var maxAbs, maxDiff float64
	for i := range b {
		maxAbs = max(maxAbs, abs(b[i]))
		maxDiff = max(maxDiff, abs(float64(a[i])-b[i]))
	}
	if maxDiff != maxDiff { // NaN
		return maxDiff
	}
	return maxDiff / maxAbs
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}
