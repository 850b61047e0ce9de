package fleet

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"meshd/internal/natschild"
	"meshd/steward"
)

// BenchmarkServeWithPublisher is what the fleet publisher adds to a
// serve's cost on the node: the serve's receipt sealed into a durable log
// (signing, CBOR, the append and its fsync, as the daemon seals it) and
// the publisher notified, with a Publisher running against a JetStream
// server (on) against the same on a log with no publisher (off). Reps of
// serves alternate on and off, the order alternating too; before each off
// rep the publisher has caught up, so its backlog never spills into an off
// rep. The server runs in this process, so its CPU is charged to the
// node's machine here: an upper bound on what a node whose server is
// elsewhere pays. Reported: on-off-ratio, the median over reps of (on
// time / off time), and cpu-on-off-ratio, the same of this process's CPU
// (the serves, the publisher and its client; the wall clock on a shared
// disk is mostly the fsync's noise). Goal: < 1.05.
//
// fsync seals as the daemon does; nosync leaves the fsync out, so the
// serve is CPU only and the publisher's (and the in-process server's) CPU
// shows at its largest: the worst case, not the daemon's.
//
//	go test ./agent/fleet -run '^$' -bench ServeWithPublisher -benchtime 20x
func BenchmarkServeWithPublisher(b *testing.B) {
	// A rep lasts many lingers, so that the publisher works while the
	// serves do and its CPU competes with theirs, as under steady load.
	b.Run("fsync", func(b *testing.B) { benchServeWithPublisher(b, false, 64) })
	b.Run("nosync", func(b *testing.B) { benchServeWithPublisher(b, true, 512) })
}

func benchServeWithPublisher(b *testing.B, noSync bool, serves int) {
	url := natschild.Start(b)
	on, off := newNode(b, steward.LogOptions{NoSync: noSync}), newNode(b, steward.LogOptions{NoSync: noSync})
	pub := NewPublisher(on.log, on.id(), PublisherConfig{
		ConnOptions: ConnOptions{URL: url},
		CursorPath:  on.dir + ".cursor",
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pub.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	waitFor(b, 10*time.Second, "the publisher to connect", func() bool { return pub.Status().Connected })

	rep := func(n *node, notify func()) time.Duration {
		start := time.Now()
		for range serves {
			if _, err := n.st.Seal(ctx, draft(int(n.log.Next()))); err != nil {
				b.Fatal(err)
			}
			notify()
		}
		return time.Since(start)
	}
	// catchUp is how long the last on rep waited, after its serves, for
	// the publisher (up to a linger late). The off rep idles as long after
	// its own, so that what the process burns while idle (the runtime's
	// timers, the client's) is charged to both alike and only the
	// publisher's work to on.
	var catchUp time.Duration
	onRep := func() time.Duration {
		d := rep(on, pub.Notify)
		want := on.log.Durable()
		t0 := time.Now()
		waitFor(b, 30*time.Second, "the publisher to catch up", func() bool { return pub.Status().Next == want })
		catchUp = time.Since(t0)
		return d
	}
	offRep := func() time.Duration {
		d := rep(off, func() {})
		time.Sleep(catchUp)
		return d
	}
	var ratios, cpuRatios, cpuAdded []float64
	var tOn, tOff, cpuOn, cpuOff time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var a, c, ca, cc time.Duration
		timed := func(f func() time.Duration, cpu *time.Duration) time.Duration {
			c0 := cpuTime()
			d := f()
			*cpu = cpuTime() - c0
			return d
		}
		if i%2 == 0 {
			a = timed(onRep, &ca)
			c = timed(offRep, &cc)
		} else {
			c = timed(offRep, &cc)
			a = timed(onRep, &ca)
		}
		tOn += a
		tOff += c
		cpuOn += ca
		cpuOff += cc
		ratios = append(ratios, float64(a)/float64(c))
		cpuRatios = append(cpuRatios, float64(ca)/float64(cc))
		cpuAdded = append(cpuAdded, float64((ca-cc).Microseconds())/float64(serves))
	}
	b.StopTimer()
	r, cr := median(ratios), median(cpuRatios)
	n := len(ratios) * serves
	fmt.Fprintf(os.Stdout, "serve with publisher (%s): %d reps of %d serves; on %.1f µs/serve, off %.1f µs/serve; on/off median %.3f (goal < 1.05)\n",
		b.Name(), len(ratios), serves, float64(tOn.Microseconds())/float64(n), float64(tOff.Microseconds())/float64(n), r)
	// The CPU includes the publisher's catch-up: everything the fleet
	// costs the node per receipt.
	// The added CPU's median over reps, beside its mean: with the fsync
	// the serve's own CPU swings by more than the publisher costs, and a
	// few reps' swings move the mean.
	fmt.Fprintf(os.Stdout, "serve with publisher (%s): this process's CPU on %.1f µs/serve, off %.1f µs/serve (publisher and client, the server being in another process: +%.1f µs per receipt, median over reps +%.1f); CPU on/off median %.3f (goal < 1.05)\n",
		b.Name(), float64(cpuOn.Microseconds())/float64(n), float64(cpuOff.Microseconds())/float64(n), float64((cpuOn-cpuOff).Microseconds())/float64(n), median(cpuAdded), cr)
	b.ReportMetric(r, "on-off-ratio")
	b.ReportMetric(cr, "cpu-on-off-ratio")
}
