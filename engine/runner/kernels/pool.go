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
// spin on the loop counter for a short while and only then park. The
// caller of a loop, once it has run out of chunks, likewise spins a
// short while for the workers still inside and then sleeps: on a machine
// with more runnable threads than cores, a worker preempted mid-chunk
// can only finish once some core is free, and a caller spinning for it
// would hold a core for nothing (with the park, decode ran 1.1-1.8x as
// fast at a load of 5-9 on two cores; on a quiet machine the last
// chunks end within the spin and it changes nothing).
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

	// waiting is set while the caller of Run sleeps on done for the
	// workers still inside a loop; the last one out sends on done.
	waiting atomic.Bool
	done    chan struct{}
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
	p := &Pool{workers: n, wake: make(chan struct{}, n), done: make(chan struct{}, 1)}
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
			p.leave()
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

// leave ends a worker's part in the loop (active--) and, when it is the
// last one out of a closed loop, wakes the caller if it sleeps. The
// caller sets waiting before it checks active a last time, so either it
// sees active reach zero or the worker here sees waiting: no lost wake.
func (p *Pool) leave() {
	s := p.state.Add(^uint64(0))
	if s&activeMask == 0 && s&closedBit != 0 && p.waiting.Load() {
		select {
		case p.done <- struct{}{}:
		default: // a wake is already pending
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
	p.wait()
	p.body = nil
}

// wait returns once no worker is inside the closed loop. A worker still
// inside after spinFor has most likely lost its core to other work on
// the machine (the operating system preempted its thread mid-chunk):
// spinning on would keep this core busy while that thread waits for
// one, so the caller sleeps and lets it have this core.
func (p *Pool) wait() {
	var start time.Time
	for i := 0; p.state.Load()&activeMask != 0; i++ {
		if i&255 != 255 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > spinFor {
			p.waiting.Store(true)
			for p.state.Load()&activeMask != 0 {
				<-p.done // a stale wake only costs one more check
			}
			p.waiting.Store(false)
			return
		}
	}
}
