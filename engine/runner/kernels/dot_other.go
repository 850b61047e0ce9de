//go:build (!amd64 && !arm64) || purego

// The portable dispatch: every CPU without assembly kernels (amd64 and
// arm64 have their own dispatch files) and the purego build.

package kernels

// hasAVX2: the AVX2 kernels exist only for amd64.
const hasAVX2 = false

func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
}

func dotQ4_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ4_0Generic, 18)(w, rowBytes, nb, v, out)
}

func dotQ4KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ4KGeneric, 144)(w, rowBytes, nb, v, out)
}

func dotQ5KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ5KGeneric, 176)(w, rowBytes, nb, v, out)
}

func dotQ6KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ6KGeneric, 210)(w, rowBytes, nb, v, out)
}

func dotF16Rows(w []byte, rowBytes int, x, out []float32) { dotF16RowsGeneric(w, rowBytes, x, out) }

func dotBF16Rows(w []byte, rowBytes int, x, out []float32) { dotBF16RowsGeneric(w, rowBytes, x, out) }

func dots(q, k []float32, stride int, out []float32) { dotsGeneric(q, k, stride, out) }

func axpys(out, p, v []float32, stride int) { axpysGeneric(out, p, v, stride) }
