package llama

import (
	"bytes"
	"testing"
	"time"

	"meshd/engine/gguf"
	"meshd/engine/kernels"
)

// copyBandwidth measures bytes per second of one large copy between
// buffers far beyond any cache: the memory-bandwidth bound a decode step,
// which streams every weight once, is compared with.
func copyBandwidth(b *testing.B) float64 {
	const size = 256 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in
	best := 0.0
	for i := 0; i < 3; i++ {
		t := time.Now()
		copy(dst, src)
		best = max(best, size/time.Since(t).Seconds())
	}
	return best
}

// BenchmarkDecodeSmolLM135M decodes with a synthetic model of
// SmolLM-135M's shape in Q8_0 on every core. The figures share the
// machine with whatever else runs on it and are noisy.
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
	bw := copyBandwidth(b)
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
	wb := float64(m.WeightBytesPerToken())
	tps := float64(n) / el
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(tps*wb/1e9, "weight-GB/s")
	b.ReportMetric(bw/1e9, "copy-GB/s")
	b.ReportMetric(tps/(bw/wb), "frac-of-bound")
	b.ReportMetric(float64(pool.Workers()), "threads")
}
