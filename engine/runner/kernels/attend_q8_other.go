//go:build !amd64 || purego

package kernels

func dotsQ8(q []float32, k []byte, stride int, out []float32) { dotsQ8Generic(q, k, stride, out) }

func axpysQ8(out, p []float32, v []byte, stride int) { axpysQ8Generic(out, p, v, stride) }
