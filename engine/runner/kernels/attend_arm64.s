//go:build !purego

// NEON kernels for attention on arm64: dots (one query against many
// cached keys) and axpys (a weighted sum of cached values), both float32.
//
// The portable Dot keeps four sums, lane i of each 4-value chunk in s_i,
// as chains of fused multiply-adds (the arm64 compiler fuses them into
// FMADD), adds the values past the last chunk to s0 and returns
// ((s0 + s1) + s2) + s3. dotsNEON keeps a vector (s0, s1, s2, s3) per key,
// four keys at a time so that four FMLA chains run independently, then
// transposes the four vectors (TRN1/TRN2, ZIP1/ZIP2) so that each holds
// one s_i of the four keys, adds the leftover values to the s0 vector
// with FMLA and sums the vectors in the portable order. axpysNEON runs
// over out 16 values at a time (then 4, then 1), adding each row in turn
// with FMLA: per value the same fused chain over the rows as
// axpysGeneric's. So both equal the portable kernels bit for bit.
//
// Go's assembler has no mnemonics for most of these vector operations,
// so they are written as WORD encodings; the comment on each is the
// instruction in the Arm syntax (any AArch64 assembler reproduces the
// word, e.g. llvm-mc -triple=aarch64 -show-encoding).
// Go's R<n> and V<n> are the Arm x<n> and v<n>.

#include "textflag.h"

// func dotsNEON(q *float32, nq int, k *float32, rowBytes, n int, out *float32)
TEXT ·dotsNEON(SB), NOSPLIT, $0-48
	MOVD	q+0(FP), R3
	MOVD	nq+8(FP), R4
	MOVD	k+16(FP), R0
	MOVD	rowBytes+24(FP), R1
	MOVD	n+32(FP), R2
	MOVD	out+40(FP), R6
	LSR	$2, R4, R5 // chunks of 4 values
	AND	$3, R4, R7 // then single ones

dgroup:
	// R10..R13: the group's key rows; when fewer than four are left
	// (R2), the missing ones repeat the last, computed and dropped.
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
	MOVD	R3, R14
	VEOR	V16.B16, V16.B16, V16.B16 // row i's (s0, s1, s2, s3) in V(16+i)
	VEOR	V17.B16, V17.B16, V17.B16
	VEOR	V18.B16, V18.B16, V18.B16
	VEOR	V19.B16, V19.B16, V19.B16
	CBZ	R5, dtranspose
	MOVD	R5, R9

dchunk:
	VLD1.P	16(R14), [V0.S4]
	VLD1.P	16(R10), [V1.S4]
	VLD1.P	16(R11), [V2.S4]
	VLD1.P	16(R12), [V3.S4]
	VLD1.P	16(R13), [V4.S4]
	WORD $0x4e20cc30 // fmla v16.4s, v1.4s, v0.4s
	WORD $0x4e20cc51 // fmla v17.4s, v2.4s, v0.4s
	WORD $0x4e20cc72 // fmla v18.4s, v3.4s, v0.4s
	WORD $0x4e20cc93 // fmla v19.4s, v4.4s, v0.4s
	SUBS	$1, R9, R9
	BNE	dchunk

dtranspose:
	// V20..V23: every row's s0, s1, s2, s3 (lane i: row i).
	WORD $0x4e912a18 // trn1 v24.4s, v16.4s, v17.4s
	WORD $0x4e916a19 // trn2 v25.4s, v16.4s, v17.4s
	WORD $0x4e932a5a // trn1 v26.4s, v18.4s, v19.4s
	WORD $0x4e936a5b // trn2 v27.4s, v18.4s, v19.4s
	WORD $0x4eda3b14 // zip1 v20.2d, v24.2d, v26.2d
	WORD $0x4edb3b35 // zip1 v21.2d, v25.2d, v27.2d
	WORD $0x4eda7b16 // zip2 v22.2d, v24.2d, v26.2d
	WORD $0x4edb7b37 // zip2 v23.2d, v25.2d, v27.2d
	CBZ	R7, dsum
	MOVD	R7, R9

dodd:
	// the values past the last chunk go to s0
	WORD $0x4ddfc9c0 // ld1r {v0.4s}, [x14], #4
	WORD $0x0ddf8141 // ld1 {v1.s}[0], [x10], #4
	WORD $0x0ddf9161 // ld1 {v1.s}[1], [x11], #4
	WORD $0x4ddf8181 // ld1 {v1.s}[2], [x12], #4
	WORD $0x4ddf91a1 // ld1 {v1.s}[3], [x13], #4
	WORD $0x4e20cc34 // fmla v20.4s, v1.4s, v0.4s
	SUBS	$1, R9, R9
	BNE	dodd

dsum:
	// ((s0 + s1) + s2) + s3
	WORD $0x4e35d694 // fadd v20.4s, v20.4s, v21.4s
	WORD $0x4e36d694 // fadd v20.4s, v20.4s, v22.4s
	WORD $0x4e37d694 // fadd v20.4s, v20.4s, v23.4s
	CMP	$4, R2
	BLT	dtail
	VST1.P	[V20.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	dgroup
	RET

dtail:
	FMOVS	F20, (R6)
	CMP	$2, R2
	BLT	ddone
	VMOV	V20.S[1], R19
	MOVW	R19, 4(R6)
	CMP	$3, R2
	BLT	ddone
	VMOV	V20.S[2], R19
	MOVW	R19, 8(R6)

ddone:
	RET

// func axpysNEON(out *float32, nout int, p *float32, np int, v *float32, rowBytes int)
TEXT ·axpysNEON(SB), NOSPLIT, $0-48
	MOVD	out+0(FP), R6
	MOVD	nout+8(FP), R2
	MOVD	p+16(FP), R3
	MOVD	np+24(FP), R4
	MOVD	v+32(FP), R0
	MOVD	rowBytes+40(FP), R1
	LSR	$4, R2, R5 // chunks of 16 values
	UBFX	$2, R2, $2, R7 // then of 4
	AND	$3, R2, R8 // then single ones
	CBZ	R5, ax4

ax16:
	// out[i:i+16] in V16..V19 while every row adds to it in turn
	VLD1	(R6), [V16.S4, V17.S4, V18.S4, V19.S4]
	MOVD	R0, R11
	MOVD	R3, R12
	MOVD	R4, R9

ax16row:
	WORD $0x4ddfc980 // ld1r {v0.4s}, [x12], #4
	VLD1	(R11), [V1.S4, V2.S4, V3.S4, V4.S4]
	WORD $0x4e20cc30 // fmla v16.4s, v1.4s, v0.4s
	WORD $0x4e20cc51 // fmla v17.4s, v2.4s, v0.4s
	WORD $0x4e20cc72 // fmla v18.4s, v3.4s, v0.4s
	WORD $0x4e20cc93 // fmla v19.4s, v4.4s, v0.4s
	ADD	R1, R11, R11
	SUBS	$1, R9, R9
	BNE	ax16row
	VST1.P	[V16.S4, V17.S4, V18.S4, V19.S4], 64(R6)
	ADD	$64, R0, R0
	SUBS	$1, R5, R5
	BNE	ax16

ax4:
	CBZ	R7, ax1

ax4loop:
	VLD1	(R6), [V16.S4]
	MOVD	R0, R11
	MOVD	R3, R12
	MOVD	R4, R9

ax4row:
	WORD $0x4ddfc980 // ld1r {v0.4s}, [x12], #4
	VLD1	(R11), [V1.S4]
	WORD $0x4e20cc30 // fmla v16.4s, v1.4s, v0.4s
	ADD	R1, R11, R11
	SUBS	$1, R9, R9
	BNE	ax4row
	VST1.P	[V16.S4], 16(R6)
	ADD	$16, R0, R0
	SUBS	$1, R7, R7
	BNE	ax4loop

ax1:
	CBZ	R8, axdone

ax1loop:
	FMOVS	(R6), F16
	MOVD	R0, R11
	MOVD	R3, R12
	MOVD	R4, R9

ax1row:
	FMOVS.P	4(R12), F0
	FMOVS	(R11), F1
	WORD $0x1f014010 // fmadd s16, s0, s1, s16
	ADD	R1, R11, R11
	SUBS	$1, R9, R9
	BNE	ax1row
	FMOVS.P	F16, 4(R6)
	ADD	$4, R0, R0
	SUBS	$1, R8, R8
	BNE	ax1loop

axdone:
	RET
