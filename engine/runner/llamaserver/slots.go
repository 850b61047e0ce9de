package llamaserver

import (
	"context"
	"slices"
	"sync"

	"meshd/engine/runner/llama"
)

// slot is one sequence: a state with its own KV cache, or an encoder's
// scratch.
type slot struct {
	id    int
	state *llama.State // nil for an embedding-only encoder
	emb   embedder
	ctx   int // positions: the longest input
}

// embedder is what /embedding needs of a slot: llama.State and
// bert.State both embed a whole input at once.
type embedder interface {
	Embed(ctx context.Context, tokens []int) ([]float32, error)
}

// tokens are the tokens cached in the slot (none for an encoder, which
// caches nothing).
func (sl *slot) tokens() []int {
	if sl.state == nil {
		return nil
	}
	return sl.state.Tokens()
}

// DefaultSlotPromptSimilarity is llama-server's --slot-prompt-similarity
// default: a request goes to the idle slot whose cache shares the largest
// fraction of its prompt, if that fraction exceeds this.
const DefaultSlotPromptSimilarity = 0.1

// slotPool hands out free slots, first come first served. A request
// waits for one only as long as its context allows.
type slotPool struct {
	mu      sync.Mutex
	all     []*slot
	free    []*slot      // in the order they were freed: free[0] is idle the longest
	waiters []chan *slot // FIFO
	// similarity is the fraction of a prompt a slot's cached prefix must
	// exceed for the slot to be chosen for it; 0 disables the choice.
	similarity float64
}

func newSlotPool(slots []*slot, similarity float64) *slotPool {
	p := &slotPool{similarity: similarity}
	for _, sl := range slots {
		p.all = append(p.all, sl)
		p.free = append(p.free, sl)
	}
	return p
}

func (p *slotPool) len() int { return len(p.all) }

// counts is the number of idle and busy slots.
func (p *slotPool) counts() (idle, busy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free), len(p.all) - len(p.free)
}

// acquire takes a free slot (pick says which), or waits for the first
// one released until ctx ends. queued, if not nil, is called once the
// request is waiting.
func (p *slotPool) acquire(ctx context.Context, prompt []int, queued func()) (*slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if len(p.free) > 0 {
		best := p.pick(prompt)
		sl := p.free[best]
		p.free = slices.Delete(p.free, best, best+1)
		p.mu.Unlock()
		return sl, nil
	}
	ch := make(chan *slot, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	if queued != nil {
		queued()
	}
	select {
	case sl := <-ch:
		return sl, nil
	case <-ctx.Done():
		p.mu.Lock()
		if i := slices.Index(p.waiters, ch); i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			p.mu.Unlock()
			return nil, ctx.Err()
		}
		p.mu.Unlock()
		// A slot was handed over as the context ended: pass it on.
		p.release(<-ch)
		return nil, ctx.Err()
	}
}

// release returns a slot: to the longest waiter if any, else to the free
// list.
func (p *slotPool) release(sl *slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		ch <- sl
		return
	}
	p.free = append(p.free, sl)
}

// pick is llama-server's choice among the free slots: the one whose
// cached tokens share the largest fraction of prompt as a common prefix,
// if that fraction exceeds the similarity threshold (the first such on a
// tie, which is the one idle longer); otherwise the slot idle the longest.
// The threshold keeps a prompt that shares little more than a BOS token or
// a system line with a slot from evicting that slot's conversation while
// another slot is idle. p.mu is held.
func (p *slotPool) pick(prompt []int) int {
	best, bestSim := 0, 0.0
	if p.similarity > 0 && len(prompt) > 0 {
		for i, sl := range p.free {
			sim := float64(commonPrefix(sl.tokens(), prompt)) / float64(len(prompt))
			if sim > bestSim && sim > p.similarity {
				best, bestSim = i, sim
			}
		}
	}
	return best
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
