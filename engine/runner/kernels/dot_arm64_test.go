//go:build !purego

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// extremeQVec quantises a random vector with outliers into both forms,
// then sets some blocks to the extreme quants (±127 in every lane, or
// 127 throughout) and keeps the sums (S, BS) consistent with them.
func extremeQVec(r *rand.Rand, n int) *QVec {
	x := randVec(r, n, 1)
	for i := 0; i < n; i += 7 {
		x[i] *= 30
	}
	v := NewQVec(n)
	v.Quantize(x)
	for b := range v.D {
		q := v.Q[32*b : 32*b+32]
		switch b % 3 {
		case 0:
			for j := range q {
				q[j] = int8(127 - 254*(j&1))
			}
		case 1:
			for j := range q {
				q[j] = 127
			}
		}
		var s int32
		for _, a := range q {
			s += int32(a)
		}
		v.S[b] = s
	}
	if len(v.DK) > 0 {
		for b := range v.DK {
			if b%2 == 0 {
				for j := range qkK {
					v.QK[b*qkK+j] = int8(127 - 254*(j&1))
				}
			}
		}
		for k := range v.BS {
			var s int16
			for _, a := range v.QK[16*k : 16*k+16] {
				s += int16(a)
			}
			v.BS[k] = s
		}
	}
	return v
}

// extremeRows fills n rows of nb blocks, rowBytes apart, with random
// bytes and finite fp16 fields, and sets every third block's quant (and
// for the K-quants scale) bytes to all-ones, all-zeros or alternating
// extremes.
func extremeRows(r *rand.Rand, typ gguf.TensorType, n, nb, rowBytes int) []byte {
	bb := int(typ.BlockBytes())
	w := make([]byte, n*rowBytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	// the fp16 fields, and the quant (and scale) bytes [quants, end)
	halves, quants, end := []int{0}, 2, bb
	switch typ {
	case gguf.Q4_K, gguf.Q5_K, gguf.Q4_1, gguf.Q5_1:
		halves, quants = []int{0, 2}, 4
	case gguf.Q6_K:
		halves, quants, end = []int{208}, 0, 208
	}
	pat := [][2]byte{{0xff, 0xff}, {0x00, 0x00}, {0x80, 0x7f}, {0x0f, 0xf0}}
	for i := 0; i < n; i++ {
		for b := 0; b < nb; b++ {
			blk := w[i*rowBytes+b*bb : i*rowBytes+b*bb+bb]
			for _, off := range halves {
				h := uint16(r.Uint32()) &^ (0x1f << 10)
				h |= uint16(r.IntN(24)) << 10
				blk[off], blk[off+1] = byte(h), byte(h>>8)
			}
			if (b+i)%3 == 0 {
				p := pat[(b+i)/3%len(pat)]
				for j := quants; j < end; j++ {
					blk[j] = p[j&1]
				}
			}
		}
	}
	return w
}

// TestNEONKernels runs the NEON kernels, with SDOT where the CPU has
// it and with the SMULL fallback always, against the portable kernels
// (bit for bit: same exact integer sums, same float steps) and against
// a float64 dot of the decoded rows with the dequantised activation
// (within float32 rounding of Σ|w·a|), over row counts around the
// four-row groups, padded strides and one to several blocks.
func TestNEONKernels(t *testing.T) {
	saved := hasSDOT
	defer func() { hasSDOT = saved }()
	modes := []bool{false}
	if saved {
		modes = append(modes, true)
	}
	t.Logf("SDOT available: %v", saved)
	type rowsFn = func(w []byte, rowBytes, nb int, v *QVec, out []float32)
	r := rand.New(rand.NewPCG(41, 42))
	for _, sdot := range modes {
		hasSDOT = sdot
		for _, tc := range []struct {
			typ       gguf.TensorType
			neon, ref rowsFn
			vals      int
		}{
			{gguf.Q8_0, dotQ8_0Rows, dotQ8_0RowsGeneric, 32},
			{gguf.Q4_0, dotQ4_0Rows, rowsGeneric(dotQ4_0Generic, 18), 32},
			{gguf.Q4_K, dotQ4KRows, rowsGeneric(dotQ4KGeneric, 144), 256},
			{gguf.Q5_K, dotQ5KRows, rowsGeneric(dotQ5KGeneric, 176), 256},
			{gguf.Q6_K, dotQ6KRows, rowsGeneric(dotQ6KGeneric, 210), 256},
			{gguf.Q4_1, dotQ4_1Rows, rowsGeneric(dotQ4_1Generic, 20), 32},
			{gguf.Q5_0, dotQ5_0Rows, rowsGeneric(dotQ5_0Generic, 22), 32},
			{gguf.Q5_1, dotQ5_1Rows, rowsGeneric(dotQ5_1Generic, 24), 32},
		} {
			bb := int(tc.typ.BlockBytes())
			for _, nb := range []int{1, 2, 3, 5, 16} {
				for _, pad := range []int{0, 10} {
					for n := 1; n <= 9; n++ {
						rb := nb*bb + pad
						w := extremeRows(r, tc.typ, n, nb, rb)
						v := extremeQVec(r, nb*tc.vals)
						got := make([]float32, n+1)
						got[n] = 42
						want := make([]float32, n)
						tc.neon(w, rb, nb, v, got[:n])
						tc.ref(w, rb, nb, v, want)
						if got[n] != 42 {
							t.Fatalf("%s sdot=%v nb=%d n=%d: wrote past the output", tc.typ, sdot, nb, n)
						}
						xa := dequantActivation(tc.typ, v, make([]float32, nb*tc.vals))
						for i := range want {
							if got[i] != want[i] {
								t.Fatalf("%s sdot=%v nb=%d pad=%d n=%d row %d: NEON %v, generic %v", tc.typ, sdot, nb, pad, n, i, got[i], want[i])
							}
							wd, err := gguf.Decode(tc.typ, w[i*rb:i*rb+nb*bb], nb*tc.vals)
							if err != nil {
								t.Fatal(err)
							}
							var exact, mag float64
							for j, a := range xa {
								exact += float64(wd[j]) * a
								mag += math.Abs(float64(wd[j]) * a)
							}
							if math.Abs(float64(got[i])-exact) > 1e-5*mag+1e-30 {
								t.Fatalf("%s sdot=%v nb=%d n=%d row %d: NEON %v, float64 %v (Σ|wa| %v)", tc.typ, sdot, nb, n, i, got[i], exact, mag)
							}
						}
					}
				}
			}
		}
	}
}
