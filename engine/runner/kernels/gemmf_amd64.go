//go:build !purego

package kernels

import (
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"meshd/engine/runner/gguf"
)

// gemmArgs is what the float GEMM kernels read (gemmf_amd64.s): four row
// pointers (float32 values), three token pointers, the output position
// of row w[0] for each token, the number of 32-column blocks and the
// number of rows to store, where the sums wait between column blocks,
// the flags (1: resume from acc, 2: fold and store), and the groups of
// rows to run (ng, each ws bytes of rows past the last, its sums the
// next acc along), so that a call covers a whole tile.
//
// The addresses are uintptr, not pointers: the kernels move them past
// the ends of their objects, which the collector must not see as
// pointers; gemmTile keeps the objects alive.
type gemmArgs struct {
	w   [4]uintptr
	x   [3]uintptr
	out [3]uintptr
	nb  int
	nr  int
	acc uintptr
	fl  int
	ng  int
	ws  int
}

//go:noescape
func cvtF16F32AVX2(dst *float32, src *byte, n int)

// prefetchL2 asks for lines 64-byte lines from p into L2; a prefetch
// faults on nothing, so p may be any address.
func prefetchL2(p uintptr, lines int)

//go:noescape
func gemmx4x3AVX512(a *gemmArgs)

//go:noescape
func gemmx1x3AVX2(a *gemmArgs)

// gemmLevel is the float GEMM's dispatch (gemmf.go's levels): four rows
// × three tokens in zmm registers where the CPU has AVX-512F (all the
// kernels need), one row × three tokens in ymm with AVX2 and FMA.
// GODEBUG=cpu.avx512f=off (or cpu.avx2=off) lowers it as it lowers the
// other kernels; the tests and benchmarks set it to run each level on a
// CPU that has more.
var gemmLevel = detectGemmLevel()

func detectGemmLevel() int {
	switch {
	case hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BF16:
		return gemmBF16
	case hasAVX2 && cpu.X86.HasAVX512F:
		return gemmAVX512
	case hasAVX2:
		return gemmAVX2
	}
	return gemmOff
}

// gemmAccWords is the float32 words a kernel call's sums take: 24 zmm
// registers (AVX-512) or 12 ymm (AVX2).
const gemmAccWords = 24 * 16

// gemmBuf is a worker's tile and sums, kept between uses.
type gemmBuf struct{ tile, acc []float32 }

var gemmBufs = sync.Pool{New: func() any { return new(gemmBuf) }}

// mulFloat computes MatMul for an F16, BF16 or F32 matrix with the float GEMM
// kernels and reports whether it did: not for other types, one token,
// columns not a multiple of 32 (the row kernels' tails) or no kernel for
// this CPU.
func (m *Matrix) mulFloat(p *Pool, out, x []float32, T int) bool {
	level := gemmLevel
	if level == gemmOff || T < 2 || m.Cols%32 != 0 || (m.Type != gguf.F16 && m.Type != gguf.F32 && m.Type != gguf.BF16) {
		return false
	}
	if level == gemmBF16 && m.Type == gguf.BF16 {
		m.mulBF16DP(p, out, x, T)
		return true
	}
	if level >= gemmAVX512 && gemm46 {
		m.mulFloat46(p, out, x, T)
		return true
	}
	cols, rows := m.Cols, m.Rows
	_ = x[T*cols-1]
	_ = out[T*rows-1]
	tileRows := gemmTile
	xs := cols + gemmPad
	p.For(rows, tileRows, func(lo, hi int) {
		buf := gemmBufs.Get().(*gemmBuf)
		defer gemmBufs.Put(buf)
		if len(buf.tile) < tileRows*xs {
			buf.tile = make([]float32, tileRows*xs)
		}
		if need := (gemmTB/3)*tileRows*gemmAccWords + 16; len(buf.acc) < need {
			buf.acc = make([]float32, need)
		}
		for r0 := lo; r0 < hi; r0 += tileRows {
			r1 := min(r0+tileRows, hi)
			m.gemmTile(level, r0, r1, out, x, xs, T, buf)
		}
	})
	return true
}

// gemmTile runs rows [r0, r1) (at most gemmTile) against every token
// (token t's activation at x[t·Cols:]), converting or copying the rows
// into buf's tile, xs = Cols + gemmPad words apart.
func (m *Matrix) gemmTile(level, r0, r1 int, out, x []float32, xs, T int, buf *gemmBuf) {
	cols, rows := m.Cols, m.Rows
	n := r1 - r0
	f16 := m.Type == gguf.F16
	t := buf.tile[:n*xs]
	for i := range n {
		src := m.Data[(r0+i)*m.rowBytes : (r0+i+1)*m.rowBytes]
		if f16 {
			cvtF16F32AVX2(&t[i*xs], &src[0], cols)
		} else if m.Type == gguf.BF16 {
			cvtBF16F32AVX2(&t[i*xs], &src[0], cols)
		} else {
			copy(t[i*xs:i*xs+cols], unsafe.Slice((*float32)(unsafe.Pointer(&src[0])), cols))
		}
	}
	// base is row r0's float32 values, stride bytes apart.
	base, stride := unsafe.Pointer(&t[0]), uintptr(4*xs)
	// The weights are read from memory once per product, here: the
	// next tile's rows are asked for a slice per token group, so that
	// they are in L2 when its conversion starts instead of stalling it
	// (F16 2048×2048 on one thread: the conversion, which read them,
	// took a sixth of the kernels' time).
	var next uintptr
	nextLines, pfLines := 0, 0
	if r1 < rows {
		nb := (min(r1+gemmTile, rows) - r1) * m.rowBytes
		next = uintptr(unsafe.Pointer(&m.Data[r1*m.rowBytes]))
		nextLines = (nb + 63) / 64
		pfLines = (nextLines + (T+2)/3 - 1) / ((T + 2) / 3)
	}
	var a gemmArgs
	// F16 and F32 rows are float32 here alike, and both run the fused
	// multiply-add kernels (dotF32MatRows).
	kernel, step := gemmx1x3AVX2, 1
	if level >= gemmAVX512 {
		kernel, step = gemmx4x3AVX512, 4
	}
	// A call's sums (24 zmm or 12 ymm registers), a token group's.
	accCall := gemmAccWords * step / 4
	accGroup := (n + step - 1) / step * accCall
	// Sums 64-byte aligned: a zmm store then never splits a line.
	acc := buf.acc[int(-uintptr(unsafe.Pointer(&buf.acc[0]))&63)/4:]
	for tb0 := 0; tb0 < T; tb0 += gemmTB {
		tb1 := min(tb0+gemmTB, T)
		for k0 := 0; k0 < cols; k0 += gemmKC {
			k1 := min(k0+gemmKC, cols)
			a.nb = (k1 - k0) / 32
			a.fl = 0
			if k0 > 0 {
				a.fl |= 1
			}
			if k1 == cols {
				a.fl |= 2
			}
			for t := tb0; t < tb1; t += 3 {
				if k0 == 0 && nextLines > 0 {
					n := min(pfLines, nextLines)
					prefetchL2(next, n)
					next += uintptr(64 * n)
					nextLines -= n
				}
				acc := acc[(t-tb0)/3*accGroup:]
				for j := range 3 {
					tk := min(t+j, tb1-1)
					a.x[j] = uintptr(unsafe.Pointer(&x[tk*cols+k0]))
				}
				// The full groups of step rows in one call, then the
				// last rows, their last repeated.
				for i := 0; i < n; {
					g := (n - i) / step
					a.nr = step
					if g == 0 {
						g, a.nr = 1, n-i
					}
					for j := range 4 {
						a.w[j] = uintptr(base) + uintptr(min(i+j, n-1))*stride + uintptr(4*k0)
					}
					for j := range 3 {
						tk := min(t+j, tb1-1)
						a.out[j] = uintptr(unsafe.Pointer(&out[tk*rows+r0+i]))
					}
					a.acc = uintptr(unsafe.Pointer(&acc[i/step*accCall]))
					a.ng, a.ws = g, step*int(stride)
					kernel(&a)
					i += g * a.nr
				}
			}
		}
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(buf)
	runtime.KeepAlive(x)
	runtime.KeepAlive(out)
}

// fmaPeakAVX512 runs n rounds of 24 independent zmm multiply-adds and
// fmaPeakAVX2 n rounds of 12 ymm ones, with no memory traffic: the
// compute peak the benchmarks compare the GEMM with.
//
//go:noescape
func fmaPeakAVX512(n int)

//go:noescape
func fmaPeakAVX2(n int)

// fmaPeakRound is the FLOP of one round of fmaPeakRun at level, with
// the level's name.
func fmaPeakRound(level int) (int, string) {
	switch level {
	case gemmAVX512, gemmBF16:
		return 2 * 16 * 24, "avx512"
	case gemmAVX2:
		return 2 * 8 * 12, "avx2"
	}
	return 0, "none"
}

func fmaPeakRun(level, rounds int) {
	if level >= gemmAVX512 {
		fmaPeakAVX512(rounds)
	} else {
		fmaPeakAVX2(rounds)
	}
}

// dotF32MatRows sets out[i] to the product of x with the F32 row i of
// w, rows rowBytes apart, as the float GEMM computes it: in the lanes,
// order and fold of dotF16RowsAVX2, with fused multiply-adds (DotF32,
// which rounds each product, is left to the rows it cannot take). It
// runs the GEMM's one-row kernel with the token thrice (the repeats
// write the same value to the same place): a decode step is bound by
// memory, not by those multiply-adds. It reports false, doing nothing,
// without AVX2 or for a length not a multiple of 32, where MatMul too
// runs DotF32's rows, so that MatVec and MatMul give the same bits.
func dotF32MatRows(w []byte, rowBytes int, x, out []float32) bool {
	n, cols := len(out), len(x)
	if !hasAVX2 || n == 0 || cols == 0 || cols%32 != 0 {
		return false
	}
	_ = w[(n-1)*rowBytes+4*cols-1]
	xp := uintptr(unsafe.Pointer(&x[0]))
	a := gemmArgs{nb: cols / 32, nr: 1, fl: 2, ng: n, ws: rowBytes}
	a.w[0] = uintptr(unsafe.Pointer(&w[0]))
	a.x = [3]uintptr{xp, xp, xp}
	op := uintptr(unsafe.Pointer(&out[0]))
	a.out = [3]uintptr{op, op, op}
	gemmx1x3AVX2(&a)
	runtime.KeepAlive(w)
	runtime.KeepAlive(x)
	runtime.KeepAlive(out)
	return true
}
