package tokenizer

import (
	"bytes"
	"reflect"
	"testing"

	"meshd/engine/runner/gguf"
)

func synthSPM(t *testing.T, n int) *Tokenizer {
	t.Helper()
	toks, scores, types := gguf.SynthVocab(n)
	tk, err := New("llama", toks, scores, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSPMRoundTripWithByteFallback(t *testing.T) {
	tk := synthSPM(t, 2000)
	for _, s := range []string{"hello world", "héllo wörld 日本語", "tabs\tand\nnewlines", "  two leading spaces", "emoji 🙂!", ""} {
		ids := tk.Encode(s, true, false)
		if len(ids) == 0 || ids[0] != tk.BOS {
			t.Fatalf("%q: no BOS in %v", s, ids)
		}
		if got := tk.Decode(ids); got != s {
			t.Errorf("round trip %q → %v → %q", s, ids, got)
		}
	}
	// Non-ASCII is not in the synthetic vocabulary, so it must come out as
	// byte tokens: é is C3 A9.
	ids := tk.Encode("é", false, false)
	want := []int{tk.lookup("▁"), tk.lookup("<0xC3>"), tk.lookup("<0xA9>")}
	if !reflect.DeepEqual(ids, want) {
		t.Errorf("é → %v, want byte fallback %v", ids, want)
	}
}

func TestSPMMergesByScore(t *testing.T) {
	tokens := []string{"<unk>", "<s>", "</s>", "▁", "a", "b", "c", "▁a", "bc", "▁ab"}
	scores := []float32{0, 0, 0, -1, -1, -1, -1, -2, -3, -4}
	types := []int32{2, 3, 3, 1, 1, 1, 1, 1, 1, 1}
	tk, err := New("llama", tokens, scores, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	// ▁+a (score −2) first, then bc (−3) beats ▁a+b (−4), and ▁abc is
	// not a token: ▁a|bc. Merging in any other order gives ▁ab|c.
	if got := tk.Encode("abc", false, false); !reflect.DeepEqual(got, []int{7, 8}) {
		t.Errorf("abc → %v, want [7 8]", got)
	}
	// With no byte tokens, unknown characters become <unk>.
	if got := tk.Encode("ab", false, false); !reflect.DeepEqual(got, []int{9}) {
		t.Errorf("ab → %v, want [9]", got)
	}
	if got := tk.Encode("az", false, false); !reflect.DeepEqual(got, []int{7, 0}) {
		t.Errorf("az → %v, want [7 0]", got)
	}
}

func TestSPMParseSpecial(t *testing.T) {
	tk := synthSPM(t, 600)
	with := tk.Encode("hi</s>", false, true)
	if with[len(with)-1] != tk.EOS {
		t.Errorf("parse_special: %v does not end in EOS", with)
	}
	without := tk.Encode("hi</s>", false, false)
	for _, id := range without {
		if id == tk.EOS {
			t.Errorf("without parse_special, EOS appeared in %v", without)
		}
	}
}

func TestNewRejectsDuplicates(t *testing.T) {
	if _, err := New("llama", []string{"a", "b", "a"}, nil, nil, nil); err == nil {
		t.Error("duplicate token strings accepted")
	}
	if _, err := New("gpt2", []string{"a"}, nil, nil, nil); err == nil {
		t.Error("gpt2 without merges accepted")
	}
	if _, err := New("rwkv", []string{"a"}, nil, nil, nil); err == nil {
		t.Error("unknown model accepted")
	}
}

func TestPretokenize(t *testing.T) {
	got := preByName["gpt-2"].Split("Hello, world!  It's 2024\n ok")
	want := []string{"Hello", ",", " world", "!", " ", " It", "'s", " 2024", "\n", " ok"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pretokenize = %q, want %q", got, want)
	}
}

func TestBPEWithMerges(t *testing.T) {
	// Ġ is the byte-level rune for a space.
	var tokens []string
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteRune[b]))
	}
	tokens = append(tokens, "lo", "low", "Ġlow", "er", "Ġl", "ow")
	merges := []string{"l o", "lo w", "e r", "Ġ l", "Ġl ow", "o w"}
	tk, err := New("gpt2", tokens, nil, nil, merges)
	if err != nil {
		t.Fatal(err)
	}
	id := func(s string) int { return tk.lookup(s) }
	// "lower": l o → lo (rank 0), lo w → low (1), e r → er (2)
	if got, want := tk.Encode("lower", false, false), []int{id("low"), id("er")}; !reflect.DeepEqual(got, want) {
		t.Errorf("lower → %v, want %v", got, want)
	}
	// " low": Ġ l → Ġl (3) and l o (0) compete: l o wins, then Ġ+lo has no
	// merge, lo w → low, and Ġ+low has no merge either.
	if got, want := tk.Encode(" low", false, false), []int{id("Ġ"), id("low")}; !reflect.DeepEqual(got, want) {
		t.Errorf("' low' → %v, want %v", got, want)
	}
	for _, s := range []string{"lower lows", "naïve café\n", "a  b"} {
		if got := tk.Decode(tk.Encode(s, false, false)); got != s {
			t.Errorf("round trip %q → %q", s, got)
		}
	}
}

func TestFromGGUF(t *testing.T) {
	var buf bytes.Buffer
	s := gguf.Shape{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, FF: 64, Vocab: 300, Ctx: 64, Type: gguf.F32}
	if err := gguf.Synth(&buf, s, 1); err != nil {
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
	if tk.Len() != 300 || tk.BOS != 1 || tk.EOS != 2 || !tk.AddBOS {
		t.Errorf("vocab %d bos %d eos %d add_bos %v", tk.Len(), tk.BOS, tk.EOS, tk.AddBOS)
	}
	if got := tk.Decode(tk.Encode("round trip", true, false)); got != "round trip" {
		t.Errorf("round trip gave %q", got)
	}
}
