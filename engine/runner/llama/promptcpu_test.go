//go:build linux

package llama

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// threadSeconds is the calling thread's CPU time, to the nanosecond.
func threadSeconds(b *testing.B) float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return float64(ts.Nano()) / 1e9
}

// BenchmarkPromptCPU measures a 128-token prompt of the benchmark model
// (F32 and F16 weights) on one thread, in prompt tokens per second of
// that thread's CPU time: on a machine shared with other work, what
// wall-clock rates cannot show, the cost of the prompt itself (a
// one-worker pool runs every product on the calling thread). It
// reports the median and the best of five repetitions, and the prompt's
// GFLOP per CPU-second.
func BenchmarkPromptCPU(b *testing.B) {
	const promptN = 128
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	q8File := lazyQ8(b)
	var table []string
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16} {
		b.Run(typ.String(), func(b *testing.B) {
			m, why := benchModel(b, typ, q8File)
			if m == nil {
				b.Skip(why)
			}
			pool := kernels.NewPool(1)
			defer pool.Close()
			st, err := m.NewState(promptN+1, pool)
			if err != nil {
				b.Fatal(err)
			}
			prompt := testPrompt(promptN, m.Vocab)
			ctx := context.Background()
			if _, err := st.EvalBatch(ctx, prompt[:8]); err != nil {
				b.Fatal(err)
			}
			// Two FLOP per weight of the layer matrices per token, and
			// of the output projection once per prompt.
			var fl float64
			for _, l := range m.layers {
				for _, mt := range []*kernels.Matrix{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
					fl += 2 * float64(mt.Rows*mt.Cols)
				}
			}
			fl += 2 * float64(m.output.Rows*m.output.Cols) / promptN
			var rates []float64
			for b.Loop() {
				for range 5 {
					st.Truncate(0)
					t0 := threadSeconds(b)
					if _, err := st.EvalBatch(ctx, prompt); err != nil {
						b.Fatal(err)
					}
					rates = append(rates, promptN/(threadSeconds(b)-t0))
				}
			}
			med, best := median(rates), 0.0
			for _, r := range rates {
				best = max(best, r)
			}
			b.ReportMetric(med, "prompt-tok/cpu-s")
			b.ReportMetric(best, "best-prompt-tok/cpu-s")
			b.ReportMetric(med*fl/1e9, "prompt-GFLOP/cpu-s")
			table = append(table, fmt.Sprintf("%-4s %9.1f %9.1f %9.1f", typ, med, best, med*fl/1e9))
		})
	}
	fmt.Printf("128-token prompt on one thread, per second of its CPU time\ntype  median/s    best/s  GFLOP/s\n%s\n", strings.Join(table, "\n"))
}
