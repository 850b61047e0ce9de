package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs data-parallel loops on a fixed set of goroutines. Work is
// handed out in chunks from a shared counter, so a core slowed by other
// load on the machine takes fewer chunks instead of stalling the loop.
//
// A decode step is a few hundred loops of tens of microseconds each, so
// waking a parked goroutine per loop (several microseconds through the
// scheduler) would cost a large share of the step: idle workers first
// spin on the loop counter for a short while and only then park.
type Pool struct {
	workers int
	mu      sync.Mutex // one loop at a time

	// state is seq<<32 | closed<<31 | active: seq numbers the loops,
	// closed is set once the caller has finished its share and waits
	// only for the workers inside (active), and joins are refused.
	state atomic.Uint64

	// The current loop; written only while no worker is inside it.
	body  Ranger
	n     int
	chunk int
	next  atomic.Int64

	sleepers atomic.Int32
	wake     chan struct{}
	quit     atomic.Bool
	wg       sync.WaitGroup
}

// Ranger is the body of a parallel loop: Range(lo, hi) handles the items
// in [lo, hi). Calls for disjoint ranges run concurrently.
type Ranger interface {
	Range(lo, hi int)
}

// RangeFunc adapts a function to Ranger.
type RangeFunc func(lo, hi int)

// Range calls f(lo, hi).
func (f RangeFunc) Range(lo, hi int) { f(lo, hi) }

const (
	closedBit  = 1 << 31
	activeMask = closedBit - 1
	// spinFor is how long an idle worker polls for the next loop before
	// parking: longer than the serial gaps between the loops of a
	// decode step (norms, quantisation), far shorter than a step.
	spinFor = 50 * time.Microsecond
)

// NewPool starts a pool using n goroutines in all (the caller of For is
// one of them); n <= 0 means GOMAXPROCS.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	p := &Pool{workers: n, wake: make(chan struct{}, n)}
	p.state.Store(closedBit)
	for i := 1; i < n; i++ {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// Workers is the number of goroutines that share each loop.
func (p *Pool) Workers() int { return p.workers }

// Close stops the workers. The pool must not be used after.
func (p *Pool) Close() {
	p.quit.Store(true)
	close(p.wake)
	p.wg.Wait()
}

// work is a worker's life: join each loop once, spin a little when idle,
// then park until the next loop wakes it.
func (p *Pool) work() {
	defer p.wg.Done()
	var seen uint64 // seq of the last loop joined
	for {
		if p.join(&seen) {
			p.chunks()
			p.state.Add(^uint64(0)) // leave: active--
			continue
		}
		if p.quit.Load() {
			return
		}
		if p.spin(seen) {
			continue
		}
		// Park. The caller wakes a sleeper after opening a loop, so
		// check once more after announcing: a loop opened in between
		// is either seen here or followed by a wake.
		p.sleepers.Add(1)
		if !p.joinable(seen) && !p.quit.Load() {
			<-p.wake
		}
		p.sleepers.Add(-1)
	}
}

func (p *Pool) joinable(seen uint64) bool {
	s := p.state.Load()
	return s&closedBit == 0 && s>>32 != seen
}

// join enters the open loop unless this worker has already been in it.
func (p *Pool) join(seen *uint64) bool {
	for {
		s := p.state.Load()
		if s&closedBit != 0 || s>>32 == *seen {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			*seen = s >> 32
			return true
		}
	}
}

// spin polls for a joinable loop for up to spinFor.
func (p *Pool) spin(seen uint64) bool {
	var start time.Time
	for i := 0; ; i++ {
		if p.joinable(seen) || p.quit.Load() {
			return true
		}
		if i&255 == 255 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinFor {
				return false
			}
		}
	}
}

func (p *Pool) chunks() {
	for {
		lo := int(p.next.Add(int64(p.chunk))) - p.chunk
		if lo >= p.n {
			return
		}
		p.body.Range(lo, min(lo+p.chunk, p.n))
	}
}

// For calls fn over [0, n) split into ranges of at least grain items.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) { p.Run(n, grain, RangeFunc(fn)) }

// Run calls r.Range over [0, n) split into ranges of a multiple of grain
// items (but for the last) and returns when all are done. Loops from
// several goroutines take turns; r must not start a loop on the same
// pool.
func (p *Pool) Run(n, grain int, r Ranger) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p == nil || p.workers == 1 || n <= grain {
		r.Range(0, n)
		return
	}
	// About four chunks per worker balances uneven cores without paying
	// much per chunk; the cap keeps big matrices (the output projection)
	// in pieces small enough that a core stalled by other load on the
	// machine holds back little.
	chunk := min(max(grain, (n+4*p.workers-1)/(4*p.workers)), 8*grain)
	chunk = (chunk + grain - 1) / grain * grain

	p.mu.Lock()
	defer p.mu.Unlock()
	p.body, p.n, p.chunk = r, n, chunk
	p.next.Store(0)
	seq := p.state.Load()>>32 + 1
	p.state.Store(seq << 32) // open: publishes the fields above
	if p.sleepers.Load() > 0 {
		for range min(int(p.sleepers.Load()), (n+chunk-1)/chunk-1) {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
	p.chunks()
	// Close the loop to late joiners, then wait for those inside; they
	// hold at most one chunk each.
	for {
		s := p.state.Load()
		if p.state.CompareAndSwap(s, s|closedBit) {
			break
		}
	}
	for i := 0; p.state.Load()&activeMask != 0; i++ {
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
	p.body = nil
}
