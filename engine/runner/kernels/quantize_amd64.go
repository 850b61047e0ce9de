//go:build !purego

package kernels

// quantize32AVX2 and quantizeKAVX2 (quantize_amd64.s) quantise nb blocks
// of x into the 32-value (q, d, s) or 256-value (q, d, bs) form, as
// quantize32Generic and quantizeKGeneric do, and return the number of
// blocks done: fewer than nb when a block holds an infinity or NaN,
// which the portable code then takes from that block on.

//go:noescape
func quantize32AVX2(x *float32, q *int8, d *float32, s *int32, nb int) int

//go:noescape
func quantizeKAVX2(x *float32, q *int8, d *float32, bs *int16, nb int) int

func (v *QVec) quantize32(x []float32) {
	done := 0
	if hasAVX2 && len(v.D) > 0 {
		_ = x[len(v.D)*32-1]
		_ = v.Q[len(v.D)*32-1]
		_ = v.S[len(v.D)-1]
		done = quantize32AVX2(&x[0], &v.Q[0], &v.D[0], &v.S[0], len(v.D))
	}
	v.quantize32Generic(x, done)
}

func (v *QVec) quantizeK(x []float32) {
	done := 0
	if hasAVX2 && len(v.DK) > 0 {
		_ = x[len(v.DK)*qkK-1]
		_ = v.QK[len(v.DK)*qkK-1]
		_ = v.BS[len(v.DK)*(qkK/16)-1]
		done = quantizeKAVX2(&x[0], &v.QK[0], &v.DK[0], &v.BS[0], len(v.DK))
	}
	v.quantizeKGeneric(x, done)
}
