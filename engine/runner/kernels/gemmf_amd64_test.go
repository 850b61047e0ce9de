//go:build !purego

package kernels

import (
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"meshd/engine/runner/gguf"
)

// fmaPeakGFLOPS is the single-precision multiply-add rate, in GFLOP/s
// (a multiply-add is two), that the pool's workers reach together at
// dispatch level with no memory traffic: the baseline a compute-bound
// product (a prompt) is measured against. 0 where there is no kernel.
func fmaPeakGFLOPS(p *Pool, level, rounds int) float64 {
	flops, f := 0, fmaPeakAVX2
	switch level {
	case gemmAVX512:
		flops, f = 2*16*24*rounds, fmaPeakAVX512
	case gemmAVX2:
		flops = 2 * 8 * 12 * rounds
	default:
		return 0
	}
	w := p.Workers()
	secs := timeIt(func() {
		p.For(w, 1, func(lo, hi int) {
			for range hi - lo {
				f(rounds)
			}
		})
	})
	return float64(flops*w) / secs / 1e9
}

// BenchmarkGemmKernel runs one kernel call on L1-resident rows and
// tokens (1024 columns), against the peak, to see the inner loop alone.
func BenchmarkGemmKernel(b *testing.B) {
	p := NewPool(1)
	defer p.Close()
	const cols = 1024
	w := make([]float32, 4*cols)
	x := make([]float32, 3*cols)
	out := make([]float32, 3*4)
	a := gemmArgs{nb: cols / 32, nr: 4}
	for j := range 4 {
		a.w[j] = unsafe.Pointer(&w[j*cols])
	}
	for j := range 3 {
		a.x[j], a.out[j] = &x[j*cols], &out[j*4]
	}
	for _, k := range []struct {
		name  string
		f     func(*gemmArgs)
		fmas  int
		level int
	}{{"f16-512", gemmF16x4x3AVX512, 4 * 3 * cols / 16, gemmAVX512}, {"f32-512", gemmF32x4x3AVX512, 4 * 3 * cols / 16, gemmAVX512}, {"f16-2", gemmF16x1x3AVX2, 3 * cols / 8, gemmAVX2}, {"f32-2", gemmF32x1x3AVX2, 3 * cols / 8, gemmAVX2}} {
		width := 16
		if k.level == gemmAVX2 {
			width = 8
		}
		var best, bestPk float64
		for range 40 {
			const n = 400
			t0 := time.Now()
			fmaPeakAVXn(k.level, 1<<12)
			pk := float64(2*width*24*(1<<12)) / float64(time.Since(t0).Nanoseconds())
			if k.level == gemmAVX2 {
				pk /= 2
			}
			t0 = time.Now()
			for range n {
				k.f(&a)
			}
			g := float64(2*width*k.fmas*n) / float64(time.Since(t0).Nanoseconds())
			best, bestPk = max(best, g), max(bestPk, pk)
		}
		b.Logf("%s: best %.1f GFLOP/s, best peak %.1f, ratio %.2f", k.name, best, bestPk, best/bestPk)
	}
}

func fmaPeakAVXn(level, rounds int) {
	if level == gemmAVX512 {
		fmaPeakAVX512(rounds)
	} else {
		fmaPeakAVX2(rounds)
	}
}

// BenchmarkGemmBest: best-of-many single MatMuls, for a loaded machine.
func BenchmarkGemmBest(b *testing.B) {
	defer func(l int) { gemmLevel = l }(gemmLevel)
	p := NewPool(1)
	defer p.Close()
	r := rand.New(rand.NewPCG(1, 2))
	const T = 128
	for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
		for _, typ := range []gguf.TensorType{gguf.F16, gguf.F32} {
			enc, _ := gguf.Encode(typ, randVec(r, sh[0]*sh[1], 0.02))
			m, _ := NewMatrix(typ, sh[0], sh[1], enc)
			x := randVec(r, T*sh[1], 1)
			out := make([]float32, T*sh[0])
			for _, l := range []int{gemmAVX512, gemmAVX2, gemmOff} {
				gemmLevel = l
				best := 0.0
				for range 15 {
					t0 := time.Now()
					MatMul(p, m, out, x, T, nil)
					best = max(best, 2*float64(T*sh[0]*sh[1])/float64(time.Since(t0).Nanoseconds()))
				}
				b.Logf("%s %dx%d %s: best %.1f GFLOP/s", typ, sh[0], sh[1], gemmLevelName(l), best)
			}
		}
	}
}
