package tokenizer

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file implements the pre-tokenizers that split text into words
// before byte-level BPE merges, one per tokenizer.ggml.pre value, with the
// semantics of llama.cpp's unicode_regex_split:
//
//   - a pre-tokenizer is a list of regexes applied in turn; each one splits
//     every piece the previous one produced, and both its matches and the
//     text between matches become pieces;
//   - a regex is searched leftmost-first with backtracking alternation, as
//     ECMAScript and Python do, and a piece's end is the end of the text for
//     look-ahead and $;
//   - \s is Unicode White_Space, \p{L}, \p{N}, \p{P} are the Unicode general
//     categories (Go's unicode tables), case-insensitive contractions match
//     ASCII letters only, as llama.cpp's adapted (?:'[sS]|...) forms do.
//
// Go's regexp (RE2) has neither look-ahead nor backtracking, so each regex
// is written with the small backtracking combinators below, alternative by
// alternative as the regex reads.

// span is the text a matcher runs over: runes [0, end) of one piece, or
// of a window of it when the piece is split in chunks (see each).
type span struct {
	r   []rune
	end int
	// far is the furthest index a match attempt looked at, end included:
	// an attempt that never looked at end gives the same result on the
	// whole piece as on a window of it.
	far int
}

// in reports whether rune i exists, noting that the attempt looked at it.
func (s *span) in(i int) bool {
	if i > s.far {
		s.far = i
	}
	return i < s.end
}

// A node is a regex as a list of alternatives, each a sequence of items;
// none of the regexes nests an alternation inside a sequence, so this is
// all the structure they need, and matching it allocates nothing.
type node [][]item

type itemKind uint8

const (
	itemRep         itemKind = iota // class{min,max}, greedy
	itemNotAhead                    // (?!class)
	itemAtEnd                       // $
	itemContraction                 // 's|'t|'re|'ve|'m|'ll|'d
)

type item struct {
	kind     itemKind
	in       func(rune) bool
	min, max int // max < 0: unbounded
	fold     bool
}

// one matches a single rune in the class.
func one(in func(rune) bool) node { return rep(in, 1, 1) }

// opt is in? — greedy, giving the rune back if the rest fails.
func opt(in func(rune) bool) node { return rep(in, 0, 1) }

// rep is in{min,max} (max < 0: unbounded), greedy with backtracking.
func rep(in func(rune) bool, min, max int) node {
	return node{{{kind: itemRep, in: in, min: min, max: max}}}
}

// seq matches its nodes one after the other; each must be a single
// alternative.
func seq(nodes ...node) node {
	var items []item
	for _, n := range nodes {
		if len(n) != 1 {
			panic("tokenizer: seq of an alternation")
		}
		items = append(items, n[0]...)
	}
	return node{items}
}

// alt tries its alternatives in order, the first that lets the rest match
// winning, as in a backtracking regex.
func alt(nodes ...node) node {
	var out node
	for _, n := range nodes {
		out = append(out, n...)
	}
	return out
}

// notAhead is (?!c): the next rune, if any, is not in c.
func notAhead(c func(rune) bool) node { return node{{{kind: itemNotAhead, in: c}}} }

// atEnd is $ at the end of the piece.
var atEnd = node{{{kind: itemAtEnd}}}

// contraction is 's|'t|'re|'ve|'m|'ll|'d, ASCII case-insensitive when fold
// is set.
func contraction(fold bool) node { return node{{{kind: itemContraction, fold: fold}}} }

// match is the end of the leftmost-first match at i, -1 if none.
func (n node) match(s *span, i int) int {
	for _, items := range n {
		if e := matchItems(items, s, i); e >= 0 {
			return e
		}
	}
	return -1
}

func matchItems(items []item, s *span, i int) int {
	if len(items) == 0 {
		return i
	}
	it, rest := &items[0], items[1:]
	switch it.kind {
	case itemRep:
		n := 0
		for (it.max < 0 || n < it.max) && s.in(i+n) && it.in(s.r[i+n]) {
			n++
		}
		for ; n >= it.min; n-- {
			if e := matchItems(rest, s, i+n); e >= 0 {
				return e
			}
		}
		return -1
	case itemNotAhead:
		if s.in(i) && it.in(s.r[i]) {
			return -1
		}
		return matchItems(rest, s, i)
	case itemAtEnd:
		if s.in(i) {
			return -1
		}
		return matchItems(rest, s, i)
	case itemContraction:
		if e := contractionEnd(s, i, it.fold); e >= 0 {
			return matchItems(rest, s, e)
		}
	}
	return -1
}

func contractionEnd(s *span, i int, fold bool) int {
	lower := func(r rune) rune {
		if fold && r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	if !s.in(i+1) || s.r[i] != '\'' {
		return -1
	}
	var second rune
	switch lower(s.r[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		second = 'e'
	case 'l':
		second = 'l'
	default:
		return -1
	}
	if s.in(i+2) && lower(s.r[i+2]) == second {
		return i + 3
	}
	return -1
}

// Character classes.
var (
	isS      = unicode.IsSpace // \s: Unicode White_Space, as llama.cpp's table
	isNotS   = func(r rune) bool { return !unicode.IsSpace(r) }
	isL      = unicode.IsLetter
	isN      = unicode.IsNumber
	isSpace1 = func(r rune) bool { return r == ' ' }
	isCRLF   = func(r rune) bool { return r == '\r' || r == '\n' }
	isDigit  = func(r rune) bool { return r >= '0' && r <= '9' }
	// [^\s\p{L}\p{N}]
	isOther = func(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }
	// [^\r\n\p{L}\p{N}]
	isPrefix = func(r rune) bool { return r != '\r' && r != '\n' && !unicode.IsLetter(r) && !unicode.IsNumber(r) }
	// [\r\n/]
	isCRLFSlash = func(r rune) bool { return r == '\r' || r == '\n' || r == '/' }
	// tekken's adapted (?=[\p{L}])([^a-z]) and (?=[\p{L}])([^A-Z])
	isUpperish = func(r rune) bool { return unicode.IsLetter(r) && !(r >= 'a' && r <= 'z') }
	isLowerish = func(r rune) bool { return unicode.IsLetter(r) && !(r >= 'A' && r <= 'Z') }
)

// punctOr is [\p{P}...] with extra ASCII characters.
func punctOr(extra string) func(rune) bool {
	return func(r rune) bool { return unicode.IsPunct(r) || (r < utf8.RuneSelf && strings.ContainsRune(extra, r)) }
}

// ranges is a bracket class of literal characters and ranges, given as
// inclusive code point pairs, matched the way llama.cpp's std::wregex sees
// the text: it turns non-ASCII whitespace into \v first, so those never
// match a literal class.
func ranges(pairs ...rune) func(rune) bool {
	type rng struct{ lo, hi rune }
	var rs []rng
	for j := 0; j+1 < len(pairs); j += 2 {
		rs = append(rs, rng{pairs[j], pairs[j+1]})
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].lo < rs[b].lo })
	var merged []rng
	for _, r := range rs {
		if n := len(merged); n > 0 && r.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, r.hi)
			continue
		}
		merged = append(merged, r)
	}
	return func(r rune) bool {
		if r >= utf8.RuneSelf && unicode.IsSpace(r) {
			return false
		}
		i := sort.Search(len(merged), func(i int) bool { return merged[i].hi >= r })
		return i < len(merged) && merged[i].lo <= r
	}
}

// The regexes, named after the llama.cpp pre-tokenizer types that use them.
var (
	// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
	reGPT2 = alt(
		contraction(false),
		seq(opt(isSpace1), rep(isL, 1, -1)),
		seq(opt(isSpace1), rep(isN, 1, -1)),
		seq(opt(isSpace1), rep(isOther, 1, -1)),
		seq(rep(isS, 1, -1), notAhead(isNotS)),
	)
	// (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
	// | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	// and qwen2's variant with \p{N} instead of \p{N}{1,3}.
	reLlama3 = llama3Like(rep(isN, 1, 3))
	reQwen2  = llama3Like(one(isN))
	// [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*
	// |\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
	reTekken = alt(
		seq(opt(isPrefix), rep(isUpperish, 0, -1), rep(isLowerish, 1, -1)),
		seq(opt(isPrefix), rep(isUpperish, 1, -1), rep(isLowerish, 0, -1)),
		one(isN),
		seq(opt(isSpace1), rep(isOther, 1, -1), rep(isCRLFSlash, 0, -1)),
		seq(rep(isS, 0, -1), rep(isCRLF, 1, -1)),
		seq(rep(isS, 1, -1), notAhead(isNotS)),
		rep(isS, 1, -1),
	)
	reDigit       = one(isN)                                                           // \p{N}
	reDigits      = rep(isN, 1, -1)                                                    // \p{N}+
	reASCIIDigit3 = seq(one(isDigit), one(isDigit), one(isDigit))                      // [0-9][0-9][0-9]
	reCRLF        = one(isCRLF)                                                        // [\r\n]
	reCJK         = rep(ranges(0x4E00, 0x9FA5, 0x0800, 0x4E00, 0xAC00, 0xD7FF), 1, -1) // [一-龥ࠀ-一가-퟿]+
	reTrailingWS  = seq(rep(isS, 1, -1), atEnd)                                        // \s+$
)

func llama3Like(digits node) node {
	return alt(
		contraction(true),
		seq(opt(isPrefix), rep(isL, 1, -1)),
		digits,
		seq(opt(isSpace1), rep(isOther, 1, -1), rep(isCRLF, 0, -1)),
		seq(rep(isS, 0, -1), rep(isCRLF, 1, -1)),
		seq(rep(isS, 1, -1), notAhead(isNotS)),
		rep(isS, 1, -1),
	)
}

// deepseekLetters is deepseek-llm's letter class [A-Za-zµÀ-ÖØ-ö…𞤀-𞥃] from
// llama.cpp, as inclusive code point pairs (its source spells them as
// characters, several of which Unicode normalisation would change).
var deepseekLetters = []rune{
	0x41, 0x5A, 0x61, 0x7A, 0xB5, 0xB5, 0xC0, 0xD6, 0xD8, 0xF6, 0xF8, 0x1BA, 0x1BC, 0x1BF,
	0x1C4, 0x293, 0x295, 0x2AF, 0x370, 0x373, 0x376, 0x376, 0x377, 0x377, 0x37B, 0x37D,
	0x37F, 0x37F, 0x386, 0x386, 0x388, 0x38A, 0x38C, 0x38C, 0x38E, 0x3A1, 0x3A3, 0x3F5,
	0x3F7, 0x481, 0x48A, 0x52F, 0x531, 0x556, 0x10A0, 0x10C5, 0x13A0, 0x13F5, 0x13F8, 0x13FD,
	0x1C90, 0x1CBA, 0x1CBD, 0x1CBF, 0x1D00, 0x1D2B, 0x1D6B, 0x1D77, 0x1D79, 0x1D9A,
	0x1E00, 0x1F15, 0x1F18, 0x1F1D, 0x1F20, 0x1F45, 0x1F48, 0x1F4D, 0x1F50, 0x1F57,
	0x1F59, 0x1F59, 0x1F5B, 0x1F5B, 0x1F5D, 0x1F5D, 0x1F5F, 0x1F7D, 0x1F80, 0x1FB4,
	0x1FB6, 0x1FBC, 0x1FBE, 0x1FBE, 0x1FC2, 0x1FC4, 0x1FC6, 0x1FCC, 0x1FD0, 0x1FD3,
	0x1FD6, 0x1FDB, 0x1FE0, 0x1FEC, 0x1FF2, 0x1FF4, 0x1FF6, 0x1FFC, 0x2102, 0x2102,
	0x2107, 0x2107, 0x210A, 0x2113, 0x2115, 0x2115, 0x2119, 0x211D, 0x2124, 0x2124,
	0x2126, 0x2126, 0x2128, 0x2128, 0x212A, 0x212D, 0x212F, 0x2134, 0x2139, 0x2139,
	0x213C, 0x213F, 0x2145, 0x2149, 0x214E, 0x214E, 0x2183, 0x2183, 0x2184, 0x2184,
	0x2C00, 0x2C7B, 0x2C7E, 0x2CE4, 0x2CEB, 0x2CEE, 0x2CF2, 0x2CF2, 0x2CF3, 0x2CF3,
	0xA640, 0xA66D, 0xA680, 0xA69B, 0xA722, 0xA76F, 0xA771, 0xA787, 0xA78B, 0xA78E,
	0xAB70, 0xABBF, 0xFB00, 0xFB06, 0xFB13, 0xFB17, 0xFF21, 0xFF3A, 0xFF41, 0xFF5A,
	0x10400, 0x1044F, 0x104B0, 0x104D3, 0x104D8, 0x104FB, 0x10C80, 0x10CB2, 0x10CC0, 0x10CF2,
	0x118A0, 0x118DF, 0x1E900, 0x1E943,
}

// PreTokenizer splits text into the words that BPE merges within.
type PreTokenizer struct {
	name   string
	stages []node
	// ignoreMerges: a word that is itself a token is emitted whole (llama.cpp's
	// ignore_merges, set for llama3 and tekken).
	ignoreMerges bool
	// addBOS is llama.cpp's add_bos default for this family, before
	// tokenizer.ggml.add_bos_token overrides it.
	addBOS bool
}

type preDef struct {
	names        []string
	stages       []node
	ignoreMerges bool
	addBOS       bool
}

// preDefs lists the tokenizer.ggml.pre values understood, grouped as
// llama.cpp's llama-vocab.cpp groups them.
var preDefs = []preDef{
	// LLAMA_VOCAB_PRE_TYPE_DEFAULT. llama.cpp does not know the name "gpt2"
	// (GPT-2 itself is "gpt-2") and falls back to this default for it.
	{names: []string{"default", "gpt2"}, stages: []node{
		rep(punctOr("$+<=>^~|"), 1, -1), reGPT2, reDigits, reASCIIDigit3}},
	{names: []string{"gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "exaone4"}, stages: []node{reGPT2}},
	{names: []string{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
		stages: []node{reLlama3}, ignoreMerges: true, addBOS: true},
	{names: []string{"dbrx", "smaug-bpe"}, stages: []node{reLlama3}},
	{names: []string{"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo", "hunyuan", "grok-2"}, stages: []node{reQwen2}},
	{names: []string{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
		stages: []node{reDigit, reGPT2}},
	{names: []string{"falcon"}, stages: []node{rep(punctOr("$+<=>^~|`"), 1, -1), reGPT2, reASCIIDigit3}},
	{names: []string{"deepseek-llm"}, stages: []node{
		reCRLF,
		seq(opt(isS), rep(ranges(deepseekLetters...), 1, -1)),
		// [!-/:-~！-／：-～‘-‟　-。]
		seq(opt(isS), rep(ranges('!', '/', ':', '~', 0xFF01, 0xFF0F, 0xFF1A, 0xFF5E, 0x2018, 0x201F, 0x3000, 0x3002), 1, -1)),
		reTrailingWS,
		reCJK,
		reDigits,
	}},
	{names: []string{"deepseek-coder"}, stages: []node{
		reCRLF,
		seq(opt(isS), rep(isL, 1, -1)),
		seq(opt(isS), rep(unicode.IsPunct, 1, -1)),
		reCJK,
		reDigit,
	}},
	{names: []string{"tekken"}, stages: []node{reTekken}, ignoreMerges: true, addBOS: true},
}

var preByName = func() map[string]*PreTokenizer {
	m := map[string]*PreTokenizer{}
	for _, d := range preDefs {
		for _, n := range d.names {
			m[n] = &PreTokenizer{name: n, stages: d.stages, ignoreMerges: d.ignoreMerges, addBOS: d.addBOS}
		}
	}
	return m
}()

// PreTokenizerNames lists the tokenizer.ggml.pre values NewPreTokenizer
// accepts, sorted.
func PreTokenizerNames() []string {
	names := make([]string, 0, len(preByName))
	for n := range preByName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewPreTokenizer returns the pre-tokenizer llama.cpp uses for a
// tokenizer.ggml.pre value. An empty name is llama.cpp's "default" (the
// key is missing); an unknown name is an error rather than a silent
// fallback, since a wrong split changes every token.
func NewPreTokenizer(name string) (*PreTokenizer, error) {
	if name == "" {
		name = "default"
	}
	p, ok := preByName[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q is not supported (known: %s)", name, strings.Join(PreTokenizerNames(), ", "))
	}
	return p, nil
}

// Name is the tokenizer.ggml.pre value the pre-tokenizer was made for.
func (p *PreTokenizer) Name() string { return p.name }

// Split cuts text into words; their concatenation is text.
func (p *PreTokenizer) Split(text string) []string {
	var out []string
	p.each(text, defaultChunk, func(w string) { out = append(out, w) })
	return out
}

// defaultChunk is how many runes a stage decodes at a time.
const defaultChunk = 4096

// each calls emit with the words of text in order, as llama.cpp's
// unicode_regex_split cuts them, holding at most a window of chunk runes
// per stage (more only while one match attempt needs to see further, as a
// run of letters longer than the window does). Each stage scans a piece
// from left to right; an attempt that looked at the window's end is
// retried with the next window, so every match is the one the whole piece
// gives.
func (p *PreTokenizer) each(text string, chunk int, emit func(string)) {
	if text == "" {
		return
	}
	type window struct {
		r   []rune
		off []int // byte offset of each rune in the piece, and of the end
	}
	wins := make([]window, len(p.stages))
	var run func(st int, piece string)
	run = func(st int, piece string) {
		if st == len(p.stages) {
			emit(piece)
			return
		}
		re, w := p.stages[st], &wins[st]
		pos, gap, want := 0, 0, chunk
		for pos < len(piece) {
			w.r, w.off = w.r[:0], w.off[:0]
			j := pos
			for j < len(piece) && len(w.r) < want {
				r, n := utf8.DecodeRuneInString(piece[j:])
				w.r, w.off = append(w.r, r), append(w.off, j)
				j += n
			}
			w.off = append(w.off, j)
			final := j == len(piece)
			s := &span{r: w.r, end: len(w.r)}
			i, stopped := 0, false
			for i < len(w.r) {
				s.far = -1
				end := re.match(s, i)
				if !final && s.far >= s.end {
					stopped = true
					break
				}
				if end <= i {
					// No match here (none of these regexes matches empty).
					i++
					continue
				}
				if gap < w.off[i] {
					run(st+1, piece[gap:w.off[i]])
				}
				run(st+1, piece[w.off[i]:w.off[end]])
				i, gap = end, w.off[end]
			}
			if stopped && i == 0 {
				want *= 2
				continue
			}
			pos, want = w.off[i], chunk
		}
		if gap < len(piece) {
			run(st+1, piece[gap:])
		}
	}
	run(0, text)
}
