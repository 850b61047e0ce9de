//go:build !amd64 || purego

package kernels

// expF32 sets dst[i] = exp32(src[i]); dst may be src.
func expF32(dst, src []float32) { expGeneric(dst[:len(src)], src, 0) }
