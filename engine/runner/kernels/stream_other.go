//go:build !amd64 || purego

package kernels

func streamSum(b []byte) uint64 { return streamSumGeneric(b) }
