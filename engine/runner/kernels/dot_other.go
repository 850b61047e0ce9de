//go:build !amd64 || purego

package kernels

// hasAVX2: the assembly kernels exist only for amd64.
const hasAVX2 = false

func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
}

func dots(q, k []float32, stride int, out []float32) { dotsGeneric(q, k, stride, out) }

func axpys(out, p, v []float32, stride int) { axpysGeneric(out, p, v, stride) }
