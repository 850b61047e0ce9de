package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// sameBits is bit equality, except that any NaN equals any NaN (which
// NaN an operation returns differs between CPUs).
func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// randF32Rows fills n rows, rowBytes apart, with nx random float32 each
// over a wide exponent range (zeros of both signs and subnormals
// included), and random bytes, NaNs among them, in the padding.
func randF32Rows(r *rand.Rand, n, nx, rowBytes int) []byte {
	w := make([]byte, n*rowBytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		for j := 0; j < nx; j++ {
			b := r.Uint32()
			switch {
			case j%13 == 6:
				b &= 0x80000000 // ±0
			case j%17 == 9:
				b &^= 0xff << 23 // subnormal
			default:
				b = b&^(0xff<<23) | uint32(87+r.IntN(80))<<23
			}
			binary.LittleEndian.PutUint32(w[i*rowBytes+4*j:], b)
		}
	}
	return w
}

// TestF32RowsMatchGeneric runs the dispatched F32 row kernel against
// DotF32 bit for bit, over row counts, every tail length (value counts
// through two chunks of 32, then longer rows), strides wider than the
// data (some not a multiple of 4); checks that a row's value does not
// depend on its neighbours, and that it is within float32 rounding of
// a float64 dot.
func TestF32RowsMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	var nxs []int
	for nx := 1; nx <= 70; nx++ {
		nxs = append(nxs, nx)
	}
	nxs = append(nxs, 95, 96, 97, 127, 255, 256, 300, 2048, 2051)
	for _, nx := range nxs {
		for _, pad := range []int{0, 4, 6, 36} {
			for _, n := range []int{1, 2, 3, 5, 9} {
				rb := 4*nx + pad
				w := randF32Rows(r, n, nx, rb)
				x := randVec(r, nx, 1)
				if nx > 4 {
					x[3] = 0
					x[4] = float32(math.Copysign(0, -1))
				}
				got := make([]float32, n+1)
				got[n] = 42
				dotF32Rows(w, rb, x, got[:n])
				if got[n] != 42 {
					t.Fatalf("nx=%d n=%d: wrote past the output", nx, n)
				}
				for i := 0; i < n; i++ {
					row := w[i*rb : (i+1)*rb]
					if want := DotF32(row, x); !sameBits(got[i], want) {
						t.Fatalf("nx=%d pad=%d n=%d row %d: dispatched %v, DotF32 %v", nx, pad, n, i, got[i], want)
					}
					var one [1]float32
					dotF32Rows(row[:4*nx], 4*nx, x, one[:])
					if !sameBits(one[0], got[i]) {
						t.Fatalf("nx=%d pad=%d row %d: %v alone, %v among %d rows", nx, pad, i, one[0], got[i], n)
					}
					var exact, mag float64
					for j, xv := range x {
						p := float64(math.Float32frombits(binary.LittleEndian.Uint32(row[4*j:]))) * float64(xv)
						exact += p
						mag += math.Abs(p)
					}
					// Each value meets one rounding for its product, at
					// most ⌈nx/32⌉ in its lane's chain and five in the fold.
					bound := float64((nx+31)/32+6)*0x1p-24*mag + 0x1p-149*float64(nx+6)
					if math.Abs(float64(got[i])-exact) > bound {
						t.Fatalf("nx=%d row %d: %v, float64 %v (Σ|wx| %v)", nx, i, got[i], exact, mag)
					}
				}
			}
		}
	}
}

// TestDotF32Lanes pins down what every F32 path computes: value j added
// to sum j mod 32 after its product is rounded, the sums folded in
// halves. Lane 0 of a 33-value row gets −(1+2⁻¹¹) and then a·a with
// a = 1+2⁻¹², whose exact square 1+2⁻¹¹+2⁻²⁴ rounds to 1+2⁻¹¹: the sum is
// 0 when the product is rounded first, 2⁻²⁴ had it been fused.
func TestDotF32Lanes(t *testing.T) {
	a := float32(1 + 0x1p-12)
	w := make([]float32, 33)
	x := make([]float32, 33)
	w[0], x[0] = -(1 + 0x1p-11), 1
	w[32], x[32] = a, a
	row := make([]byte, 4*len(w))
	for j, v := range w {
		binary.LittleEndian.PutUint32(row[4*j:], math.Float32bits(v))
	}
	var out [1]float32
	dotF32Rows(row, len(row), x, out[:])
	if d := DotF32(row, x); d != 0 || out[0] != 0 {
		t.Fatalf("DotF32 %v, dispatched %v: want 0, the products rounded before adding", d, out[0])
	}

	// The same, stated plainly, on random rows of every tail length.
	r := rand.New(rand.NewPCG(73, 74))
	for range 200 {
		nx := 1 + r.IntN(100)
		row := randF32Rows(r, 1, nx, 4*nx)
		x := randVec(r, nx, 1)
		var s [32]float32
		for j := range x {
			p := float32(math.Float32frombits(binary.LittleEndian.Uint32(row[4*j:])) * x[j])
			s[j%32] += p
		}
		for h := 16; h >= 4; h /= 2 {
			for k := 0; k < h; k++ {
				s[k] += s[k+h]
			}
		}
		want := (s[0] + s[1]) + (s[2] + s[3])
		dotF32Rows(row, len(row), x, out[:])
		if d := DotF32(row, x); !sameBits(d, want) || !sameBits(out[0], want) {
			t.Fatalf("nx=%d: DotF32 %v, dispatched %v, lanes %v", nx, d, out[0], want)
		}
	}
}
