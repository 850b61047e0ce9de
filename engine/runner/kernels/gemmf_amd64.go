//go:build !purego

package kernels

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"meshd/engine/runner/gguf"
)

// gemmArgs is what the float GEMM kernels read (gemmf_amd64.s): four row
// pointers (float32 values), three token pointers, the output position
// of row w[0] for each token, the number of 32-column blocks and the
// number of rows to store.
type gemmArgs struct {
	w   [4]unsafe.Pointer
	x   [3]*float32
	out [3]*float32
	nb  int
	nr  int
}

//go:noescape
func cvtF16F32AVX2(dst *float32, src *byte, n int)

//go:noescape
func gemmF16x4x3AVX512(a *gemmArgs)

//go:noescape
func gemmF32x4x3AVX512(a *gemmArgs)

//go:noescape
func gemmF16x1x3AVX2(a *gemmArgs)

//go:noescape
func gemmF32x1x3AVX2(a *gemmArgs)

// gemmLevel is the float GEMM's dispatch (gemmf.go's levels): four rows
// × three tokens in zmm registers where the CPU has AVX-512F (all the
// kernels need), one row × three tokens in ymm with AVX2 and FMA.
// GODEBUG=cpu.avx512f=off (or cpu.avx2=off) lowers it as it lowers the
// other kernels; the tests and benchmarks set it to run each level on a
// CPU that has more.
var gemmLevel = detectGemmLevel()

func detectGemmLevel() int {
	switch {
	case hasAVX2 && cpu.X86.HasAVX512F:
		return gemmAVX512
	case hasAVX2:
		return gemmAVX2
	}
	return gemmOff
}

// gemmTile is the rows a worker converts to float32 at once (F16) and
// runs every token against: 16 rows of 2048 columns are 128 KiB, which
// stay in L2 while the tokens' activations stream through L1 three at a
// time.
const gemmTile = 16

// gemmTiles holds a worker's converted tile between uses.
var gemmTiles = sync.Pool{New: func() any { return new([]float32) }}

// mulFloat computes MatMul for an F16 or F32 matrix with the float GEMM
// kernels and reports whether it did: not for other types, one token,
// columns not a multiple of 32 (the row kernels' tails) or no kernel for
// this CPU.
func (m *Matrix) mulFloat(p *Pool, out, x []float32, T int) bool {
	level := gemmLevel
	if level == gemmOff || T < 2 || m.Cols%32 != 0 || (m.Type != gguf.F16 && m.Type != gguf.F32) {
		return false
	}
	cols, rows := m.Cols, m.Rows
	_ = x[T*cols-1]
	_ = out[T*rows-1]
	p.For(rows, gemmTile, func(lo, hi int) {
		var tile *[]float32
		if m.Type == gguf.F16 {
			tile = gemmTiles.Get().(*[]float32)
			if len(*tile) < gemmTile*cols {
				*tile = make([]float32, gemmTile*cols)
			}
			defer gemmTiles.Put(tile)
		}
		for r0 := lo; r0 < hi; r0 += gemmTile {
			r1 := min(r0+gemmTile, hi)
			m.gemmTile(level, r0, r1, out, x, T, tile)
		}
	})
	return true
}

// gemmTile runs rows [r0, r1) (at most gemmTile) against every token.
func (m *Matrix) gemmTile(level, r0, r1 int, out, x []float32, T int, tile *[]float32) {
	cols, rows := m.Cols, m.Rows
	n := r1 - r0
	// row(i) is row r0+i's float32 values.
	var row func(i int) unsafe.Pointer
	f16 := m.Type == gguf.F16
	if f16 {
		buf := (*tile)[:n*cols]
		src := m.Data[r0*m.rowBytes : r1*m.rowBytes]
		cvtF16F32AVX2(&buf[0], &src[0], n*cols)
		row = func(i int) unsafe.Pointer { return unsafe.Pointer(&buf[i*cols]) }
	} else {
		d := m.Data[r0*m.rowBytes : r1*m.rowBytes]
		row = func(i int) unsafe.Pointer { return unsafe.Pointer(&d[i*m.rowBytes]) }
	}
	a := gemmArgs{nb: cols / 32}
	kernel := gemmF32x1x3AVX2
	step := 1
	switch {
	case level == gemmAVX512 && f16:
		kernel, step = gemmF16x4x3AVX512, 4
	case level == gemmAVX512:
		kernel, step = gemmF32x4x3AVX512, 4
	case f16:
		kernel = gemmF16x1x3AVX2
	}
	for t := 0; t < T; t += 3 {
		for i := range 3 {
			tk := min(t+i, T-1)
			a.x[i] = &x[tk*cols]
		}
		for i := 0; i < n; i += step {
			for j := range 4 {
				a.w[j] = row(min(i+j, n-1))
			}
			a.nr = min(step, n-i)
			for j := range 3 {
				tk := min(t+j, T-1)
				a.out[j] = &out[tk*rows+r0+i]
			}
			kernel(&a)
		}
	}
}

// fmaPeakAVX512 runs n rounds of 24 independent zmm multiply-adds and
// fmaPeakAVX2 n rounds of 12 ymm ones, with no memory traffic: the
// compute peak the benchmarks compare the GEMM with.
//
//go:noescape
func fmaPeakAVX512(n int)

//go:noescape
func fmaPeakAVX2(n int)
