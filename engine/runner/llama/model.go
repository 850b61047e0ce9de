// Package llama owns the forward pass of llama-family decoder models on
// the CPU: the model's weights as quantised matrices over a GGUF file, the
// KV cache, batched prompt evaluation, one-token decode, embeddings,
// sampling, and generation with prompt-prefix reuse.
//
// Two architectures are supported, as llama.cpp builds them: "llama"
// (NORM RoPE, optional attention biases, Llama 3.1 rope frequency factors
// and linear rope scaling) and "qwen2" (NEOX RoPE, biases on the Q, K and V
// projections). Any other general.architecture is refused by name.
package llama

import (
	"fmt"
	"math"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/tokenizer"
)

// Pooling is how Embed reduces per-token hidden states to one vector; the
// values are llama.cpp's llama_pooling_type.
type Pooling int

// The pooling types of <arch>.pooling_type.
const (
	PoolNone Pooling = 0 // no pooling: one embedding per token
	PoolMean Pooling = 1 // mean over the tokens
	PoolCLS  Pooling = 2 // the first token's state
	PoolLast Pooling = 3 // the last token's state
	PoolRank Pooling = 4 // reranking head (not supported by Embed)
)

func (p Pooling) String() string {
	switch p {
	case PoolNone:
		return "none"
	case PoolMean:
		return "mean"
	case PoolCLS:
		return "cls"
	case PoolLast:
		return "last"
	case PoolRank:
		return "rank"
	}
	return fmt.Sprintf("pooling(%d)", int(p))
}

// Config is the architecture read from <arch>.* metadata.
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

	// Arch is general.architecture: "llama" or "qwen2".
	Arch string
	// RopeNeox selects the NEOX rotation (x[i], x[i+NRot/2]) instead of
	// llama's adjacent pairs (x[2i], x[2i+1]).
	RopeNeox bool
	// RopeFreqScale multiplies every rope angle: 1/<arch>.rope.scaling.factor
	// under linear scaling, 1 otherwise.
	RopeFreqScale float64
	// Pooling is <arch>.pooling_type; PoolMean when the file has none.
	Pooling Pooling
}

// Model is a loaded model. Its matrices alias the GGUF file, which must
// stay open while the model is used.
type Model struct {
	Config
	Tok     *tokenizer.Tokenizer
	Name    string
	embd    *kernels.Matrix
	layers  []layer
	outNorm []float32
	output  *kernels.Matrix
	// The matrices that read the Dim-long activation (normed hidden
	// state, attention output) and the FF-long one: the forms of their
	// quantised activations follow from these (newActivations).
	dimReaders, ffReaders []*kernels.Matrix
	// invFreq[i] is the rope angle per position of pair i:
	// base^(−2i/NRot) · RopeFreqScale / rope_freqs[i].
	invFreq []float64
}

type layer struct {
	attnNorm, ffnNorm          []float32
	q, k, v, o, gate, up, down *kernels.Matrix
	bq, bk, bv, bo             []float32 // optional biases (nil: none)
}

// archTraits is what differs between the supported architectures.
func archTraits(arch string) (neox, qkvBias, ok bool) {
	switch arch {
	case "llama":
		return false, false, true
	case "qwen2":
		return true, true, true
	}
	return false, false, false
}

// Load builds a model from a parsed file.
func Load(f *gguf.File) (*Model, error) {
	arch, _ := f.String("general.architecture")
	neox, qkvBias, ok := archTraits(arch)
	if !ok {
		return nil, fmt.Errorf("llama: architecture %q is not supported (supported: llama, qwen2)", arch)
	}
	pre := arch + "."
	u := func(key string, def int, required bool) (int, error) {
		v, ok := f.Uint(pre + key)
		if !ok {
			if required {
				return 0, fmt.Errorf("llama: %s%s missing", pre, key)
			}
			return def, nil
		}
		if v == 0 || v > 1<<24 {
			return 0, fmt.Errorf("llama: %s%s = %d is out of range", pre, key, v)
		}
		return int(v), nil
	}
	c := Config{Arch: arch, RopeNeox: neox}
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
	if v, ok := f.Float(pre + "rope.freq_base"); ok {
		c.RopeBase = v
	}
	if c.RopeFreqScale, err = ropeScale(f, pre); err != nil {
		return nil, err
	}
	c.Eps = 1e-5
	if v, ok := f.Float(pre + "attention.layer_norm_rms_epsilon"); ok {
		c.Eps = float32(v)
	}
	c.Pooling = PoolMean
	if v, ok := f.Uint(pre + "pooling_type"); ok {
		c.Pooling = Pooling(v)
	}
	m := &Model{Config: c}
	m.Name, _ = f.String("general.name")
	if m.Tok, err = tokenizer.FromGGUF(f); err != nil {
		return nil, fmt.Errorf("llama: %w", err)
	}
	m.Vocab = m.Tok.Len()

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
	// vec decodes a 1-D tensor; a missing optional one is nil.
	vec := func(name string, n int, required bool) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			if !required {
				return nil, nil
			}
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
	if m.embd, err = mat("token_embd.weight", m.Vocab, c.Dim); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		p := fmt.Sprintf("blk.%d.", i)
		for _, e := range []error{
			func() (err error) { l.attnNorm, err = vec(p+"attn_norm.weight", c.Dim, true); return }(),
			func() (err error) { l.ffnNorm, err = vec(p+"ffn_norm.weight", c.Dim, true); return }(),
			func() (err error) { l.q, err = mat(p+"attn_q.weight", c.Dim, c.Dim); return }(),
			func() (err error) { l.k, err = mat(p+"attn_k.weight", kvDim, c.Dim); return }(),
			func() (err error) { l.v, err = mat(p+"attn_v.weight", kvDim, c.Dim); return }(),
			func() (err error) { l.o, err = mat(p+"attn_output.weight", c.Dim, c.Dim); return }(),
			func() (err error) { l.gate, err = mat(p+"ffn_gate.weight", c.FF, c.Dim); return }(),
			func() (err error) { l.up, err = mat(p+"ffn_up.weight", c.FF, c.Dim); return }(),
			func() (err error) { l.down, err = mat(p+"ffn_down.weight", c.Dim, c.FF); return }(),
			// qwen2 requires the Q, K and V biases; llama.cpp's llama
			// graph takes all four when present.
			func() (err error) { l.bq, err = vec(p+"attn_q.bias", c.Dim, qkvBias); return }(),
			func() (err error) { l.bk, err = vec(p+"attn_k.bias", kvDim, qkvBias); return }(),
			func() (err error) { l.bv, err = vec(p+"attn_v.bias", kvDim, qkvBias); return }(),
			func() (err error) { l.bo, err = vec(p+"attn_output.bias", c.Dim, false); return }(),
		} {
			if e != nil {
				return nil, e
			}
		}
	}
	// Feed-forward biases exist in a few llama-architecture conversions;
	// running without them would be silently wrong.
	for _, n := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
		if _, ok := f.Tensor("blk.0." + n + ".bias"); ok {
			return nil, fmt.Errorf("llama: tensor blk.0.%s.bias: feed-forward biases are not supported", n)
		}
	}
	if m.outNorm, err = vec("output_norm.weight", c.Dim, true); err != nil {
		return nil, err
	}
	if _, ok := f.Tensor("output.weight"); ok {
		if m.output, err = mat("output.weight", m.Vocab, c.Dim); err != nil {
			return nil, err
		}
	} else {
		m.output = m.embd
	}
	// Llama 3.1+ carries per-pair rope frequency factors: llama.cpp divides
	// each pair's angle by its factor (ggml_rope_ext's freq_factors).
	factors, err := vec("rope_freqs.weight", c.NRot/2, false)
	if err != nil {
		return nil, err
	}
	m.invFreq = make([]float64, c.NRot/2)
	for i := range m.invFreq {
		m.invFreq[i] = math.Pow(c.RopeBase, -2*float64(i)/float64(c.NRot)) * c.RopeFreqScale
		if factors != nil {
			if !(factors[i] > 0) {
				return nil, fmt.Errorf("llama: rope_freqs.weight[%d] = %g is not positive", i, factors[i])
			}
			m.invFreq[i] /= float64(factors[i])
		}
	}
	for _, mt := range m.matrices() {
		if mt.Quantized() && (mt.Cols%32 != 0) {
			return nil, fmt.Errorf("llama: quantised matrix with %d columns", mt.Cols)
		}
	}
	for _, l := range m.layers {
		m.dimReaders = append(m.dimReaders, l.q, l.k, l.v, l.o, l.gate, l.up)
		m.ffReaders = append(m.ffReaders, l.down)
	}
	m.dimReaders = append(m.dimReaders, m.output)
	return m, nil
}

// ropeScale reads <arch>.rope.scaling.* as llama.cpp does: the type
// defaults to linear, the factor (or the older rope.scale_linear) gives
// freq_scale = 1/factor, and type "none" never scales. YaRN and LongRoPE
// change the angles in ways this runner does not implement, so a file
// that asks for them is refused rather than run wrongly.
func ropeScale(f *gguf.File, pre string) (float64, error) {
	typ, ok := f.String(pre + "rope.scaling.type")
	if !ok {
		typ = "linear"
	}
	factor, ok := f.Float(pre + "rope.scaling.factor")
	if !ok {
		factor, _ = f.Float(pre + "rope.scale_linear")
	}
	switch {
	case typ == "none" || factor == 0 || factor == 1:
		return 1, nil
	case typ == "linear":
		if !(factor > 0) || math.IsInf(factor, 0) {
			return 0, fmt.Errorf("llama: %srope.scaling.factor = %g is not a usable scale", pre, factor)
		}
		return 1 / factor, nil
	}
	return 0, fmt.Errorf("llama: rope scaling %q (factor %g) is not supported (none and linear are)", typ, factor)
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

// TrainedContext is the context length the model was trained for
// (<arch>.context_length): the largest NewState accepts.
func (m *Model) TrainedContext() int { return m.CtxTrain }

// StateBytes is about how much memory a state of nCtx positions takes
// once it has evaluated a prompt: the float32 KV cache of every layer,
// attention scores, and the decode and prompt-batch scratch.
func (m *Model) StateBytes(nCtx int) int64 {
	kv := int64(2*m.Layers) * int64(nCtx) * int64(m.KVHeads*m.HeadDim) * 4
	scores := int64(m.Heads) * int64(nCtx) * 4
	rows := int64(min(nCtx, DefaultPromptChunk)) + 1
	// Per row: five Dim and two FF float vectors, and the quantised
	// activations (about 2.3 bytes a value in all their forms).
	scratch := rows*int64(5*m.Dim+2*m.FF)*4 + rows*int64(m.Dim+m.FF)*23/10 + int64(m.Vocab)*4
	return kv + scores + scratch
}
