//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

// hasAVX2: the AVX2 kernels exist only for amd64.
const hasAVX2 = false

// hasSDOT selects the SDOT (ARMv8.2 dot product) form of the NEON
// kernels; without it they multiply with SMULL/SMLAL and widen with
// SADDLP/SADALP, which every ARMv8 CPU has. Both give the same exact
// integer sums. The tests switch it off to check the fallback.
var hasSDOT = cpu.ARM64.HasASIMDDP

// The NEON kernels (dot_arm64.s, dotq5_arm64.s, float_arm64.s,
// attend_arm64.s) run on every arm64 CPU: Advanced SIMD is part of
// ARMv8-A. Their results equal the portable kernels' as compiled for
// arm64: the integer block sums are exact either way, and the float
// steps follow the portable kernels' order and fusion.
//
// Estimated on paper, not measured. Decode multiplies thousands of rows
// by one activation, so each weight byte is read once from DRAM and the
// question is whether a core keeps up with the memory. Instructions
// counted from the assembly (SDOT form), for a Cortex-A76 (Pi 5, 2.4
// GHz, 4 cores) or A78AE (Orin AGX, 2.2 GHz, up to 12 cores): 4-wide
// decode, two 128-bit SIMD pipes (SDOT, AND, ADDP, FMLA: 2 per cycle),
// two loads per cycle; cycles ≈ SIMD ops / 2, as they dominate.
//
//	kernel  bytes   instrs / SIMD ops   ≈cycles  bytes/   GB/s/core    cores to reach DRAM bandwidth
//	        /block  per row and block            cycle    (A76/A78AE)  Pi 5 ~17 GB/s   Orin ~102 GB/s
//	Q8_0    34      ≈8 / ≈5             ≈2.5     ≈13      ≈33 / ≈30    1               ≈4
//	Q4_0    18      ≈12 / ≈9            ≈4.5     ≈4       ≈10 / ≈9     2               ≈11-12
//	Q4_1    20      ≈13 / ≈8            ≈4.2     ≈4.8     ≈11 / ≈10    2               ≈10
//	Q5_0    22      ≈19 / ≈15           ≈7.4     ≈3.0     ≈7.1 / ≈6.5  3               all 12: ≈78
//	Q5_1    24      ≈22 / ≈16           ≈8.1     ≈3.0     ≈7.1 / ≈6.5  3               all 12: ≈78
//	Q4_K    144     ≈100 / ≈70          ≈37      ≈3.9     ≈9.4 / ≈8.6  2               ≈12 (all)
//	Q5_K    176     ≈132 / ≈100         ≈50      ≈3.5     ≈8.4 / ≈7.7  2-3             all 12: ≈93
//	Q6_K    210     ≈117 / ≈98          ≈49      ≈4.3     ≈10 / ≈9.4   2               ≈11
//	F16     16 (8)  ≈6.4 / ≈5           ≈2.5     ≈6.4     ≈15 / ≈14    2               ≈7-8
//	BF16    16 (8)  ≈6.4 / ≈5           ≈2.5     ≈6.4     ≈15 / ≈14    2               ≈7-8
//	F32     32 (8)  ≈4.5 / ≈4           ≈2       ≈16      ≈38 / ≈35    1               ≈3
//
// Q8_0 per row and block: the scale lane load, the 32-byte weight load,
// a zeroing, 2 SDOT, and a quarter of the group's activation loads (2),
// reduction and scaling (3 ADDP, SCVTF, FCVTL, FMUL, FMLA) and loop (2).
// Q4_0 loads 16 bytes and adds the nibble unpacking (USHR, AND, 2 SUB).
// Q4_K per 256 values: 10 loads, ~21 scalar instructions and 4 INS for
// the 6-bit scales, 16 AND/USHR, 16 SDOT, 8 zeroings, ~17 for the sums
// per sub-block times scales and mins, 8 for the rounded combine. The
// SMULL fallback (no dot product: Cortex-A53/A72, Pi 3/4) spends 6
// instructions per 32 products instead of 2, roughly halving the 4-bit
// rates. So on a Pi 5 every kernel reaches the memory's rate with two
// cores (Q8_0 with one); on an Orin the 4-bit kernels are compute bound
// and need every core, and the next gains there are in the arithmetic
// (e.g. four rows at a time for Q4_K, sharing the scale work).
//
// The rows added with the other kernels, counted the same way (the four-
// row kernels' group instructions divided by four):
//
// Q4_1 is Q4_0 without the SUBs and with m: its float step is 4 more
// vector operations per group (the second product and add, rounded
// apart as the portable kernel's explicit conversions demand). Q5_0 and
// Q5_1 add the fifth bits, 10 vector operations per row and block (2
// TBL to spread the qh bytes, 2 CMTST against the bit of each lane, 2
// AND/BIC and 2 ORR/SUB), which is what makes them about twice Q4_0's
// work and compute bound on an Orin.
//
// Q5_K is Q4_K plus, per 64 values, 10 shift/insert operations for the
// fifth bits and 2 USHR of qh (the scales, sums and combine are Q4_K's):
// ≈100 SIMD operations per 176 bytes. Q6_K per 256 values: 32 shift/
// insert/AND operations to assemble the 6-bit quants (SLI and SRI merge
// ql and qh in place), 16 zeroings and 16 SDOT (one sum per 16-value
// sub-block: its scales are per 16 values), 12 ADDP putting the sixteen
// sums in order, 17 for Σ sc·(sum − 32·bs) (widening the int8 scales,
// SMULL/SMLAL against bs, MUL/MLA, ADDV) and 7 scalar float steps: ≈98
// SIMD operations for 210 bytes, the best bytes per cycle of the
// K-quants. Without SDOT, Q5_K spends Q4_K's 6 instructions per 32
// products, Q6_K 4 per 16 (no zeroing; a 6-bit product fits int16).
//
// F16 and BF16 per 8 rows and 8 values (128 bytes): LD4R of the x
// pairs, 8 loads, 8 ZIP, 16 FCVTL (or SHLL for BF16), 16 FMLA, loop:
// ≈51 instructions, 40 SIMD operations, ≈20 cycles; the four FMLA chains
// of 4 per chunk (16 cycles of latency at 4 each) fit inside that. If
// a core issues FCVTL or SHLL to one of its two pipes only (the A76's
// optimisation guide lists conversions and shifts on single pipes), the
// other 24 operations per chunk still roughly balance it. So one core nearly covers a Pi 5 and 7-8
// cores an Orin; two bytes per value make these rows the most bandwidth
// hungry, and the fastest per value.
//
// F32 per row and 32 values (128 bytes, dotf32_arm64.s): 8 loads of the
// row and 8 of x (from L1), 8 FMUL and 8 FADD (the products rounded
// apart, as DotF32 does), loop: 16 SIMD operations, ≈8 cycles, with
// eight chains of additions covering their latency; the loads, two per
// cycle, take the same 8. Four bytes per value make it bound by memory
// everywhere: one core covers a Pi 5, three an Orin.
//
// Attention (dots, axpys) reads the float32 KV cache, 4 bytes a value:
// dots per 4 keys and 4 values 5 loads and 4 FMLA, axpys per row and 16
// values a broadcast, a 64-byte load and 4 FMLA. Both are bound by the
// FMLA latency of their four chains (4 cycles each), ≈16 bytes per cycle,
// ≈38 / ≈35 GB/s per core: one core covers a Pi 5's memory, three an
// Orin's.

// dotQ8_0RowsNEON writes to out[0:n] the dot products of n Q8_0 rows
// starting at w, rowBytes apart, with the activation quants q and scales
// d, over nb blocks. The caller guarantees every pointer covers what is
// read (nb ≥ 1, n ≥ 1).
//
//go:noescape
func dotQ8_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)

// dotQ4_0RowsNEON is dotQ8_0RowsNEON for Q4_0 rows.
//
//go:noescape
func dotQ4_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)

// dotQ4KRowsNEON is dotQ8_0RowsNEON for Q4_K rows against the 256-value
// form of the activation (quants q, scales d, sums per 16 bs).
//
//go:noescape
func dotQ4KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)

// dotQ5KRowsNEON is dotQ4KRowsNEON for Q5_K rows.
//
//go:noescape
func dotQ5KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)

// dotQ6KRowsNEON is dotQ4KRowsNEON for Q6_K rows.
//
//go:noescape
func dotQ6KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)

// dotF16RowsNEON writes to out[0:n] the dot products of n F16 rows
// starting at w, rowBytes apart, with x[0:nx] (float_arm64.s). The
// caller guarantees every pointer covers what is read (nx ≥ 1, n ≥ 1).
//
//go:noescape
func dotF16RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)

// dotBF16RowsNEON is dotF16RowsNEON for BF16 rows.
//
//go:noescape
func dotBF16RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)

// dotsNEON writes to out[0:n] the dot products of q[0:nq] with n key
// rows starting at k, rowBytes apart (attend_arm64.s). The caller
// guarantees every pointer covers what is read (nq ≥ 1, n ≥ 1).
//
//go:noescape
func dotsNEON(q *float32, nq int, k *float32, rowBytes, n int, out *float32)

// axpysNEON adds to out[0:nout] the rows of v, rowBytes apart, each
// times its weight in p[0:np], in the order of p (attend_arm64.s). The
// caller guarantees every pointer covers what is read (nout ≥ 1, np ≥ 1).
//
//go:noescape
func axpysNEON(out *float32, nout int, p *float32, np int, v *float32, rowBytes int)

// dotQ8_0Rows sets out[i] to the dot product of v with the first nb
// blocks of row i of w, rows rowBytes apart.
func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
		return
	}
	// The assembly reads without bounds checks: these panic, as the
	// generic kernel's indexing would, on a length the caller got wrong.
	_ = w[(len(out)-1)*rowBytes+nb*34-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	dotQ8_0RowsNEON(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0], hasSDOT)
}

func dotQ4_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4_0Generic, 18)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*18-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	dotQ4_0RowsNEON(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0], hasSDOT)
}

func dotQ4KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4KGeneric, 144)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*144-1]
	_ = v.QK[nb*qkK-1]
	_ = v.DK[nb-1]
	_ = v.BS[nb*16-1]
	dotQ4KRowsNEON(&w[0], rowBytes, len(out), &v.QK[0], &v.DK[0], &v.BS[0], nb, &out[0], hasSDOT)
}

func dotQ5KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ5KGeneric, 176)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*176-1]
	_ = v.QK[nb*qkK-1]
	_ = v.DK[nb-1]
	_ = v.BS[nb*16-1]
	dotQ5KRowsNEON(&w[0], rowBytes, len(out), &v.QK[0], &v.DK[0], &v.BS[0], nb, &out[0], hasSDOT)
}

func dotQ6KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ6KGeneric, 210)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*210-1]
	_ = v.QK[nb*qkK-1]
	_ = v.DK[nb-1]
	_ = v.BS[nb*16-1]
	dotQ6KRowsNEON(&w[0], rowBytes, len(out), &v.QK[0], &v.DK[0], &v.BS[0], nb, &out[0], hasSDOT)
}

func dotF16Rows(w []byte, rowBytes int, x, out []float32) {
	if len(x) == 0 || len(out) == 0 {
		dotF16RowsGeneric(w, rowBytes, x, out)
		return
	}
	// What the generic kernel slices for the last row, which the assembly
	// reads furthest into w.
	_ = w[(len(out)-1)*rowBytes : len(out)*rowBytes][:2*len(x)]
	dotF16RowsNEON(&w[0], rowBytes, len(out), &x[0], len(x), &out[0])
}

func dotBF16Rows(w []byte, rowBytes int, x, out []float32) {
	if len(x) == 0 || len(out) == 0 {
		dotBF16RowsGeneric(w, rowBytes, x, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes : len(out)*rowBytes][:2*len(x)]
	dotBF16RowsNEON(&w[0], rowBytes, len(out), &x[0], len(x), &out[0])
}

func dots(q, k []float32, stride int, out []float32) {
	if len(q) == 0 || len(out) == 0 {
		dotsGeneric(q, k, stride, out)
		return
	}
	// What the generic kernel slices for the last key, which the assembly
	// reads furthest into k.
	last := (len(out) - 1) * stride
	_ = k[last : last+len(q)]
	dotsNEON(&q[0], len(q), &k[0], 4*stride, len(out), &out[0])
}

func axpys(out, p, v []float32, stride int) {
	if len(out) == 0 || len(p) == 0 {
		axpysGeneric(out, p, v, stride)
		return
	}
	last := (len(p) - 1) * stride
	_ = v[last : last+len(out)]
	axpysNEON(&out[0], len(out), &p[0], len(p), &v[0], 4*stride)
}
