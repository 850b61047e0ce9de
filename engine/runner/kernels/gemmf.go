package kernels

// The float GEMM's dispatch levels (gemmLevel): MatMul of an F16 or F32
// matrix runs the zmm kernels, the ymm kernels, or the row kernels per
// token.
const (
	gemmOff = iota
	gemmAVX2
	gemmAVX512
)
