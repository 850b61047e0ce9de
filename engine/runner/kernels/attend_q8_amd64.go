//go:build !purego

package kernels

//go:noescape
func dotsQ8AVX2(q *float32, k *byte, n, stride, nb int, out *float32)

//go:noescape
func axpysQ8AVX2(out *float32, p *float32, v *byte, n, stride, nb int)

// dotsQ8 sets out[t] to the dot product of q with row t of k (Q8_0
// blocks, rows stride bytes apart, len(q)/32 blocks a row).
func dotsQ8(q []float32, k []byte, stride int, out []float32) {
	nb, n := len(q)/32, len(out)
	if !hasAVX2 || nb == 0 || n == 0 {
		dotsQ8Generic(q, k, stride, out)
		return
	}
	// The assembly reads without bounds checks.
	_ = k[(n-1)*stride+nb*34-1]
	dotsQ8AVX2(&q[0], &k[0], n, stride, nb, &out[0])
}

// axpysQ8 adds p[t] times row t of v (Q8_0 blocks, rows stride bytes
// apart; len(out)/32 blocks a row) to out for t < len(p).
func axpysQ8(out, p []float32, v []byte, stride int) {
	nb, n := len(out)/32, len(p)
	if !hasAVX2 || nb == 0 || n == 0 {
		axpysQ8Generic(out, p, v, stride)
		return
	}
	_ = v[(n-1)*stride+nb*34-1]
	axpysQ8AVX2(&out[0], &p[0], &v[0], n, stride, nb)
}
