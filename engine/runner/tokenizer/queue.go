package tokenizer

// pairQueue is a binary min-heap of merge candidates, first by their
// before method, shared by the SentencePiece and BPE mergers.
// container/heap would box every candidate in an interface on each
// push and pop, one allocation per candidate on the tokenizer's hot path.
type pairQueue[T interface{ before(T) bool }] []T

func (q *pairQueue[T]) push(p T) {
	h := append(*q, p)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h[i].before(h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	*q = h
}

func (q *pairQueue[T]) pop() T {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, best := 2*i+1, 2*i+2, i
		if l < last && h[l].before(h[best]) {
			best = l
		}
		if r < last && h[r].before(h[best]) {
			best = r
		}
		if best == i {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	*q = h
	return top
}
