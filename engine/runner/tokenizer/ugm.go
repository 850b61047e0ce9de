package tokenizer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode/utf8"
)

// ugmModel is the state of SentencePiece's unigram tokenizer as llama.cpp
// implements it (llm_tokenizer_ugm): the vocabulary's score range and the
// normaliser's precompiled character map.
type ugmModel struct {
	unkScore float64 // the lowest normal score less 10, llama.cpp's penalty
	// userDefined are the user-defined tokens, longest first: the
	// normaliser passes them through untouched.
	userDefined []string
	// The precompiled charsmap: a XOR-compressed compact double array
	// over input bytes whose leaves index NUL-terminated replacements.
	xcda []uint32
	repl []byte
}

func newUGM(t *Tokenizer) *ugmModel {
	u := &ugmModel{}
	lo, seen := math.Inf(1), false
	for id, ty := range t.Types {
		switch ty {
		case TypeNormal:
			lo, seen = min(lo, float64(t.Scores[id])), true
		case TypeUserDefined:
			u.userDefined = append(u.userDefined, t.Tokens[id])
		}
	}
	if !seen {
		lo = 0
	}
	u.unkScore = lo - 10
	sort.SliceStable(u.userDefined, func(a, b int) bool { return len(u.userDefined[a]) > len(u.userDefined[b]) })
	return u
}

// SetCharsMap installs a unigram vocabulary's precompiled_charsmap
// (SentencePiece's normaliser rules, e.g. NFKC as XLM-RoBERTa uses it): a
// little-endian u32 size of the double array, the array, then the
// NUL-terminated replacement strings. An empty map normalises nothing.
func (t *Tokenizer) SetCharsMap(cm []byte) error {
	if t.ugm == nil {
		return fmt.Errorf("tokenizer: a precompiled charsmap applies only to t5 (unigram) vocabularies, not %s", t.Model)
	}
	if len(cm) == 0 {
		t.ugm.xcda, t.ugm.repl = nil, nil
		return nil
	}
	if len(cm) < 4 {
		return fmt.Errorf("tokenizer: precompiled charsmap of %d bytes has no size header", len(cm))
	}
	n := uint64(binary.LittleEndian.Uint32(cm))
	if n%4 != 0 || n+4 >= uint64(len(cm)) {
		return fmt.Errorf("tokenizer: precompiled charsmap declares a %d-byte array in %d bytes", n, len(cm))
	}
	xcda := make([]uint32, n/4)
	for i := range xcda {
		xcda[i] = binary.LittleEndian.Uint32(cm[4+4*i:])
	}
	t.ugm.xcda, t.ugm.repl = xcda, cm[4+n:]
	return nil
}

// utf8Len is the length of the UTF-8 sequence a lead byte announces (1
// for a stray continuation byte), as llama.cpp's unicode_len_utf8.
func utf8Len(b byte) int {
	return [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}[b>>4]
}

// encodeUGM is the unigram model's Viterbi search: text is normalised,
// then every normal, user-defined or unused vocabulary entry is a
// candidate at each code point, scored by its log probability
// (user-defined entries by 0); a code point no entry starts with costs the
// unknown score. The best-scoring cover wins (the earlier, shorter
// candidate on ties) and consecutive unknown pieces merge into one UNK.
func (t *Tokenizer) encodeUGM(out []int, text string) []int {
	u := t.ugm
	s := t.normalizeUGM(text)
	n := len(s)
	if n == 0 {
		return out
	}
	type best struct {
		id    int
		from  int
		score float64
	}
	bt := make([]best, n+1)
	for i := range bt {
		bt[i] = best{t.UNK, 0, -math.MaxFloat64}
	}
	bt[0].score = 0
	for off := 0; off < n; {
		cl := min(utf8Len(s[off]), n-off)
		cur := bt[off].score
		single := false
		for l := 1; l <= min(t.maxTokLen, n-off); l++ {
			id, ok := t.index[s[off:off+l]]
			if !ok {
				continue
			}
			ty := t.Types[id]
			if ty != TypeNormal && ty != TypeUserDefined && ty != TypeUnused {
				continue
			}
			if l == cl {
				single = true
			}
			sc := float64(t.Scores[id])
			if ty == TypeUserDefined {
				sc = 0
			}
			if cur+sc > bt[off+l].score {
				bt[off+l] = best{id, off, cur + sc}
			}
		}
		if !single {
			if sc := cur + u.unkScore; sc > bt[off+cl].score {
				bt[off+cl] = best{t.UNK, off, sc}
			}
		}
		off += cl
	}
	start := len(out)
	prevUnk := false
	for i := n; ; i = bt[i].from {
		unk := bt[i].id == t.UNK
		if !(prevUnk && unk) {
			out = append(out, bt[i].id)
		}
		if bt[i].from == 0 {
			break
		}
		prevUnk = unk
	}
	for i, j := start, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// normalizeUGM is llama.cpp's unigram normaliser: each prefix is replaced
// per the charsmap (user-defined tokens pass untouched), spaces become
// "▁", a "▁" goes before the first word with AddSpacePrefix, and with
// RemoveExtraWhitespaces runs of spaces collapse into the one before each
// word (trailing spaces are dropped).
func (t *Tokenizer) normalizeUGM(in string) string {
	const space = "▁"
	var b strings.Builder
	prepend := t.AddSpacePrefix
	merge := t.RemoveExtraWhitespaces
	prepended, inWord := false, false
	for off := 0; off < len(in); {
		repl, used := t.ugm.normalizePrefix(in, off)
		for i := 0; i < len(repl); i++ {
			c := repl[i]
			if c != ' ' {
				if !inWord {
					inWord = true
					if prepend && !prepended || merge {
						b.WriteString(space)
						prepended = true
					}
				}
				b.WriteByte(c)
				continue
			}
			inWord = false
			if !merge {
				b.WriteString(space)
			}
		}
		off += used
	}
	return b.String()
}

// normalizePrefix replaces the longest prefix of in[off:] the charsmap
// knows, returning the replacement and the input bytes it stands for. A
// user-defined token is returned as itself, a code point the map does not
// know likewise, and an invalid byte as U+FFFD.
func (u *ugmModel) normalizePrefix(in string, off int) (string, int) {
	for _, ud := range u.userDefined {
		if strings.HasPrefix(in[off:], ud) {
			return ud, len(ud)
		}
	}
	longest, at := 0, uint32(0)
	if len(u.xcda) > 0 {
		node := u.base(0)
		for p := off; p < len(in); p++ {
			c := in[p]
			if c == 0 {
				break
			}
			node ^= uint32(c)
			if int(node) >= len(u.xcda) || u.xcda[node]&(1<<31|0xff) != uint32(c) {
				break
			}
			leaf := u.xcda[node]>>8&1 == 1
			node ^= u.base(node)
			if leaf {
				if int(node) >= len(u.xcda) {
					break
				}
				longest, at = p-off+1, u.xcda[node]&(1<<31-1)
			}
		}
	}
	if longest > 0 && int(at) < len(u.repl) {
		r := u.repl[at:]
		if end := bytes.IndexByte(r, 0); end >= 0 {
			return string(r[:end]), longest
		}
	}
	r, n := utf8.DecodeRuneInString(in[off:])
	if r == utf8.RuneError && n <= 1 {
		return "\uFFFD", 1
	}
	return in[off : off+n], n
}

// base is the BASE of double-array node i: bits 10–30, shifted left by 8
// when bit 9 is set.
func (u *ugmModel) base(i uint32) uint32 {
	if int(i) >= len(u.xcda) {
		return 0
	}
	p := u.xcda[i]
	return (p >> 10) << ((p & (1 << 9)) >> 6)
}
