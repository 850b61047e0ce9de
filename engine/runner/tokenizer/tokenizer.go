// Package tokenizer owns text ↔ token conversion for GGUF models: the
// SentencePiece-style tokenizer with byte fallback ("llama"), the
// byte-level BPE tokenizer with ranked merges ("gpt2"), BERT's WordPiece
// ("bert") and SentencePiece's unigram model ("t5", as XLM-RoBERTa-based
// encoders use it), all built from the tokenizer.ggml.* metadata as
// llama.cpp builds them. BPE text is first split into words by the
// pre-tokenizer that tokenizer.ggml.pre names (see NewPreTokenizer), with
// the splitting rules of llama.cpp. Any other tokenizer.ggml.model is
// refused by name.
package tokenizer

import (
	"fmt"
	"strings"

	"meshd/engine/runner/gguf"
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// Tokenizer converts between text and token ids.
type Tokenizer struct {
	Model  string // "llama", "gpt2", "bert" or "t5"
	Tokens []string
	Scores []float32
	Types  []int32
	BOS    int // -1 when absent; WordPiece's [CLS]
	EOS    int
	UNK    int
	SEP    int // WordPiece's [SEP], -1 when absent
	AddBOS bool
	AddEOS bool
	// AddSEP ends a specially encoded text with SEP, as BERT does.
	AddSEP bool
	// AddSpacePrefix puts a space before the text, as SentencePiece does.
	AddSpacePrefix bool
	// Lowercase and StripAccents are WordPiece's normalisation
	// (tokenizer.ggml.normalizer.*; both on by default, as in BERT's
	// uncased vocabularies).
	Lowercase, StripAccents bool
	// RemoveExtraWhitespaces makes the unigram model collapse runs of
	// spaces (SentencePiece's remove_extra_whitespaces).
	RemoveExtraWhitespaces bool

	index map[string]int
	// maxTokLen is the longest token in bytes: WordPiece's longest
	// possible match.
	maxTokLen int
	ugm       *ugmModel
	byteTok   [256]int // SPM: id of <0xXX>, -1 if absent
	ranks     map[string]int
	// special matches the tokens Encode finds in the text before
	// tokenizing the rest: control, user-defined and unknown tokens with
	// parse_special, user-defined ones alone without (as llama.cpp's
	// tokenizer_st_partition).
	special, userDefined *specialSet
	pre                  *PreTokenizer
}

// New builds a tokenizer from a vocabulary. merges is required for gpt2
// and ignored otherwise. A gpt2 tokenizer splits words with GPT-2's own
// pre-tokenizer ("gpt-2") until SetPreTokenizer chooses another; FromGGUF
// chooses the one the file names. A bert (WordPiece) vocabulary is in
// llama.cpp's phantom-space form (see wordStart); a t5 (unigram) one needs
// scores, and its normaliser's precompiled character map is set with
// SetCharsMap.
func New(model string, tokens []string, scores []float32, types []int32, merges []string) (*Tokenizer, error) {
	switch model {
	case "llama", "gpt2", "bert", "t5":
	default:
		return nil, fmt.Errorf("tokenizer: model %q is not supported (llama, gpt2, bert, t5)", model)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("tokenizer: empty vocabulary")
	}
	if scores != nil && len(scores) != len(tokens) {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(scores), len(tokens))
	}
	if types != nil && len(types) != len(tokens) {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(types), len(tokens))
	}
	t := &Tokenizer{Model: model, Tokens: tokens, Scores: scores, Types: types, BOS: -1, EOS: -1, UNK: -1, SEP: -1,
		index: make(map[string]int, len(tokens))}
	if t.Scores == nil {
		t.Scores = make([]float32, len(tokens))
	}
	if t.Types == nil {
		t.Types = make([]int32, len(tokens))
		for i := range t.Types {
			t.Types[i] = TypeNormal
		}
	}
	for i, s := range tokens {
		if j, dup := t.index[s]; dup {
			return nil, fmt.Errorf("tokenizer: tokens %d and %d are both %q", j, i, s)
		}
		t.index[s] = i
		t.maxTokLen = max(t.maxTokLen, len(s))
	}
	t.special = newSpecialSet(tokens, t.Types, func(ty int32) bool {
		return ty == TypeControl || ty == TypeUserDefined || ty == TypeUnknown
	})
	t.userDefined = newSpecialSet(tokens, t.Types, func(ty int32) bool { return ty == TypeUserDefined })
	for b := range t.byteTok {
		t.byteTok[b] = -1
		if id, ok := t.index[fmt.Sprintf("<0x%02X>", b)]; ok && t.Types[id] == TypeByte {
			t.byteTok[b] = id
		}
	}
	switch model {
	case "llama":
		t.AddBOS, t.AddSpacePrefix = true, true
		t.BOS, t.EOS, t.UNK = t.lookup("<s>"), t.lookup("</s>"), t.lookup("<unk>")
	case "gpt2":
		if len(merges) == 0 {
			return nil, fmt.Errorf("tokenizer: gpt2 vocabulary has no merges")
		}
		t.ranks = make(map[string]int, len(merges))
		for i, m := range merges {
			if strings.Count(m, " ") != 1 {
				return nil, fmt.Errorf("tokenizer: merge %d %q is not two pieces", i, m)
			}
			if _, dup := t.ranks[m]; !dup {
				t.ranks[m] = i
			}
		}
		t.pre = preByName["gpt-2"]
	case "bert":
		// llama.cpp's defaults for a WordPiece vocabulary: [CLS] text [SEP],
		// uncased. The ids are BERT's when the vocabulary lacks the names.
		t.AddBOS, t.AddSEP, t.Lowercase, t.StripAccents = true, true, true, true
		t.BOS, t.SEP, t.UNK = t.lookupOr("[CLS]", 101), t.lookupOr("[SEP]", 102), t.lookupOr("[UNK]", 100)
	case "t5":
		// llama.cpp's defaults for a unigram vocabulary: text </s>, with
		// SentencePiece's dummy prefix; XLM-RoBERTa files override the ids
		// and add <s> through the metadata.
		t.AddEOS, t.AddSpacePrefix = true, true
		t.EOS, t.UNK = t.lookupOr("</s>", 1), t.lookupOr("<unk>", 2)
		t.ugm = newUGM(t)
	}
	return t, nil
}

// lookupOr is the id of token s, or def when s is absent and def is a
// valid id, else -1.
func (t *Tokenizer) lookupOr(s string, def int) int {
	if id, ok := t.index[s]; ok {
		return id
	}
	if def < len(t.Tokens) {
		return def
	}
	return -1
}

// SetPreTokenizer chooses the BPE pre-tokenizer by its tokenizer.ggml.pre
// name ("" is llama.cpp's default); see NewPreTokenizer. SentencePiece
// vocabularies have no pre-tokenizer and ignore it.
func (t *Tokenizer) SetPreTokenizer(name string) error {
	p, err := NewPreTokenizer(name)
	if err != nil {
		return err
	}
	if t.Model == "gpt2" {
		t.pre = p
	}
	return nil
}

// PreTokenizer is the name of the BPE pre-tokenizer in use, "" for
// SentencePiece vocabularies.
func (t *Tokenizer) PreTokenizer() string {
	if t.pre == nil {
		return ""
	}
	return t.pre.name
}

func (t *Tokenizer) lookup(s string) int {
	if id, ok := t.index[s]; ok {
		return id
	}
	return -1
}

// FromGGUF builds the tokenizer described by a file's metadata.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	model, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.model missing")
	}
	ta, ok := f.ArrayOf("tokenizer.ggml.tokens")
	tokens, ok2 := ta.Values.([]string)
	if !ok || !ok2 {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.tokens missing or not strings")
	}
	var scores []float32
	if a, ok := f.ArrayOf("tokenizer.ggml.scores"); ok {
		if scores, ok = a.Values.([]float32); !ok {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.scores is %s, want f32", a.Elem)
		}
	}
	var types []int32
	if a, ok := f.ArrayOf("tokenizer.ggml.token_type"); ok {
		if types, ok = a.Values.([]int32); !ok {
			return nil, fmt.Errorf("tokenizer: tokenizer.ggml.token_type is %s, want i32", a.Elem)
		}
	}
	var merges []string
	if a, ok := f.ArrayOf("tokenizer.ggml.merges"); ok {
		merges, _ = a.Values.([]string)
	}
	t, err := New(model, tokens, scores, types, merges)
	if err != nil {
		return nil, err
	}
	if model == "t5" {
		if a, ok := f.ArrayOf("tokenizer.ggml.precompiled_charsmap"); ok {
			var cm []byte
			switch v := a.Values.(type) {
			case []uint8:
				cm = v
			case []int8:
				cm = make([]byte, len(v))
				for i, b := range v {
					cm[i] = byte(b)
				}
			default:
				return nil, fmt.Errorf("tokenizer: tokenizer.ggml.precompiled_charsmap is %s, want u8 or i8", a.Elem)
			}
			if err := t.SetCharsMap(cm); err != nil {
				return nil, err
			}
		}
	}
	if model == "gpt2" {
		// A missing key is llama.cpp's "default" pre-tokenizer.
		pre, _ := f.String("tokenizer.ggml.pre")
		if err := t.SetPreTokenizer(pre); err != nil {
			return nil, fmt.Errorf("tokenizer.ggml.pre: %w", err)
		}
		t.AddBOS = t.pre.addBOS
	}
	type idKey struct {
		key string
		dst *int
	}
	var ids []idKey
	if model == "bert" {
		// BERT files name [CLS], the token WordPiece starts with, only as
		// cls_token_id; a bos_token_id, where there is one, comes later
		// and wins.
		ids = append(ids, idKey{"tokenizer.ggml.cls_token_id", &t.BOS})
	}
	ids = append(ids, idKey{"tokenizer.ggml.bos_token_id", &t.BOS}, idKey{"tokenizer.ggml.eos_token_id", &t.EOS},
		idKey{"tokenizer.ggml.unknown_token_id", &t.UNK},
		// gguf-py spells the key "seperator".
		idKey{"tokenizer.ggml.seperator_token_id", &t.SEP})
	for _, k := range ids {
		if v, ok := f.Uint(k.key); ok {
			if v >= uint64(len(tokens)) {
				return nil, fmt.Errorf("tokenizer: %s %d is outside the %d-token vocabulary", k.key, v, len(tokens))
			}
			*k.dst = int(v)
		}
	}
	if v, ok := f.Bool("tokenizer.ggml.add_bos_token"); ok {
		t.AddBOS = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_eos_token"); ok {
		t.AddEOS = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_sep_token"); ok {
		t.AddSEP = v
	}
	if v, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		t.AddSpacePrefix = v
	}
	if v, ok := f.Bool("tokenizer.ggml.remove_extra_whitespaces"); ok {
		t.RemoveExtraWhitespaces = v
	}
	// llama.cpp: strip_accents follows lowercase unless set itself.
	if v, ok := f.Bool("tokenizer.ggml.normalizer.lowercase"); ok {
		t.Lowercase, t.StripAccents = v, v
	}
	if v, ok := f.Bool("tokenizer.ggml.normalizer.strip_accents"); ok {
		t.StripAccents = v
	}
	return t, nil
}

// Len is the vocabulary size.
func (t *Tokenizer) Len() int { return len(t.Tokens) }

// IsEOG reports whether id ends generation.
func (t *Tokenizer) IsEOG(id int) bool { return id == t.EOS && id >= 0 }

// AddedSpecial is the number of tokens Encode adds with addSpecial.
func (t *Tokenizer) AddedSpecial() int {
	n := 0
	for _, add := range []bool{t.AddBOS && t.BOS >= 0, t.AddEOS && t.EOS >= 0, t.AddSEP && t.SEP >= 0} {
		if add {
			n++
		}
	}
	return n
}

// Encode tokenizes text. addSpecial adds BOS/EOS (and BERT's [CLS] and
// [SEP]) as the model asks; parseSpecial turns the text of control and
// unknown tokens into those tokens instead of spelling them out.
// User-defined tokens are matched either way, as llama.cpp matches them.
// Memory beyond the result stays within a window of the text (see
// encodeSPM and PreTokenizer.each), whatever the text's length.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int {
	// Real vocabularies average three to five bytes a token: sized so,
	// the result of a large text rarely grows by copying.
	return t.encode(make([]int, 0, len(text)/4+4), text, addSpecial, parseSpecial, nil)
}

// spillAt is how many tokens EncodeFunc gathers before handing them on.
const spillAt = 4096

// EncodeFunc is Encode handing the tokens to emit in order, some
// thousands at a time, instead of returning them, so that tokenizing a
// text takes memory for a window of it and a batch of tokens, however
// many tokens it makes (WordPiece and unigram vocabularies hand each
// fragment's tokens over whole). emit must not keep the slice.
func (t *Tokenizer) EncodeFunc(text string, addSpecial, parseSpecial bool, emit func([]int)) {
	spill := func(out []int) []int {
		if len(out) < spillAt {
			return out
		}
		emit(out)
		return out[:0]
	}
	if out := t.encode(make([]int, 0, 2*spillAt), text, addSpecial, parseSpecial, spill); len(out) > 0 {
		emit(out)
	}
}

func (t *Tokenizer) encode(out []int, text string, addSpecial, parseSpecial bool, spill func([]int) []int) []int {
	if addSpecial && t.AddBOS && t.BOS >= 0 {
		out = append(out, t.BOS)
	}
	set := t.userDefined
	if parseSpecial {
		set = t.special
	}
	first := true
	set.partition(text, func(frag string, id int) {
		if id >= 0 {
			out = append(out, id)
			first = true
			return
		}
		switch t.Model {
		case "llama":
			out = t.encodeSPM(out, frag, first && t.AddSpacePrefix, spill)
		case "bert":
			out = t.encodeWPM(out, frag)
		case "t5":
			out = t.encodeUGM(out, frag)
		default:
			out = t.encodeBPE(out, frag, spill)
		}
		if spill != nil {
			out = spill(out)
		}
		first = false
	})
	if addSpecial && t.AddEOS && t.EOS >= 0 {
		out = append(out, t.EOS)
	}
	if addSpecial && t.AddSEP && t.SEP >= 0 {
		out = append(out, t.SEP)
	}
	return out
}

// Piece is the text of one token as generation emits it.
func (t *Tokenizer) Piece(id int) []byte {
	if id < 0 || id >= len(t.Tokens) {
		return nil
	}
	s := t.Tokens[id]
	switch t.Types[id] {
	case TypeControl, TypeUnused:
		return nil
	case TypeByte:
		if t.Model == "llama" {
			var b byte
			if _, err := fmt.Sscanf(s, "<0x%02X>", &b); err == nil {
				return []byte{b}
			}
		}
	case TypeUserDefined:
		return []byte(s)
	}
	if t.Model != "gpt2" {
		// SentencePiece's escaped space, WordPiece's phantom one.
		return []byte(strings.ReplaceAll(s, "▁", " "))
	}
	return bpeDecode(s)
}

// Decode is the inverse of Encode without special tokens: it joins the
// pieces and drops the space SentencePiece prefixed. WordPiece text comes
// back normalised (lowercased, accents stripped) and with a space between
// words and punctuation except before "?!.,", as llama.cpp detokenises it.
func (t *Tokenizer) Decode(ids []int) string {
	var b []byte
	for _, id := range ids {
		b = append(b, t.Piece(id)...)
	}
	s := string(b)
	switch {
	case t.Model == "bert":
		s = cleanSpaces(s)
	case (t.Model == "llama" || t.Model == "t5") && t.AddSpacePrefix:
		s = strings.TrimPrefix(s, " ")
	}
	return s
}
