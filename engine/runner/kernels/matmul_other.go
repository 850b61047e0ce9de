//go:build !amd64 || purego

package kernels

// mulTokens: the multi-token kernels exist only for amd64; MatMul runs
// every token through the one-token row kernels.
func (m *Matrix) mulTokens(r0, r1 int, out []float32, T int, qx []*QVec) int { return 0 }
