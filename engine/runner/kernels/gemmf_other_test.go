//go:build !amd64 || purego

package kernels

// fmaPeakGFLOPS: no float GEMM kernel here, so no peak to compare with.
func fmaPeakGFLOPS(p *Pool, level, rounds int) float64 { return 0 }
