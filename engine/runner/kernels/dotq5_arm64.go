//go:build !purego

package kernels

// NEON row kernels for Q4_1, Q5_0 and Q5_1 (dotq5_arm64.s), against the
// 32-value activation form. Each writes to out[0:n] the dot products of
// n rows starting at w, rowBytes apart, with the activation quants q,
// scales d and block sums s, over nb blocks. The caller guarantees every
// pointer covers what is read (nb ≥ 1, n ≥ 1).

//go:noescape
func dotQ4_1RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)

//go:noescape
func dotQ5_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)

//go:noescape
func dotQ5_1RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)

// dotQ4_1Rows sets out[i] to the dot product of v with the first nb
// blocks of Q4_1 row i of w, rows rowBytes apart.
func dotQ4_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4_1Generic, 20)(w, rowBytes, nb, v, out)
		return
	}
	q32RowsNEON(dotQ4_1RowsNEON, 20, w, rowBytes, nb, v, out)
}

// dotQ5_0Rows is dotQ4_1Rows for Q5_0 rows.
func dotQ5_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5_0Generic, 22)(w, rowBytes, nb, v, out)
		return
	}
	q32RowsNEON(dotQ5_0RowsNEON, 22, w, rowBytes, nb, v, out)
}

// dotQ5_1Rows is dotQ4_1Rows for Q5_1 rows.
func dotQ5_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5_1Generic, 24)(w, rowBytes, nb, v, out)
		return
	}
	q32RowsNEON(dotQ5_1RowsNEON, 24, w, rowBytes, nb, v, out)
}

// q32RowsNEON checks what the assembly will read, then runs it: these
// panic, as the generic kernel's indexing would, on a length the caller
// got wrong.
func q32RowsNEON(asm func(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool), bb int, w []byte, rowBytes, nb int, v *QVec, out []float32) {
	_ = w[(len(out)-1)*rowBytes+nb*bb-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	_ = v.S[nb-1]
	asm(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], &v.S[0], nb, &out[0], hasSDOT)
}
