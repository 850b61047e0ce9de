// Package shunttest helps tests drive a sampler one reading at a time,
// synchronising on the sampler itself instead of on time.
package shunttest

import (
	"context"
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

// CloseDriving runs closeWindow (a window's Close) while drive keeps the
// simulated hardware going, until it returns: a window waits for the
// reading that ends past it, and on a simulated clock that reading comes
// only if someone moves the clock. drive is called repeatedly; it should
// block until the sampler can take one more step or closed is closed (the window
// closed), and an error from it ends the wait.
func CloseDriving[R any](ctx context.Context, closeWindow func(context.Context) (R, error), drive func(closed <-chan struct{}) error) (R, error) {
	var r R
	var err error
	closed := make(chan struct{})
	go func() {
		r, err = closeWindow(ctx)
		close(closed)
	}()
	for {
		select {
		case <-closed:
			return r, err
		default:
		}
		if derr := drive(closed); derr != nil {
			<-closed
			return r, derr
		}
	}
}
