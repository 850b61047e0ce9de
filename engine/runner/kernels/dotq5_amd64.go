//go:build !purego

package kernels

// Assembly row kernels for Q4_1, Q5_0 and Q5_1 (dotq5_amd64.s), against
// the 32-value activation form. Each writes to out[0:n] the dot products
// of n rows starting at w, rowBytes apart, with the activation quants q,
// scales d and block sums s, over nb blocks. The caller guarantees every
// pointer covers what is read (nb ≥ 1, n ≥ 1).

//go:noescape
func dotQ4_1RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

//go:noescape
func dotQ5_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

//go:noescape
func dotQ5_1RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

// The AVX-512 forms (dotq5_512_amd64.s): four rows per pass, the same
// lanes and roundings as the AVX2 ones, so the same bits.

//go:noescape
func dotQ4_1RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

//go:noescape
func dotQ5_0RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

//go:noescape
func dotQ5_1RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)

// dotQ4_1Rows sets out[i] to the dot product of v with the first nb
// blocks of Q4_1 row i of w, rows rowBytes apart.
func dotQ4_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4_1Generic, 20)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		q32RowsAVX2(dotQ4_1RowsAVX512, 20, w, rowBytes, nb, v, out)
		return
	}
	q32RowsAVX2(dotQ4_1RowsAVX2, 20, w, rowBytes, nb, v, out)
}

// dotQ5_0Rows is dotQ4_1Rows for Q5_0 rows.
func dotQ5_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5_0Generic, 22)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		q32RowsAVX2(dotQ5_0RowsAVX512, 22, w, rowBytes, nb, v, out)
		return
	}
	q32RowsAVX2(dotQ5_0RowsAVX2, 22, w, rowBytes, nb, v, out)
}

// dotQ5_1Rows is dotQ4_1Rows for Q5_1 rows.
func dotQ5_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5_1Generic, 24)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		q32RowsAVX2(dotQ5_1RowsAVX512, 24, w, rowBytes, nb, v, out)
		return
	}
	q32RowsAVX2(dotQ5_1RowsAVX2, 24, w, rowBytes, nb, v, out)
}

// q32RowsAVX2 checks what the assembly will read, then runs it: these
// panic, as the generic kernel's indexing would, on a length the caller
// got wrong.
func q32RowsAVX2(asm func(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32), bb int, w []byte, rowBytes, nb int, v *QVec, out []float32) {
	_ = w[(len(out)-1)*rowBytes+nb*bb-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	_ = v.S[nb-1]
	asm(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], &v.S[0], nb, &out[0])
}
