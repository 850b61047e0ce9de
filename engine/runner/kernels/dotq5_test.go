package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// q32Extremes overwrites some blocks of rows built by randBlocks with
// the quants' extremes: every nibble 0 or 15, every fifth bit clear or
// set, and mixes of both in every lane.
func q32Extremes(typ gguf.TensorType, w []byte, blocks int) {
	bb := int(typ.BlockBytes())
	qs, qh := 0, -1
	switch typ {
	case gguf.Q4_0:
		qs = 2
	case gguf.Q4_1:
		qs = 4
	case gguf.Q5_0:
		qh, qs = 2, 6
	case gguf.Q5_1:
		qh, qs = 4, 8
	}
	for b := 0; b < blocks; b++ {
		blk := w[b*bb : (b+1)*bb]
		var fill, bits byte
		switch b % 4 {
		case 0:
			fill, bits = 0x00, 0x00
		case 1:
			fill, bits = 0xff, 0xff
		case 2:
			fill, bits = 0x0f, 0x55
		default:
			continue // random bytes
		}
		for j := qs; j < qs+16; j++ {
			blk[j] = fill
		}
		if qh >= 0 {
			for j := qh; j < qh+4; j++ {
				blk[j] = bits
			}
		}
	}
}

// q32Activation quantises random values with outliers, then forces the
// quant extremes (±127, and −128, which Quantize never makes but the
// kernels accept) into some blocks, keeping the block sums right.
func q32Activation(r *rand.Rand, nb int) *QVec {
	x := randVec(r, nb*32, 1)
	for i := 0; i < len(x); i += 7 {
		x[i] *= 30
	}
	v := NewQVec(nb * 32)
	v.Quantize(x)
	for b := 0; b < nb; b++ {
		if b%3 == 2 {
			continue
		}
		var s int32
		for j := 0; j < 32; j++ {
			q := int8(127)
			switch {
			case b%3 == 1 && j%2 == 1:
				q = -128
			case j%4 >= 2:
				q = -127
			}
			v.Q[b*32+j] = q
			s += int32(q)
		}
		v.S[b] = s
	}
	return v
}

// TestQ32RowKernels checks the dispatched Q4_0, Q4_1, Q5_0 and Q5_1 row
// kernels (assembly where the CPU has it) against the portable ones and
// against a float64 product of the rows as gguf.Decode reads them, on
// random blocks with every quant extreme, over row counts around the
// four-row groups, strides wider than the data, and one to many blocks.
// A row's value must not depend on its position in the call.
func TestQ32RowKernels(t *testing.T) {
	t.Logf("AVX2 kernels in use: %v, AVX-512 row kernels: %v", hasAVX2, hasAVX512Rows)
	eachWidth(t, testQ32RowKernels)
}

// TestQ32WidthsAgree: the AVX-512 row kernels of the 32-value types do
// the AVX2 kernels' integer sums, roundings and reductions, so the two
// widths give the same bits for every row (a model's output must not
// depend on which CPU of a fleet served it).
func TestQ32WidthsAgree(t *testing.T) {
	wide, rows := hasAVX512, hasAVX512Rows
	defer func() { hasAVX512, hasAVX512Rows = wide, rows }()
	if !rows {
		t.Skip("no AVX-512 row kernels on this CPU: one width only")
	}
	r := rand.New(rand.NewPCG(53, 54))
	for _, tc := range []struct {
		typ  gguf.TensorType
		rows func(w []byte, rowBytes, nb int, v *QVec, out []float32)
	}{
		{gguf.Q4_0, dotQ4_0Rows}, {gguf.Q4_1, dotQ4_1Rows}, {gguf.Q5_0, dotQ5_0Rows}, {gguf.Q5_1, dotQ5_1Rows},
	} {
		bb := int(tc.typ.BlockBytes())
		for _, nb := range []int{1, 2, 7, 8, 9, 17, 64} {
			for _, n := range []int{1, 3, 4, 5, 8, 13} {
				for _, pad := range []int{0, 5} {
					rb := nb*bb + pad
					packed := randBlocks(r, tc.typ, n, nb)
					q32Extremes(tc.typ, packed, n*nb)
					w := make([]byte, n*rb)
					for i := range n {
						copy(w[i*rb:], packed[i*nb*bb:(i+1)*nb*bb])
					}
					v := q32Activation(r, nb)
					wideOut, narrowOut := make([]float32, n), make([]float32, n)
					hasAVX512, hasAVX512Rows = wide, true
					tc.rows(w, rb, nb, v, wideOut)
					hasAVX512, hasAVX512Rows = false, false
					tc.rows(w, rb, nb, v, narrowOut)
					for i := range n {
						if math.Float32bits(wideOut[i]) != math.Float32bits(narrowOut[i]) {
							t.Fatalf("%s nb=%d n=%d pad=%d row %d: AVX-512 %v, AVX2 %v", tc.typ, nb, n, pad, i, wideOut[i], narrowOut[i])
						}
					}
				}
			}
		}
	}
}

func testQ32RowKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	type rowsFn = func(w []byte, rowBytes, nb int, v *QVec, out []float32)
	for _, tc := range []struct {
		typ             gguf.TensorType
		dispatched, ref rowsFn
	}{
		{gguf.Q4_0, dotQ4_0Rows, rowsGeneric(dotQ4_0Generic, 18)},
		{gguf.Q4_1, dotQ4_1Rows, rowsGeneric(dotQ4_1Generic, 20)},
		{gguf.Q5_0, dotQ5_0Rows, rowsGeneric(dotQ5_0Generic, 22)},
		{gguf.Q5_1, dotQ5_1Rows, rowsGeneric(dotQ5_1Generic, 24)},
	} {
		bb := int(tc.typ.BlockBytes())
		for _, nb := range []int{1, 2, 3, 8, 64} {
			for _, pad := range []int{0, 5} {
				for n := 1; n <= 9; n++ {
					rb := nb*bb + pad
					// Rows rb apart: build them packed, then spread.
					packed := randBlocks(r, tc.typ, n, nb)
					q32Extremes(tc.typ, packed, n*nb)
					w := make([]byte, n*rb)
					for i := 0; i < n; i++ {
						copy(w[i*rb:], packed[i*nb*bb:(i+1)*nb*bb])
					}
					v := q32Activation(r, nb)
					got := make([]float32, n+1)
					got[n] = 42
					want := make([]float32, n)
					tc.dispatched(w, rb, nb, v, got[:n])
					tc.ref(w, rb, nb, v, want)
					if got[n] != 42 {
						t.Fatalf("%s nb=%d n=%d: wrote past the output", tc.typ, nb, n)
					}
					wd, err := gguf.Decode(tc.typ, packed, n*nb*32)
					if err != nil {
						t.Fatal(err)
					}
					for i := 0; i < n; i++ {
						var exact, mag float64
						for j := 0; j < nb*32; j++ {
							p := float64(wd[i*nb*32+j]) * float64(v.Q[j]) * float64(v.D[j/32])
							exact += p
							mag += math.Abs(p)
						}
						tol := 1e-5*mag + 1e-30
						if math.Abs(float64(got[i]-want[i])) > tol {
							t.Fatalf("%s nb=%d pad=%d n=%d row %d: dispatched %v, generic %v", tc.typ, nb, pad, n, i, got[i], want[i])
						}
						if math.Abs(float64(got[i])-exact) > tol {
							t.Fatalf("%s nb=%d pad=%d n=%d row %d: dispatched %v, float64 %v (Σ|terms| %v)", tc.typ, nb, pad, n, i, got[i], exact, mag)
						}
						var one [1]float32
						tc.dispatched(w[i*rb:i*rb+nb*bb], nb*bb, nb, v, one[:])
						if one[0] != got[i] {
							t.Fatalf("%s nb=%d n=%d row %d: %v alone, %v among %d rows", tc.typ, nb, n, i, one[0], got[i], n)
						}
					}
				}
			}
		}
	}
}
