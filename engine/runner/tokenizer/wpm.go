package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// wordStart is how GGUF vocabularies mark the start of a word. llama.cpp's
// converter rewrites a WordPiece vocabulary into this "phantom space"
// form: a word-initial piece "hello" is stored as "▁hello", a continuation
// piece "##llo" as "llo", and bracketed specials ("[CLS]") unchanged.
const wordStart = "▁"

// encodeWPM is llama.cpp's WordPiece (llm_tokenizer_wpm): the text is
// normalised and split into words (wpmWords), then each word, with the
// phantom space in front, is covered greedily by the longest vocabulary
// entry at each position; the first piece therefore has to be a
// word-start piece and the rest continuation pieces. A word that cannot
// be covered completely becomes one UNK token.
func (t *Tokenizer) encodeWPM(out []int, text string) []int {
	for _, word := range wpmWords(text, t.Lowercase, t.StripAccents) {
		w := wordStart + word
		n := len(w)
		start := len(out)
		for i := 0; i < n; {
			matched := false
			for j := min(n, i+t.maxTokLen); j > i; j-- {
				if id, ok := t.index[w[i:j]]; ok {
					out = append(out, id)
					i = j
					matched = true
					break
				}
			}
			if !matched {
				out = out[:start]
				break
			}
		}
		if len(out) == start && t.UNK >= 0 {
			out = append(out, t.UNK)
		}
	}
	return out
}

// wpmWords is BERT's basic tokenizer as llama.cpp writes it
// (llm_tokenizer_wpm_session::preprocess): with stripAccents each code
// point is first replaced by the first code point of its canonical
// decomposition and combining marks are dropped; whitespace separates
// words; NUL, U+FFFD and control and format characters are dropped; the
// rest is lowercased when asked; and punctuation, ASCII symbols and CJK
// ideographs each become a word of their own.
func wpmWords(text string, lower, stripAccents bool) []string {
	var words []string
	var cur strings.Builder
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	for _, r := range text {
		if stripAccents {
			r = nfdFirst(r)
		}
		switch {
		case isWPMSpace(r):
			flush()
			continue
		case r == 0 || r == utf8.RuneError || unicode.In(r, unicode.C):
			continue
		case stripAccents && unicode.In(r, unicode.M):
			continue
		}
		if lower {
			r = unicode.ToLower(r)
		}
		if unicode.IsPunct(r) || r < 0x7F && unicode.IsSymbol(r) || isCJK(r) {
			flush()
			words = append(words, string(r))
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return words
}

// isWPMSpace is llama.cpp's whitespace set (Python's str.isspace), which
// also counts the ASCII separators U+001C–U+001F.
func isWPMSpace(r rune) bool {
	return unicode.IsSpace(r) || r >= 0x1C && r <= 0x1F
}

// isCJK reports the CJK ideograph blocks BERT splits character by
// character (the ranges of llama.cpp's is_chinese_char, which follows the
// Hugging Face implementation, 0x2B920 included).
func isCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF ||
		r >= 0x20000 && r <= 0x2A6DF || r >= 0x2A700 && r <= 0x2B73F ||
		r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B920 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// nfdFirst is the first code point of r's canonical decomposition (r
// itself when it has none), as llama.cpp's unicode_cpts_normalize_nfd
// maps each code point: "é" becomes "e" and the accent is simply gone.
func nfdFirst(r rune) rune {
	if r >= 0xAC00 && r <= 0xD7A3 {
		// A Hangul syllable decomposes into jamo, leading consonant first.
		return 0x1100 + (r-0xAC00)/588
	}
	if r < 0xC0 {
		return r
	}
	n := len(nfdBase) / 2
	i := sort.Search(n, func(i int) bool { return rune(nfdBase[2*i]) >= r })
	if i < n && rune(nfdBase[2*i]) == r {
		return rune(nfdBase[2*i+1])
	}
	return r
}

// cleanSpaces is the first pass of llama.cpp's clean_spaces for WordPiece
// detokenisation: the space a word-start piece brings is dropped before
// "?", "!", "." and ",", and at the very start.
func cleanSpaces(s string) string {
	s = strings.TrimPrefix(s, " ")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && i+1 < len(s) && strings.IndexByte("?!.,", s[i+1]) >= 0 {
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
