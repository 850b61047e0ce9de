//go:build !purego

package kernels

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"meshd/engine/runner/gguf"
)

// threadCPU is the CPU time the calling thread has used, in seconds:
// on a machine shared with other work it counts only the time the
// kernel ran, not the time it waited for a core.
func threadCPU() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// cpuBench runs f b.N times on one locked thread and reports the thread
// CPU time per call as cpu-ns/op and bytes/cpu-ns as cpu-GB/s.
func cpuBench(b *testing.B, bytes int, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f()
	t := threadCPU()
	for b.Loop() {
		f()
	}
	c := (threadCPU() - t) / float64(b.N)
	b.ReportMetric(c*1e9, "cpu-ns/op")
	if bytes > 0 && c > 0 {
		b.ReportMetric(float64(bytes)/c/1e9, "cpu-GB/s")
	}
}

// BenchmarkRowKernelsCached times the one-token row kernels on one core
// over a matrix small enough to stay in the L2 cache (256 rows of 2048
// columns), in thread CPU time: their compute throughput in weight
// bytes per second, apart from memory bandwidth and other load.
func BenchmarkRowKernelsCached(b *testing.B) {
	r := rand.New(rand.NewPCG(61, 62))
	const rows, cols = 256, 2048
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			b.Fatal(err)
		}
		x := randVec(r, cols, 1)
		qx := m.NewActivation()
		if qx != nil {
			qx.Quantize(x)
		}
		out := make([]float32, rows)
		b.Run(typ.String(), func(b *testing.B) {
			cpuBench(b, len(enc), func() { m.dotRows(0, rows, out, x, qx) })
		})
	}
}

// BenchmarkMatMulCached times MatMul on one worker for 32 tokens over a
// matrix that stays in the L2 cache (64 rows of 2048 columns), in
// thread CPU time per token, with the multi-token kernels on and off.
func BenchmarkMatMulCached(b *testing.B) {
	r := rand.New(rand.NewPCG(63, 64))
	const T, rows, cols = 32, 64, 2048
	x := randVec(r, T*cols, 1)
	p := NewPool(1)
	defer p.Close()
	defer func() { matMulKernels = true }()
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			b.Fatal(err)
		}
		qx := make([]*QVec, T)
		for t := range qx {
			qx[t] = m.NewActivation()
			qx[t].Quantize(x[t*cols : (t+1)*cols])
		}
		out := make([]float32, T*rows)
		for _, on := range []bool{false, true} {
			name := typ.String() + "/rows"
			if on {
				name = typ.String() + "/tokens"
			}
			b.Run(name, func(b *testing.B) {
				matMulKernels = on
				cpuBench(b, len(enc)*T, func() { MatMul(p, m, out, x, T, qx) })
			})
		}
	}
}
