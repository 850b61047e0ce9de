//go:build (!amd64 && !arm64) || purego

package kernels

// dotF32Rows sets out[i] to DotF32 of the F32 row i of w with x, rows
// rowBytes apart.
func dotF32Rows(w []byte, rowBytes int, x, out []float32) {
	for i := range out {
		out[i] = DotF32(w[i*rowBytes:(i+1)*rowBytes], x)
	}
}
