//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

// hasAVX2 selects the assembly kernels: AVX2 for the integer products,
// FMA for the accumulation and F16C for the block scales.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// dotQ8_0RowsAVX2 writes to out[0:n] the dot products of n Q8_0 rows
// starting at w, rowBytes apart, with the activation quants q and scales
// d, over nb blocks. The caller guarantees every pointer covers what is
// read (nb ≥ 1, n ≥ 1).
//
//go:noescape
func dotQ8_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)

// dotQ8_0Rows sets out[i] to the dot product of v with the first nb
// blocks of row i of w, rows rowBytes apart.
func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
		return
	}
	// The assembly reads without bounds checks: these panic, as the
	// generic kernel's indexing would, on a length the caller got wrong.
	_ = w[(len(out)-1)*rowBytes+nb*34-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	dotQ8_0RowsAVX2(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0])
}

//go:noescape
func dotsF32AVX2(q *float32, k *float32, n, stride, hd int, out *float32)

//go:noescape
func axpysF32AVX2(out *float32, p *float32, v *float32, n, stride, hd int)

// dots sets out[t] to the dot product of q with k[t·stride:][:len(q)]
// for t < len(out).
func dots(q, k []float32, stride int, out []float32) {
	hd, n := len(q), len(out)
	if !hasAVX2 || hd%16 != 0 || hd == 0 || n == 0 {
		dotsGeneric(q, k, stride, out)
		return
	}
	_ = k[(n-1)*stride+hd-1]
	dotsF32AVX2(&q[0], &k[0], n, stride, hd, &out[0])
}

// axpys adds p[t]·v[t·stride:][:len(out)] to out for t < len(p).
func axpys(out, p, v []float32, stride int) {
	hd, n := len(out), len(p)
	if !hasAVX2 || hd%16 != 0 || hd == 0 || n == 0 {
		axpysGeneric(out, p, v, stride)
		return
	}
	_ = v[(n-1)*stride+hd-1]
	axpysF32AVX2(&out[0], &p[0], &v[0], n, stride, hd)
}

//go:noescape
func dotQ4_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)

//go:noescape
func dotQ4_0RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)

// dotQ4_0Rows sets out[i] to the dot product of v with the first nb
// blocks of Q4_0 row i of w, rows rowBytes apart.
func dotQ4_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4_0Generic, 18)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*18-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	if hasAVX512Rows {
		dotQ4_0RowsAVX512(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0])
		return
	}
	dotQ4_0RowsAVX2(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0])
}

// dotQ4KRows sets out[i] to the dot product of v with the first nb
// super-blocks of Q4_K row i of w, rows rowBytes apart.
func dotQ4KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4KGeneric, 144)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		kRowsAVX2(dotQ4KRowsAVX512, 144, w, rowBytes, nb, v, out)
		return
	}
	kRowsAVX2(dotQ4KRowsAVX2, 144, w, rowBytes, nb, v, out)
}

// dotQ5KRows is dotQ4KRows for Q5_K rows.
func dotQ5KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5KGeneric, 176)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		kRowsAVX2(dotQ5KRowsAVX512, 176, w, rowBytes, nb, v, out)
		return
	}
	kRowsAVX2(dotQ5KRowsAVX2, 176, w, rowBytes, nb, v, out)
}

// dotQ6KRows is dotQ4KRows for Q6_K rows.
func dotQ6KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if !hasAVX2 || nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ6KGeneric, 210)(w, rowBytes, nb, v, out)
		return
	}
	if hasAVX512Rows {
		kRowsAVX2(dotQ6KRowsAVX512, 210, w, rowBytes, nb, v, out)
		return
	}
	kRowsAVX2(dotQ6KRowsAVX2, 210, w, rowBytes, nb, v, out)
}

//go:noescape
func dotF16RowsAVX2(w *byte, rowBytes, n int, x *float32, cols int, out *float32)

//go:noescape
func dotBF16RowsAVX2(w *byte, rowBytes, n int, x *float32, cols int, out *float32)

// dotF16Rows sets out[i] to the product of x with the F16 row i of w,
// rows rowBytes apart.
func dotF16Rows(w []byte, rowBytes int, x, out []float32) {
	if !hasAVX2 || len(x)%32 != 0 || len(x) == 0 || len(out) == 0 {
		dotF16RowsGeneric(w, rowBytes, x, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+2*len(x)-1]
	dotF16RowsAVX2(&w[0], rowBytes, len(out), &x[0], len(x), &out[0])
}

// dotBF16Rows is dotF16Rows for BF16 rows; at gemmBF16 it rounds x to
// bfloat16 and runs VDPBF16PS (dotBF16DPRows), as MatMul does there.
func dotBF16Rows(w []byte, rowBytes int, x, out []float32) {
	if gemmLevel == gemmBF16 && len(x)%32 == 0 && len(x) > 0 && len(out) > 0 {
		dotBF16DPRows(w, rowBytes, x, out)
		return
	}
	if !hasAVX2 || len(x)%32 != 0 || len(x) == 0 || len(out) == 0 {
		dotBF16RowsGeneric(w, rowBytes, x, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+2*len(x)-1]
	dotBF16RowsAVX2(&w[0], rowBytes, len(out), &x[0], len(x), &out[0])
}

//go:noescape
func dotQ4KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

//go:noescape
func dotQ5KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

//go:noescape
func dotQ6KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

// The AVX-512 K-quant row kernels (dotk512_amd64.s): four rows per
// pass, the same integer sums and float roundings as the AVX2 ones.

//go:noescape
func dotQ4KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

//go:noescape
func dotQ5KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

//go:noescape
func dotQ6KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)

// hasAVX512Rows selects the AVX-512 row kernels, which need VL (EVEX
// forms of 256-bit operations), GFNI (the quant unpacking) and VBMI
// (Q4_0's byte permutes) beyond what hasAVX512 checks. The tests turn it off to run the AVX2 kernels
// too.
var hasAVX512Rows = hasAVX512 && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512GFNI && cpu.X86.HasAVX512VBMI

// kRowsAVX2 checks what the assembly will read, then runs it.
func kRowsAVX2(asm func(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32), bb int, w []byte, rowBytes, nb int, v *QVec, out []float32) {
	_ = w[(len(out)-1)*rowBytes+nb*bb-1]
	_ = v.QK[nb*qkK-1]
	_ = v.DK[nb-1]
	_ = v.BS[nb*16-1]
	asm(&w[0], rowBytes, len(out), &v.QK[0], &v.DK[0], &v.BS[0], nb, &out[0])
}
