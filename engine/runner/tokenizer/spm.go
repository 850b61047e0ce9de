package tokenizer

import (
	"unicode/utf8"
)

// spmSym is one symbol of a text being merged: bytes [start, end) of the
// escaped text, in a list linked by index.
type spmSym struct {
	start, end int32
	prev, next int32
}

// spmPair is a candidate merge of two adjacent symbols.
type spmPair struct {
	left, right int32
	size        int32 // bytes of the merged text, to spot a stale pair
	score       float32
}

// before orders the queue: highest score first, leftmost on ties, as
// llama.cpp's llm_bigram_spm comparator.
func (a spmPair) before(b spmPair) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

// spmChunk is how many input bytes encodeSPM aims to merge at a time.
const spmChunk = 4 << 10

// encodeSPM merges adjacent symbols greedily by score, the highest-scoring
// pair that forms a vocabulary entry first (leftmost on ties), as
// llama.cpp's SPM tokenizer does; symbols left outside the vocabulary fall
// back to byte tokens.
//
// A long text is merged in chunks cut where no vocabulary entry can
// straddle the cut (see spmCut): a merged symbol is always a vocabulary
// entry, so no symbol ever crosses such a cut and the merges on either
// side cannot affect one another; the tokens are those of the whole text,
// in memory proportional to a chunk.
func (t *Tokenizer) encodeSPM(out []int, text string, spacePrefix bool, spill func([]int) []int) []int {
	return t.encodeSPMChunked(out, text, spacePrefix, spmChunk, spill)
}

// encodeSPMChunked is encodeSPM with chunks of about chunk bytes; spill,
// if not nil, is handed the tokens so far after each chunk and returns
// the slice to go on appending to.
func (t *Tokenizer) encodeSPMChunked(out []int, text string, spacePrefix bool, chunk int, spill func([]int) []int) []int {
	if text == "" {
		return out
	}
	var m spmMerger
	for start := 0; start < len(text); {
		end := t.spmCut(text, start, chunk)
		m.esc = m.esc[:0]
		if start == 0 && spacePrefix {
			m.esc = append(m.esc, "▁"...)
		}
		m.esc = appendEscaped(m.esc, text[start:end])
		out = t.mergeSPM(out, &m)
		if spill != nil {
			out = spill(out)
		}
		start = end
	}
	return out
}

// appendEscaped is SentencePiece's whitespace escape: each space is ▁.
func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			dst = append(dst, "▁"...)
		} else {
			dst = append(dst, s[i])
		}
	}
	return dst
}

// spmCut is where the chunk of text that begins at start ends: the first
// rune boundary chunk bytes or more on where no vocabulary entry equals
// an escaped substring that straddles it, or the end of the text.
func (t *Tokenizer) spmCut(text string, start, chunk int) int {
	L := t.maxTokLen
	if chunk <= 0 || L > 1024 {
		return len(text)
	}
	var ctx []byte
	for b := start + max(chunk, L+1); b < len(text); b++ {
		if !utf8.RuneStart(text[b]) {
			continue
		}
		// L raw bytes either side escape to at least L bytes.
		ctx = appendEscaped(ctx[:0], text[b-L:b])
		cut := len(ctx)
		ctx = appendEscaped(ctx, text[b:min(len(text), b+L)])
		if !t.straddled(ctx, cut) {
			return b
		}
	}
	return len(text)
}

// straddled reports whether some vocabulary entry is ctx[i:j] with
// i < cut < j; shorter entries are tried first, as they are the likely
// ones.
func (t *Tokenizer) straddled(ctx []byte, cut int) bool {
	for n := 2; n <= t.maxTokLen; n++ {
		for i := max(0, cut-n+1); i < cut && i+n <= len(ctx); i++ {
			if _, ok := t.index[string(ctx[i:i+n])]; ok {
				return true
			}
		}
	}
	return false
}

// spmMerger holds the buffers of one encodeSPM call, reused from chunk to
// chunk.
type spmMerger struct {
	esc  []byte
	syms []spmSym
	q    pairQueue[spmPair]
}

// mergeSPM tokenizes the escaped text in m.esc.
func (t *Tokenizer) mergeSPM(out []int, m *spmMerger) []int {
	text := m.esc
	if len(text) == 0 {
		return out
	}
	m.syms, m.q = m.syms[:0], m.q[:0]
	for i := 0; i < len(text); {
		_, n := utf8.DecodeRune(text[i:])
		k := int32(len(m.syms))
		m.syms = append(m.syms, spmSym{start: int32(i), end: int32(i + n), prev: k - 1, next: k + 1})
		i += n
	}
	syms := m.syms
	syms[len(syms)-1].next = -1
	try := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start:syms[r].end]
		if id, ok := t.index[string(s)]; ok {
			m.q.push(spmPair{left: l, right: r, size: int32(len(s)), score: t.Scores[id]})
		}
	}
	for i := int32(1); i < int32(len(syms)); i++ {
		try(i-1, i)
	}
	for len(m.q) > 0 {
		p := m.q.pop()
		l, r := &syms[p.left], &syms[p.right]
		// A pair queued before one side merged elsewhere is stale.
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
		s := text[syms[i].start:syms[i].end]
		if id, ok := t.index[string(s)]; ok {
			out = append(out, id)
			continue
		}
		for _, b := range s {
			if id := t.byteTok[b]; id >= 0 {
				out = append(out, id)
			} else if t.UNK >= 0 {
				out = append(out, t.UNK)
			}
		}
	}
	return out
}
