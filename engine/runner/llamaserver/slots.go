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

// slotPool hands out free slots, first come first served. A request
// waits for one only as long as its context allows.
type slotPool struct {
	mu      sync.Mutex
	all     []*slot
	free    []*slot
	waiters []chan *slot // FIFO
}

func newSlotPool(slots []*slot) *slotPool {
	p := &slotPool{}
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

// acquire takes a free slot, preferring the one whose cache shares the
// longest prefix with prompt, or waits for one until ctx ends. queued,
// if not nil, is called once the request is waiting.
func (p *slotPool) acquire(ctx context.Context, prompt []int, queued func()) (*slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if len(p.free) > 0 {
		best, bestN := 0, -1
		for i, sl := range p.free {
			if n := commonPrefix(sl.tokens(), prompt); n > bestN {
				best, bestN = i, n
			}
		}
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

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
