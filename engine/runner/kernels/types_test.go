package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// bf16DPActive reports whether products of a typ matrix of cols columns
// round the activation to bfloat16 (BF16 at gemmBF16, dotBF16Rows).
func bf16DPActive(typ gguf.TensorType, cols int) bool {
	return typ == gguf.BF16 && gemmLevel == gemmBF16 && cols%32 == 0
}

// allTypes are the matrix types NewMatrix accepts.
var allTypes = []gguf.TensorType{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K}

// dequantActivation is the activation as the integer kernels see it:
// the 256-value form for the K-quants, the 32-value form otherwise; for
// BF16 at gemmBF16, x rounded to bfloat16.
func dequantActivation(typ gguf.TensorType, v *QVec, x []float32) []float64 {
	out := make([]float64, len(x))
	for i := range out {
		switch {
		case bf16DPActive(typ, len(x)):
			out[i] = float64(gguf.BF16ToF32(gguf.F32ToBF16(x[i])))
		case !(&Matrix{Type: typ}).Quantized():
			out[i] = float64(x[i])
		case isKQuant(typ):
			out[i] = float64(v.QK[i]) * float64(v.DK[i/qkK])
		default:
			out[i] = float64(v.Q[i]) * float64(v.D[i/32])
		}
	}
	return out
}

// TestEveryTypeAgainstFloat64 checks each type's product two ways
// against a float64 dot of the row decoded by gguf.Decode (the layout
// as ggml's dequantize_row_* defines it, independent of the kernels):
// with the activation the integer kernel actually reads (dequantised
// from the QVec), agreement to float32 rounding (1e-5 of Σ|w·x|) proves
// the kernel's unpacking and integer arithmetic exact; with the exact
// activation, agreement within 1% of Σ|w·x| bounds the activation
// quantisation error. Rows mix plain, offset and outlier weights.
func TestEveryTypeAgainstFloat64(t *testing.T) { eachWidth(t, testEveryTypeAgainstFloat64) }

func testEveryTypeAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, typ := range allTypes {
		for _, n := range []int{256, 512, 2048} {
			rows := 9
			w := randVec(r, rows*n, 0.05)
			for i := range w {
				switch (i / n) % 3 {
				case 1:
					w[i] += 0.03 // offset rows exercise the K-quant minimums
				case 2:
					if i%97 == 0 {
						w[i] *= 20
					}
				}
			}
			x := randVec(r, n, 1)
			enc, err := gguf.Encode(typ, w)
			if err != nil {
				t.Fatal(err)
			}
			wd, err := gguf.Decode(typ, enc, rows*n)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMatrix(typ, rows, n, enc)
			if err != nil {
				t.Fatal(err)
			}
			qx := m.NewActivation()
			if qx != nil {
				qx.Quantize(x)
			}
			xa := dequantActivation(typ, qx, x)
			out := make([]float32, rows)
			MatVec(nil, m, out, x, qx)
			for i := 0; i < rows; i++ {
				var seen, exact, mag float64
				for j := 0; j < n; j++ {
					wj := float64(wd[i*n+j])
					seen += wj * xa[j]
					exact += wj * float64(x[j])
					mag += math.Abs(wj * float64(x[j]))
				}
				got := float64(out[i])
				if math.Abs(got-seen) > 1e-5*mag {
					t.Errorf("%s n=%d row %d: %v, float64 with the quantised activation %v (Σ|wx| %v)", typ, n, i, got, seen, mag)
				}
				if math.Abs(got-exact) > 0.01*mag {
					t.Errorf("%s n=%d row %d: %v, float64 with the exact activation %v (Σ|wx| %v)", typ, n, i, got, exact, mag)
				}
				if one := m.DotRow(i, x, qx); one != out[i] {
					t.Errorf("%s n=%d row %d: DotRow %v, MatVec %v", typ, n, i, one, out[i])
				}
			}
		}
	}
}

// randBlocks fills n rows of nb blocks of a quantised type with random
// bytes, every fp16 field a random finite value: quants and scales then
// take every value the format allows, extremes included.
func randBlocks(r *rand.Rand, typ gguf.TensorType, n, nb int) []byte {
	bb := int(typ.BlockBytes())
	w := make([]byte, n*nb*bb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	var halves []int
	switch typ {
	case gguf.Q8_0, gguf.Q4_0, gguf.Q5_0:
		halves = []int{0}
	case gguf.Q4_1, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K:
		halves = []int{0, 2}
	case gguf.Q6_K:
		halves = []int{208}
	case gguf.F16:
		for i := 0; i < bb*nb*n; i += 2 {
			halves = append(halves, i)
		}
		nb, n, bb = 1, 1, len(w)
	}
	for blk := 0; blk < n*nb; blk++ {
		for _, off := range halves {
			h := uint16(r.Uint32()) &^ (0x1f << 10)
			h |= uint16(r.IntN(24)) << 10 // finite, and products stay in float32 range
			w[blk*bb+off], w[blk*bb+off+1] = byte(h), byte(h>>8)
		}
	}
	return w
}

// eachWidth runs f as a subtest with the AVX-512 kernels where this CPU
// has them ("avx512") and again with them off ("avx2": the AVX2 kernels
// where the CPU has those, else the portable ones), restoring the
// switches after: every path a machine can take is tested on it.
func eachWidth(t *testing.T, f func(t *testing.T)) {
	wide, rows := hasAVX512, hasAVX512Rows
	defer func() { hasAVX512, hasAVX512Rows = wide, rows }()
	for _, on := range []bool{true, false} {
		if on && !wide && !rows {
			continue
		}
		hasAVX512, hasAVX512Rows = on && wide, on && rows
		name := "avx2"
		if on {
			name = "avx512"
		}
		t.Run(name, f)
	}
}

// TestRowKernelsMatchGeneric: the dispatched row kernels (assembly
// where this CPU has it, AVX-512 and AVX2 in turn) against the portable
// ones, on random bytes, for row counts around the kernels' grouping
// (fours, then single rows), block counts from one up and row strides
// wider than the data. The K-quant kernels add the same integer sums in
// the same order, so they must agree bit for bit; the others accumulate
// in vector lanes and must agree to float32 rounding. Every row must
// also give the same bits alone as among others.
func TestRowKernelsMatchGeneric(t *testing.T) {
	t.Logf("AVX2 kernels in use: %v, AVX-512 row kernels: %v", hasAVX2, hasAVX512Rows)
	eachWidth(t, testRowKernelsMatchGeneric)
}

func testRowKernelsMatchGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	type rowsFn = func(w []byte, rowBytes, nb int, v *QVec, out []float32)
	for _, tc := range []struct {
		typ              gguf.TensorType
		dispatched, ref  rowsFn
		exact            bool
		bb, valsPerBlock int
	}{
		{gguf.Q8_0, dotQ8_0Rows, dotQ8_0RowsGeneric, false, 34, 32},
		{gguf.Q4_0, dotQ4_0Rows, rowsGeneric(dotQ4_0Generic, 18), false, 18, 32},
		{gguf.Q4_K, dotQ4KRows, rowsGeneric(dotQ4KGeneric, 144), true, 144, 256},
		{gguf.Q5_K, dotQ5KRows, rowsGeneric(dotQ5KGeneric, 176), true, 176, 256},
		{gguf.Q6_K, dotQ6KRows, rowsGeneric(dotQ6KGeneric, 210), true, 210, 256},
	} {
		for _, nb := range []int{1, 2, 3, 8, 9, 17} {
			for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13} {
				for _, pad := range []int{0, 46} {
					rb := nb*tc.bb + pad
					dense := randBlocks(r, tc.typ, n, nb)
					w := make([]byte, n*rb)
					for i := range n {
						copy(w[i*rb:], dense[i*nb*tc.bb:(i+1)*nb*tc.bb])
					}
					x := randVec(r, nb*tc.valsPerBlock, 1)
					for i := 0; i < len(x); i += 7 {
						x[i] *= 30 // outliers: extreme activation quants
					}
					v := NewQVec(nb * tc.valsPerBlock)
					v.Quantize(x)
					got := make([]float32, n+1)
					got[n] = 42
					want := make([]float32, n)
					tc.dispatched(w, rb, nb, v, got[:n])
					tc.ref(w, rb, nb, v, want)
					if got[n] != 42 {
						t.Fatalf("%s nb=%d n=%d: wrote past the output", tc.typ, nb, n)
					}
					if hasAVX512Rows {
						// The AVX-512 kernels keep the AVX2 ones' lanes
						// and roundings: the same bits for every type.
						hasAVX512Rows = false
						narrow := make([]float32, n)
						tc.dispatched(w, rb, nb, v, narrow)
						hasAVX512Rows = true
						for i := range narrow {
							if got[i] != narrow[i] {
								t.Fatalf("%s nb=%d n=%d pad=%d row %d: AVX-512 %v, AVX2 %v", tc.typ, nb, n, pad, i, got[i], narrow[i])
							}
						}
					}
					wd, err := gguf.Decode(tc.typ, dense, n*nb*tc.valsPerBlock)
					if err != nil {
						t.Fatal(err)
					}
					xa := dequantActivation(tc.typ, v, x)
					for i := range want {
						var mag float64 // Σ|w·x| as the kernels see them
						for j, a := range xa {
							mag += math.Abs(float64(wd[i*len(xa)+j]) * a)
						}
						if tc.exact && got[i] != want[i] || !tc.exact && math.Abs(float64(got[i]-want[i])) > 1e-5*mag+1e-30 {
							t.Fatalf("%s nb=%d n=%d pad=%d row %d: dispatched %v, generic %v", tc.typ, nb, n, pad, i, got[i], want[i])
						}
						var one [1]float32
						tc.dispatched(w[i*rb:i*rb+nb*tc.bb], nb*tc.bb, nb, v, one[:])
						if one[0] != got[i] {
							t.Fatalf("%s nb=%d n=%d pad=%d row %d: %v alone, %v among %d rows", tc.typ, nb, n, pad, i, one[0], got[i], n)
						}
					}
				}
			}
		}
	}
	// Float rows: F16 and BF16 against their portable kernels.
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.BF16} {
		for _, cols := range []int{8, 16, 40, 64, 256, 2048} {
			n := 5
			x := randVec(r, cols, 1)
			enc, _ := gguf.Encode(typ, randVec(r, n*cols, 0.1))
			got, want := make([]float32, n), make([]float32, n)
			if typ == gguf.F16 {
				dotF16Rows(enc, 2*cols, x, got)
				dotF16RowsGeneric(enc, 2*cols, x, want)
			} else {
				dotBF16Rows(enc, 2*cols, x, got)
				if bf16DPActive(typ, cols) {
					// VDPBF16PS on x rounded to bfloat16: its
					// emulation's bits exactly.
					dotBF16DPRowsGeneric(enc, 2*cols, x, want)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s cols=%d row %d: dispatched %v, generic %v", typ, cols, i, got[i], want[i])
						}
					}
				} else {
					dotBF16RowsGeneric(enc, 2*cols, x, want)
				}
			}
			wd, _ := gguf.Decode(typ, enc, n*cols)
			for i := range want {
				var mag float64
				for j := 0; j < cols; j++ {
					mag += math.Abs(float64(wd[i*cols+j]) * float64(x[j]))
				}
				if math.Abs(float64(got[i]-want[i])) > 1e-6*mag {
					t.Fatalf("%s cols=%d row %d: dispatched %v, generic %v", typ, cols, i, got[i], want[i])
				}
			}
		}
	}
}

// TestQuantizeK checks the 256-value form against quantize_row_q8_K_ref:
// the largest magnitude maps to −127 exactly, every quant is the
// tie-to-even rounding of x·(−127/max) capped at 127, bsums add up, and
// an all-zero block has scale 0.
func TestQuantizeK(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 36))
	x := randVec(r, 1024, 2)
	clear(x[512:768])
	x[100] = -9 // negative extreme: positive scale
	x[300] = 9  // positive extreme: negative scale
	v := NewQVec(len(x))
	v.Quantize(x)
	for b := 0; b < 4; b++ {
		if b == 2 {
			if v.DK[b] != 0 {
				t.Fatalf("zero block scale %v", v.DK[b])
			}
			continue
		}
		var mx, amax float32
		for _, f := range x[b*256 : b*256+256] {
			if a := abs32(f); a > amax {
				amax, mx = a, f
			}
		}
		iscale := -127 / mx
		if v.DK[b] != 1/iscale {
			t.Fatalf("block %d scale %v, want %v", b, v.DK[b], 1/iscale)
		}
		for j := 0; j < 256; j++ {
			want := math.RoundToEven(float64(iscale * x[b*256+j]))
			want = math.Min(127, want)
			if float64(v.QK[b*256+j]) != want {
				t.Fatalf("x[%d]=%v: quant %d, want %v", b*256+j, x[b*256+j], v.QK[b*256+j], want)
			}
		}
		for s := 0; s < 16; s++ {
			var sum int16
			for _, q := range v.QK[b*256+16*s : b*256+16*s+16] {
				sum += int16(q)
			}
			if v.BS[b*16+s] != sum {
				t.Fatalf("block %d bsum %d: %d, want %d", b, s, v.BS[b*16+s], sum)
			}
		}
	}
	if v.QK[100] != -127 || v.QK[300] != -127 {
		t.Errorf("extremes quantised to %d, %d; want -127", v.QK[100], v.QK[300])
	}
}

// TestNewActivationForms: only the forms the matrices read are
// allocated, and a K-quant product without the 256-value form panics
// with a message rather than reading out of range.
func TestNewActivationForms(t *testing.T) {
	mk := func(typ gguf.TensorType) *Matrix {
		enc, _ := gguf.Encode(typ, make([]float32, 512))
		m, err := NewMatrix(typ, 1, 512, enc)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	q8, q4k, f16 := mk(gguf.Q8_0), mk(gguf.Q4_K), mk(gguf.F16)
	for _, tc := range []struct {
		ms          []*Matrix
		nil32, nilK bool
		none        bool
	}{
		{[]*Matrix{f16}, true, true, true},
		{[]*Matrix{q8}, false, true, false},
		{[]*Matrix{q4k}, true, false, false},
		{[]*Matrix{q8, q4k, f16}, false, false, false},
	} {
		v := NewActivation(512, tc.ms...)
		if (v == nil) != tc.none {
			t.Fatalf("%v: activation %v", tc.ms, v)
		}
		if v != nil && ((v.D == nil) != tc.nil32 || (v.DK == nil) != tc.nilK) {
			t.Errorf("forms: 32-value %v, 256-value %v", v.D != nil, v.DK != nil)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("K-quant product with a 32-value activation did not panic")
		}
	}()
	v := NewActivation(512, q8)
	v.Quantize(make([]float32, 512))
	q4k.DotRow(0, nil, v)
}

// TestMatMulEqualsMatVec: a batch of tokens through MatMul gives, for
// every type and pool size, exactly the per-token MatVec results (the
// same row kernels run in the same order; only the loop nest differs),
// over row counts that leave partial tiles and chunks.
func TestMatMulEqualsMatVec(t *testing.T) { eachWidth(t, testMatMulEqualsMatVec) }

func testMatMulEqualsMatVec(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	const cols = 512
	for _, typ := range allTypes {
		for _, rows := range []int{1, 17, 150} {
			enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.05))
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMatrix(typ, rows, cols, enc)
			if err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{1, 5, 33} {
				x := randVec(r, T*cols, 1)
				var qx []*QVec
				if m.Quantized() {
					for tok := 0; tok < T; tok++ {
						q := NewQVec(cols)
						q.Quantize(x[tok*cols : (tok+1)*cols])
						qx = append(qx, q)
					}
				}
				for _, workers := range []int{1, 2, 3} {
					p := NewPool(workers)
					out := make([]float32, T*rows+1)
					out[T*rows] = 42
					MatMul(p, m, out[:T*rows], x, T, qx)
					if out[T*rows] != 42 {
						t.Fatalf("%s: wrote past the output", typ)
					}
					want := make([]float32, rows)
					for tok := 0; tok < T; tok++ {
						var q *QVec
						if qx != nil {
							q = qx[tok]
						}
						MatVec(p, m, want, x[tok*cols:(tok+1)*cols], q)
						for i := range want {
							if got := out[tok*rows+i]; got != want[i] {
								t.Fatalf("%s rows=%d T=%d workers=%d token %d row %d: MatMul %v, MatVec %v", typ, rows, T, workers, tok, i, got, want[i])
							}
						}
					}
					p.Close()
				}
			}
		}
	}
}
