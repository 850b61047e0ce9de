//go:build !purego

package kernels

import "meshd/engine/runner/gguf"

// mmQ8Args is what the Q8_0 multi-token kernel reads for its four
// tokens: quants, scales and the output position of the first row of
// the tile (the kernel advances out as it stores). A group of fewer than
// four tokens repeats its last token: the repeat writes the same values
// to the same place.
type mmQ8Args struct {
	q   [4]*int8
	d   [4]*float32
	out [4]*float32
}

// mmKArgs is what the K-quant multi-token kernels read for their four
// tokens: quants, output positions (advanced as the kernel stores),
// bsums and scales.
type mmKArgs struct {
	q   [4]*int8
	out [4]*float32
	bs  [4]*int16
	dk  [4]*float32
}

// mulQ8_0x2x4AVX2 computes pairs·2 rows (rowBytes apart from w, nb
// blocks each) against the four tokens of a, storing row r of token t
// at a.out[t][r].
//
//go:noescape
func mulQ8_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)

// mulQ4Kx4AVX2 computes n Q4_K rows against the four tokens of a.
//
//go:noescape
func mulQ4Kx4AVX2(w *byte, rowBytes, nb, n int, a *mmKArgs)

// mulQ4Kx2x4AVX2 computes pairs·2 Q4_K rows against the four tokens of
// a, each row as mulQ4Kx4AVX2 does.
//
//go:noescape
func mulQ4Kx2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmKArgs)

// mulQ4_0x2x4AVX2 computes pairs·2 Q4_0 rows against the four tokens of
// a (quants and scales in Q8_0 form), each row with the arithmetic of
// dotQ4_0RowsAVX2.
//
//go:noescape
func mulQ4_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)

// mulTokens computes rows [r0, r1) of out for tokens [0, k) with the
// multi-token kernel of m's type and returns k: 0 where there is none
// (then MatMul runs every token through the row kernels).
func (m *Matrix) mulTokens(r0, r1 int, out []float32, T int, qx []*QVec) int {
	if !hasAVX2 || T < 2 {
		return 0
	}
	switch m.Type {
	case gguf.Q8_0:
		return m.mulQ8_0(r0, r1, out, T, qx)
	case gguf.Q4_K:
		return m.mulQ4K(r0, r1, out, T, qx)
	case gguf.Q4_0:
		return m.mulQ4_0(r0, r1, out, T, qx)
	}
	return 0
}

func (m *Matrix) mulQ8_0(r0, r1 int, out []float32, T int, qx []*QVec) int {
	return m.mulPairs(r0, r1, out, T, qx, mulQ8_0x2x4AVX2)
}

func (m *Matrix) mulQ4_0(r0, r1 int, out []float32, T int, qx []*QVec) int {
	return m.mulPairs(r0, r1, out, T, qx, mulQ4_0x2x4AVX2)
}

// mulPairs runs a two-row × four-token kernel over Q8_0-form
// activations (Q8_0 and Q4_0 rows); an odd last row goes through the
// row kernel for the tokens the kernel took.
func (m *Matrix) mulPairs(r0, r1 int, out []float32, T int, qx []*QVec, kernel func(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)) int {
	nb := m.Cols / 32
	pairs := (r1 - r0) / 2
	if pairs == 0 {
		return 0
	}
	rb := m.rowBytes
	_ = m.Data[(r0+2*pairs)*rb-1]
	done := 0
	var a mmQ8Args
	for t := 0; t+2 <= T; t += 4 {
		k := min(4, T-t)
		for i := range 4 {
			tk := t + min(i, k-1)
			v := qx[tk]
			_ = v.Q[nb*32-1]
			_ = v.D[nb-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r0+2*pairs]
			a.q[i], a.d[i], a.out[i] = &v.Q[0], &v.D[0], &o[0]
		}
		kernel(&m.Data[r0*rb], rb, nb, pairs, &a)
		done = t + k
	}
	if r := r0 + 2*pairs; r < r1 {
		for t := 0; t < done; t++ {
			m.dotRows(r, r1, out[t*m.Rows+r:t*m.Rows+r1], nil, qx[t])
		}
	}
	return done
}

func (m *Matrix) mulQ4K(r0, r1 int, out []float32, T int, qx []*QVec) int {
	nb := m.Cols / qkK
	n := r1 - r0
	if n == 0 || nb == 0 {
		return 0
	}
	pairs := n / 2
	rb := m.rowBytes
	_ = m.Data[r1*rb-1]
	done := 0
	var a mmKArgs
	for t := 0; t+2 <= T; t += 4 {
		k := min(4, T-t)
		for i := range 4 {
			tk := t + min(i, k-1)
			v := qx[tk]
			m.needK(v)
			_ = v.QK[nb*qkK-1]
			_ = v.BS[nb*16-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r1]
			a.q[i], a.out[i], a.bs[i], a.dk[i] = &v.QK[0], &o[0], &v.BS[0], &v.DK[0]
		}
		if pairs > 0 {
			mulQ4Kx2x4AVX2(&m.Data[r0*rb], rb, nb, pairs, &a)
		}
		if n&1 != 0 {
			// a.out now points at the last row.
			mulQ4Kx4AVX2(&m.Data[(r1-1)*rb], rb, nb, 1, &a)
		}
		done = t + k
	}
	return done
}
