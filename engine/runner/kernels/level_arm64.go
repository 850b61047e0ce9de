//go:build !purego

package kernels

// DispatchLevel names the kernels this process runs, for benchmark
// output: arm64's NEON ones.
func DispatchLevel() string { return "arm64" }
