package tokenizer

// The encoders as they were before they were made to stream: whole-text,
// allocating, but plainly llama.cpp's algorithms. The streaming ones are
// checked against them.

import (
	"container/heap"
	"strings"
	"unicode/utf8"
)

// encodeBPE splits text with the vocabulary's pre-tokenizer, maps each
// word's bytes to runes and applies merges lowest rank first (leftmost on
// ties), as llama.cpp does. With ignore_merges, a word that is a token is
// emitted whole.
func (t *Tokenizer) refEncodeBPE(out []int, text string) []int {
	for _, word := range refSplit(t.pre, text) {
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

type refSymbol struct {
	text       string
	prev, next int
}

type refBigram struct {
	left, right int
	score       float32
	size        int
}

type refBigramQueue []refBigram

func (q refBigramQueue) Len() int { return len(q) }
func (q refBigramQueue) Less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}
func (q refBigramQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *refBigramQueue) Push(x any)   { *q = append(*q, x.(refBigram)) }
func (q *refBigramQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// encodeSPM merges adjacent symbols greedily by score, the highest-scoring
// pair that forms a vocabulary entry first (leftmost on ties), as
// llama.cpp's SPM tokenizer does; symbols left outside the vocabulary fall
// back to byte tokens.
func (t *Tokenizer) refEncodeSPM(out []int, text string, spacePrefix bool) []int {
	if text == "" {
		return out
	}
	if spacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", "▁")
	var syms []refSymbol
	for i := 0; i < len(text); {
		_, n := utf8.DecodeRuneInString(text[i:])
		syms = append(syms, refSymbol{text: text[i : i+n], prev: len(syms) - 1, next: len(syms) + 1})
		i += n
	}
	syms[len(syms)-1].next = -1
	q := &refBigramQueue{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := syms[l].text + syms[r].text
		if id, ok := t.index[s]; ok {
			heap.Push(q, refBigram{left: l, right: r, score: t.Scores[id], size: len(s)})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(refBigram)
		l, r := &syms[b.left], &syms[b.right]
		// A pair queued before one side merged elsewhere is stale.
		if l.text == "" || r.text == "" || len(l.text)+len(r.text) != b.size || l.next != b.right {
			continue
		}
		l.text += r.text
		r.text = ""
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = b.left
		}
		try(l.prev, b.left)
		try(b.left, l.next)
	}
	for i := 0; i >= 0; i = syms[i].next {
		s := syms[i].text
		if id, ok := t.index[s]; ok {
			out = append(out, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			if id := t.byteTok[s[j]]; id >= 0 {
				out = append(out, id)
			} else if t.UNK >= 0 {
				out = append(out, t.UNK)
			}
		}
	}
	return out
}

// Split cuts text into words; their concatenation is text.
func refSplit(p *PreTokenizer, text string) []string {
	if text == "" {
		return nil
	}
	rs := []rune(text)
	// Rune offsets of the pieces, as llama.cpp keeps them.
	lens := []int{len(rs)}
	for _, re := range p.stages {
		var next []int
		start := 0
		for _, n := range lens {
			next = refSplitPiece(next, rs[start:start+n], re)
			start += n
		}
		lens = next
	}
	out := make([]string, 0, len(lens))
	// Slice the original string, so invalid UTF-8 passes through unchanged.
	off := 0
	for _, n := range lens {
		end := off
		for j := 0; j < n; j++ {
			_, w := utf8.DecodeRuneInString(text[end:])
			end += w
		}
		out = append(out, text[off:end])
		off = end
	}
	return out
}

// refSplitPiece appends the lengths of re's matches in piece, and of the text
// between them, to lens.
func refSplitPiece(lens []int, piece []rune, re node) []int {
	s := &span{r: piece, end: len(piece)}
	gap := 0
	for i := 0; i < len(piece); {
		end := re.match(s, i)
		if end <= i {
			// No match here (none of these regexes matches empty).
			i++
			continue
		}
		if gap < i {
			lens = append(lens, i-gap)
		}
		lens = append(lens, end-i)
		i, gap = end, end
	}
	if gap < len(piece) {
		lens = append(lens, len(piece)-gap)
	}
	return lens
}
