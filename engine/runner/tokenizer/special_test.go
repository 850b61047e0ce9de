package tokenizer

import (
	"reflect"
	"testing"
)

// gemmaLike is a small SentencePiece vocabulary shaped like Gemma's: an
// unknown token, control tokens, user-defined HTML tags and byte
// fallback.
func gemmaLike(t *testing.T) *Tokenizer {
	t.Helper()
	tokens := []string{"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<html>", "<h1>", "<h1>x", "x<h", "▁", "a", "b", "h", "t", "m", "l", "<", ">", "1", "x", "▁a"}
	types := []int32{TypeControl, TypeControl, TypeControl, TypeUnknown, TypeControl, TypeUserDefined, TypeUserDefined, TypeUserDefined, TypeUserDefined,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, byteName(b))
		types = append(types, TypeByte)
		scores = append(scores, 0)
	}
	tk, err := New("llama", tokens, scores, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	tk.BOS, tk.EOS, tk.UNK = 2, 1, 3
	return tk
}

func byteName(b int) string {
	return "<0x" + string("0123456789ABCDEF"[b>>4]) + string("0123456789ABCDEF"[b&15]) + ">"
}

func (t *Tokenizer) names(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = t.Tokens[id]
	}
	return out
}

// Special tokens are found as llama.cpp's tokenizer_st_partition finds
// them: user-defined tokens whether or not special tokens are parsed,
// control and unknown ones only when they are, longer tokens before
// shorter ones wherever they are, and each is prefixed with the space
// that SentencePiece puts before a text after a token.
func TestSpecialTokensAsLlamaCpp(t *testing.T) {
	tk := gemmaLike(t)
	cases := []struct {
		text         string
		parseSpecial bool
		want         []string
	}{
		// Gemma's HTML tags are user-defined: matched with parse_special
		// off too.
		{"a<html>b", false, []string{"▁a", "<html>", "▁", "b"}},
		{"a<html>b", true, []string{"▁a", "<html>", "▁", "b"}},
		// A control token is spelt out without parse_special …
		{"<eos>", false, []string{"▁", "<", "<0x65>", "<0x6F>", "<0x73>", ">"}},
		{"<eos>", true, []string{"<eos>"}},
		// … and so is the unknown token, which parse_special maps to
		// <unk> itself.
		{"a<unk>", true, []string{"▁a", "<unk>"}},
		{"a<unk>", false, []string{"▁a", "<", "<0x75>", "<0x6E>", "<0x6B>", ">"}},
		// Longest first, not leftmost first: "x<h" comes before "<h1>x"
		// in the text, but the longer token takes its bytes.
		{"x<h1>x", false, []string{"▁", "x", "<h1>x"}},
		// Shorter tokens take what the longer ones left.
		{"<h1><h1>x", false, []string{"<h1>", "<h1>x"}},
		{"", true, []string{}},
	}
	for _, c := range cases {
		got := tk.names(tk.Encode(c.text, false, c.parseSpecial))
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q parse_special=%v: %q, want %q", c.text, c.parseSpecial, got, c.want)
		}
	}
}

// BPE vocabularies match user-defined tokens without parse_special too
// (llama.cpp's neox-style added tokens).
func TestBPEUserDefinedWithoutParseSpecial(t *testing.T) {
	tokens, merges := byteLevelVocab(t, corpus, 50)
	tokens = append(tokens, "<|im_start|>", "<tag>")
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = TypeNormal
	}
	types[len(types)-2], types[len(types)-1] = TypeControl, TypeUserDefined
	tk, err := New("gpt2", tokens, nil, types, merges)
	if err != nil {
		t.Fatal(err)
	}
	ids := tk.Encode("x<tag>y<|im_start|>", false, false)
	var tags, starts int
	for _, id := range ids {
		switch tk.Tokens[id] {
		case "<tag>":
			tags++
		case "<|im_start|>":
			starts++
		}
	}
	if tags != 1 || starts != 0 {
		t.Errorf("parse_special off: %q has %d <tag> and %d <|im_start|>, want 1 and 0", tk.names(ids), tags, starts)
	}
	if got := tk.Decode(ids); got != "x<tag>y<|im_start|>" {
		t.Errorf("round trip: %q", got)
	}
}
