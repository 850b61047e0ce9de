package kernels

// MatMul computes out = X·Wᵀ for T tokens at once: out[t·Rows + r] is row
// r of m dotted with token t's activation x[t·Cols : (t+1)·Cols]. For
// quantised matrices qx[t] must hold token t's activation quantised. The
// pool splits the weight rows, and each worker walks its rows in tiles
// against every token, so a tile of weights is read from memory once per
// batch, not once per token: that is what makes a prompt faster per token
// than decode.
func MatMul(p *Pool, m *Matrix, out, x []float32, T int, qx []*QVec) {
	const tile = 16 // rows per tile: a few KiB of weights stay in L1/L2
	p.For(m.Rows, max(tile, (16<<10)/max(m.rowBytes, 1))&^(tile-1), func(lo, hi int) {
		for r0 := lo; r0 < hi; r0 += tile {
			r1 := min(r0+tile, hi)
			for t := 0; t < T; t++ {
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
