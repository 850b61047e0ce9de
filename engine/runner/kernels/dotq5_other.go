//go:build (!amd64 && !arm64) || purego

package kernels

// The Q4_1, Q5_0 and Q5_1 rows run the portable kernels wherever neither
// the AVX2 assembly (dotq5_amd64.s) nor the NEON one (dotq5_arm64.s) is
// built.

func dotQ4_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ4_1Generic, 20)(w, rowBytes, nb, v, out)
}

func dotQ5_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ5_0Generic, 22)(w, rowBytes, nb, v, out)
}

func dotQ5_1Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ5_1Generic, 24)(w, rowBytes, nb, v, out)
}
