//go:build !purego

package kernels

import (
	"runtime"
	"sync"
)

//go:noescape
func bf16dp4x6AVX512(w *byte, ws int, x *uint16, xs int, nb int, out *float32)

//go:noescape
func bf16dp1x1AVX512(w *byte, rowBytes, n int, x *uint16, nb int, out *float32)

//go:noescape
func cvtF32BF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func cvtBF16F32AVX2(dst *float32, src *byte, n int)

// bf16Bufs holds the bfloat16 activations of a product between uses.
var bf16Bufs = sync.Pool{New: func() any { return new([]uint16) }}

func getBF16Buf(n int) *[]uint16 {
	bp := bf16Bufs.Get().(*[]uint16)
	if cap(*bp) < n {
		*bp = make([]uint16, n)
	}
	*bp = (*bp)[:n]
	return bp
}

// dotBF16DPRows is dotBF16Rows at gemmBF16: x rounded to bfloat16,
// then each row's VDPBF16PS sums. len(x) is a positive multiple of 32.
func dotBF16DPRows(w []byte, rowBytes int, x, out []float32) {
	cols, n := len(x), len(out)
	_ = w[(n-1)*rowBytes+2*cols-1]
	bp := getBF16Buf(cols)
	xb := *bp
	cvtF32BF16AVX512(&xb[0], &x[0], cols)
	bf16dp1x1AVX512(&w[0], rowBytes, n, &xb[0], cols/32, &out[0])
	bf16Bufs.Put(bp)
}

// bf16Pad is the bfloat16 words added to each token's length in the
// packed activations, so that tokens of a power-of-two length do not
// all fall in the same sets of L1.
const bf16Pad = 128

// mulBF16DP is MatMul of a BF16 matrix at gemmBF16 (columns a multiple
// of 32): the tokens rounded to bfloat16 once, then each worker's rows
// four at a time against six tokens at a time, the four rows staying in
// L1 while the tokens go by. Each (row, token) sum is formed as
// dotBF16DPRows forms it.
func (m *Matrix) mulBF16DP(p *Pool, out, x []float32, T int) {
	cols, rows, rb := m.Cols, m.Rows, m.rowBytes
	_ = x[T*cols-1]
	_ = out[T*rows-1]
	xs := cols + bf16Pad
	tp := (T + 5) / 6 * 6
	bp := getBF16Buf(tp * xs)
	xb := *bp
	for t := range T {
		cvtF32BF16AVX512(&xb[t*xs], &x[t*cols], cols)
	}
	// The repeats' sums are never stored; zeros keep them finite.
	clear(xb[T*xs:])
	nb := cols / 32
	p.For(rows, 16, func(lo, hi int) {
		var o [24]float32
		for i := lo; i < hi; i += 4 {
			// A last group of fewer than four rows: the four ending at
			// hi where the matrix has them (storing only the new ones),
			// else one row four times.
			r0, ws, skip := i, rb, 0
			if hi-i < 4 {
				if rows >= 4 {
					r0, skip = hi-4, i-(hi-4)
				} else {
					ws = 0
				}
			}
			nr := min(4, hi-i)
			if ws == 0 {
				nr = 1
			}
			for t := 0; t < T; t += 6 {
				bf16dp4x6AVX512(&m.Data[r0*rb], ws, &xb[t*xs], 2*xs, nb, &o[0])
				for r := range nr {
					for j := range min(6, T-t) {
						out[(t+j)*rows+i+r] = o[6*(skip+r)+j]
					}
				}
			}
			if ws == 0 {
				i -= 3 // one row done, not four
			}
		}
	})
	runtime.KeepAlive(xb)
	bf16Bufs.Put(bp)
}
