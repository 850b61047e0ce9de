//go:build !purego

package kernels

// dotF32RowsNEON writes to out[0:n] the dot products of n F32 rows
// starting at w, rowBytes apart, with x[0:nx], in DotF32's lanes and
// order (dotf32_arm64.s). The caller guarantees every pointer covers
// what is read (nx ≥ 1, n ≥ 1).
//
//go:noescape
func dotF32RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)

// dotF32Rows sets out[i] to DotF32 of the F32 row i of w with x, rows
// rowBytes apart.
func dotF32Rows(w []byte, rowBytes int, x, out []float32) {
	if len(x) == 0 || len(out) == 0 {
		for i := range out {
			out[i] = DotF32(w[i*rowBytes:(i+1)*rowBytes], x)
		}
		return
	}
	// What DotF32 slices for the last row, which the assembly reads
	// furthest into w.
	_ = w[(len(out)-1)*rowBytes : len(out)*rowBytes][:4*len(x)]
	dotF32RowsNEON(&w[0], rowBytes, len(out), &x[0], len(x), &out[0])
}
