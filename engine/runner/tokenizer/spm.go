package tokenizer

import (
	"container/heap"
	"strings"
	"unicode/utf8"
)

type symbol struct {
	text       string
	prev, next int
}

type bigram struct {
	left, right int
	score       float32
	size        int
}

type bigramQueue []bigram

func (q bigramQueue) Len() int { return len(q) }
func (q bigramQueue) Less(i, j int) bool {
	if q[i].score != q[j].score {
		return q[i].score > q[j].score
	}
	return q[i].left < q[j].left
}
func (q bigramQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *bigramQueue) Push(x any)   { *q = append(*q, x.(bigram)) }
func (q *bigramQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// encodeSPM merges adjacent symbols greedily by score, the highest-scoring
// pair that forms a vocabulary entry first (leftmost on ties), as
// llama.cpp's SPM tokenizer does; symbols left outside the vocabulary fall
// back to byte tokens.
func (t *Tokenizer) encodeSPM(out []int, text string, spacePrefix bool) []int {
	if text == "" {
		return out
	}
	if spacePrefix {
		text = " " + text
	}
	text = strings.ReplaceAll(text, " ", "▁")
	var syms []symbol
	for i := 0; i < len(text); {
		_, n := utf8.DecodeRuneInString(text[i:])
		syms = append(syms, symbol{text: text[i : i+n], prev: len(syms) - 1, next: len(syms) + 1})
		i += n
	}
	syms[len(syms)-1].next = -1
	q := &bigramQueue{}
	try := func(l, r int) {
		if l < 0 || r < 0 {
			return
		}
		s := syms[l].text + syms[r].text
		if id, ok := t.index[s]; ok {
			heap.Push(q, bigram{left: l, right: r, score: t.Scores[id], size: len(s)})
		}
	}
	for i := 1; i < len(syms); i++ {
		try(i-1, i)
	}
	for q.Len() > 0 {
		b := heap.Pop(q).(bigram)
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
