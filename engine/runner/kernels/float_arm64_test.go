//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// sameFloat is bit equality, except that any NaN equals any NaN (the
// NaN payloads of a conversion are not what these kernels promise).
func sameFloat(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// randHalfRows fills n rows, rowBytes apart, with random finite F16 or
// BF16 values across the whole exponent range (zeros, signed zeros and
// subnormals included) and random bytes in the padding.
func randHalfRows(r *rand.Rand, bf16 bool, n, nx, rowBytes int) []byte {
	w := make([]byte, n*rowBytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		for j := 0; j < nx; j++ {
			h := uint16(r.Uint32())
			switch {
			case j%11 == 5:
				h &= 0x8000 // ±0
			case bf16:
				h = h&^(0xff<<7) | uint16(100+r.IntN(56))<<7
			default:
				h = h&^(0x1f<<10) | uint16(r.IntN(31))<<10
			}
			w[i*rowBytes+2*j], w[i*rowBytes+2*j+1] = byte(h), byte(h>>8)
		}
	}
	return w
}

// TestNEONFloatRows runs the F16 and BF16 NEON kernels against the
// portable ones, bit for bit (the same FMADD chains; see float_arm64.s),
// and against a float64 dot within float32 rounding of Σ|w·x|, over row
// counts around the eight-row groups, value counts around the 8-value
// chunks and the pairs (odd ones too) and padded strides.
func TestNEONFloatRows(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	type rowsFn = func(w []byte, rowBytes int, x, out []float32)
	for _, tc := range []struct {
		name      string
		bf16      bool
		neon, ref rowsFn
		decode    func(uint16) float32
	}{
		{"F16", false, dotF16Rows, dotF16RowsGeneric, gguf.F16ToF32},
		{"BF16", true, dotBF16Rows, dotBF16RowsGeneric, gguf.BF16ToF32},
	} {
		for _, nx := range []int{1, 2, 3, 5, 7, 8, 9, 14, 15, 16, 17, 31, 64, 67, 256} {
			for _, pad := range []int{0, 6} {
				for n := 1; n <= 19; n++ {
					rb := 2*nx + pad
					w := randHalfRows(r, tc.bf16, n, nx, rb)
					x := randVec(r, nx, 1)
					if nx > 4 {
						x[3] = 0
						x[4] = float32(math.Copysign(0, -1))
					}
					got := make([]float32, n+1)
					got[n] = 42
					want := make([]float32, n)
					tc.neon(w, rb, x, got[:n])
					tc.ref(w, rb, x, want)
					if got[n] != 42 {
						t.Fatalf("%s nx=%d n=%d: wrote past the output", tc.name, nx, n)
					}
					for i := range want {
						if !sameFloat(got[i], want[i]) {
							t.Fatalf("%s nx=%d pad=%d n=%d row %d: NEON %v, generic %v", tc.name, nx, pad, n, i, got[i], want[i])
						}
						var exact, mag float64
						for j, xv := range x {
							wv := float64(tc.decode(uint16(w[i*rb+2*j]) | uint16(w[i*rb+2*j+1])<<8))
							exact += wv * float64(xv)
							mag += math.Abs(wv * float64(xv))
						}
						if math.Abs(float64(got[i])-exact) > float64(nx)*0x1p-23*mag+1e-300 {
							t.Fatalf("%s nx=%d n=%d row %d: NEON %v, float64 %v (Σ|wx| %v)", tc.name, nx, n, i, got[i], exact, mag)
						}
					}
				}
			}
		}
	}
}

// TestNEONFloatRowsEveryHalf converts every 16-bit pattern (NaNs and
// infinities too) through each path of the NEON kernels: one value per
// row (the odd tail), two (the pairs) and eight (the chunks), against
// the portable kernels.
func TestNEONFloatRowsEveryHalf(t *testing.T) {
	type rowsFn = func(w []byte, rowBytes int, x, out []float32)
	for _, tc := range []struct {
		name      string
		neon, ref rowsFn
	}{
		{"F16", dotF16Rows, dotF16RowsGeneric},
		{"BF16", dotBF16Rows, dotBF16RowsGeneric},
	} {
		for _, nx := range []int{1, 2, 8} {
			const rows = 1 << 16
			w := make([]byte, rows*2*nx)
			for i := 0; i < rows; i++ {
				for j := 0; j < nx; j++ {
					// value j of row i: pattern i in the last slot, a
					// small normal elsewhere, so each pattern's product
					// is added last.
					h := uint16(0x3c00)
					if tc.name == "BF16" {
						h = 0x3f80
					}
					if j == nx-1 {
						h = uint16(i)
					}
					w[i*2*nx+2*j], w[i*2*nx+2*j+1] = byte(h), byte(h>>8)
				}
			}
			x := make([]float32, nx)
			for j := range x {
				x[j] = 1.5 - float32(j)/4
			}
			got := make([]float32, rows)
			want := make([]float32, rows)
			tc.neon(w, 2*nx, x, got)
			tc.ref(w, 2*nx, x, want)
			for i := range want {
				if !sameFloat(got[i], want[i]) {
					t.Fatalf("%s nx=%d pattern %#04x: NEON %v, generic %v", tc.name, nx, i, got[i], want[i])
				}
			}
		}
	}
}
