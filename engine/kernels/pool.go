package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool runs data-parallel loops on a fixed set of goroutines. Work is
// handed out in chunks from a shared counter, so a core slowed by other
// load on the machine takes fewer chunks instead of stalling the loop.
type Pool struct {
	workers int
	tasks   chan *task
	wg      sync.WaitGroup
}

type task struct {
	fn    func(lo, hi int)
	n     int
	chunk int
	next  atomic.Int64
	done  sync.WaitGroup
}

// NewPool starts a pool using n goroutines in all (the caller of For is
// one of them); n <= 0 means GOMAXPROCS.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &Pool{workers: n, tasks: make(chan *task)}
	for i := 1; i < n; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for t := range p.tasks {
				t.run()
				t.done.Done()
			}
		}()
	}
	return p
}

// Workers is the number of goroutines that share each loop.
func (p *Pool) Workers() int { return p.workers }

// Close stops the workers. The pool must not be used after.
func (p *Pool) Close() {
	close(p.tasks)
	p.wg.Wait()
}

func (t *task) run() {
	for {
		lo := int(t.next.Add(int64(t.chunk))) - t.chunk
		if lo >= t.n {
			return
		}
		t.fn(lo, min(lo+t.chunk, t.n))
	}
}

// For calls fn over [0, n) split into ranges of at least grain items.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p == nil || p.workers == 1 || n <= grain {
		fn(0, n)
		return
	}
	// About four chunks per worker balances uneven cores without paying
	// much per chunk.
	chunk := max(grain, (n+4*p.workers-1)/(4*p.workers))
	helpers := min(p.workers-1, (n+chunk-1)/chunk-1)
	t := &task{fn: fn, n: n, chunk: chunk}
	t.done.Add(helpers)
	for i := 0; i < helpers; i++ {
		p.tasks <- t
	}
	t.run()
	t.done.Wait()
}
