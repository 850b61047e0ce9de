//go:build !amd64 || purego

package kernels

func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
}
