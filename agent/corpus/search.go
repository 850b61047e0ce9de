package corpus

import (
	"container/heap"
	"fmt"
	"math"

	"meshd/engine/runner/kernels"
)

// normalise scales v to unit length (a zero vector stays zero), so that a
// dot product is the cosine similarity.
func normalise(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	out := make([]float32, len(v))
	if s == 0 {
		return out
	}
	inv := 1 / math.Sqrt(s)
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out
}

// Scored is a chunk index with its cosine similarity to a query.
type Scored struct {
	Chunk int
	Score float64
}

// ErrDimension is wrapped when a query vector's length is not the corpus's
// dim (the contract's dimension_mismatch).
var ErrDimension = fmt.Errorf("dimension_mismatch")

// Search returns the k chunks most similar to q (any length-dim vector; it
// is normalised), best first; ties go to the earlier chunk, so an answer
// is the same on every run. The search is exact: every chunk is scored.
func (c *Corpus) Search(q []float32, k int) ([]Scored, error) {
	if len(q) != c.Dim {
		return nil, fmt.Errorf("%w: query vector of %d values, the corpus embedding has %d", ErrDimension, len(q), c.Dim)
	}
	q = normalise(q)
	h := make(minHeap, 0, k+1)
	for i := range c.Chunks {
		s := float64(kernels.Dot(q, c.vectors[i*c.Dim:(i+1)*c.Dim]))
		if len(h) < k {
			heap.Push(&h, Scored{i, s})
		} else if k > 0 && better(Scored{i, s}, h[0]) {
			h[0] = Scored{i, s}
			heap.Fix(&h, 0)
		}
	}
	out := make([]Scored, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Scored)
	}
	return out, nil
}

// better orders hits: higher score, then lower chunk index.
func better(a, b Scored) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Chunk < b.Chunk
}

// minHeap keeps the worst of the best k at its root.
type minHeap []Scored

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(Scored)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// VectorBytes is the memory the index's vectors take.
func (c *Corpus) VectorBytes() int { return 4 * len(c.vectors) }
