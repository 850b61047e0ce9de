package tokenizer

import (
	"unicode"
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

// encodeBPE splits text with GPT-2's pre-tokenizer, maps each word's bytes
// to runes and applies merges lowest rank first.
func (t *Tokenizer) encodeBPE(out []int, text string) []int {
	for _, word := range pretokenize(text) {
		var syms []string
		for i := 0; i < len(word); i++ {
			syms = append(syms, string(byteRune[word[i]]))
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

// pretokenize implements GPT-2's split pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// by hand, since Go's regexp has no lookahead.
func pretokenize(s string) []string {
	var out []string
	runeAt := func(i int) (rune, int) {
		if i >= len(s) {
			return -1, 0
		}
		return utf8.DecodeRuneInString(s[i:])
	}
	isOther := func(r rune) bool {
		return r >= 0 && !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r)
	}
	run := func(i int, f func(rune) bool) int {
		for {
			r, n := runeAt(i)
			if n == 0 || !f(r) {
				return i
			}
			i += n
		}
	}
	for i := 0; i < len(s); {
		if s[i] == '\'' {
			matched := false
			for _, c := range []string{"s", "t", "re", "ve", "m", "ll", "d"} {
				if len(s) >= i+1+len(c) && s[i+1:i+1+len(c)] == c {
					out = append(out, s[i:i+1+len(c)])
					i += 1 + len(c)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		j := i
		if s[i] == ' ' {
			j++
		}
		r, _ := runeAt(j)
		var end int
		switch {
		case r >= 0 && unicode.IsLetter(r):
			end = run(j, unicode.IsLetter)
		case r >= 0 && unicode.IsNumber(r):
			end = run(j, unicode.IsNumber)
		case isOther(r):
			end = run(j, isOther)
		default:
			// whitespace: the run minus its last char when a word follows,
			// so the word keeps its leading space
			end = run(i, unicode.IsSpace)
			if end < len(s) {
				_, last := utf8.DecodeLastRuneInString(s[i:end])
				if end-last > i {
					end -= last
				}
			}
		}
		out = append(out, s[i:end])
		i = end
	}
	return out
}
