package llamaserver

import (
	"context"
	"slices"
	"sync"

	"meshd/engine/runner/llama"
)

// slot is one sequence: a state with its own KV cache.
type slot struct {
	id    int
	state *llama.State
}

// slotPool hands out free slots, first come first served. A request
// waits for one only as long as its context allows.
type slotPool struct {
	mu      sync.Mutex
	all     []*slot
	free    []*slot
	waiters []chan *slot // FIFO
}

func newSlotPool(states []*llama.State) *slotPool {
	p := &slotPool{}
	for i, st := range states {
		sl := &slot{id: i, state: st}
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
			if n := commonPrefix(sl.state.Tokens(), prompt); n > bestN {
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
