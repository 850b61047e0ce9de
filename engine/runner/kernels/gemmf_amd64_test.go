//go:build !purego

package kernels

import (
	"math/rand/v2"
	"runtime"

	"golang.org/x/sys/unix"
	"testing"
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

func fmaPeakAVXn(level, rounds int) {
	if level == gemmAVX512 {
		fmaPeakAVX512(rounds)
	} else {
		fmaPeakAVX2(rounds)
	}
}

// threadNS is the calling thread's CPU time in seconds, to the
// nanosecond (CLOCK_THREAD_CPUTIME_ID).
func threadNS() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return float64(ts.Nano()) / 1e9
}

// BenchmarkGemmTune: one worker's tiles over whole matrices, timed in
// thread CPU time, for a few blockings.
func BenchmarkGemmTune(b *testing.B) {
	defer func(l, t, k, tb, pd int) { gemmLevel, gemmTile, gemmKC, gemmTB, gemmPad = l, t, k, tb, pd }(gemmLevel, gemmTile, gemmKC, gemmTB, gemmPad)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := rand.New(rand.NewPCG(1, 2))
	const T = 128
	pk := 0.0
	for range 20 {
		t0 := threadNS()
		fmaPeakAVX512(1 << 16)
		pk = max(pk, float64(2*16*24*(1<<16))/(threadNS()-t0)/1e9)
	}
	b.Logf("peak %.1f", pk)
	for _, kc := range []int{2048} {
		for _, fl := range []int{2, 3, 1} {
			w := make([]float32, 4*kc)
			x := make([]float32, 3*kc)
			o := make([]float32, 12)
			acc := make([]float32, gemmAccWords)
			a := gemmArgs{nb: kc / 32, nr: 4, acc: uintptr(unsafe.Pointer(&acc[0])), fl: fl}
			set := func() {
				for j := range 4 {
					a.w[j] = uintptr(unsafe.Pointer(&w[j*kc]))
				}
				for j := range 3 {
					a.x[j], a.out[j] = uintptr(unsafe.Pointer(&x[j*kc])), uintptr(unsafe.Pointer(&o[j*4]))
				}
				a.acc, a.ng = uintptr(unsafe.Pointer(&acc[0])), 1
			}
			var secs []float64
			n := 1 << 24 / kc
			for range 5 {
				t0 := threadNS()
				for range n {
					set()
					gemmF16x4x3AVX512(&a)
				}
				secs = append(secs, threadNS()-t0)
			}
			g := float64(2*16*12*2*kc/32*n) / median(secs) / 1e9
			b.Logf("kernel kc=%d fl=%d: %.1f GFLOP/s (%.2f)", kc, fl, g, g/pk)
		}
	}
	for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
		for _, typ := range []gguf.TensorType{gguf.F16, gguf.F32} {
			enc, _ := gguf.Encode(typ, randVec(r, sh[0]*sh[1], 0.02))
			m, _ := NewMatrix(typ, sh[0], sh[1], enc)
			x := randVec(r, T*sh[1], 1)
			out := make([]float32, T*sh[0])
			for _, cfg := range [][5]int{{16, 256, 6, 2, 64}, {16, 256, 6, 2, 16}, {16, 256, 12, 2, 64}, {16, 512, 6, 2, 64}, {16, 1 << 20, 3, 2, 64}, {16, 256, 6, 1, 64}, {16, 1 << 20, 3, 1, 64}} {
				gemmTile, gemmKC, gemmTB, gemmLevel, gemmPad = cfg[0], cfg[1], cfg[2], cfg[3], cfg[4]
				xs := sh[1] + gemmPad
				xp := make([]float32, T*xs)
				for t := range T {
					copy(xp[t*xs:], x[t*sh[1]:(t+1)*sh[1]])
				}
				buf := &gemmBuf{tile: make([]float32, gemmTile*(sh[1]+gemmPad)), acc: make([]float32, (gemmTB/3)*gemmTile*gemmAccWords+16)}
				var secs []float64
				for range 5 {
					t0 := threadNS()
					for r0 := 0; r0 < sh[0]; r0 += gemmTile {
						m.gemmTile(gemmLevel, r0, min(r0+gemmTile, sh[0]), out, xp, xs, T, buf)
					}
					secs = append(secs, threadNS()-t0)
				}
				g := 2 * float64(T*sh[0]*sh[1]) / median(secs) / 1e9
				b.Logf("%s %dx%d cfg %v: %.1f GFLOP/s (%.2f of peak)", typ, sh[0], sh[1], cfg, g, g/pk)
			}
		}
	}
}
