//go:build (!amd64 && !arm64) || purego

package kernels

// DispatchLevel names the kernels this process runs, for benchmark
// output: here the portable ones.
func DispatchLevel() string { return "generic" }
