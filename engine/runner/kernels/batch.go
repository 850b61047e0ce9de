package kernels

// matMulKernels lets the tests turn the multi-token kernels off, to
// compare MatMul with and without them.
var matMulKernels = true

// MatMul computes out = X·Wᵀ for T tokens at once: out[t·Rows + r] is row
// r of m dotted with token t's activation x[t·Cols : (t+1)·Cols]. For
// quantised matrices qx[t] must hold token t's activation quantised. The
// pool splits the weight rows, and each worker walks its rows in tiles
// against every token, so a tile of weights is read from memory once per
// batch, not once per token: that is what makes a prompt faster per token
// than decode.
//
// Where a multi-token kernel exists for m's type (amd64: Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1 as 16-row tiles against three tokens per pass with
// AVX-512 VNNI, Q4_K, Q5_K and Q6_K as 16-row tiles against four tokens
// with it (Q5_K packed into Q4_K's tile layout, its fifth bit merged into
// the lane bytes; Q6_K with two scales a sub-block and its −32 as the min
// term), and one row against eight tokens with AVX2 alone;
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and Q4_K two rows × four tokens with
// AVX2 alone), it takes
// the tokens of each tile in groups, unpacking each weight block once per
// group rather than once per token; it forms each row's integer sums and
// adds its blocks in the same order as the one-token kernels, so the
// results equal MatVec's bit for bit. Tokens it leaves (a last single
// one, or all of them elsewhere) go through the one-token row kernels.
// F16, BF16 and F32 matrices (amd64 with AVX2 or AVX-512F, columns a
// multiple of 32) go to the float GEMM (gemmf_amd64.go; BF16 with
// AVX512_BF16 to gemmbf16_amd64.go), equally MatVec's bits.
func MatMul(p *Pool, m *Matrix, out, x []float32, T int, qx []*QVec) {
	const tile = 16 // rows per tile: a few KiB of weights stay in L1/L2
	if matMulKernels && qx == nil && m.mulFloat(p, out, x, T) {
		return // F16, BF16 and F32: the float GEMM (gemmf_amd64.go)
	}
	var tp *tokenPack
	if T >= 2 && qx != nil && matMulKernels {
		tp = m.packTokens(T, qx)
		defer tp.release()
	}
	p.For(m.Rows, max(tile, (16<<10)/max(m.rowBytes, 1))&^(tile-1), func(lo, hi int) {
		for r0 := lo; r0 < hi; r0 += tile {
			r1 := min(r0+tile, hi)
			t0 := 0
			if T >= 2 && qx != nil && matMulKernels {
				t0 = m.mulTokens(r0, r1, out, T, qx, tp)
			}
			for t := t0; t < T; t++ {
				xt := x[t*m.Cols : (t+1)*m.Cols]
				var q *QVec
				if qx != nil {
					q = qx[t]
				}
				o := out[t*m.Rows:]
				m.dotRows(r0, r1, o[r0:r1], xt, q)
			}
		}
	})
}
