// Package shunttest helps tests drive a sampler one reading at a time,
// synchronising on the sampler itself instead of on time.
package shunttest

import (
	"testing"
	"time"
)

// Release lets a stepped sensor deliver n readings and returns once the
// sampler has recorded them all. The sensor reads one value from step per
// request: true delivers a reading, false delivers nothing and waits again.
// Because the sampler asks for reading n+1 only after recording reading n,
// the final false is accepted only once all n are recorded.
func Release(t testing.TB, step chan<- bool, n int) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second) // reports a hang only
	defer timeout.Stop()
	for i := 0; i <= n; i++ {
		select {
		case step <- i < n:
		case <-timeout.C:
			t.Fatalf("the sampler stopped asking for readings after %d of %d", i, n)
		}
	}
}
