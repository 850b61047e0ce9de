package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteRune is GPT-2's reversible map from bytes to printable runes, so
// that every byte sequence is a string of vocabulary characters.
var byteRune, runeByte = func() ([256]rune, map[rune]byte) {
	var br [256]rune
	rb := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			br[b] = rune(b)
		} else {
			br[b] = rune(256 + n)
			n++
		}
		rb[br[b]] = byte(b)
	}
	return br, rb
}()

func bpeDecode(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// encodeBPE splits text with the vocabulary's pre-tokenizer, maps each
// word's bytes to runes and applies merges lowest rank first (leftmost on
// ties), as llama.cpp does. With ignore_merges, a word that is a token is
// emitted whole.
func (t *Tokenizer) encodeBPE(out []int, text string) []int {
	for _, word := range t.pre.Split(text) {
		var syms []string
		for i := 0; i < len(word); i++ {
			syms = append(syms, string(byteRune[word[i]]))
		}
		if t.pre.ignoreMerges {
			if id, ok := t.index[strings.Join(syms, "")]; ok {
				out = append(out, id)
				continue
			}
		}
		for len(syms) > 1 {
			best, bestRank := -1, 0
			for i := 0; i+1 < len(syms); i++ {
				if r, ok := t.ranks[syms[i]+" "+syms[i+1]]; ok && (best < 0 || r < bestRank) {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			syms[best] += syms[best+1]
			syms = append(syms[:best+1], syms[best+2:]...)
		}
		for _, s := range syms {
			if id, ok := t.index[s]; ok {
				out = append(out, id)
				continue
			}
			for _, r := range s {
				if id, ok := t.index[string(r)]; ok {
					out = append(out, id)
				} else if t.UNK >= 0 {
					out = append(out, t.UNK)
				}
			}
		}
	}
	return out
}
