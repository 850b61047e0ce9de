package tokenizer

import (
	"bytes"
	"reflect"
	"sort"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// byteLevelVocab is a GPT-2 style vocabulary: the 256 byte runes, then
// merges learnt from text by plain BPE (most frequent adjacent pair first,
// ties broken by the pair's text), so merged tokens span spaces, UTF-8
// continuation bytes and digits as in real vocabularies.
func byteLevelVocab(t testing.TB, text []string, nMerges int) (tokens, merges []string) {
	t.Helper()
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteRune[b]))
	}
	var words [][]string
	for _, s := range text {
		for _, w := range preByName["gpt-2"].Split(s) {
			var syms []string
			for i := 0; i < len(w); i++ {
				syms = append(syms, string(byteRune[w[i]]))
			}
			words = append(words, syms)
		}
	}
	seen := map[string]bool{}
	for len(merges) < nMerges {
		count := map[string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w); i++ {
				count[w[i]+" "+w[i+1]]++
			}
		}
		var pairs []string
		for p := range count {
			if !seen[p] {
				pairs = append(pairs, p)
			}
		}
		if len(pairs) == 0 {
			break
		}
		sort.Slice(pairs, func(i, j int) bool {
			if count[pairs[i]] != count[pairs[j]] {
				return count[pairs[i]] > count[pairs[j]]
			}
			return pairs[i] < pairs[j]
		})
		best := pairs[0]
		seen[best] = true
		merges = append(merges, best)
		l, r, _ := strings.Cut(best, " ")
		if !seen["tok:"+l+r] {
			seen["tok:"+l+r] = true
			tokens = append(tokens, l+r)
		}
		for wi, w := range words {
			var out []string
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == l && w[i+1] == r {
					out = append(out, l+r)
					i++
				} else {
					out = append(out, w[i])
				}
			}
			words[wi] = out
		}
	}
	return tokens, merges
}

func TestBPERoundTripEveryPreTokenizer(t *testing.T) {
	tokens, merges := byteLevelVocab(t, corpus, 300)
	for _, name := range PreTokenizerNames() {
		tk, err := New("gpt2", tokens, nil, nil, merges)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.SetPreTokenizer(name); err != nil {
			t.Fatal(err)
		}
		nTok, nByte := 0, 0
		for _, s := range corpus {
			ids := tk.Encode(s, false, false)
			if got := tk.Decode(ids); got != s {
				t.Errorf("%s: %q → %v → %q", name, s, ids, got)
			}
			nTok, nByte = nTok+len(ids), nByte+len(s)
		}
		if nTok*4 > nByte*3 {
			t.Errorf("%s: %d tokens for %d bytes: merges were hardly applied", name, nTok, nByte)
		}
	}
}

// The pre-tokenizer decides where merges may happen: llama3 cuts digit
// runs into threes, gpt-2 keeps them whole, qwen2 splits every digit.
func TestBPEEncodeUsesPreTokenizer(t *testing.T) {
	var tokens []string
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteRune[b]))
	}
	tokens = append(tokens, "12", "34", "123", "45")
	merges := []string{"3 4", "1 2", "12 3", "4 5"}
	id := func(tk *Tokenizer, ss ...string) []int {
		var out []int
		for _, s := range ss {
			out = append(out, tk.lookup(s))
		}
		return out
	}
	for _, c := range []struct {
		pre  string
		want []string
	}{
		// One word: 3 4 (rank 0) first, then 1 2; 12+34 is no merge.
		{"gpt-2", []string{"12", "34", "5"}},
		// "123" | "45".
		{"llama-bpe", []string{"123", "45"}},
		{"qwen2", []string{"1", "2", "3", "4", "5"}},
	} {
		tk, err := New("gpt2", tokens, nil, nil, merges)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.SetPreTokenizer(c.pre); err != nil {
			t.Fatal(err)
		}
		if got, want := tk.Encode("12345", false, false), id(tk, c.want...); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: 12345 → %v, want %v (%q)", c.pre, got, want, c.want)
		}
	}
}

// llama.cpp's ignore_merges (llama3, tekken): a word that is a token is
// taken whole even when no merge path builds it.
func TestBPEIgnoreMerges(t *testing.T) {
	var tokens []string
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteRune[b]))
	}
	tokens = append(tokens, "Ġhello")
	merges := []string{"x y"}
	for _, c := range []struct {
		pre   string
		whole bool
	}{{"llama-bpe", true}, {"tekken", true}, {"gpt-2", false}, {"qwen2", false}, {"smaug-bpe", false}} {
		tk, err := New("gpt2", tokens, nil, nil, merges)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.SetPreTokenizer(c.pre); err != nil {
			t.Fatal(err)
		}
		ids := tk.Encode(" hello", false, false)
		if whole := reflect.DeepEqual(ids, []int{tk.lookup("Ġhello")}); whole != c.whole {
			t.Errorf("%s: ' hello' → %v, whole token %v, want %v", c.pre, ids, whole, c.whole)
		}
		if got := tk.Decode(ids); got != " hello" {
			t.Errorf("%s: decoded %q", c.pre, got)
		}
	}
}

func gpt2GGUF(t *testing.T, kv map[string]any) *gguf.File {
	t.Helper()
	tokens, merges := byteLevelVocab(t, corpus[:3], 50)
	tokens = append(tokens, "<|begin_of_text|>")
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = TypeNormal
	}
	types[len(types)-1] = TypeControl
	var w gguf.Writer
	w.AddKV("general.architecture", "llama")
	w.AddKV("tokenizer.ggml.model", "gpt2")
	w.AddKV("tokenizer.ggml.tokens", tokens)
	w.AddKV("tokenizer.ggml.token_type", types)
	w.AddKV("tokenizer.ggml.merges", merges)
	w.AddKV("tokenizer.ggml.bos_token_id", uint32(len(tokens)-1))
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.AddKV(k, kv[k])
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFromGGUFPreTokenizer(t *testing.T) {
	for _, c := range []struct {
		kv     map[string]any
		pre    string
		addBOS bool
	}{
		{map[string]any{}, "default", false}, // llama.cpp's fallback for a missing key
		{map[string]any{"tokenizer.ggml.pre": "llama-bpe"}, "llama-bpe", true},
		{map[string]any{"tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.add_bos_token": false}, "llama-bpe", false},
		{map[string]any{"tokenizer.ggml.pre": "qwen2"}, "qwen2", false},
		{map[string]any{"tokenizer.ggml.pre": "smollm"}, "smollm", false},
		{map[string]any{"tokenizer.ggml.pre": "tekken"}, "tekken", true},
	} {
		tk, err := FromGGUF(gpt2GGUF(t, c.kv))
		if err != nil {
			t.Fatalf("%v: %v", c.kv, err)
		}
		if tk.PreTokenizer() != c.pre || tk.AddBOS != c.addBOS {
			t.Errorf("%v: pre %q add_bos %v, want %q %v", c.kv, tk.PreTokenizer(), tk.AddBOS, c.pre, c.addBOS)
		}
		ids := tk.Encode("Hello, world!", true, false)
		if c.addBOS != (len(ids) > 0 && ids[0] == tk.BOS) {
			t.Errorf("%v: BOS presence wrong in %v", c.kv, ids)
		}
		if got := tk.Decode(ids); got != "Hello, world!" {
			t.Errorf("%v: round trip gave %q", c.kv, got)
		}
	}
	_, err := FromGGUF(gpt2GGUF(t, map[string]any{"tokenizer.ggml.pre": "brand-new-pre"}))
	if err == nil || !strings.Contains(err.Error(), "brand-new-pre") || !strings.Contains(err.Error(), "tokenizer.ggml.pre") {
		t.Errorf("unknown pre-tokenizer: err = %v", err)
	}
}

// Every vocabulary gguf.Synth writes (byte-fallback SPM of any size)
// encodes and decodes the corpus back to itself.
func TestSynthVocabulariesRoundTrip(t *testing.T) {
	for _, vocab := range []int{260, 300, 1000, 5000, gguf.SmolLM135M.Vocab} {
		var buf bytes.Buffer
		s := gguf.Shape{Layers: 1, Dim: 8, Heads: 2, KVHeads: 1, FF: 16, Vocab: vocab, Ctx: 16, Type: gguf.F32}
		if err := gguf.Synth(&buf, s, 3); err != nil {
			t.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		tk, err := FromGGUF(f)
		if err != nil {
			t.Fatal(err)
		}
		if tk.PreTokenizer() != "" {
			t.Errorf("SPM vocabulary reports pre-tokenizer %q", tk.PreTokenizer())
		}
		for _, text := range corpus {
			ids := tk.Encode(text, true, false)
			if len(ids) == 0 || ids[0] != tk.BOS {
				t.Fatalf("vocab %d: %q: no BOS in %v", vocab, text, ids)
			}
			if got := tk.Decode(ids); got != text {
				t.Errorf("vocab %d: %q → %v → %q", vocab, text, ids, got)
			}
		}
	}
}
