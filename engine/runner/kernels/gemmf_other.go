//go:build !amd64 || purego

package kernels

// gemmLevel: the float GEMM kernels exist only for amd64.
var gemmLevel = gemmOff

func detectGemmLevel() int { return gemmOff }

// mulFloat: MatMul runs F16, BF16 and F32 matrices through the row kernels
// per token.
func (m *Matrix) mulFloat(p *Pool, out, x []float32, T int) bool { return false }

// fmaPeakRound: no kernel, no peak.
func fmaPeakRound(level int) (int, string) { return 0, "none" }

func fmaPeakRun(level, rounds int) {}

// dotF32MatRows: the F32 rows go to DotF32.
func dotF32MatRows(w []byte, rowBytes int, x, out []float32) bool { return false }
