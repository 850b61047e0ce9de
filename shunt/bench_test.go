package shunt

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkSampler measures the sampler's own cost per reading: the fake
// sensor returns at once, so what is left is the loop, the prefix sums and
// the lock.
func BenchmarkSampler(b *testing.B) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, squareTrace{lo: 1e6, hi: 5e6, period: 7e6, duty: 0.4}, b.N)
	g := &gatedSensor{fakeSensor: f, at: 0, gate: make(chan struct{}), reached: make(chan struct{})}
	m, err := New(context.Background(), g, Config{Now: c.Now, Capacity: 600_000})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	<-g.reached
	b.ResetTimer()
	start := time.Now()
	close(g.gate)
	<-f.drained
	elapsed := time.Since(start)
	b.StopTimer()
	if got := m.Stats().Entries; got != uint64(b.N) {
		b.Fatalf("recorded %d of %d", got, b.N)
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/reading")
}

// BenchmarkQuery600k integrates windows spanning most of ten minutes of
// 1 kHz readings.
func BenchmarkQuery600k(b *testing.B) {
	c := newSimClock()
	f := newFake(c, time.Millisecond, time.Millisecond, squareTrace{lo: 1e6, hi: 5e6, period: 7e6, duty: 0.4}, 600_000)
	f.fail = func(i int) bool { return i%100_000 == 50_000 } // a few gaps to find
	m := replay(b, f, Config{Capacity: 600_000})
	if n := m.Stats().Entries; n != 600_000 {
		b.Fatalf("recorded %d", n)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	var windows int
	start := time.Now()
	for b.Loop() {
		t0 := ms(c, 1+rng.Float64()*59_000)
		t1 := ms(c, 540_000+rng.Float64()*59_000)
		rep, err := m.Energy(t0, t1)
		if err != nil || rep.Coverage.Samples < 400_000 {
			b.Fatalf("%+v %v", rep.Coverage, err)
		}
		windows++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(windows), "µs/query")
}
