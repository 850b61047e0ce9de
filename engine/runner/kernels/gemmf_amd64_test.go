//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// TestFloatGEMMFourByThree: the four-row × three-token AVX-512 kernel,
// which the benchmark times against the two-row × seven-token one,
// still gives MatVec's bits.
func TestFloatGEMMFourByThree(t *testing.T) {
	if detectGemmLevel() != gemmAVX512 {
		t.Skip("no AVX-512")
	}
	defer func(s bool) { gemmSeven = s }(gemmSeven)
	gemmSeven = false
	r := rand.New(rand.NewPCG(65, 66))
	for _, rows := range []int{1, 5, 17} {
		testFloatGEMM(t, r, gemmAVX512, gguf.F16, rows, 96)
	}
}

// BenchmarkFloatGEMMKernels times, in the calling thread's CPU time (the
// machine is shared), one worker's 128-token MatMul of F16 2048×2048
// and 5632×2048 with the AVX-512 kernels: four rows × three tokens over
// whole rows (the kernel before the two-row × seven-token one) and two
// rows × seven tokens over whole rows and column blocks of 512, 1024
// and 2048, against the same thread's multiply-add peak, interleaved,
// seven repetitions; the median per-repetition ratio of each to the
// first goes to a metric <shape>-<kernel>/4x3.
func BenchmarkFloatGEMMKernels(b *testing.B) {
	if detectGemmLevel() != gemmAVX512 {
		b.Skip("no AVX-512")
	}
	defer func(l, kc int, s bool) { gemmLevel, gemmKC, gemmSeven = l, kc, s }(gemmLevel, gemmKC, gemmSeven)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	gemmLevel = gemmAVX512
	p := NewPool(1)
	defer p.Close()
	r := rand.New(rand.NewPCG(67, 68))
	type variant struct {
		name  string
		seven bool
		kc    int
	}
	vs := []variant{{"4x3", false, 1 << 30}, {"2x7", true, 1 << 30}, {"2x7-kc512", true, 512}, {"2x7-kc1024", true, 1024}, {"2x7-kc2048", true, 2048}}
	var tab strings.Builder
	for _, sh := range [][3]int{{2048, 2048, 128}, {5632, 2048, 128}, {32, 512, 14}} {
		rows, cols, T := sh[0], sh[1], sh[2]
		reps := max(1, int(5e8/float64(2*T*rows*cols)))
		enc, err := gguf.Encode(gguf.F16, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewMatrix(gguf.F16, rows, cols, enc)
		if err != nil {
			b.Fatal(err)
		}
		x := randVec(r, T*cols, 1)
		out := make([]float32, T*rows)
		flop := 2 * float64(T*rows*cols)
		gf := make([][]float64, len(vs))
		rat := make([][]float64, len(vs))
		var peak []float64
		for range 7 {
			c0 := threadCPU()
			fmaPeakAVX512(1 << 20)
			peak = append(peak, float64(2*16*24<<20)/(threadCPU()-c0)/1e9)
			var first float64
			for i, v := range vs {
				gemmSeven, gemmKC = v.seven, v.kc
				c0 := threadCPU()
				for range reps {
					MatMul(p, m, out, x, T, nil)
				}
				g := float64(reps) * flop / (threadCPU() - c0) / 1e9
				if i == 0 {
					first = g
				}
				gf[i] = append(gf[i], g)
				rat[i] = append(rat[i], g/first)
			}
		}
		pk := median(peak)
		fmt.Fprintf(&tab, "\nF16 %dx%d, %d tokens, one thread; peak %.1f GFLOP/s\n%-12s %8s %8s %8s\n", rows, cols, T, pk, "kernel", "GFLOP/s", "/peak", "/4x3")
		for i, v := range vs {
			fmt.Fprintf(&tab, "%-12s %8.1f %8.3f %8.3f\n", v.name, median(gf[i]), median(gf[i])/pk, median(rat[i]))
			b.ReportMetric(median(rat[i]), fmt.Sprintf("%dx%d-%s/4x3", rows, cols, v.name))
		}
	}
	b.Log(tab.String())
}
