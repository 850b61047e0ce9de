package llama

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// copyBuffers are two 256 MiB buffers, far beyond any cache, for
// measuring the memory-bandwidth bound a decode step (which streams
// every weight once) is compared with.
type copyBuffers struct{ src, dst []byte }

func newCopyBuffers() *copyBuffers {
	const size = 256 << 20
	c := &copyBuffers{src: make([]byte, size), dst: make([]byte, size)}
	for i := range c.src {
		c.src[i] = byte(i)
	}
	copy(c.dst, c.src) // fault the pages in
	return c
}

// bandwidth is bytes copied per second (each byte counted once, though
// it is read and written) by threads goroutines, each copying its own
// contiguous share, best of three: the best is the stricter bound on a
// machine shared with other work.
func (c *copyBuffers) bandwidth(threads int) float64 {
	best := 0.0
	share := len(c.src) / threads
	for range 3 {
		var wg sync.WaitGroup
		t := time.Now()
		for i := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(c.dst[i*share:(i+1)*share], c.src[i*share:(i+1)*share])
			}()
		}
		wg.Wait()
		best = max(best, float64(threads*share)/time.Since(t).Seconds())
	}
	return best
}

// BenchmarkDecodeSmolLM135M decodes with a synthetic model of
// SmolLM-135M's shape in Q8_0 on every core (GOMAXPROCS: set it with
// -cpu). It reports tokens/s, the weight bytes read per second, and that
// rate as a fraction of two bounds measured in the same run, before and
// after decoding (the higher of the two kept): a single-threaded copy
// (frac-of-bound) and a copy split over as many threads as decode uses
// (frac-of-mt-bound). The figures share the machine with whatever else
// runs on it and are noisy.
func BenchmarkDecodeSmolLM135M(b *testing.B) {
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, gguf.SmolLM135M, 1); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	m, err := Load(f)
	if err != nil {
		b.Fatal(err)
	}
	pool := kernels.NewPool(0)
	defer pool.Close()
	const nCtx = 256
	st, err := m.NewState(nCtx, pool)
	if err != nil {
		b.Fatal(err)
	}
	cb := newCopyBuffers()
	bw1, bwN := cb.bandwidth(1), cb.bandwidth(pool.Workers())
	st.Eval(1) // warm up
	tok := 1
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		if len(st.Tokens()) >= nCtx {
			st.Truncate(1)
		}
		logits, err := st.Eval(tok)
		if err != nil {
			b.Fatal(err)
		}
		tok = Argmax(logits)
		n++
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	bw1, bwN = max(bw1, cb.bandwidth(1)), max(bwN, cb.bandwidth(pool.Workers()))
	wb := float64(m.WeightBytesPerToken())
	tps := float64(n) / el
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(tps*wb/1e9, "weight-GB/s")
	b.ReportMetric(bw1/1e9, "copy-GB/s")
	b.ReportMetric(bwN/1e9, "copy-mt-GB/s")
	b.ReportMetric(tps*wb/bw1, "frac-of-bound")
	b.ReportMetric(tps*wb/bwN, "frac-of-mt-bound")
	b.ReportMetric(float64(pool.Workers()), "threads")
}
