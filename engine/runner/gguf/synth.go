package gguf

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
)

// Shape is the architecture of a synthetic llama model.
type Shape struct {
	Layers  int
	Dim     int // embedding length
	Heads   int
	KVHeads int
	FF      int // feed-forward length
	Vocab   int
	Ctx     int
	Type    TensorType // type of the matrices; norms are always F32
	// Mix, when set, replaces Type with a llama.cpp quantisation preset
	// that picks each matrix's type (see TypeOf).
	Mix Mixture
	// SeparateOutput writes an output.weight; otherwise the output
	// projection is tied to token_embd as in SmolLM.
	SeparateOutput bool
}

// SmolLM135M is the shape of SmolLM-135M, quantised to Q8_0.
var SmolLM135M = Shape{Layers: 30, Dim: 576, Heads: 9, KVHeads: 3, FF: 1536, Vocab: 49152, Ctx: 2048, Type: Q8_0}

// Validate checks that the shape describes a loadable model.
func (s Shape) Validate() error {
	switch {
	case s.Layers < 1 || s.Dim < 1 || s.Heads < 1 || s.KVHeads < 1 || s.FF < 1 || s.Ctx < 1:
		return fmt.Errorf("gguf: shape %+v: every size must be positive", s)
	case s.Layers > 1024 || s.Dim > 1<<16 || s.FF > 1<<18 || s.Vocab > 1<<20 || s.Ctx > 1<<20:
		return fmt.Errorf("gguf: shape %+v: sizes beyond any model this writer is meant for", s)
	case s.Dim%s.Heads != 0:
		return fmt.Errorf("gguf: dim %d is not a multiple of heads %d", s.Dim, s.Heads)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("gguf: heads %d is not a multiple of kv heads %d", s.Heads, s.KVHeads)
	case (s.Dim/s.Heads)%2 != 0:
		return fmt.Errorf("gguf: head dimension %d is odd; RoPE rotates pairs", s.Dim/s.Heads)
	case s.Vocab < 259+1:
		return fmt.Errorf("gguf: vocab %d is below the 260 tokens of the byte-fallback vocabulary", s.Vocab)
	}
	if s.Mix != MixNone {
		if !s.Mix.known() {
			return fmt.Errorf("gguf: unknown mixture %d", s.Mix)
		}
		// Tensors whose rows are not whole super-blocks fall back to
		// 32-value types, as llama.cpp's quantizer does.
		if s.Dim%32 != 0 || s.FF%32 != 0 {
			return fmt.Errorf("gguf: %s needs dim and ff in multiples of 32 (dim %d, ff %d)", s.Mix, s.Dim, s.FF)
		}
		return nil
	}
	switch s.Type {
	case F32, F16, BF16:
	case Q8_0, Q4_0, Q4_1, Q5_0, Q5_1:
		if s.Dim%32 != 0 || s.FF%32 != 0 {
			return fmt.Errorf("gguf: %s needs dim and ff in multiples of 32 (dim %d, ff %d)", s.Type, s.Dim, s.FF)
		}
	case Q4_K, Q5_K, Q6_K:
		if s.Dim%QK_K != 0 || s.FF%QK_K != 0 {
			return fmt.Errorf("gguf: %s needs dim and ff in multiples of %d (dim %d, ff %d); the %s mixtures fall back per tensor instead", s.Type, QK_K, s.Dim, s.FF, s.Type)
		}
	default:
		return fmt.Errorf("gguf: synthetic models of type %s are not supported", s.Type)
	}
	return nil
}

// Params is the number of weights in the model.
func (s Shape) Params() int64 {
	hd := s.Dim / s.Heads
	perLayer := int64(s.Dim)*int64(s.Dim)*2 + 2*int64(s.Dim)*int64(hd*s.KVHeads) + 3*int64(s.Dim)*int64(s.FF) + 2*int64(s.Dim)
	n := int64(s.Layers)*perLayer + int64(s.Vocab)*int64(s.Dim) + int64(s.Dim)
	if s.SeparateOutput {
		n += int64(s.Vocab) * int64(s.Dim)
	}
	return n
}

// fileType is the general.file_type (llama.cpp's llama_ftype) of a
// shape: the preset for a mixture, else the pure type's number (pure
// K-quant files are labelled with the nearest "_S" preset).
func (s Shape) fileType() uint32 {
	switch s.Mix {
	case MixQ4_K_M:
		return 15
	case MixQ5_K_M:
		return 17
	}
	switch s.Type {
	case F32:
		return 0
	case F16:
		return 1
	case Q4_0:
		return 2
	case Q4_1:
		return 3
	case Q8_0:
		return 7
	case Q5_0:
		return 8
	case Q5_1:
		return 9
	case Q4_K:
		return 14
	case Q5_K:
		return 16
	case Q6_K:
		return 18
	case BF16:
		return 32
	}
	return 0
}

// Mixture is a llama.cpp quantisation preset: a file type whose tensors
// are quantised to different types.
type Mixture uint8

// The mixtures Synth can write.
const (
	MixNone   Mixture = iota
	MixQ4_K_M         // llama.cpp's Q4_K_M
	MixQ5_K_M         // llama.cpp's Q5_K_M
)

func (m Mixture) known() bool { return m <= MixQ5_K_M }

func (m Mixture) String() string {
	switch m {
	case MixNone:
		return "none"
	case MixQ4_K_M:
		return "q4_k_m"
	case MixQ5_K_M:
		return "q5_k_m"
	}
	return fmt.Sprintf("mixture(%d)", uint8(m))
}

// ParseQuant maps a quantisation name as llama-quantize spells it in
// lower case ("q8_0", "q4_k", "q4_k_m", ...) to a pure tensor type or a
// mixture.
func ParseQuant(name string) (TensorType, Mixture, error) {
	switch name {
	case "q4_k_m":
		return Q4_K, MixQ4_K_M, nil
	case "q5_k_m":
		return Q5_K, MixQ5_K_M, nil
	}
	t, err := ParseTensorType(name)
	return t, MixNone, err
}

// useMoreBits is llama.cpp's use_more_bits: the first and last eighth of
// the layers and every third layer between get the larger type.
func useMoreBits(layer, layers int) bool {
	return layer < layers/8 || layer >= 7*layers/8 || (layer-layers/8)%3 == 2
}

// TypeOf is the type Synth gives the matrix kind ("token_embd",
// "output", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
// "ffn_up", "ffn_down") of the given layer, cols values per row.
//
// For the mixtures this follows llama.cpp's llama_tensor_get_type for
// the llama architecture, simplified to the rules that fire for a dense
// model without importance matrix, under 70B, without experts: the
// output projection (token_embd when it is tied) is Q6_K (Q8_0 when its
// rows are not whole super-blocks); attn_v and ffn_down are Q6_K in the
// layers use_more_bits picks; everything else is the preset's base type
// (Q4_K or Q5_K); and a K-quant tensor whose rows are not whole 256-value
// super-blocks falls back to Q5_0 (from Q4_K), Q5_1 (from Q5_K) or Q8_0
// (from Q6_K), as llama.cpp's incompatible-tensor fallback does.
func (s Shape) TypeOf(kind string, layer, cols int) TensorType {
	var t TensorType
	switch s.Mix {
	case MixQ4_K_M:
		t = Q4_K
	case MixQ5_K_M:
		t = Q5_K
	default:
		return s.Type
	}
	switch {
	case kind == "output" || kind == "token_embd" && !s.SeparateOutput:
		if cols%QK_K != 0 {
			return Q8_0
		}
		return Q6_K
	case kind == "attn_v" || kind == "ffn_down":
		if useMoreBits(layer, s.Layers) {
			t = Q6_K
		}
	}
	if cols%QK_K != 0 {
		switch t {
		case Q4_K:
			t = Q5_0
		case Q5_K:
			t = Q5_1
		case Q6_K:
			t = Q8_0
		}
	}
	return t
}

// SynthVocab returns the byte-fallback SPM vocabulary of n tokens used by
// synthetic models: <unk>, <s>, </s>, the 256 byte tokens, then unique
// normal pieces (single characters, then strings over a small alphabet)
// with scores that favour shorter pieces, so merges happen bottom-up.
func SynthVocab(n int) (tokens []string, scores []float32, types []int32) {
	tokens = []string{"<unk>", "<s>", "</s>"}
	types = []int32{2, 3, 3}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	seen := map[string]bool{}
	add := func(s string) bool {
		if len(tokens) >= n {
			return false
		}
		if !seen[s] {
			seen[s] = true
			tokens = append(tokens, s)
			types = append(types, 1)
		}
		return true
	}
	add("▁")
	for c := byte(0x21); c < 0x7f; c++ {
		add(string(c))
	}
	alphabet := []string{"▁", "e", "t", "a", "o", "i", "n", "s", "h", "r", "d", "l", "u", "c", "m", "f", "w", "y", "p", "v", "b", "g", "k", "j", "q", "x", "z"}
	var grow func(prefix string, depth int) bool
	grow = func(prefix string, depth int) bool {
		if depth == 0 {
			return add(prefix)
		}
		for _, a := range alphabet {
			if !grow(prefix+a, depth-1) {
				return false
			}
		}
		return true
	}
	for l := 2; len(tokens) < n; l++ {
		grow("", l)
	}
	scores = make([]float32, len(tokens))
	for i := range scores {
		if types[i] == 1 {
			scores[i] = -float32(i)
		}
	}
	return tokens, scores, types
}

// Synth writes a llama-architecture model of the given shape with seeded
// random weights: matrices drawn from N(0, 1/fan_in) so activations keep
// their scale through the layers, norms near 1.
func Synth(w io.Writer, s Shape, seed uint64) error {
	if err := s.Validate(); err != nil {
		return err
	}
	hd := s.Dim / s.Heads
	kvw := uint64(hd * s.KVHeads)
	var gw Writer
	synthMeta(&gw, s, seed)

	// One stream, consumed in directory order, keeps the weights a pure
	// function of (shape, seed).
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	matrix := func(name string, layer int, in, out uint64, std float64) {
		kind := strings.TrimSuffix(name, ".weight")
		kind = kind[strings.LastIndexByte(kind, '.')+1:]
		t := s.TypeOf(kind, layer, int(in))
		gw.AddTensor(name, t, []uint64{in, out}, func() ([]byte, error) {
			x := make([]float32, in*out)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * std)
			}
			enc, err := Encode(t, x)
			if err != nil {
				return nil, fmt.Errorf("gguf: synthesising %s: %w", name, err)
			}
			return enc, nil
		})
	}
	norm := func(name string) {
		gw.AddTensor(name, F32, []uint64{uint64(s.Dim)}, func() ([]byte, error) {
			x := make([]float32, s.Dim)
			for i := range x {
				x[i] = float32(1 + 0.1*rng.NormFloat64())
			}
			return Encode(F32, x)
		})
	}
	d, ff := uint64(s.Dim), uint64(s.FF)
	matrix("token_embd.weight", 0, d, uint64(s.Vocab), 1)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		norm(p + "attn_norm.weight")
		matrix(p+"attn_q.weight", l, d, d, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_k.weight", l, d, kvw, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_v.weight", l, d, kvw, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_output.weight", l, d, d, 1/math.Sqrt(float64(d)))
		norm(p + "ffn_norm.weight")
		matrix(p+"ffn_gate.weight", l, d, ff, 1/math.Sqrt(float64(d)))
		matrix(p+"ffn_down.weight", l, ff, d, 1/math.Sqrt(float64(ff)))
		matrix(p+"ffn_up.weight", l, d, ff, 1/math.Sqrt(float64(d)))
	}
	norm("output_norm.weight")
	if s.SeparateOutput {
		matrix("output.weight", 0, d, uint64(s.Vocab), 1/math.Sqrt(float64(d)))
	}
	_, err := gw.WriteTo(w)
	return err
}

// synthMeta adds the metadata of a synthetic model of shape s.
func synthMeta(gw *Writer, s Shape, seed uint64) {
	hd := s.Dim / s.Heads
	tokens, scores, types := SynthVocab(s.Vocab)
	gw.AddKV("general.architecture", "llama")
	label := s.Type.String()
	if s.Mix != MixNone {
		label = s.Mix.String()
	}
	gw.AddKV("general.name", fmt.Sprintf("synthetic-llama-%dL-%dd-%s-seed%d", s.Layers, s.Dim, label, seed))
	gw.AddKV("general.file_type", s.fileType())
	gw.AddKV("llama.vocab_size", uint32(s.Vocab))
	gw.AddKV("llama.context_length", uint32(s.Ctx))
	gw.AddKV("llama.embedding_length", uint32(s.Dim))
	gw.AddKV("llama.block_count", uint32(s.Layers))
	gw.AddKV("llama.feed_forward_length", uint32(s.FF))
	gw.AddKV("llama.attention.head_count", uint32(s.Heads))
	gw.AddKV("llama.attention.head_count_kv", uint32(s.KVHeads))
	gw.AddKV("llama.rope.freq_base", float32(10000))
	gw.AddKV("llama.rope.dimension_count", uint32(hd))
	gw.AddKV("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	gw.AddKV("tokenizer.ggml.model", "llama")
	gw.AddKV("tokenizer.ggml.tokens", tokens)
	gw.AddKV("tokenizer.ggml.scores", scores)
	gw.AddKV("tokenizer.ggml.token_type", types)
	gw.AddKV("tokenizer.ggml.unknown_token_id", uint32(0))
	gw.AddKV("tokenizer.ggml.bos_token_id", uint32(1))
	gw.AddKV("tokenizer.ggml.eos_token_id", uint32(2))
	gw.AddKV("tokenizer.ggml.add_bos_token", true)
	gw.AddKV("tokenizer.ggml.add_eos_token", false)

}
