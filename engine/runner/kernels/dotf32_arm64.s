//go:build !purego

// The F32 rows on arm64: DotF32's 32 sums are the lanes of V0-V7 (values
// 0-3, 4-7, ... 28-31 of each 32), advanced by FMUL then FADD, not FMLA,
// as DotF32 rounds the product first; eight chains of additions are
// plenty for one row at a time. The last nx mod 32 values go, 4 at a
// time, to V0, V1, ... in turn, and the final nx mod 4 of them, loaded
// into otherwise zero lanes, to the next register: the zero lanes add
// +0, which leaves a sum unchanged, as every sum starts at +0 and so is
// never −0. The fold is DotF32's: V0+V4 ... V3+V7, then V0+V2 and V1+V3,
// then their sum, and two pairwise adds for (s0+s1)+(s2+s3). So the
// results equal DotF32's bit for bit.
//
// Go's assembler has no mnemonics for the vector FMUL, FADD and FADDP,
// so they are WORD encodings with the Arm syntax in the comment (any
// AArch64 assembler reproduces the word, e.g. llvm-mc -triple=aarch64
// -show-encoding). Go's R<n> and V<n> are the Arm x<n> and v<n>.

#include "textflag.h"

// F32QUAD adds the products of the 4 values at R10 and R11 to V<k>:
// fmul v8.4s, v8.4s, v16.4s, then ADD, the word of
// fadd v<k>.4s, v<k>.4s, v8.4s.
#define F32QUAD(ADD) \
	VLD1.P 16(R10), [V8.S4] \
	VLD1.P 16(R11), [V16.S4] \
	WORD   $0x6e30dd08 \
	WORD   $ADD

// func dotF32RowsNEON(w *byte, rowBytes, n int, x *float32, nx int, out *float32)
TEXT ·dotF32RowsNEON(SB), NOSPLIT, $0-48
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	x+24(FP), R3
	MOVD	nx+32(FP), R4
	MOVD	out+40(FP), R6
	LSR	$5, R4, R5 // chunks of 32 values
	UBFX	$2, R4, $3, R7 // then quads
	AND	$3, R4, R8 // then single values

f32row:
	MOVD	R0, R10
	MOVD	R3, R11
	VEOR	V0.B16, V0.B16, V0.B16
	VEOR	V1.B16, V1.B16, V1.B16
	VEOR	V2.B16, V2.B16, V2.B16
	VEOR	V3.B16, V3.B16, V3.B16
	VEOR	V4.B16, V4.B16, V4.B16
	VEOR	V5.B16, V5.B16, V5.B16
	VEOR	V6.B16, V6.B16, V6.B16
	VEOR	V7.B16, V7.B16, V7.B16
	CBZ	R5, f32tail
	MOVD	R5, R9

f32chunk:
	VLD1.P	64(R10), [V8.S4, V9.S4, V10.S4, V11.S4]
	VLD1.P	64(R10), [V12.S4, V13.S4, V14.S4, V15.S4]
	VLD1.P	64(R11), [V16.S4, V17.S4, V18.S4, V19.S4]
	VLD1.P	64(R11), [V20.S4, V21.S4, V22.S4, V23.S4]
	WORD $0x6e30dd08 // fmul v8.4s, v8.4s, v16.4s
	WORD $0x6e31dd29 // fmul v9.4s, v9.4s, v17.4s
	WORD $0x6e32dd4a // fmul v10.4s, v10.4s, v18.4s
	WORD $0x6e33dd6b // fmul v11.4s, v11.4s, v19.4s
	WORD $0x6e34dd8c // fmul v12.4s, v12.4s, v20.4s
	WORD $0x6e35ddad // fmul v13.4s, v13.4s, v21.4s
	WORD $0x6e36ddce // fmul v14.4s, v14.4s, v22.4s
	WORD $0x6e37ddef // fmul v15.4s, v15.4s, v23.4s
	WORD $0x4e28d400 // fadd v0.4s, v0.4s, v8.4s
	WORD $0x4e29d421 // fadd v1.4s, v1.4s, v9.4s
	WORD $0x4e2ad442 // fadd v2.4s, v2.4s, v10.4s
	WORD $0x4e2bd463 // fadd v3.4s, v3.4s, v11.4s
	WORD $0x4e2cd484 // fadd v4.4s, v4.4s, v12.4s
	WORD $0x4e2dd4a5 // fadd v5.4s, v5.4s, v13.4s
	WORD $0x4e2ed4c6 // fadd v6.4s, v6.4s, v14.4s
	WORD $0x4e2fd4e7 // fadd v7.4s, v7.4s, v15.4s
	SUBS	$1, R9, R9
	BNE	f32chunk

f32tail:
	// V24: the products of the last nx mod 4 values, past the quads.
	ADD	R7<<4, R10, R12
	ADD	R7<<4, R11, R13
	VEOR	V24.B16, V24.B16, V24.B16
	CBZ	R8, f32quads
	FMOVS	(R12), F24 // zeroes lanes 1-3
	FMOVS	(R13), F25
	CMP	$2, R8
	BLT	f32single
	MOVWU	4(R12), R14
	VMOV	R14, V24.S[1]
	MOVWU	4(R13), R14
	VMOV	R14, V25.S[1]
	CMP	$3, R8
	BLT	f32single
	MOVWU	8(R12), R14
	VMOV	R14, V24.S[2]
	MOVWU	8(R13), R14
	VMOV	R14, V25.S[2]

f32single:
	WORD $0x6e39df18 // fmul v24.4s, v24.4s, v25.4s

f32quads:
	CBZ	R7, f32add0
	MOVD	R7, R9
	F32QUAD(0x4e28d400) // fadd v0.4s, v0.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add1
	F32QUAD(0x4e28d421) // fadd v1.4s, v1.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add2
	F32QUAD(0x4e28d442) // fadd v2.4s, v2.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add3
	F32QUAD(0x4e28d463) // fadd v3.4s, v3.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add4
	F32QUAD(0x4e28d484) // fadd v4.4s, v4.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add5
	F32QUAD(0x4e28d4a5) // fadd v5.4s, v5.4s, v8.4s
	SUBS	$1, R9, R9
	BEQ	f32add6
	F32QUAD(0x4e28d4c6) // fadd v6.4s, v6.4s, v8.4s
	WORD $0x4e38d4e7 // fadd v7.4s, v7.4s, v24.4s
	B	f32fold

f32add0:
	WORD $0x4e38d400 // fadd v0.4s, v0.4s, v24.4s
	B	f32fold

f32add1:
	WORD $0x4e38d421 // fadd v1.4s, v1.4s, v24.4s
	B	f32fold

f32add2:
	WORD $0x4e38d442 // fadd v2.4s, v2.4s, v24.4s
	B	f32fold

f32add3:
	WORD $0x4e38d463 // fadd v3.4s, v3.4s, v24.4s
	B	f32fold

f32add4:
	WORD $0x4e38d484 // fadd v4.4s, v4.4s, v24.4s
	B	f32fold

f32add5:
	WORD $0x4e38d4a5 // fadd v5.4s, v5.4s, v24.4s
	B	f32fold

f32add6:
	WORD $0x4e38d4c6 // fadd v6.4s, v6.4s, v24.4s

f32fold:
	WORD $0x4e24d400 // fadd v0.4s, v0.4s, v4.4s
	WORD $0x4e25d421 // fadd v1.4s, v1.4s, v5.4s
	WORD $0x4e26d442 // fadd v2.4s, v2.4s, v6.4s
	WORD $0x4e27d463 // fadd v3.4s, v3.4s, v7.4s
	WORD $0x4e22d400 // fadd v0.4s, v0.4s, v2.4s
	WORD $0x4e23d421 // fadd v1.4s, v1.4s, v3.4s
	WORD $0x4e21d400 // fadd v0.4s, v0.4s, v1.4s
	WORD $0x6e20d400 // faddp v0.4s, v0.4s, v0.4s
	WORD $0x7e30d800 // faddp s0, v0.2s
	FMOVS	F0, (R6)
	ADD	$4, R6, R6
	ADD	R1, R0, R0
	SUBS	$1, R2, R2
	BNE	f32row
	RET
