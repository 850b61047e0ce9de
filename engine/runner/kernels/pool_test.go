package kernels

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolWaitsForSlowChunk holds one chunk of most loops well past
// spinFor: when a helper holds it, the caller runs out of chunks, stops
// spinning and sleeps until that helper leaves (the path taken when a
// worker's thread is preempted mid-chunk). Every loop must still return
// only after all of its chunks ran, once each, with no wake lost or
// carried into the next loop.
func TestPoolWaitsForSlowChunk(t *testing.T) {
	for _, workers := range []int{2, 3} {
		p := NewPool(workers)
		for loop := 0; loop < 60; loop++ {
			const n = 16
			var hits [n]atomic.Int32
			var started atomic.Int32
			p.For(n, 1, func(lo, hi int) {
				// The first chunk's holder (mostly the caller) waits
				// for another goroutine to start a chunk, which then
				// is the slow one.
				if lo == 0 {
					for end := time.Now().Add(time.Second); started.Load() == 0 && time.Now().Before(end); {
						time.Sleep(10 * time.Microsecond)
					}
				} else if started.Add(1) == 1 && loop%3 != 2 {
					time.Sleep(3 * spinFor)
				}
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("workers=%d loop %d: index %d visited %d times when For returned", workers, loop, i, h)
				}
			}
		}
		p.Close()
	}
}
