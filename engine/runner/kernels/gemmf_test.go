package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
)

// gemmLevels are the float GEMM dispatch levels this CPU can run, the
// highest first, then the row kernels alone (gemmOff).
func gemmLevels() []int {
	var ls []int
	for l := detectGemmLevel(); l > gemmOff; l-- {
		ls = append(ls, l)
	}
	return append(ls, gemmOff)
}

func gemmLevelName(l int) string {
	return [...]string{"off", "avx2", "avx512", "avx512bf16"}[l]
}

// TestFloatGEMM: at every dispatch level this CPU has (AVX-512 and AVX2
// forced in turn), MatMul of F16 and F32 matrices gives, for row counts
// that leave partial four-row groups and tiles, token counts that leave
// partial three-token groups, column counts of one 32-column block and
// more (and, for F32, columns that are no multiple of 32, which go to
// the row kernels), on pools of one and two workers: MatVec's results
// bit for bit (the row kernels' sums in the same lanes, folded the same
// way), within float32 rounding of a float64 reference (of the
// activations rounded to bfloat16, for BF16 at the avx512bf16 level),
// and nothing written past the output; with whole rows and with column
// blocks.
func TestFloatGEMM(t *testing.T) {
	defer func(l, kc, tb int, k46 bool, kc46, tile46 int, cvt bool) {
		gemmLevel, gemmKC, gemmTB, gemm46, gemm46KC, gemm46Tile, gemm46Cvt = l, kc, tb, k46, kc46, tile46, cvt
	}(gemmLevel, gemmKC, gemmTB, gemm46, gemm46KC, gemm46Tile, gemm46Cvt)
	r := rand.New(rand.NewPCG(61, 62))
	// At AVX-512 the four-row × six-token kernel over blocks of the
	// default steps and tile (F16 and BF16 tiles converted in the first
	// token group's calls, and by a pass of their own), of one and three steps (three splits 25
	// steps into blocks of 3 and a last of 1) with tiles of 16 and 32
	// rows, and over whole halves with tiles of four; then the four-row × three-token one: whole rows, and
	// blocks of 64 and 256 columns with six and three tokens, whose sums
	// wait in memory between blocks.
	for _, blk := range []struct {
		kc, tb       int
		k46          bool
		kc46, tile46 int
		nocvt        bool
	}{
		{gemmKC, gemmTB, true, gemm46KC, gemm46Tile, false}, {gemmKC, gemmTB, true, gemm46KC, gemm46Tile, true},
		{gemmKC, gemmTB, true, 3, 16, false}, {gemmKC, gemmTB, true, 1, 32, false}, {gemmKC, gemmTB, true, 1 << 20, 4, false},
		{gemmKC, gemmTB, false, 0, 16, false}, {64, 6, false, 0, 16, false}, {256, 3, false, 0, 16, false},
	} {
		gemmKC, gemmTB, gemm46, gemm46KC, gemm46Tile, gemm46Cvt = blk.kc, blk.tb, blk.k46, blk.kc46, blk.tile46, !blk.nocvt
		t.Run(fmt.Sprintf("x6=%v/kc46=%d/tile46=%d/cvt=%v", blk.k46, blk.kc46, blk.tile46, !blk.nocvt), func(t *testing.T) { testFloatGEMMLevels(t, r, blk.kc) })
	}
}

func testFloatGEMMLevels(t *testing.T, r *rand.Rand, kc int) {
	for _, level := range gemmLevels() {
		for _, typ := range []gguf.TensorType{gguf.F16, gguf.BF16, gguf.F32} {
			for _, cols := range []int{32, 96, 512, 800, 40} {
				if cols%32 != 0 && typ != gguf.F32 {
					continue
				}
				for _, rows := range []int{1, 2, 3, 5, 7, 16, 17, 37} {
					name := fmt.Sprintf("kc%d/%s/%s/%dx%d", min(kc, 1<<20), gemmLevelName(level), typ, rows, cols)
					t.Run(name, func(t *testing.T) {
						testFloatGEMM(t, r, level, typ, rows, cols)
					})
				}
			}
		}
	}
}

func testFloatGEMM(t *testing.T, r *rand.Rand, level int, typ gguf.TensorType, rows, cols int) {
	w := randVec(r, rows*cols, 0.05)
	enc, err := gguf.Encode(typ, w)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMatrix(typ, rows, cols, enc)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := gguf.Decode(typ, enc, rows*cols)
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range []int{2, 3, 4, 5, 7, 9, 16} {
		x := randVec(r, T*cols, 1)
		gemmLevel = level
		p1 := NewPool(1)
		ran := m.mulFloat(p1, make([]float32, T*rows), x, T)
		p1.Close()
		gemmLevel = detectGemmLevel()
		if wantRan := level != gemmOff && cols%32 == 0; ran != wantRan {
			t.Fatalf("T=%d: the float GEMM ran: %v, want %v", T, ran, wantRan)
		}
		for _, workers := range []int{1, 2} {
			p := NewPool(workers)
			got := make([]float32, T*rows+1)
			got[T*rows] = 42
			gemmLevel = level
			MatMul(p, m, got[:T*rows], x, T, nil)
			if got[T*rows] != 42 {
				t.Fatalf("T=%d workers=%d: wrote past the output", T, workers)
			}
			gemmLevel = detectGemmLevel()
			want := make([]float32, rows)
			for tok := range T {
				xt := x[tok*cols : (tok+1)*cols]
				gemmLevel = level
				MatVec(p, m, want, xt, nil)
				gemmLevel = detectGemmLevel()
				xr := xt
				if typ == gguf.BF16 && level == gemmBF16 {
					xr = make([]float32, cols)
					for k, v := range xt {
						xr[k] = gguf.BF16ToF32(gguf.F32ToBF16(v))
					}
				}
				for i := range rows {
					g := got[tok*rows+i]
					if g != want[i] {
						t.Fatalf("T=%d workers=%d token %d row %d: MatMul %v, MatVec %v", T, workers, tok, i, g, want[i])
					}
					var ref, mag float64
					for k := range cols {
						pr := float64(wd[i*cols+k]) * float64(xr[k])
						ref += pr
						mag += math.Abs(pr)
					}
					if d := math.Abs(float64(g) - ref); d > 1e-5*(1+mag) {
						t.Fatalf("T=%d workers=%d token %d row %d: MatMul %v, float64 reference %v", T, workers, tok, i, g, ref)
					}
				}
			}
			p.Close()
		}
	}
}

// fmaPeakGFLOPS is FMAPeak at level, in GFLOP/s, over about 60 ms.
func fmaPeakGFLOPS(p *Pool, level, rounds int) float64 {
	defer func(l int) { gemmLevel = l }(gemmLevel)
	gemmLevel = level
	var f float64
	timeIt(func() { f, _ = FMAPeak(p, rounds) })
	return f / 1e9
}

// BenchmarkFloatGEMM measures a 128-token MatMul of F16, BF16 and F32
// matrices of the model's shapes (2048×2048, 5632×2048, 2048×5632) at
// every dispatch level this CPU has, AVX-512 and AVX2 forced in turn,
// and with the row kernels alone (level off: what a prompt ran before
// the GEMM), as GFLOP/s (two per multiply-add) and as a ratio to the
// float32 multiply-add peak the same pool reaches at that level with no
// memory traffic, the best of its repetitions, as a peak is: a
// preempted repetition only ever reads low, and a low peak would
// overstate every ratio (BF16 at avx512bf16, whose VDPBF16PS does two
// multiply-adds per lane, can reach twice it) (fmaPeakGFLOPS; level off is compared with the AVX2 peak, the
// width of the row kernels): a prompt is compute-bound, so that is its
// honest bound. Cases and peak run interleaved, five repetitions,
// medians; each ratio goes to a metric <type>-<rows>x<cols>-<level>/peak.
func BenchmarkFloatGEMM(b *testing.B) {
	defer func(l int) { gemmLevel = l }(gemmLevel)
	p := NewPool(0)
	defer p.Close()
	r := rand.New(rand.NewPCG(63, 64))
	const T = 128
	type gcase struct {
		typ        gguf.TensorType
		rows, cols int
		level      int
		m          *Matrix
		x          []float32
		gflops     []float64
	}
	var cases []*gcase
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.BF16, gguf.F32} {
		for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
			enc, err := gguf.Encode(typ, randVec(r, sh[0]*sh[1], 0.02))
			if err != nil {
				b.Fatal(err)
			}
			m, err := NewMatrix(typ, sh[0], sh[1], enc)
			if err != nil {
				b.Fatal(err)
			}
			x := randVec(r, T*sh[1], 1)
			for _, l := range gemmLevels() {
				cases = append(cases, &gcase{typ: typ, rows: sh[0], cols: sh[1], level: l, m: m, x: x})
			}
		}
	}
	peak := map[int][]float64{}
	out := make([]float32, T*5632)
	b.ResetTimer()
	for rep := 0; rep < 5; rep++ {
		for _, l := range gemmLevels() {
			if l != gemmOff {
				peak[l] = append(peak[l], fmaPeakGFLOPS(p, l, 1<<18))
			}
		}
		for _, c := range cases {
			gemmLevel = c.level
			secs := timeIt(func() { MatMul(p, c.m, out[:T*c.rows], c.x, T, nil) })
			c.gflops = append(c.gflops, 2*float64(T*c.rows*c.cols)/secs/1e9)
		}
	}
	b.StopTimer()
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%d-token MatMul, %d workers; peak GFLOP/s (multiply-adds, no loads):", T, p.Workers())
	for _, l := range gemmLevels() {
		if l != gemmOff {
			fmt.Fprintf(&tab, " %s %.1f", gemmLevelName(l), peakOf(peak, l))
		}
	}
	fmt.Fprintf(&tab, "\n%-16s %-7s %8s %8s %8s\n", "type-shape", "level", "GFLOP/s", "tok/s", "/peak")
	for _, c := range cases {
		pl := c.level
		if pl == gemmOff {
			pl = gemmAVX2
		}
		g := median(c.gflops)
		ratio := 0.0
		if pk := peakOf(peak, pl); pk > 0 {
			ratio = g / pk
		}
		name := fmt.Sprintf("%s-%dx%d", c.typ, c.rows, c.cols)
		fmt.Fprintf(&tab, "%-16s %-7s %8.1f %8.0f %8.3f\n", name, gemmLevelName(c.level), g, g*1e9/(2*float64(c.rows*c.cols)), ratio)
		b.ReportMetric(ratio, name+"-"+gemmLevelName(c.level)+"/peak")
	}
	b.Log(tab.String())
}

// peakOf is the best multiply-add rate measured at level. The AVX-512
// levels run the same peak loop, so their repetitions are pooled.
func peakOf(peak map[int][]float64, level int) float64 {
	var best float64
	for l, rates := range peak {
		if l == level || (l >= gemmAVX512 && level >= gemmAVX512) {
			for _, r := range rates {
				best = max(best, r)
			}
		}
	}
	return best
}
