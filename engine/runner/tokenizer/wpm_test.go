package tokenizer

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// wpmVocab is a WordPiece vocabulary in GGUF's phantom-space form: "▁"
// starts a word, bare pieces continue one ("##ing" in BERT's files).
var wpmVocab = []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
	"▁un", "▁play", "play", "able", "ing", "▁the", "▁cafe", "▁,", "▁!", "▁.", "▁hello", "▁world",
	"▁中", "▁文", "s", "▁a", "▁hel", "lo", "▁cafes"}

func newWPM(t *testing.T) *Tokenizer {
	t.Helper()
	types := make([]int32, len(wpmVocab))
	for i := range types {
		types[i] = TypeNormal
		if strings.HasPrefix(wpmVocab[i], "[") {
			types[i] = TypeControl
		}
	}
	tok, err := New("bert", wpmVocab, nil, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func pieces(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = tok.Tokens[id]
	}
	return out
}

// TestWordPieceSplits: known splits, as llama.cpp's llm_tokenizer_wpm
// makes them.
func TestWordPieceSplits(t *testing.T) {
	tok := newWPM(t)
	if tok.BOS != 2 || tok.SEP != 3 || tok.UNK != 1 || !tok.AddBOS || !tok.AddSEP || tok.AddEOS {
		t.Fatalf("specials %+v", tok)
	}
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"Hello, World!", []string{"[CLS]", "▁hello", "▁,", "▁world", "▁!", "[SEP]"}},
		{"playing PLAYS", []string{"[CLS]", "▁play", "ing", "▁play", "s", "[SEP]"}},
		{"unplayable", []string{"[CLS]", "▁un", "play", "able", "[SEP]"}},
		// Longest match first, even when it strands the rest: "▁cafes"
		// wins over "▁cafe"+"s" and nothing continues "▁cafes".
		{"cafes", []string{"[CLS]", "▁cafes", "[SEP]"}},
		// A word that cannot be covered is one [UNK], whatever matched.
		{"unknowable the", []string{"[CLS]", "[UNK]", "▁the", "[SEP]"}},
		{"Café CAFÉ", []string{"[CLS]", "▁cafe", "▁cafe", "[SEP]"}},                        // lowercased, accents stripped (precomposed)
		{"Cafe\u0301", []string{"[CLS]", "▁cafe", "[SEP]"}},                                // and combining
		{"中文", []string{"[CLS]", "▁中", "▁文", "[SEP]"}},                                     // CJK one by one
		{"hel\u200blo\t\n the\u3000.", []string{"[CLS]", "▁hello", "▁the", "▁.", "[SEP]"}}, // format char dropped, Unicode spaces split
		{"[CLS] the", []string{"[CLS]", "[CLS]", "▁the", "[SEP]"}},                         // special text parsed
		{"", []string{"[CLS]", "[SEP]"}},
	} {
		if got := pieces(tok, tok.Encode(tc.text, true, true)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
	if got := pieces(tok, tok.Encode("the a", false, false)); !reflect.DeepEqual(got, []string{"▁the", "▁a"}) {
		t.Errorf("without specials: %q", got)
	}
	tok.Lowercase, tok.StripAccents = false, false
	if got := pieces(tok, tok.Encode("Hello café", false, false)); !reflect.DeepEqual(got, []string{"[UNK]", "[UNK]"}) {
		t.Errorf("cased: %q", got)
	}
}

// TestWordPieceRoundTrip: normalised text decodes back to itself, with
// the word-start spaces restored and none before punctuation.
func TestWordPieceRoundTrip(t *testing.T) {
	tok := newWPM(t)
	for _, text := range []string{"hello world!", "the cafes, the cafe.", "unplayable playing", "a 中 文"} {
		ids := tok.Encode(text, true, false)
		if got := tok.Decode(ids); got != text {
			t.Errorf("%q: decoded %q (%q)", text, got, pieces(tok, ids))
		}
	}
	if got := tok.Decode(tok.Encode("HELLO,  World", false, false)); got != "hello, world" {
		t.Errorf("normalised: %q", got)
	}
}

// TestWordPieceFromGGUF reads the synthetic BERT vocabulary as a real
// converted file lays it out: [CLS] from cls_token_id, [SEP] from the
// misspelt seperator_token_id, and the normaliser keys.
func TestWordPieceFromGGUF(t *testing.T) {
	var buf bytes.Buffer
	s := gguf.BERTShape{Layers: 1, Dim: 32, Heads: 2, FF: 64, Vocab: 2000, Ctx: 16, Type: gguf.F32, Pooling: 1}
	if err := gguf.SynthBERT(&buf, s, 1); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Model != "bert" || tok.BOS != 101 || tok.SEP != 102 || tok.UNK != 100 || !tok.Lowercase || !tok.StripAccents {
		t.Fatalf("%+v", tok)
	}
	got := pieces(tok, tok.Encode("Query: the quick brown fox jumps?", true, true))
	want := []string{"[CLS]", "▁query", "▁:", "▁the", "▁quick", "▁brown", "▁fox", "▁jump", "s", "▁?", "[SEP]"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
	if tok.AddedSpecial() != 2 {
		t.Errorf("AddedSpecial %d, want 2", tok.AddedSpecial())
	}
}

func TestUnknownTokenizerRefused(t *testing.T) {
	for _, m := range []string{"wordpiece", "rwkv", "plamo2", ""} {
		if _, err := New(m, []string{"a"}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), `"`+m+`" is not supported`) {
			t.Errorf("%q: %v", m, err)
		}
	}
}

// newUGMTok: its scores favour a split of "world" over the whole word, so only
// a search over covers (not the longest match) finds it.
func newUGMTok(t *testing.T) *Tokenizer {
	t.Helper()
	toks := []string{"<pad>", "</s>", "<unk>", "▁", "▁hello", "▁he", "llo", "▁world", "▁wor", "ld", "h", "e", "l", "o", "w", "r", "d", "<user>"}
	scores := []float32{0, 0, 0, -3, -1, -2, -2.5, -1, -0.5, -0.4, -5, -5, -5, -5, -5, -5, -5, 0}
	types := []int32{3, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4}
	tok, err := New("t5", toks, scores, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestUnigramViterbi: the best-scoring cover, unknown runs merged into
// one <unk>, user-defined tokens kept whole, </s> appended.
func TestUnigramViterbi(t *testing.T) {
	tok := newUGMTok(t)
	for _, tc := range []struct {
		text    string
		special bool
		merge   bool
		want    []string
	}{
		{"hello world", true, false, []string{"▁hello", "▁wor", "ld", "</s>"}},
		{"hello ZZ", false, false, []string{"▁hello", "▁", "<unk>"}},
		{"hello<user>", false, false, []string{"▁hello", "<user>"}},
		{"hello   world", false, false, []string{"▁hello", "▁", "▁", "▁wor", "ld"}},
		{"hello   world  ", false, true, []string{"▁hello", "▁wor", "ld"}},
	} {
		tok.RemoveExtraWhitespaces = tc.merge
		if got := pieces(tok, tok.Encode(tc.text, tc.special, false)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
	tok.RemoveExtraWhitespaces = false
	if got := tok.Decode(tok.Encode("hello world", false, false)); got != "hello world" {
		t.Errorf("round trip: %q", got)
	}
}

// charsMap builds a precompiled charsmap (the XOR-compressed double array
// llama.cpp walks) that maps "X" to "wor" and "XY" to "hello".
func charsMap() []byte {
	xcda := make([]uint32, 0x301)
	xcda[0] = 0x100 << 10 // root: BASE 0x100
	// "X" (0x58) at 0x100^0x58; a leaf whose BASE leads to node 0x200.
	xcda[0x158] = (0x158^0x200)<<10 | 1<<8 | 0x58
	xcda[0x200] = 1<<31 | 0 // "wor" at offset 0
	// "XY": "Y" (0x59) under node 0x200, a leaf leading to node 0x300.
	xcda[0x259] = (0x259^0x300)<<10 | 1<<8 | 0x59
	xcda[0x300] = 1<<31 | 4 // "hello" at offset 4
	out := binary.LittleEndian.AppendUint32(nil, uint32(4*len(xcda)))
	for _, v := range xcda {
		out = binary.LittleEndian.AppendUint32(out, v)
	}
	return append(out, "wor\x00hello\x00"...)
}

func TestUnigramCharsMap(t *testing.T) {
	tok := newUGMTok(t)
	if err := tok.SetCharsMap(charsMap()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, same string }{
		{"Xld", "world"},          // "X" replaced by "wor"
		{"XY Xld", "hello world"}, // the longest prefix wins
		{"hello", "hello"},        // unmapped text unchanged
	} {
		got, want := tok.Encode(tc.in, false, false), tok.Encode(tc.same, false, false)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %q, want %q (as %q)", tc.in, pieces(tok, got), pieces(tok, want), tc.same)
		}
	}
	if err := tok.SetCharsMap([]byte{1, 0}); err == nil {
		t.Error("a charsmap without its header was accepted")
	}
	if err := newWPM(t).SetCharsMap(charsMap()); err == nil {
		t.Error("a charsmap on a WordPiece vocabulary was accepted")
	}
}
