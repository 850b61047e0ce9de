// Package llama owns the llama-architecture forward pass on the CPU: the
// model's weights as quantised matrices over a GGUF file, the KV cache,
// sampling, and generation with prompt-prefix reuse.
package llama

import (
	"fmt"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/tokenizer"
)

// Config is the architecture read from llama.* metadata.
type Config struct {
	Layers   int
	Dim      int
	Heads    int
	KVHeads  int
	HeadDim  int
	FF       int
	Vocab    int
	CtxTrain int
	RopeBase float64
	NRot     int
	Eps      float32
}

// Model is a loaded llama model. Its matrices alias the GGUF file, which
// must stay open while the model is used.
type Model struct {
	Config
	Tok     *tokenizer.Tokenizer
	Name    string
	embd    *kernels.Matrix
	layers  []layer
	outNorm []float32
	output  *kernels.Matrix
}

type layer struct {
	attnNorm, ffnNorm          []float32
	q, k, v, o, gate, up, down *kernels.Matrix
}

// Load builds a model from a parsed file.
func Load(f *gguf.File) (*Model, error) {
	arch, _ := f.String("general.architecture")
	if arch != "llama" {
		return nil, fmt.Errorf("llama: architecture %q is not supported (llama only)", arch)
	}
	u := func(key string, def int, required bool) (int, error) {
		v, ok := f.Uint("llama." + key)
		if !ok {
			if required {
				return 0, fmt.Errorf("llama: llama.%s missing", key)
			}
			return def, nil
		}
		if v == 0 || v > 1<<24 {
			return 0, fmt.Errorf("llama: llama.%s = %d is out of range", key, v)
		}
		return int(v), nil
	}
	var c Config
	var err error
	for _, k := range []struct {
		key string
		dst *int
	}{{"block_count", &c.Layers}, {"embedding_length", &c.Dim}, {"feed_forward_length", &c.FF}, {"attention.head_count", &c.Heads}, {"context_length", &c.CtxTrain}} {
		if *k.dst, err = u(k.key, 0, true); err != nil {
			return nil, err
		}
	}
	if c.KVHeads, err = u("attention.head_count_kv", c.Heads, false); err != nil {
		return nil, err
	}
	if c.Dim%c.Heads != 0 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("llama: dim %d, heads %d, kv heads %d do not divide", c.Dim, c.Heads, c.KVHeads)
	}
	c.HeadDim = c.Dim / c.Heads
	if c.NRot, err = u("rope.dimension_count", c.HeadDim, false); err != nil {
		return nil, err
	}
	if c.NRot > c.HeadDim || c.NRot%2 != 0 {
		return nil, fmt.Errorf("llama: rope dimension %d does not fit head dimension %d", c.NRot, c.HeadDim)
	}
	c.RopeBase = 10000
	if v, ok := f.Float("llama.rope.freq_base"); ok {
		c.RopeBase = v
	}
	c.Eps = 1e-5
	if v, ok := f.Float("llama.attention.layer_norm_rms_epsilon"); ok {
		c.Eps = float32(v)
	}
	m := &Model{Config: c}
	m.Name, _ = f.String("general.name")
	if m.Tok, err = tokenizer.FromGGUF(f); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	c.Vocab = m.Tok.Len()
	m.Vocab = c.Vocab

	mat := func(name string, rows, cols int) (*kernels.Matrix, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("llama: tensor %s missing", name)
		}
		if len(ti.Dims) != 2 || ti.Dims[0] != uint64(cols) || ti.Dims[1] != uint64(rows) {
			return nil, fmt.Errorf("llama: tensor %s has dims %v, want [%d %d]", name, ti.Dims, cols, rows)
		}
		mt, err := kernels.NewMatrix(ti.Type, rows, cols, f.TensorData(ti))
		if err != nil {
			return nil, fmt.Errorf("llama: tensor %s: %w", name, err)
		}
		return mt, nil
	}
	vec := func(name string, n int) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("llama: tensor %s missing", name)
		}
		if len(ti.Dims) != 1 || ti.Dims[0] != uint64(n) {
			return nil, fmt.Errorf("llama: tensor %s has dims %v, want [%d]", name, ti.Dims, n)
		}
		v, err := gguf.Decode(ti.Type, f.TensorData(ti), n)
		if err != nil {
			return nil, fmt.Errorf("llama: tensor %s: %w", name, err)
		}
		return v, nil
	}
	kvDim := c.KVHeads * c.HeadDim
	if m.embd, err = mat("token_embd.weight", c.Vocab, c.Dim); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		for _, e := range []error{
			func() (err error) { l.attnNorm, err = vec(p+"attn_norm.weight", c.Dim); return }(),
			func() (err error) { l.ffnNorm, err = vec(p+"ffn_norm.weight", c.Dim); return }(),
			func() (err error) { l.q, err = mat(p+"attn_q.weight", c.Dim, c.Dim); return }(),
			func() (err error) { l.k, err = mat(p+"attn_k.weight", kvDim, c.Dim); return }(),
			func() (err error) { l.v, err = mat(p+"attn_v.weight", kvDim, c.Dim); return }(),
			func() (err error) { l.o, err = mat(p+"attn_output.weight", c.Dim, c.Dim); return }(),
			func() (err error) { l.gate, err = mat(p+"ffn_gate.weight", c.FF, c.Dim); return }(),
			func() (err error) { l.up, err = mat(p+"ffn_up.weight", c.FF, c.Dim); return }(),
			func() (err error) { l.down, err = mat(p+"ffn_down.weight", c.Dim, c.FF); return }(),
		} {
			if e != nil {
				return nil, e
			}
		}
	}
	if m.outNorm, err = vec("output_norm.weight", c.Dim); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok {
		if m.output, err = mat("output.weight", c.Vocab, c.Dim); err != nil {
			return nil, err
		}
	} else {
		m.output = m.embd
	}
	for _, mt := range m.matrices() {
		if mt.Quantized() && (mt.Cols%32 != 0) {
			return nil, fmt.Errorf("llama: quantised matrix with %d columns", mt.Cols)
		}
	}
	return m, nil
}

func (m *Model) matrices() []*kernels.Matrix {
	var ms []*kernels.Matrix
	for _, l := range m.layers {
		ms = append(ms, l.q, l.k, l.v, l.o, l.gate, l.up, l.down)
	}
	return append(ms, m.output)
}

// WeightBytesPerToken is how many bytes of weights one decode step reads:
// every layer matrix and the output projection (the embedding row is
// negligible).
func (m *Model) WeightBytesPerToken() int64 {
	var n int64
	for _, mt := range m.matrices() {
		n += int64(mt.Bytes())
	}
	return n
}
