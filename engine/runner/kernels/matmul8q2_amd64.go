//go:build !purego

package kernels

// mmQ40Args is what mulQ4_0x2x4OffAVX2 reads for its four tokens:
// quants, the token pack's lane offsets, output positions (advanced as
// the kernel stores) and the group's dₐ, four a block. A group of fewer
// than four repeats its last token: the repeat writes the same values
// to the same place.
type mmQ40Args struct {
	q   [4]*int8
	o   [4]*int32
	out [4]*float32
	ds  *float32
}

// mulQ4_0x2x4OffAVX2 computes pairs·2 Q4_0 rows (rowBytes apart from w,
// nb blocks each) against the four tokens of a, with dotQ4_0RowsAVX2's
// arithmetic (matmul8q2_amd64.s).
//
//go:noescape
func mulQ4_0x2x4OffAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ40Args)

// packQ4_0Off computes mulQ4_0x2x4OffAVX2's token pack for T tokens of
// nb blocks: each token's lane offsets −8·Σa (q32OffsAVX2), and per
// group of four tokens the four dₐ of each block side by side.
func packQ4_0Off(nb, T int, qx []*QVec) *tokenPack {
	tp := packQ32(8, nb, T, qx)
	groups := (T + 3) / 4
	if cap(tp.ds) < groups*nb*4 {
		tp.ds = make([]float32, groups*nb*4)
	}
	tp.ds = tp.ds[:groups*nb*4]
	for g := range groups {
		for i := range 4 {
			d := qx[min(4*g+i, T-1)].D[:nb]
			for b, v := range d {
				tp.ds[(g*nb+b)*4+i] = v
			}
		}
	}
	return tp
}

// mulQ4_0Off runs mulQ4_0x2x4OffAVX2 over every token of tp (a
// packQ4_0Off pack) for the pairs of rows in [r0, r1), an odd last row
// through the row kernel, and returns T; 0 where tp is not such a pack.
func (m *Matrix) mulQ4_0Off(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	nb := m.Cols / 32
	pairs := (r1 - r0) / 2
	groups := (T + 3) / 4
	if hasAVX512 || tp == nil || pairs == 0 || tp.q32Words != 8*nb || len(tp.q32) != T*8*nb || len(tp.ds) != groups*nb*4 {
		return 0
	}
	rb := m.rowBytes
	_ = m.Data[(r0+2*pairs)*rb-1]
	var a mmQ40Args
	for g := range groups {
		for i := range 4 {
			tk := min(4*g+i, T-1)
			v := qx[tk]
			_ = v.Q[nb*32-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r0+2*pairs]
			a.q[i], a.o[i], a.out[i] = &v.Q[0], &tp.q32[tk*8*nb], &o[0]
		}
		a.ds = &tp.ds[g*nb*4]
		mulQ4_0x2x4OffAVX2(&m.Data[r0*rb], rb, nb, pairs, &a)
	}
	if r := r0 + 2*pairs; r < r1 {
		for t := range T {
			m.dotRows(r, r1, out[t*m.Rows+r:t*m.Rows+r1], nil, qx[t])
		}
	}
	return T
}
