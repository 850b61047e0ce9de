package gguf

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// BERTShape is the architecture of a synthetic BERT encoder, written as
// llama.cpp's converter writes a BERT model ("bert" architecture,
// WordPiece vocabulary).
type BERTShape struct {
	Layers int
	Dim    int // embedding length
	Heads  int
	FF     int // feed-forward length
	Vocab  int
	Ctx    int        // trained context: the rows of position_embd
	Type   TensorType // type of token_embd and the layer matrices; the rest is F32
	// Pooling is bert.pooling_type in llama.cpp's numbering: 1 mean,
	// 2 CLS (0 none, 3 last).
	Pooling uint32
}

// The shapes of real embedding models, as F16 GGUF files of them are.
var (
	// E5SmallV2 is intfloat/e5-small-v2: mean pooling.
	E5SmallV2 = BERTShape{Layers: 12, Dim: 384, Heads: 12, FF: 1536, Vocab: 30522, Ctx: 512, Type: F16, Pooling: 1}
	// BGESmallENv15 is BAAI/bge-small-en-v1.5: CLS pooling.
	BGESmallENv15 = BERTShape{Layers: 12, Dim: 384, Heads: 12, FF: 1536, Vocab: 30522, Ctx: 512, Type: F16, Pooling: 2}
	// AllMiniLML6v2 is sentence-transformers/all-MiniLM-L6-v2: six
	// layers, mean pooling.
	AllMiniLML6v2 = BERTShape{Layers: 6, Dim: 384, Heads: 12, FF: 1536, Vocab: 30522, Ctx: 512, Type: F16, Pooling: 1}
)

// minBERTVocab is the smallest vocabulary SynthBERTVocab lays out: BERT's
// 104 reserved ids, the single characters and a few words.
const minBERTVocab = 300

// Validate checks that the shape describes a loadable BERT model.
func (s BERTShape) Validate() error {
	switch {
	case s.Layers < 1 || s.Dim < 1 || s.Heads < 1 || s.FF < 1 || s.Ctx < 1:
		return fmt.Errorf("gguf: BERT shape %+v: every size must be positive", s)
	case s.Layers > 1024 || s.Dim > 1<<16 || s.FF > 1<<18 || s.Vocab > 1<<20 || s.Ctx > 1<<16:
		return fmt.Errorf("gguf: BERT shape %+v: sizes beyond any model this writer is meant for", s)
	case s.Dim%s.Heads != 0:
		return fmt.Errorf("gguf: dim %d is not a multiple of heads %d", s.Dim, s.Heads)
	case s.Vocab < minBERTVocab:
		return fmt.Errorf("gguf: BERT vocab %d is below the %d tokens of the synthetic WordPiece vocabulary", s.Vocab, minBERTVocab)
	case s.Pooling > 3:
		return fmt.Errorf("gguf: BERT pooling type %d is not one of 0 (none), 1 (mean), 2 (cls), 3 (last)", s.Pooling)
	}
	switch s.Type {
	case F32, F16, BF16:
	case Q8_0, Q4_0, Q4_1, Q5_0, Q5_1:
		if s.Dim%32 != 0 || s.FF%32 != 0 {
			return fmt.Errorf("gguf: %s needs dim and ff in multiples of 32 (dim %d, ff %d)", s.Type, s.Dim, s.FF)
		}
	case Q4_K, Q5_K, Q6_K:
		if s.Dim%QK_K != 0 || s.FF%QK_K != 0 {
			return fmt.Errorf("gguf: %s needs dim and ff in multiples of %d (dim %d, ff %d)", s.Type, QK_K, s.Dim, s.FF)
		}
	default:
		return fmt.Errorf("gguf: synthetic models of type %s are not supported", s.Type)
	}
	return nil
}

// Params is the number of weights in the model.
func (s BERTShape) Params() int64 {
	d, ff := int64(s.Dim), int64(s.FF)
	perLayer := 4*d*d + 4*d + 2*d*ff + ff + d + 4*d
	return int64(s.Layers)*perLayer + (int64(s.Vocab)+int64(s.Ctx)+2)*d + 2*d
}

// bertWords are whole words the synthetic vocabulary knows, so text
// tokenizes into realistic pieces.
var bertWords = []string{
	"the", "of", "and", "to", "a", "in", "is", "for", "on", "that", "with", "as", "was", "by", "it", "be",
	"are", "from", "at", "this", "or", "an", "which", "not", "have", "has", "had", "but", "we", "you", "they",
	"he", "she", "his", "her", "their", "its", "can", "will", "would", "do", "does", "what", "how", "when",
	"where", "who", "why", "all", "one", "two", "three", "new", "more", "most", "other", "some", "than",
	"then", "there", "these", "those", "been", "were", "into", "about", "after", "before", "between",
	"query", "passage", "document", "documents", "search", "retrieval", "model", "models", "embedding",
	"vector", "vectors", "language", "text", "sentence", "question", "answer", "data", "time", "world",
	"hello", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "believe", "meaning", "life",
	"power", "energy", "battery", "solar", "machine", "learning", "network", "city", "water", "food",
	"school", "music", "history", "science", "health", "people", "house", "work", "play", "game",
	"un", "re", "pre", "play", "read", "write", "run", "walk", "talk", "think", "know", "make", "take",
}

// bertSuffixes are common continuation pieces ("##ing" in the original
// vocabulary).
var bertSuffixes = []string{
	"s", "es", "ed", "ing", "er", "ers", "est", "ly", "tion", "tions", "ment", "ness", "able", "ible", "al",
	"ity", "ous", "ive", "ize", "ise", "ful", "less", "ship", "hood", "ward", "ist", "ism", "ic", "ical",
}

// SynthBERTVocab returns the WordPiece vocabulary of n tokens (n ≥ 300)
// used by synthetic BERT models, in the form llama.cpp's converter writes
// (see the tokenizer package): BERT's reserved ids ([PAD] 0,
// [unused0…98] 1–99, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), then
// every printable ASCII character but the capitals (BERT vocabularies are
// lower-cased) as a word start ("▁a") and as a continuation ("a", from
// "##a"), a few non-Latin characters, whole words, common suffixes, and
// then generated word starts and continuations over a-z up to n. The
// reserved tokens are control tokens; the rest are normal.
func SynthBERTVocab(n int) (tokens []string, types []int32) {
	seen := map[string]bool{}
	add := func(s string, ty int32) {
		if len(tokens) >= n || seen[s] {
			return
		}
		seen[s] = true
		tokens = append(tokens, s)
		types = append(types, ty)
	}
	add("[PAD]", 3)
	for i := 0; i < 99; i++ {
		add(fmt.Sprintf("[unused%d]", i), 1)
	}
	for _, s := range []string{"[UNK]", "[CLS]", "[SEP]", "[MASK]"} {
		add(s, 3)
	}
	for _, prefix := range []string{"▁", ""} {
		for c := byte(0x21); c < 0x7f; c++ {
			if c < 'A' || c > 'Z' {
				add(prefix+string(c), 1)
			}
		}
	}
	for _, s := range []string{"中", "文", "日", "本", "α", "β", "д", "ж", "ß"} {
		add("▁"+s, 1)
	}
	for _, w := range bertWords {
		add("▁"+w, 1)
	}
	for _, w := range bertSuffixes {
		add(w, 1)
	}
	const alphabet = "etaoinshrdlucmfwypvbgkjqxz"
	for l := 2; len(tokens) < n; l++ {
		// All strings of length l over the alphabet, as continuations and
		// as word starts, interleaved so that both grow together.
		idx := make([]int, l)
		for len(tokens) < n {
			b := make([]byte, l)
			for i, j := range idx {
				b[i] = alphabet[j]
			}
			add(string(b), 1)
			add("▁"+string(b), 1)
			i := l - 1
			for i >= 0 {
				idx[i]++
				if idx[i] < len(alphabet) {
					break
				}
				idx[i] = 0
				i--
			}
			if i < 0 {
				break
			}
		}
	}
	return tokens, types
}

// SynthBERT writes a BERT encoder of the given shape with seeded random
// weights, with the metadata, tensor names and WordPiece vocabulary of a
// real converted model: matrices drawn from N(0, 1/fan_in), biases and
// embeddings small, LayerNorm weights near 1. token_embd and the layer
// matrices have the shape's type; position_embd, token_types, the norms
// and the biases are F32, as in llama.cpp's F16 and Q8_0 files.
func SynthBERT(w io.Writer, s BERTShape, seed uint64) error {
	if err := s.Validate(); err != nil {
		return err
	}
	tokens, types := SynthBERTVocab(s.Vocab)
	var gw Writer
	gw.AddKV("general.architecture", "bert")
	gw.AddKV("general.name", fmt.Sprintf("synthetic-bert-%dL-%dd-%s-seed%d", s.Layers, s.Dim, s.Type, seed))
	gw.AddKV("general.file_type", Shape{Type: s.Type}.fileType())
	gw.AddKV("bert.block_count", uint32(s.Layers))
	gw.AddKV("bert.context_length", uint32(s.Ctx))
	gw.AddKV("bert.embedding_length", uint32(s.Dim))
	gw.AddKV("bert.feed_forward_length", uint32(s.FF))
	gw.AddKV("bert.attention.head_count", uint32(s.Heads))
	gw.AddKV("bert.attention.layer_norm_epsilon", float32(1e-12))
	gw.AddKV("bert.attention.causal", false)
	gw.AddKV("bert.pooling_type", s.Pooling)
	gw.AddKV("tokenizer.ggml.token_type_count", uint32(2))
	gw.AddKV("tokenizer.ggml.model", "bert")
	gw.AddKV("tokenizer.ggml.pre", "jina-v2-en")
	gw.AddKV("tokenizer.ggml.tokens", tokens)
	gw.AddKV("tokenizer.ggml.token_type", types)
	gw.AddKV("tokenizer.ggml.unknown_token_id", uint32(100))
	gw.AddKV("tokenizer.ggml.seperator_token_id", uint32(102))
	gw.AddKV("tokenizer.ggml.padding_token_id", uint32(0))
	gw.AddKV("tokenizer.ggml.cls_token_id", uint32(101))
	gw.AddKV("tokenizer.ggml.mask_token_id", uint32(103))

	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	tensor := func(name string, t TensorType, dims []uint64, gen func() float64) {
		n := uint64(1)
		for _, d := range dims {
			n *= d
		}
		gw.AddTensor(name, t, dims, func() ([]byte, error) {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(gen())
			}
			enc, err := Encode(t, x)
			if err != nil {
				return nil, fmt.Errorf("gguf: synthesising %s: %w", name, err)
			}
			return enc, nil
		})
	}
	normal := func(std float64) func() float64 { return func() float64 { return rng.NormFloat64() * std } }
	near1 := func() float64 { return 1 + 0.1*rng.NormFloat64() }
	d, ff := uint64(s.Dim), uint64(s.FF)
	tensor("token_embd.weight", s.Type, []uint64{d, uint64(s.Vocab)}, normal(1))
	tensor("token_types.weight", F32, []uint64{d, 2}, normal(0.3))
	tensor("position_embd.weight", F32, []uint64{d, uint64(s.Ctx)}, normal(0.3))
	tensor("token_embd_norm.weight", F32, []uint64{d}, near1)
	tensor("token_embd_norm.bias", F32, []uint64{d}, normal(0.02))
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		for _, m := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			tensor(p+m+".weight", s.Type, []uint64{d, d}, normal(1/math.Sqrt(float64(d))))
			tensor(p+m+".bias", F32, []uint64{d}, normal(0.02))
		}
		tensor(p+"attn_output_norm.weight", F32, []uint64{d}, near1)
		tensor(p+"attn_output_norm.bias", F32, []uint64{d}, normal(0.02))
		tensor(p+"ffn_up.weight", s.Type, []uint64{d, ff}, normal(1/math.Sqrt(float64(d))))
		tensor(p+"ffn_up.bias", F32, []uint64{ff}, normal(0.02))
		tensor(p+"ffn_down.weight", s.Type, []uint64{ff, d}, normal(1/math.Sqrt(float64(ff))))
		tensor(p+"ffn_down.bias", F32, []uint64{d}, normal(0.02))
		tensor(p+"layer_output_norm.weight", F32, []uint64{d}, near1)
		tensor(p+"layer_output_norm.bias", F32, []uint64{d}, normal(0.02))
	}
	_, err := gw.WriteTo(w)
	return err
}
