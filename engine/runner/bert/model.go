// Package bert owns the forward pass of BERT encoders on the CPU, the
// architecture llama.cpp calls "bert" and the sentence-embedding models
// used for retrieval are (e5, bge, all-MiniLM): learned absolute position
// and token-type embeddings, post-LayerNorm blocks of bidirectional
// multi-head attention and a GELU feed-forward network, every projection
// with a bias. An encoder has no KV cache and no decode step: a State runs
// a whole input through the layers as one matrix of tokens and pools the
// last hidden states into an L2-normalised embedding (Embed), as
// llama-server's /embedding does.
//
// The graph is llama.cpp's llm_build_bert for LLM_ARCH_BERT: separate Q,
// K and V projections (a fused attn_qkv, as nomic-bert writes, is
// refused); token type 0 for every token;
// GELU in its tanh form (ggml_gelu). Any other general.architecture is
// refused by name.
package bert

import (
	"fmt"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/tokenizer"
)

// Arch is the general.architecture this package runs.
const Arch = "bert"

// Pooling is how Embed reduces per-token hidden states to one vector; the
// values are llama.cpp's llama_pooling_type.
type Pooling int

// The pooling types of bert.pooling_type.
const (
	PoolNone Pooling = 0 // no pooling: one embedding per token
	PoolMean Pooling = 1 // mean over the tokens
	PoolCLS  Pooling = 2 // the first token's state ([CLS])
	PoolLast Pooling = 3 // the last token's state
	PoolRank Pooling = 4 // reranking head (not supported)
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

// Config is the architecture read from bert.* metadata.
type Config struct {
	Layers   int
	Dim      int
	Heads    int
	HeadDim  int
	FF       int
	Vocab    int
	CtxTrain int // rows of position_embd: the longest input
	Eps      float32
	// Pooling is bert.pooling_type; PoolMean when the file has none.
	Pooling Pooling
}

// Model is a loaded encoder. Its matrices alias the GGUF file, which must
// stay open while the model is used.
type Model struct {
	Config
	Tok  *tokenizer.Tokenizer
	Name string

	embd     *kernels.Matrix // token_embd, read a row per token
	pos      []float32       // position_embd, CtxTrain rows of Dim
	type0    []float32       // row 0 of token_types (nil: none)
	embNormW []float32
	embNormB []float32
	layers   []layer
	// The matrices that read a Dim-long activation and the FF-long one:
	// the quantised forms of the activations follow from these.
	dimReaders, ffReaders []*kernels.Matrix
}

type layer struct {
	q, k, v, o, up, down       *kernels.Matrix
	bq, bk, bv, bo, bup, bdown []float32
	attnNormW, attnNormB       []float32 // attn_output_norm
	outNormW, outNormB         []float32 // layer_output_norm
}

// Load builds an encoder from a parsed file whose general.architecture
// is "bert".
func Load(f *gguf.File) (*Model, error) {
	arch, _ := f.String("general.architecture")
	if arch != Arch {
		return nil, fmt.Errorf("bert: architecture %q is not supported (supported: bert)", arch)
	}
	const pre = Arch + "."
	u := func(key string) (int, error) {
		v, ok := f.Uint(pre + key)
		if !ok {
			return 0, fmt.Errorf("bert: %s%s missing", pre, key)
		}
		if v == 0 || v > 1<<24 {
			return 0, fmt.Errorf("bert: %s%s = %d is out of range", pre, key, v)
		}
		return int(v), nil
	}
	var c Config
	var err error
	for _, k := range []struct {
		key string
		dst *int
	}{{"block_count", &c.Layers}, {"embedding_length", &c.Dim}, {"feed_forward_length", &c.FF}, {"attention.head_count", &c.Heads}, {"context_length", &c.CtxTrain}} {
		if *k.dst, err = u(k.key); err != nil {
			return nil, err
		}
	}
	if v, ok := f.Uint(pre + "attention.head_count_kv"); ok && int(v) != c.Heads {
		return nil, fmt.Errorf("bert: %d key/value heads for %d heads: grouped-query attention is not part of BERT", v, c.Heads)
	}
	if c.Dim%c.Heads != 0 {
		return nil, fmt.Errorf("bert: dim %d is not a multiple of heads %d", c.Dim, c.Heads)
	}
	c.HeadDim = c.Dim / c.Heads
	if c.CtxTrain > 1<<16 {
		return nil, fmt.Errorf("bert: context length %d is beyond a BERT encoder's", c.CtxTrain)
	}
	if causal, ok := f.Bool(pre + "attention.causal"); ok && causal {
		// Every BERT conversion writes false; a causal encoder would be
		// another model.
		return nil, fmt.Errorf("bert: %sattention.causal is true: only bidirectional attention is supported", pre)
	}
	c.Eps = 1e-12
	if v, ok := f.Float(pre + "attention.layer_norm_epsilon"); ok {
		c.Eps = float32(v)
	}
	c.Pooling = PoolMean
	if v, ok := f.Uint(pre + "pooling_type"); ok {
		c.Pooling = Pooling(v)
	}
	switch c.Pooling {
	case PoolNone, PoolMean, PoolCLS, PoolLast:
	default:
		return nil, fmt.Errorf("bert: pooling %s is not supported (none, mean, cls, last)", c.Pooling)
	}
	m := &Model{Config: c}
	m.Name, _ = f.String("general.name")
	if m.Tok, err = tokenizer.FromGGUF(f); err != nil {
		return nil, fmt.Errorf("bert: %w", err)
	}
	m.Vocab = m.Tok.Len()

	mat := func(name string, rows, cols int) (*kernels.Matrix, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			return nil, fmt.Errorf("bert: tensor %s missing", name)
		}
		if len(ti.Dims) != 2 || ti.Dims[0] != uint64(cols) || ti.Dims[1] != uint64(rows) {
			return nil, fmt.Errorf("bert: tensor %s has dims %v, want [%d %d]", name, ti.Dims, cols, rows)
		}
		mt, err := kernels.NewMatrix(ti.Type, rows, cols, f.TensorData(ti))
		if err != nil {
			return nil, fmt.Errorf("bert: tensor %s: %w", name, err)
		}
		return mt, nil
	}
	// vec decodes a 1-D tensor of n values; a missing optional one is nil.
	vec := func(name string, n int, required bool) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			if !required {
				return nil, nil
			}
			return nil, fmt.Errorf("bert: tensor %s missing", name)
		}
		if len(ti.Dims) != 1 || ti.Dims[0] != uint64(n) {
			return nil, fmt.Errorf("bert: tensor %s has dims %v, want [%d]", name, ti.Dims, n)
		}
		v, err := gguf.Decode(ti.Type, f.TensorData(ti), n)
		if err != nil {
			return nil, fmt.Errorf("bert: tensor %s: %w", name, err)
		}
		return v, nil
	}
	// table decodes a {Dim, rows} embedding table whole.
	table := func(name string, rows int, required bool) ([]float32, error) {
		ti, ok := f.Tensor(name)
		if !ok {
			if !required {
				return nil, nil
			}
			return nil, fmt.Errorf("bert: tensor %s missing", name)
		}
		if len(ti.Dims) != 2 || ti.Dims[0] != uint64(c.Dim) || ti.Dims[1] < uint64(rows) {
			return nil, fmt.Errorf("bert: tensor %s has dims %v, want [%d ≥%d]", name, ti.Dims, c.Dim, rows)
		}
		n := int(ti.Dims[1]) * c.Dim
		v, err := gguf.Decode(ti.Type, f.TensorData(ti), n)
		if err != nil {
			return nil, fmt.Errorf("bert: tensor %s: %w", name, err)
		}
		return v[:rows*c.Dim], nil
	}
	if m.embd, err = mat("token_embd.weight", m.Vocab, c.Dim); err != nil {
		return nil, err
	}
	if m.pos, err = table("position_embd.weight", c.CtxTrain, true); err != nil {
		return nil, err
	}
	// Token types are fixed to 0 ("sentence A"), as in llama.cpp.
	if m.type0, err = table("token_types.weight", 1, false); err != nil {
		return nil, err
	}
	if m.embNormW, err = vec("token_embd_norm.weight", c.Dim, true); err != nil {
		return nil, err
	}
	if m.embNormB, err = vec("token_embd_norm.bias", c.Dim, true); err != nil {
		return nil, err
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		if err := m.loadLayer(&m.layers[i], fmt.Sprintf("blk.%d.", i), f, mat, vec); err != nil {
			return nil, err
		}
	}
	for _, l := range m.layers {
		for _, mt := range []*kernels.Matrix{l.q, l.k, l.v, l.o, l.up, l.down} {
			if mt.Quantized() && mt.Cols%32 != 0 {
				return nil, fmt.Errorf("bert: quantised matrix with %d columns", mt.Cols)
			}
		}
		m.dimReaders = append(m.dimReaders, l.q, l.k, l.v, l.o, l.up)
		m.ffReaders = append(m.ffReaders, l.down)
	}
	return m, nil
}

// loadLayer reads one block: the Q, K, V and output projections and the
// two feed-forward ones, each with its bias, and the two post-norms.
func (m *Model) loadLayer(l *layer, p string, f *gguf.File,
	mat func(string, int, int) (*kernels.Matrix, error), vec func(string, int, bool) ([]float32, error)) error {
	D, F := m.Dim, m.FF
	var err error
	for _, t := range []struct {
		name string
		m    **kernels.Matrix
		b    *[]float32
	}{{"attn_q", &l.q, &l.bq}, {"attn_k", &l.k, &l.bk}, {"attn_v", &l.v, &l.bv}} {
		if *t.m, err = mat(p+t.name+".weight", D, D); err != nil {
			return err
		}
		if *t.b, err = vec(p+t.name+".bias", D, true); err != nil {
			return err
		}
	}
	for _, n := range []string{"attn_qkv", "attn_q_norm", "attn_k_norm", "attn_norm_2", "ffn_gate"} {
		// Parts of BERT's relatives (jina, nomic) that this graph lacks:
		// running without them would be silently wrong.
		if _, ok := f.Tensor(p + n + ".weight"); ok {
			return fmt.Errorf("bert: tensor %s%s.weight is not part of a BERT block (a related architecture?)", p, n)
		}
	}
	for _, e := range []error{
		func() (err error) { l.o, err = mat(p+"attn_output.weight", D, D); return }(),
		func() (err error) { l.bo, err = vec(p+"attn_output.bias", D, true); return }(),
		func() (err error) { l.attnNormW, err = vec(p+"attn_output_norm.weight", D, true); return }(),
		func() (err error) { l.attnNormB, err = vec(p+"attn_output_norm.bias", D, true); return }(),
		func() (err error) { l.up, err = mat(p+"ffn_up.weight", F, D); return }(),
		func() (err error) { l.bup, err = vec(p+"ffn_up.bias", F, true); return }(),
		func() (err error) { l.down, err = mat(p+"ffn_down.weight", D, F); return }(),
		func() (err error) { l.bdown, err = vec(p+"ffn_down.bias", D, true); return }(),
		func() (err error) { l.outNormW, err = vec(p+"layer_output_norm.weight", D, true); return }(),
		func() (err error) { l.outNormB, err = vec(p+"layer_output_norm.bias", D, true); return }(),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// TrainedContext is the longest input the model embeds: the rows of its
// position embeddings (bert.context_length).
func (m *Model) TrainedContext() int { return m.CtxTrain }

// newActivations allocates the quantised forms of a Dim-long and an
// FF-long activation, each with only the forms its readers need; either
// is nil where no reader is quantised or the length does not split into
// blocks.
func (m *Model) newActivations() (dim, ff *kernels.QVec) {
	if m.Dim%32 == 0 {
		dim = kernels.NewActivation(m.Dim, m.dimReaders...)
	}
	if m.FF%32 == 0 {
		ff = kernels.NewActivation(m.FF, m.ffReaders...)
	}
	return dim, ff
}
