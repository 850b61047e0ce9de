//go:build !purego

package kernels

import "meshd/engine/runner/gguf"

// mmQ32x4Args is what the two-row × four-token kernels of
// matmul8q3_amd64.s read for their four tokens: quants, the token pack's
// lane offsets (Q5_0), output positions (advanced as the kernel stores)
// and the group's packed block data (pk4Words floats a block: the four
// dₐ, then the four float(S)). A group of fewer than four repeats its
// last token: the repeat writes the same values to the same place.
type mmQ32x4Args struct {
	q   [4]*int8
	o   [4]*int32
	out [4]*float32
	pk  *float32
}

// pk4Words is the packed data of a group of four tokens per block, in
// float32 words: their dₐ, then their float(S).
const pk4Words = 8

// mulQ8_0x2x4PkAVX2 computes pairs·2 Q8_0 rows (rowBytes apart from w,
// nb blocks each) against the four tokens of a, with dotQ8_0RowsAVX2's
// arithmetic.
//
//go:noescape
func mulQ8_0x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)

// mulQ4_1x2x4PkAVX2 is mulQ8_0x2x4PkAVX2 for Q4_1 rows, with
// dotQ4_1RowsAVX2's arithmetic.
//
//go:noescape
func mulQ4_1x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)

// mulQ5_0x2x4PkAVX2 is mulQ8_0x2x4PkAVX2 for Q5_0 rows, with
// dotQ5_0RowsAVX2's arithmetic; it reads the tokens' lane offsets.
//
//go:noescape
func mulQ5_0x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)

// mulQ5_1x2x4PkAVX2 is mulQ8_0x2x4PkAVX2 for Q5_1 rows, with
// dotQ5_1RowsAVX2's arithmetic.
//
//go:noescape
func mulQ5_1x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)

// pk4Kernel returns the two-row × four-token kernel of typ and its block
// size, or nil.
func pk4Kernel(typ gguf.TensorType) (func(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args), int) {
	switch typ {
	case gguf.Q8_0:
		return mulQ8_0x2x4PkAVX2, 34
	case gguf.Q4_1:
		return mulQ4_1x2x4PkAVX2, 20
	case gguf.Q5_0:
		return mulQ5_0x2x4PkAVX2, 22
	case gguf.Q5_1:
		return mulQ5_1x2x4PkAVX2, 24
	}
	return nil, 0
}

// hasPk4Kernel reports whether a product of typ with T tokens of cols
// values runs the two-row × four-token kernels: AVX2 without the
// sixteen-row AVX-512 ones.
func hasPk4Kernel(typ gguf.TensorType, T, cols int) bool {
	k, _ := pk4Kernel(typ)
	return k != nil && hasAVX2 && !hasAVX512 && T >= 2 && cols >= 32
}

// packQ32x4 computes the token pack of the two-row × four-token kernels
// for T tokens of nb blocks: per group of four tokens (the last
// repeating its last token) and block, the four dₐ and the four
// float(S) (the conversion VCVTSI2SSL makes in the row kernels); for
// Q5_0 also each token's lane offsets −16·Σa (q32OffsAVX2).
func packQ32x4(typ gguf.TensorType, nb, T int, qx []*QVec) *tokenPack {
	tp := getTokenPack()
	groups := (T + 3) / 4
	n := groups * nb * pk4Words
	if cap(tp.ds) < n {
		tp.ds = make([]float32, n)
	}
	tp.ds = tp.ds[:n]
	for g := range groups {
		for i := range 4 {
			v := qx[min(4*g+i, T-1)]
			d, s := v.D[:nb], v.S[:nb]
			for b := range nb {
				o := tp.ds[(g*nb+b)*pk4Words:][:pk4Words]
				o[i], o[4+i] = d[b], float32(s[b])
			}
		}
	}
	tp.q32, tp.q32Words = tp.q32[:0], 0
	if typ == gguf.Q5_0 {
		if cap(tp.q32) < T*8*nb {
			tp.q32 = make([]int32, T*8*nb)
		}
		tp.q32, tp.q32Words = tp.q32[:T*8*nb], 8*nb
		for t, v := range qx[:T] {
			_ = v.Q[nb*32-1]
			q32OffsAVX2(&v.Q[0], nb, &tp.q32[t*8*nb], 16)
		}
	}
	return tp
}

// mulQ32x4 runs the two-row × four-token kernel of m's type over every
// token of tp (a packQ32x4 pack) for the pairs of rows in [r0, r1), an
// odd last row through the row kernel, and returns T; 0 where the kernel
// does not apply or tp is not such a pack.
func (m *Matrix) mulQ32x4(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	kernel, bsize := pk4Kernel(m.Type)
	nb := m.Cols / 32
	pairs := (r1 - r0) / 2
	groups := (T + 3) / 4
	if !hasPk4Kernel(m.Type, T, m.Cols) || tp == nil || pairs == 0 || len(tp.ds) != groups*nb*pk4Words {
		return 0
	}
	offs := m.Type == gguf.Q5_0
	if offs && (tp.q32Words != 8*nb || len(tp.q32) != T*8*nb) {
		return 0
	}
	rb := m.rowBytes
	_ = m.Data[(r0+2*pairs-1)*rb+nb*bsize-1]
	var a mmQ32x4Args
	for g := range groups {
		for i := range 4 {
			tk := min(4*g+i, T-1)
			v := qx[tk]
			_ = v.Q[nb*32-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r0+2*pairs]
			a.q[i], a.out[i] = &v.Q[0], &o[0]
			if offs {
				a.o[i] = &tp.q32[tk*8*nb]
			}
		}
		a.pk = &tp.ds[g*nb*pk4Words]
		kernel(&m.Data[r0*rb], rb, nb, pairs, &a)
	}
	if r := r0 + 2*pairs; r < r1 {
		for t := range T {
			m.dotRows(r, r1, out[t*m.Rows+r:t*m.Rows+r1], nil, qx[t])
		}
	}
	return T
}
