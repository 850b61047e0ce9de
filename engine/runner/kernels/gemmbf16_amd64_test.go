//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// randBF16Bits is n float32 values, most of them ordinary, some whose
// bfloat16 roundings or products lie near and below the smallest normal
// (which VDPBF16PS reads as zero or flushes to zero), some signed zeros,
// and, where wild is set, some of any bits at all (infinities and NaNs
// included); all scaled by scale (a row of tiny values sums to denormals
// throughout).
func randBF16Bits(r *rand.Rand, n int, wild bool, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		switch r.IntN(16) {
		case 0:
			x[i] = float32(r.NormFloat64() * 1e-38)
		case 1:
			x[i] = float32(r.NormFloat64() * 1e-19)
		case 2:
			x[i] = math.Float32frombits(r.Uint32() & 0x80000000)
		case 3:
			if wild {
				x[i] = math.Float32frombits(r.Uint32())
				continue
			}
			fallthrough
		default:
			x[i] = float32(r.NormFloat64())
		}
		x[i] = float32(float64(x[i]) * scale)
	}
	return x
}

// TestCvtF32BF16: the assembly rounding of float32 to bfloat16 gives
// gguf.F32ToBF16's bits (ggml's rounding) for every kind of value,
// NaNs and infinities included.
func TestCvtF32BF16(t *testing.T) {
	if detectGemmLevel() != gemmBF16 {
		t.Skip("no AVX512_BF16 on this CPU: the kernel is never run")
	}
	r := rand.New(rand.NewPCG(71, 72))
	for _, n := range []int{16, 32, 4096} {
		x := randBF16Bits(r, n, true, 1)
		x[0] = math.Float32frombits(0x7f800001) // signalling NaN
		x[1] = math.Float32frombits(0x3f808000) // a tie to even, down
		x[2] = math.Float32frombits(0x3f818000) // a tie to even, up
		got, want := make([]uint16, n+1), make([]uint16, n)
		got[n] = 0xbeef
		cvtF32BF16AVX512(&got[0], &x[0], n)
		cvtF32BF16Generic(want, x)
		if got[n] != 0xbeef {
			t.Fatalf("n=%d: wrote past the end", n)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("n=%d: %08x → %04x, want %04x", n, math.Float32bits(x[i]), got[i], want[i])
			}
		}
	}
}

// TestBF16DPMatchesGeneric: the VDPBF16PS kernels, decode's four-row
// one and the GEMM's four-row × six-token one (through dotBF16Rows and
// MatMul at gemmBF16), give dotBF16DPGeneric's bits for rows and tokens
// across the finite range, denormals and signed zeros included, for row
// counts around the four-row groups and token counts around the
// six-token ones.
func TestBF16DPMatchesGeneric(t *testing.T) {
	if detectGemmLevel() != gemmBF16 {
		t.Skip("no AVX512_BF16 on this CPU: the kernels are never run")
	}
	defer func(l int) { gemmLevel = l }(gemmLevel)
	gemmLevel = gemmBF16
	r := rand.New(rand.NewPCG(73, 74))
	p := NewPool(2)
	defer p.Close()
	// Scales: ordinary rows and tokens; products and sums near the
	// smallest normal; weights that are denormal as bfloat16.
	for _, sc := range [][2]float64{{1, 1}, {1e-19, 1e-19}, {1e-38, 1e3}} {
		for _, cols := range []int{32, 64, 320} {
			for _, rows := range []int{1, 2, 3, 4, 5, 7, 9, 21} {
				enc, err := gguf.Encode(gguf.BF16, randBF16Bits(r, rows*cols, false, sc[0]))
				if err != nil {
					t.Fatal(err)
				}
				m, err := NewMatrix(gguf.BF16, rows, cols, enc)
				if err != nil {
					t.Fatal(err)
				}
				for _, T := range []int{1, 2, 6, 7, 13} {
					x := randBF16Bits(r, T*cols, false, sc[1])
					got := make([]float32, T*rows)
					MatMul(p, m, got, x, T, nil)
					want := make([]float32, rows)
					for tok := range T {
						dotBF16DPRowsGeneric(enc, m.rowBytes, x[tok*cols:(tok+1)*cols], want)
						for i := range rows {
							if g := got[tok*rows+i]; math.Float32bits(g) != math.Float32bits(want[i]) {
								t.Fatalf("scales %v cols=%d rows=%d T=%d token %d row %d: kernel %v (%08x), generic %v (%08x)",
									sc, cols, rows, T, tok, i, g, math.Float32bits(g), want[i], math.Float32bits(want[i]))
							}
						}
					}
				}
			}
		}
	}
}
