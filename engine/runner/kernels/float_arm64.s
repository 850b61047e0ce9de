//go:build !purego

// NEON kernels for the float rows on arm64: F16 and BF16 weights against
// a float32 activation, eight rows at a time.
//
// The portable kernels (DotF16, DotBF16) keep two sums per row, s0 over
// the even values and s1 over the odd ones, each a chain of fused
// multiply-adds (the arm64 compiler fuses s += w·x into FMADD), and
// return s0 + s1. These kernels keep exactly those chains: a vector holds
// two rows' (s0, s1), lanes (a.s0, a.s1, b.s0, b.s1), and one FMLA
// against (x[i], x[i+1], x[i], x[i+1]) advances both rows by a pair of
// values. ZIP1/ZIP2 on 32-bit lanes interleave two rows' halves in pairs,
// FCVTL/FCVTL2 (F16) or SHLL/SHLL2 #16 (BF16, whose bits are a float32's
// top half) widen them, and LD4R loads the four (x[i], x[i+1]) pairs of
// an 8-value chunk already duplicated. The four vectors give four
// independent FMLA chains, enough to cover the FMLA latency. An odd last
// value goes to s0 alone (BIT keeps lanes 1 and 3), and FADDP adds each
// row's s0 and s1. So every rounding is the portable kernel's and the
// results are equal bit for bit (FCVTL and the table behind F16ToF32 are
// both exact).
//
// Go's assembler has no mnemonics for most of these vector operations,
// so they are written as WORD encodings; the comment on each is the
// instruction in the Arm syntax (any AArch64 assembler reproduces the
// word, e.g. llvm-mc -triple=aarch64 -show-encoding).
// Go's R<n> and V<n> are the Arm x<n> and v<n>.

#include "textflag.h"

// func dotF16RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)
TEXT ·dotF16RowsNEON(SB), NOSPLIT, $0-48
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	x+24(FP), R3
	MOVD	nx+32(FP), R4
	MOVD	out+40(FP), R6
	LSR	$3, R4, R5 // chunks of 8 values
	UBFX	$1, R4, $2, R7 // then pairs
	WORD $0x6f00e5ff // movi v31.2d, #0x00000000ffffffff // lanes 0 and 2: the s0 accumulators

f16group:
	// R10..R15, R19, R20: the group's rows; when fewer than eight are
	// left (R2), the missing ones repeat the last, computed and dropped.
	MOVD	R0, R10
	ADD	R1, R10, R11
	CMP	$2, R2
	CSEL	LT, R10, R11, R11
	ADD	R1, R11, R12
	CMP	$3, R2
	CSEL	LT, R11, R12, R12
	ADD	R1, R12, R13
	CMP	$4, R2
	CSEL	LT, R12, R13, R13
	ADD	R1, R13, R14
	CMP	$5, R2
	CSEL	LT, R13, R14, R14
	ADD	R1, R14, R15
	CMP	$6, R2
	CSEL	LT, R14, R15, R15
	ADD	R1, R15, R19
	CMP	$7, R2
	CSEL	LT, R15, R19, R19
	ADD	R1, R19, R20
	CMP	$8, R2
	CSEL	LT, R19, R20, R20
	MOVD	R3, R21
	VEOR	V24.B16, V24.B16, V24.B16
	VEOR	V25.B16, V25.B16, V25.B16
	VEOR	V26.B16, V26.B16, V26.B16
	VEOR	V27.B16, V27.B16, V27.B16
	// V24..V27: rows (0,1), (2,3), (4,5), (6,7); lanes 0-1 are the first
	// row's s0 and s1, lanes 2-3 the second's.
	CBZ	R5, f16pairs
	MOVD	R5, R9

f16chunk:
	WORD $0x4dffeea0 // ld4r {v0.2d, v1.2d, v2.2d, v3.2d}, [x21], #32 // (x0,x1)×2 ... (x6,x7)×2
	VLD1.P	16(R10), [V4.H8]
	VLD1.P	16(R11), [V5.H8]
	VLD1.P	16(R12), [V6.H8]
	VLD1.P	16(R13), [V7.H8]
	VLD1.P	16(R14), [V8.H8]
	VLD1.P	16(R15), [V9.H8]
	VLD1.P	16(R19), [V10.H8]
	VLD1.P	16(R20), [V11.H8]
	// rows 0 and 1: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e85388c // zip1 v12.4s, v4.4s, v5.4s
	WORD $0x4e85788d // zip2 v13.4s, v4.4s, v5.4s
	WORD $0x0e217984 // fcvtl v4.4s, v12.4h
	WORD $0x4e217985 // fcvtl2 v5.4s, v12.8h
	WORD $0x0e2179ac // fcvtl v12.4s, v13.4h
	WORD $0x4e2179ad // fcvtl2 v13.4s, v13.8h
	WORD $0x4e20cc98 // fmla v24.4s, v4.4s, v0.4s
	WORD $0x4e21ccb8 // fmla v24.4s, v5.4s, v1.4s
	WORD $0x4e22cd98 // fmla v24.4s, v12.4s, v2.4s
	WORD $0x4e23cdb8 // fmla v24.4s, v13.4s, v3.4s
	// rows 2 and 3: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e8738ce // zip1 v14.4s, v6.4s, v7.4s
	WORD $0x4e8778cf // zip2 v15.4s, v6.4s, v7.4s
	WORD $0x0e2179c6 // fcvtl v6.4s, v14.4h
	WORD $0x4e2179c7 // fcvtl2 v7.4s, v14.8h
	WORD $0x0e2179ee // fcvtl v14.4s, v15.4h
	WORD $0x4e2179ef // fcvtl2 v15.4s, v15.8h
	WORD $0x4e20ccd9 // fmla v25.4s, v6.4s, v0.4s
	WORD $0x4e21ccf9 // fmla v25.4s, v7.4s, v1.4s
	WORD $0x4e22cdd9 // fmla v25.4s, v14.4s, v2.4s
	WORD $0x4e23cdf9 // fmla v25.4s, v15.4s, v3.4s
	// rows 4 and 5: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e893910 // zip1 v16.4s, v8.4s, v9.4s
	WORD $0x4e897911 // zip2 v17.4s, v8.4s, v9.4s
	WORD $0x0e217a08 // fcvtl v8.4s, v16.4h
	WORD $0x4e217a09 // fcvtl2 v9.4s, v16.8h
	WORD $0x0e217a30 // fcvtl v16.4s, v17.4h
	WORD $0x4e217a31 // fcvtl2 v17.4s, v17.8h
	WORD $0x4e20cd1a // fmla v26.4s, v8.4s, v0.4s
	WORD $0x4e21cd3a // fmla v26.4s, v9.4s, v1.4s
	WORD $0x4e22ce1a // fmla v26.4s, v16.4s, v2.4s
	WORD $0x4e23ce3a // fmla v26.4s, v17.4s, v3.4s
	// rows 6 and 7: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e8b3952 // zip1 v18.4s, v10.4s, v11.4s
	WORD $0x4e8b7953 // zip2 v19.4s, v10.4s, v11.4s
	WORD $0x0e217a4a // fcvtl v10.4s, v18.4h
	WORD $0x4e217a4b // fcvtl2 v11.4s, v18.8h
	WORD $0x0e217a72 // fcvtl v18.4s, v19.4h
	WORD $0x4e217a73 // fcvtl2 v19.4s, v19.8h
	WORD $0x4e20cd5b // fmla v27.4s, v10.4s, v0.4s
	WORD $0x4e21cd7b // fmla v27.4s, v11.4s, v1.4s
	WORD $0x4e22ce5b // fmla v27.4s, v18.4s, v2.4s
	WORD $0x4e23ce7b // fmla v27.4s, v19.4s, v3.4s
	SUBS	$1, R9, R9
	BNE	f16chunk

f16pairs:
	CBZ	R7, f16odd
	MOVD	R7, R9

f16pair:
	WORD $0x4ddfcea0 // ld1r {v0.2d}, [x21], #8
	WORD $0x0ddf8144 // ld1 {v4.s}[0], [x10], #4
	WORD $0x0ddf9164 // ld1 {v4.s}[1], [x11], #4
	WORD $0x0e217884 // fcvtl v4.4s, v4.4h
	WORD $0x4e20cc98 // fmla v24.4s, v4.4s, v0.4s
	WORD $0x0ddf8185 // ld1 {v5.s}[0], [x12], #4
	WORD $0x0ddf91a5 // ld1 {v5.s}[1], [x13], #4
	WORD $0x0e2178a5 // fcvtl v5.4s, v5.4h
	WORD $0x4e20ccb9 // fmla v25.4s, v5.4s, v0.4s
	WORD $0x0ddf81c6 // ld1 {v6.s}[0], [x14], #4
	WORD $0x0ddf91e6 // ld1 {v6.s}[1], [x15], #4
	WORD $0x0e2178c6 // fcvtl v6.4s, v6.4h
	WORD $0x4e20ccda // fmla v26.4s, v6.4s, v0.4s
	WORD $0x0ddf8267 // ld1 {v7.s}[0], [x19], #4
	WORD $0x0ddf9287 // ld1 {v7.s}[1], [x20], #4
	WORD $0x0e2178e7 // fcvtl v7.4s, v7.4h
	WORD $0x4e20ccfb // fmla v27.4s, v7.4s, v0.4s
	SUBS	$1, R9, R9
	BNE	f16pair

f16odd:
	// The last value of an odd count goes to s0 only (lanes 0 and 2).
	TBZ	$0, R4, f16sum
	WORD $0x4d40caa0 // ld1r {v0.4s}, [x21]
	WORD $0x0d404144 // ld1 {v4.h}[0], [x10]
	WORD $0x0d405164 // ld1 {v4.h}[2], [x11]
	WORD $0x0e217884 // fcvtl v4.4s, v4.4h
	WORD $0x4eb81f08 // mov v8.16b, v24.16b
	WORD $0x4e20cc88 // fmla v8.4s, v4.4s, v0.4s
	WORD $0x6ebf1d18 // bit v24.16b, v8.16b, v31.16b
	WORD $0x0d404185 // ld1 {v5.h}[0], [x12]
	WORD $0x0d4051a5 // ld1 {v5.h}[2], [x13]
	WORD $0x0e2178a5 // fcvtl v5.4s, v5.4h
	WORD $0x4eb91f29 // mov v9.16b, v25.16b
	WORD $0x4e20cca9 // fmla v9.4s, v5.4s, v0.4s
	WORD $0x6ebf1d39 // bit v25.16b, v9.16b, v31.16b
	WORD $0x0d4041c6 // ld1 {v6.h}[0], [x14]
	WORD $0x0d4051e6 // ld1 {v6.h}[2], [x15]
	WORD $0x0e2178c6 // fcvtl v6.4s, v6.4h
	WORD $0x4eba1f4a // mov v10.16b, v26.16b
	WORD $0x4e20ccca // fmla v10.4s, v6.4s, v0.4s
	WORD $0x6ebf1d5a // bit v26.16b, v10.16b, v31.16b
	WORD $0x0d404267 // ld1 {v7.h}[0], [x19]
	WORD $0x0d405287 // ld1 {v7.h}[2], [x20]
	WORD $0x0e2178e7 // fcvtl v7.4s, v7.4h
	WORD $0x4ebb1f6b // mov v11.16b, v27.16b
	WORD $0x4e20cceb // fmla v11.4s, v7.4s, v0.4s
	WORD $0x6ebf1d7b // bit v27.16b, v11.16b, v31.16b

f16sum:
	// s0 + s1 for each row: rows 0-3 in V20, 4-7 in V21.
	WORD $0x6e39d714 // faddp v20.4s, v24.4s, v25.4s
	WORD $0x6e3bd755 // faddp v21.4s, v26.4s, v27.4s
	CMP	$8, R2
	BLT	f16tail
	VST1.P	[V20.S4, V21.S4], 32(R6)
	ADD	R1<<3, R0, R0
	SUBS	$8, R2, R2
	BNE	f16group
	RET

f16tail:
	CMP	$4, R2
	BLT	f16tail3
	VST1.P	[V20.S4], 16(R6)
	VORR	V21.B16, V21.B16, V20.B16
	SUB	$4, R2, R2
	CBZ	R2, f16done

f16tail3:
	FMOVS	F20, (R6)
	CMP	$2, R2
	BLT	f16done
	VMOV	V20.S[1], R22
	MOVW	R22, 4(R6)
	CMP	$3, R2
	BLT	f16done
	VMOV	V20.S[2], R22
	MOVW	R22, 8(R6)

f16done:
	RET

// func dotBF16RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)
TEXT ·dotBF16RowsNEON(SB), NOSPLIT, $0-48
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	x+24(FP), R3
	MOVD	nx+32(FP), R4
	MOVD	out+40(FP), R6
	LSR	$3, R4, R5 // chunks of 8 values
	UBFX	$1, R4, $2, R7 // then pairs
	WORD $0x6f00e5ff // movi v31.2d, #0x00000000ffffffff // lanes 0 and 2: the s0 accumulators

bf16group:
	// R10..R15, R19, R20: the group's rows; when fewer than eight are
	// left (R2), the missing ones repeat the last, computed and dropped.
	MOVD	R0, R10
	ADD	R1, R10, R11
	CMP	$2, R2
	CSEL	LT, R10, R11, R11
	ADD	R1, R11, R12
	CMP	$3, R2
	CSEL	LT, R11, R12, R12
	ADD	R1, R12, R13
	CMP	$4, R2
	CSEL	LT, R12, R13, R13
	ADD	R1, R13, R14
	CMP	$5, R2
	CSEL	LT, R13, R14, R14
	ADD	R1, R14, R15
	CMP	$6, R2
	CSEL	LT, R14, R15, R15
	ADD	R1, R15, R19
	CMP	$7, R2
	CSEL	LT, R15, R19, R19
	ADD	R1, R19, R20
	CMP	$8, R2
	CSEL	LT, R19, R20, R20
	MOVD	R3, R21
	VEOR	V24.B16, V24.B16, V24.B16
	VEOR	V25.B16, V25.B16, V25.B16
	VEOR	V26.B16, V26.B16, V26.B16
	VEOR	V27.B16, V27.B16, V27.B16
	// V24..V27: rows (0,1), (2,3), (4,5), (6,7); lanes 0-1 are the first
	// row's s0 and s1, lanes 2-3 the second's.
	CBZ	R5, bf16pairs
	MOVD	R5, R9

bf16chunk:
	WORD $0x4dffeea0 // ld4r {v0.2d, v1.2d, v2.2d, v3.2d}, [x21], #32 // (x0,x1)×2 ... (x6,x7)×2
	VLD1.P	16(R10), [V4.H8]
	VLD1.P	16(R11), [V5.H8]
	VLD1.P	16(R12), [V6.H8]
	VLD1.P	16(R13), [V7.H8]
	VLD1.P	16(R14), [V8.H8]
	VLD1.P	16(R15), [V9.H8]
	VLD1.P	16(R19), [V10.H8]
	VLD1.P	16(R20), [V11.H8]
	// rows 0 and 1: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e85388c // zip1 v12.4s, v4.4s, v5.4s
	WORD $0x4e85788d // zip2 v13.4s, v4.4s, v5.4s
	WORD $0x2e613984 // shll v4.4s, v12.4h, #16
	WORD $0x6e613985 // shll2 v5.4s, v12.8h, #16
	WORD $0x2e6139ac // shll v12.4s, v13.4h, #16
	WORD $0x6e6139ad // shll2 v13.4s, v13.8h, #16
	WORD $0x4e20cc98 // fmla v24.4s, v4.4s, v0.4s
	WORD $0x4e21ccb8 // fmla v24.4s, v5.4s, v1.4s
	WORD $0x4e22cd98 // fmla v24.4s, v12.4s, v2.4s
	WORD $0x4e23cdb8 // fmla v24.4s, v13.4s, v3.4s
	// rows 2 and 3: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e8738ce // zip1 v14.4s, v6.4s, v7.4s
	WORD $0x4e8778cf // zip2 v15.4s, v6.4s, v7.4s
	WORD $0x2e6139c6 // shll v6.4s, v14.4h, #16
	WORD $0x6e6139c7 // shll2 v7.4s, v14.8h, #16
	WORD $0x2e6139ee // shll v14.4s, v15.4h, #16
	WORD $0x6e6139ef // shll2 v15.4s, v15.8h, #16
	WORD $0x4e20ccd9 // fmla v25.4s, v6.4s, v0.4s
	WORD $0x4e21ccf9 // fmla v25.4s, v7.4s, v1.4s
	WORD $0x4e22cdd9 // fmla v25.4s, v14.4s, v2.4s
	WORD $0x4e23cdf9 // fmla v25.4s, v15.4s, v3.4s
	// rows 4 and 5: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e893910 // zip1 v16.4s, v8.4s, v9.4s
	WORD $0x4e897911 // zip2 v17.4s, v8.4s, v9.4s
	WORD $0x2e613a08 // shll v8.4s, v16.4h, #16
	WORD $0x6e613a09 // shll2 v9.4s, v16.8h, #16
	WORD $0x2e613a30 // shll v16.4s, v17.4h, #16
	WORD $0x6e613a31 // shll2 v17.4s, v17.8h, #16
	WORD $0x4e20cd1a // fmla v26.4s, v8.4s, v0.4s
	WORD $0x4e21cd3a // fmla v26.4s, v9.4s, v1.4s
	WORD $0x4e22ce1a // fmla v26.4s, v16.4s, v2.4s
	WORD $0x4e23ce3a // fmla v26.4s, v17.4s, v3.4s
	// rows 6 and 7: (a0,a1,b0,b1), (a2,a3,b2,b3), (a4,a5,b4,b5), (a6,a7,b6,b7)
	WORD $0x4e8b3952 // zip1 v18.4s, v10.4s, v11.4s
	WORD $0x4e8b7953 // zip2 v19.4s, v10.4s, v11.4s
	WORD $0x2e613a4a // shll v10.4s, v18.4h, #16
	WORD $0x6e613a4b // shll2 v11.4s, v18.8h, #16
	WORD $0x2e613a72 // shll v18.4s, v19.4h, #16
	WORD $0x6e613a73 // shll2 v19.4s, v19.8h, #16
	WORD $0x4e20cd5b // fmla v27.4s, v10.4s, v0.4s
	WORD $0x4e21cd7b // fmla v27.4s, v11.4s, v1.4s
	WORD $0x4e22ce5b // fmla v27.4s, v18.4s, v2.4s
	WORD $0x4e23ce7b // fmla v27.4s, v19.4s, v3.4s
	SUBS	$1, R9, R9
	BNE	bf16chunk

bf16pairs:
	CBZ	R7, bf16odd
	MOVD	R7, R9

bf16pair:
	WORD $0x4ddfcea0 // ld1r {v0.2d}, [x21], #8
	WORD $0x0ddf8144 // ld1 {v4.s}[0], [x10], #4
	WORD $0x0ddf9164 // ld1 {v4.s}[1], [x11], #4
	WORD $0x2e613884 // shll v4.4s, v4.4h, #16
	WORD $0x4e20cc98 // fmla v24.4s, v4.4s, v0.4s
	WORD $0x0ddf8185 // ld1 {v5.s}[0], [x12], #4
	WORD $0x0ddf91a5 // ld1 {v5.s}[1], [x13], #4
	WORD $0x2e6138a5 // shll v5.4s, v5.4h, #16
	WORD $0x4e20ccb9 // fmla v25.4s, v5.4s, v0.4s
	WORD $0x0ddf81c6 // ld1 {v6.s}[0], [x14], #4
	WORD $0x0ddf91e6 // ld1 {v6.s}[1], [x15], #4
	WORD $0x2e6138c6 // shll v6.4s, v6.4h, #16
	WORD $0x4e20ccda // fmla v26.4s, v6.4s, v0.4s
	WORD $0x0ddf8267 // ld1 {v7.s}[0], [x19], #4
	WORD $0x0ddf9287 // ld1 {v7.s}[1], [x20], #4
	WORD $0x2e6138e7 // shll v7.4s, v7.4h, #16
	WORD $0x4e20ccfb // fmla v27.4s, v7.4s, v0.4s
	SUBS	$1, R9, R9
	BNE	bf16pair

bf16odd:
	// The last value of an odd count goes to s0 only (lanes 0 and 2).
	TBZ	$0, R4, bf16sum
	WORD $0x4d40caa0 // ld1r {v0.4s}, [x21]
	WORD $0x0d404144 // ld1 {v4.h}[0], [x10]
	WORD $0x0d405164 // ld1 {v4.h}[2], [x11]
	WORD $0x2e613884 // shll v4.4s, v4.4h, #16
	WORD $0x4eb81f08 // mov v8.16b, v24.16b
	WORD $0x4e20cc88 // fmla v8.4s, v4.4s, v0.4s
	WORD $0x6ebf1d18 // bit v24.16b, v8.16b, v31.16b
	WORD $0x0d404185 // ld1 {v5.h}[0], [x12]
	WORD $0x0d4051a5 // ld1 {v5.h}[2], [x13]
	WORD $0x2e6138a5 // shll v5.4s, v5.4h, #16
	WORD $0x4eb91f29 // mov v9.16b, v25.16b
	WORD $0x4e20cca9 // fmla v9.4s, v5.4s, v0.4s
	WORD $0x6ebf1d39 // bit v25.16b, v9.16b, v31.16b
	WORD $0x0d4041c6 // ld1 {v6.h}[0], [x14]
	WORD $0x0d4051e6 // ld1 {v6.h}[2], [x15]
	WORD $0x2e6138c6 // shll v6.4s, v6.4h, #16
	WORD $0x4eba1f4a // mov v10.16b, v26.16b
	WORD $0x4e20ccca // fmla v10.4s, v6.4s, v0.4s
	WORD $0x6ebf1d5a // bit v26.16b, v10.16b, v31.16b
	WORD $0x0d404267 // ld1 {v7.h}[0], [x19]
	WORD $0x0d405287 // ld1 {v7.h}[2], [x20]
	WORD $0x2e6138e7 // shll v7.4s, v7.4h, #16
	WORD $0x4ebb1f6b // mov v11.16b, v27.16b
	WORD $0x4e20cceb // fmla v11.4s, v7.4s, v0.4s
	WORD $0x6ebf1d7b // bit v27.16b, v11.16b, v31.16b

bf16sum:
	// s0 + s1 for each row: rows 0-3 in V20, 4-7 in V21.
	WORD $0x6e39d714 // faddp v20.4s, v24.4s, v25.4s
	WORD $0x6e3bd755 // faddp v21.4s, v26.4s, v27.4s
	CMP	$8, R2
	BLT	bf16tail
	VST1.P	[V20.S4, V21.S4], 32(R6)
	ADD	R1<<3, R0, R0
	SUBS	$8, R2, R2
	BNE	bf16group
	RET

bf16tail:
	CMP	$4, R2
	BLT	bf16tail3
	VST1.P	[V20.S4], 16(R6)
	VORR	V21.B16, V21.B16, V20.B16
	SUB	$4, R2, R2
	CBZ	R2, bf16done

bf16tail3:
	FMOVS	F20, (R6)
	CMP	$2, R2
	BLT	bf16done
	VMOV	V20.S[1], R22
	MOVW	R22, 4(R6)
	CMP	$3, R2
	BLT	bf16done
	VMOV	V20.S[2], R22
	MOVW	R22, 8(R6)

bf16done:
	RET
