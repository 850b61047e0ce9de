//go:build !purego

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// BenchmarkMatMulPk4 times, at the AVX2 level (the AVX-512 kernels
// turned off), a 128-token MatMul over one 2048×2048 Q8_0, Q4_1, Q5_0
// and Q5_1 matrix on one worker through the two-row × four-token kernels
// against the same product through the row kernels (the multi-token
// kernels off) and, for Q8_0, through the two-row × four-token kernel
// that reads no token pack (mulQ8_0x2x4AVX2). The three run interleaved,
// nine repetitions, so that a loaded machine slows each alike; the
// metrics are the medians of the per-repetition ratios to the row
// kernels (<type>/pk4-per-rows, q8_0/old-per-rows) and of ns per token.
func BenchmarkMatMulPk4(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no AVX2")
	}
	wide, rows512 := hasAVX512, hasAVX512Rows
	defer func() { hasAVX512, hasAVX512Rows, matMulKernels = wide, rows512, true }()
	hasAVX512, hasAVX512Rows = false, false
	r := rand.New(rand.NewPCG(57, 58))
	const T, rows, cols, reps = 128, 2048, 2048, 9
	x := randVec(r, T*cols, 1)
	p := NewPool(1)
	defer p.Close()
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1} {
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			b.Fatal(err)
		}
		qx := make([]*QVec, T)
		for t := range qx {
			qx[t] = m.NewActivation()
			qx[t].Quantize(x[t*cols : (t+1)*cols])
		}
		out := make([]float32, T*rows)
		b.Run(typ.String(), func(b *testing.B) {
			var pk4, old, plain []float64
			for b.Loop() {
				for range reps {
					matMulKernels = true
					pk4 = append(pk4, timeIt(func() { MatMul(p, m, out, x, T, qx) }))
					matMulKernels = false
					plain = append(plain, timeIt(func() { MatMul(p, m, out, x, T, qx) }))
					matMulKernels = true
					if typ == gguf.Q8_0 {
						old = append(old, timeIt(func() { m.mulQ8_0Old(out, T, qx) }))
					}
				}
			}
			ratio := func(a []float64) float64 {
				q := make([]float64, len(a))
				for i := range a {
					q[i] = a[i] / plain[i]
				}
				return median(q)
			}
			b.ReportMetric(ratio(pk4), "pk4-per-rows")
			b.ReportMetric(median(pk4)*1e9/T, "pk4-ns/token")
			b.ReportMetric(median(plain)*1e9/T, "rows-ns/token")
			line := fmt.Sprintf("%s avx2 one worker: pk4/rows %.3f", typ, ratio(pk4))
			if typ == gguf.Q8_0 {
				b.ReportMetric(ratio(old), "old-per-rows")
				line += fmt.Sprintf(", old/rows %.3f, pk4/old %.3f", ratio(old), ratio(pk4)/ratio(old))
			}
			b.Log(line)
		})
	}
}

// mulQ8_0Old is MatMul's loop over sixteen-row tiles on one goroutine
// with mulQ8_0x2x4AVX2, the tokens it leaves through the row kernels.
func (m *Matrix) mulQ8_0Old(out []float32, T int, qx []*QVec) {
	for r0 := 0; r0 < m.Rows; r0 += 16 {
		r1 := min(r0+16, m.Rows)
		for t := m.mulPairs(r0, r1, out, T, qx, mulQ8_0x2x4AVX2); t < T; t++ {
			m.dotRows(r0, r1, out[t*m.Rows+r0:t*m.Rows+r1], nil, qx[t])
		}
	}
}
