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
		for _, fl := range []int{2, 6, 10, 14} {
			// fl>>2: row groups (the rows 4·kc apart, all different).
			ng := max(1, fl>>2)
			fl &= 3
			w := randVec(r, 4*ng*kc, 0.02)
			x := randVec(r, 3*kc, 1)
			o := make([]float32, 12*ng+16)
			acc := make([]float32, gemmAccWords)
			a := gemmArgs{nb: kc / 32, nr: 4, acc: uintptr(unsafe.Pointer(&acc[0])), fl: fl}
			set := func() {
				for j := range 4 {
					a.w[j] = uintptr(unsafe.Pointer(&w[j*kc]))
				}
				for j := range 3 {
					a.x[j], a.out[j] = uintptr(unsafe.Pointer(&x[j*kc])), uintptr(unsafe.Pointer(&o[j*4]))
				}
				a.acc, a.ng, a.ws = uintptr(unsafe.Pointer(&acc[0])), ng, 16*kc
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
			g := float64(2*16*12*2*kc/32*n*ng) / median(secs) / 1e9
			b.Logf("kernel kc=%d fl=%d ng=%d: %.1f GFLOP/s (%.2f)", kc, fl, ng, g, g/pk)
		}
	}
	for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
		for _, typ := range []gguf.TensorType{gguf.F16, gguf.F32} {
			enc, _ := gguf.Encode(typ, randVec(r, sh[0]*sh[1], 0.02))
			m, _ := NewMatrix(typ, sh[0], sh[1], enc)
			x := randVec(r, T*sh[1], 1)
			out := make([]float32, T*sh[0])
			for _, cfg := range [][5]int{{16, 512, 6, 2, 64}, {16, 1 << 20, 3, 2, 64}} {
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
