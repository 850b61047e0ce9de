//go:build !purego

package kernels

// expF32AVX2 sets dst[i] = exp32(src[i]) for i < n, n a multiple of 8
// (exp_amd64.s).
//
//go:noescape
func expF32AVX2(dst, src *float32, n int)

// expF32 sets dst[i] = exp32(src[i]); dst may be src.
func expF32(dst, src []float32) {
	dst = dst[:len(src)]
	n := len(src) &^ 7
	if hasAVX2 && n > 0 {
		expF32AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	expGeneric(dst, src, n)
}
