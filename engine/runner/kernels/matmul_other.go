//go:build !amd64 || purego

package kernels

import "meshd/engine/runner/gguf"

// mulTokens: the multi-token kernels exist only for amd64; MatMul runs
// every token through the one-token row kernels.
func (m *Matrix) mulTokens(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	return 0
}

// hasAVX512: the AVX-512 kernels exist only for amd64.
var hasAVX512 = false

// hasAVX512Rows: nor do the AVX-512 row kernels.
var hasAVX512Rows = false

// tokenPack: no kernel here reads packed token data.
type tokenPack struct{}

// packTokens has nothing to pack.
func (m *Matrix) packTokens(T int, qx []*QVec) *tokenPack { return nil }

// release does nothing.
func (tp *tokenPack) release() {}

// k16MinTokens: nor does the sixteen-row Q4_K kernel.
const k16MinTokens = 0

// hasK8Kernel: nor do the eight-token Q5_K and Q6_K kernels.
func hasK8Kernel(typ gguf.TensorType) bool { return false }

// hasPk4Kernel: nor do the two-row × four-token kernels of the 32-value
// types.
func hasPk4Kernel(typ gguf.TensorType, T, cols int) bool { return false }
