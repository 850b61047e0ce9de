//go:build !purego

package kernels

import (
	"runtime"
	"unsafe"

	"meshd/engine/runner/gguf"
)

//go:noescape
func gemmx4x6AVX512(w *float32, ws int, x *float32, xs int, nb int, acc *float32, fl int, out *float32)

//go:noescape
func splitF16F32AVX512(d0, d1 *float32, src *byte, n int)

//go:noescape
func splitBF16F32AVX512(d0, d1 *float32, src *byte, n int)

//go:noescape
func splitF32AVX512(d0, d1 *float32, src *byte, n int)

// split lays n values of src out as float32 halves (gemmx4x6AVX512).
func split(typ gguf.TensorType, d0, d1 *float32, src *byte, n int) {
	switch typ {
	case gguf.F16:
		splitF16F32AVX512(d0, d1, src, n)
	case gguf.BF16:
		splitBF16F32AVX512(d0, d1, src, n)
	default:
		splitF32AVX512(d0, d1, src, n)
	}
}

// mulFloat46 is mulFloat at gemmAVX512 and above: the tokens laid out
// in halves once, then each worker's tiles of gemmTile rows, converted
// (or copied) to float32 halves, run six tokens × four rows at a time
// by gemmx4x6AVX512's two passes. The sums are those of the four-row ×
// three-token kernel, so MatVec's (dotF16RowsAVX2, dotBF16RowsAVX2,
// dotF32MatRows) bit for bit.
func (m *Matrix) mulFloat46(p *Pool, out, x []float32, T int) {
	cols, rows := m.Cols, m.Rows
	half := cols / 2
	xs := cols + gemmPad
	tp := (T + 5) / 6 * 6
	tb := gemmBufs.Get().(*gemmBuf)
	if len(tb.tile) < tp*xs {
		tb.tile = make([]float32, tp*xs)
	}
	xp := tb.tile[:tp*xs]
	for t := range T {
		splitF32AVX512(&xp[t*xs], &xp[t*xs+half], (*byte)(unsafe.Pointer(&x[t*cols])), cols)
	}
	// The repeats' sums are never stored; zeros keep them finite.
	clear(xp[T*xs:])
	p.For(rows, gemmTile, func(lo, hi int) {
		buf := gemmBufs.Get().(*gemmBuf)
		defer gemmBufs.Put(buf)
		if len(buf.tile) < gemmTile*xs {
			buf.tile = make([]float32, gemmTile*xs)
		}
		if need := (gemmTile+3)/4*gemmAccWords + 16; len(buf.acc) < need {
			buf.acc = make([]float32, need)
		}
		acc := buf.acc[int(-uintptr(unsafe.Pointer(&buf.acc[0]))&63)/4:]
		t := buf.tile
		var o [24]float32
		for r0 := lo; r0 < hi; r0 += gemmTile {
			n := min(r0+gemmTile, hi) - r0
			for i := range n {
				split(m.Type, &t[i*xs], &t[i*xs+half], &m.Data[(r0+i)*m.rowBytes], cols)
			}
			// The next tile's rows asked for into L2 a slice per
			// token group, as gemmTile does.
			var next uintptr
			nextLines, pfLines := 0, 0
			if r1 := r0 + n; r1 < rows {
				nb := (min(r1+gemmTile, rows) - r1) * m.rowBytes
				next = uintptr(unsafe.Pointer(&m.Data[r1*m.rowBytes]))
				nextLines = (nb + 63) / 64
				pfLines = (nextLines + tp/6 - 1) / (tp / 6)
			}
			for tg := 0; tg < T; tg += 6 {
				if nextLines > 0 {
					k := min(pfLines, nextLines)
					prefetchL2(next, k)
					next += uintptr(64 * k)
					nextLines -= k
				}
				// Every row group's first pass, then every one's second,
				// each group's sums waiting at acc of its own: the six
				// tokens' half (24 KiB at 2048 columns) then stays in L1
				// for the tile's four groups while their rows stream past,
				// where a group's two passes back to back left each half
				// to evict the other. On one Xeon core (128 tokens, wall
				// clock, best of 5) F16 and F32 2048×2048 ran 140-142 →
				// 155-157 and 131 → 142-145 GFLOP/s, 5632×2048 137-143 →
				// 155-157 and 133 → 146, 2048×5632 (whose halves no
				// longer fit) 105-106 → 108 and 99-100 → 102.
				for i := 0; i < n; i += 4 {
					gemmx4x6AVX512(&t[i*xs], 4*xs, &xp[tg*xs], 4*xs, cols/32, &acc[i/4*gemmAccWords], 0, nil)
				}
				for i := 0; i < n; i += 4 {
					gemmx4x6AVX512(&t[i*xs+half], 4*xs, &xp[tg*xs+half], 4*xs, cols/32, &acc[i/4*gemmAccWords], 1, &o[0])
					for r := range min(4, n-i) {
						for j := range min(6, T-tg) {
							out[(tg+j)*rows+r0+i+r] = o[6*r+j]
						}
					}
				}
			}
		}
		runtime.KeepAlive(m)
	})
	gemmBufs.Put(tb)
}
