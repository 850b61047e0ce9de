//go:build !purego

package kernels

import (
	"runtime"
	"unsafe"

	"meshd/engine/runner/gguf"
)

//go:noescape
func gemmx4x6AVX512(w *float32, ws int, x *float32, xs int, nb int, acc *float32, fl int, acc0 *float32, out *float32, src *byte, ss int, sst int)

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
// in halves once, then each worker's tiles of gemm46Tile rows, converted
// (or copied) to float32 halves, run six tokens × four rows at a time
// by gemmx4x6AVX512 over each half's blocks, a pair's sums resumed from
// memory between blocks. The sums are those of the four-row ×
// three-token kernel, so MatVec's (dotF16RowsAVX2, dotBF16RowsAVX2,
// dotF32MatRows) bit for bit: every lane adds the same products in the
// same order, whatever the blocks.
func (m *Matrix) mulFloat46(p *Pool, out, x []float32, T int) {
	cols, rows := m.Cols, m.Rows
	half := cols / 2
	steps := cols / 32
	nblk := (steps + gemm46KC - 1) / gemm46KC
	kc := (steps + nblk - 1) / nblk
	xs := cols + gemmPad
	tile := gemm46Tile
	// cvt is the kernel's flag that converts m's rows as it runs the
	// first token group (gemmx4x6AVX512), eb their bytes per value and
	// sst the bytes from a half's step of 16 values to its next. F32
	// rows are copied by a pass of their own (cvt 0): on one Xeon core
	// the kernel's F32 path ran a 128-token prompt 2-4 % slower, where
	// F16's ran it 1-3 % faster.
	cvt, eb := 4, 2
	switch m.Type {
	case gguf.BF16:
		cvt = 8
	case gguf.F32:
		cvt, eb = 0, 4
	}
	if !gemm46Cvt {
		cvt = 0
	}
	sst := 32 * eb
	ntg := (T + 5) / 6
	tb := gemmBufs.Get().(*gemmBuf)
	defer gemmBufs.Put(tb)
	if len(tb.tile) < 6*ntg*xs {
		tb.tile = make([]float32, 6*ntg*xs)
	}
	xp := tb.tile[:6*ntg*xs]
	for t := range T {
		splitF32AVX512(&xp[t*xs], &xp[t*xs+half], (*byte)(unsafe.Pointer(&x[t*cols])), cols)
	}
	// The repeats' sums are never stored; zeros keep them finite.
	clear(xp[T*xs:])
	p.For(rows, tile, func(lo, hi int) {
		buf := gemmBufs.Get().(*gemmBuf)
		defer gemmBufs.Put(buf)
		if len(buf.tile) < tile*xs {
			buf.tile = make([]float32, tile*xs)
		}
		ng := (tile + 3) / 4
		if need := 2*ng*gemmAccWords + 16; len(buf.acc) < need {
			buf.acc = make([]float32, need)
		}
		acc := buf.acc[int(-uintptr(unsafe.Pointer(&buf.acc[0]))&63)/4:]
		t := buf.tile
		var o [24]float32
		for r0 := lo; r0 < hi; r0 += tile {
			n := min(r0+tile, hi) - r0
			// The first token group converts the tile's whole row
			// groups as it runs them; a last group of fewer than four
			// rows, whose fourth would be read past the matrix, is
			// converted first.
			full := n &^ 3
			if cvt == 0 {
				full = 0
			}
			for i := full; i < n; i++ {
				split(m.Type, &t[i*xs], &t[i*xs+half], &m.Data[(r0+i)*m.rowBytes], cols)
			}
			// The next tile's rows asked for into L2 a few lines per
			// kernel call: a token group's share at once (gemmTile's
			// way) stalled the kernel behind a burst of misses, and
			// spread thin the GEMM ran 4-16 % faster on one Xeon core.
			var next uintptr
			nextLines, pfLines := 0, 0
			if r1 := r0 + n; r1 < rows {
				nb := (min(r1+tile, rows) - r1) * m.rowBytes
				next = uintptr(unsafe.Pointer(&m.Data[r1*m.rowBytes]))
				nextLines = (nb + 63) / 64
				calls := ntg * 2 * nblk * ng
				pfLines = (nextLines + calls - 1) / calls
			}
			for tg := range ntg {
				// Each block runs every row group of the tile, so the
				// tokens' block stays in L1 while their rows stream
				// past; a group's sums wait at an acc of their own per
				// half, the first half's until the second's last block
				// folds them into out.
				x := xp[tg*6*xs:]
				for h := range 2 {
					for c0 := 0; c0 < steps; c0 += kc {
						nb := min(kc, steps-c0)
						fl := 0
						if c0 > 0 {
							fl = 1
						}
						fold := h == 1 && c0+nb == steps
						if fold {
							fl |= 2
						}
						off := h*half + c0*16
						soff := eb * (h*16 + c0*32)
						for i := 0; i < n; i += 4 {
							g := i / 4
							cfl, src := fl, (*byte)(nil)
							if tg == 0 && i < full {
								cfl |= cvt
								src = &m.Data[(r0+i)*m.rowBytes+soff]
							}
							a := &acc[(h*ng+g)*gemmAccWords]
							if nextLines > 0 {
								k := min(pfLines, nextLines)
								prefetchL2(next, k)
								next += uintptr(64 * k)
								nextLines -= k
							}
							if !fold {
								gemmx4x6AVX512(&t[i*xs+off], 4*xs, &x[off], 4*xs, nb, a, cfl, nil, nil, src, m.rowBytes, sst)
								continue
							}
							gemmx4x6AVX512(&t[i*xs+off], 4*xs, &x[off], 4*xs, nb, a, cfl, &acc[g*gemmAccWords], &o[0], src, m.rowBytes, sst)
							for r := range min(4, n-i) {
								for j := range min(6, T-tg*6) {
									out[(tg*6+j)*rows+r0+i+r] = o[6*r+j]
								}
							}
						}
					}
				}
			}
		}
		runtime.KeepAlive(m)
	})
}
