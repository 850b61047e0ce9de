package tokenizer

import (
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
// emitted whole. Words are encoded as the pre-tokenizer finds them, so
// memory follows the longest word, not the text.
func (t *Tokenizer) encodeBPE(out []int, text string, spill func([]int) []int) []int {
	return t.encodeBPEChunked(out, text, defaultChunk, spill)
}

// encodeBPEChunked is encodeBPE with the pre-tokenizer's window in runes;
// spill, if not nil, is handed the tokens so far after each word and
// returns the slice to go on appending to.
func (t *Tokenizer) encodeBPEChunked(out []int, text string, chunk int, spill func([]int) []int) []int {
	var m bpeMerger
	t.pre.each(text, chunk, func(word string) {
		out = t.mergeBPE(out, word, &m)
		if spill != nil {
			out = spill(out)
		}
	})
	return out
}

// bpeMerger holds the buffers of one encodeBPE call, reused from word to
// word.
type bpeMerger struct {
	word []byte // the word in GPT-2's byte runes
	key  []byte // "left right", a merge's name
	syms []spmSym
	q    pairQueue[bpePair]
}

type bpePair struct {
	left, right int32
	size        int32
	rank        int32
}

// before orders the queue: lowest rank first, leftmost on ties, as
// llama.cpp's llm_bigram_bpe comparator.
func (a bpePair) before(b bpePair) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

func (t *Tokenizer) mergeBPE(out []int, word string, m *bpeMerger) []int {
	m.word, m.syms, m.q = m.word[:0], m.syms[:0], m.q[:0]
	for i := 0; i < len(word); i++ {
		k, start := int32(len(m.syms)), int32(len(m.word))
		m.word = utf8.AppendRune(m.word, byteRune[word[i]])
		m.syms = append(m.syms, spmSym{start: start, end: int32(len(m.word)), prev: k - 1, next: k + 1})
	}
	w, syms := m.word, m.syms
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	if t.pre.ignoreMerges {
		if id, ok := t.index[string(w)]; ok {
			return append(out, id)
		}
	}
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		m.key = append(append(append(m.key[:0], w[syms[l].start:syms[l].end]...), ' '), w[syms[r].start:syms[r].end]...)
		if rank, ok := t.ranks[string(m.key)]; ok {
			m.q.push(bpePair{left: l, right: r, size: syms[r].end - syms[l].start, rank: int32(rank)})
		}
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(m.q) > 0 {
		p := m.q.pop()
		l, r := &syms[p.left], &syms[p.right]
		if l.start == l.end || r.start == r.end || l.next != p.right || r.end-l.start != p.size {
			continue
		}
		l.end = r.end
		r.start = r.end
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = p.left
		}
		try(l.prev, p.left)
		try(p.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		s := w[syms[i].start:syms[i].end]
		if id, ok := t.index[string(s)]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); {
			_, n := utf8.DecodeRune(s[j:])
			if id, ok := t.index[string(s[j:j+n])]; ok {
				out = append(out, id)
			} else if t.UNK >= 0 {
				out = append(out, t.UNK)
			}
			j += n
		}
	}
	return out
}
