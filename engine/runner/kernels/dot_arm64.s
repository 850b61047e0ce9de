//go:build !purego

// NEON kernels for the quantised row products on arm64: Q8_0 and Q4_0
// four rows at a time (the activation block is loaded once for all
// four), Q4_K, Q5_K and Q6_K one row at a time. Each kernel computes every block's
// integer sum exactly (SDOT when the CPU has the dot-product extension,
// SMULL/SMLAL with pairwise widening adds otherwise) and then does the
// portable kernel's float arithmetic in its order, so the results equal
// the portable kernels' as compiled for arm64 (which fuses a row's
// multiply-add into FMADD, hence FMLA here for Q8_0 and Q4_0; the Q4_K
// combine rounds every step, as kCombine does; so does Q6_K's).
//
// The 5- and 6-bit quants are assembled in byte lanes with shift-and-
// insert: SLI puts the high bits above a low nibble it keeps, SRI puts
// a high nibble below the high bits it keeps, so each 16 quants cost two
// or three instructions beyond Q4_K's unpacking. Q6_K keeps one sum per
// 16-value sub-block (one SDOT each into a zeroed lane set, then pairwise
// adds put the sixteen sums in order in four vectors), because its
// scales are per 16 values and signed.
//
// Go's assembler has no mnemonics for most of these vector operations,
// so they are written as WORD encodings; the comment on each is the
// instruction in the Arm syntax (any AArch64 assembler reproduces the
// word, e.g. llvm-mc -triple=aarch64 -mattr=+dotprod -show-encoding).
// Go's R<n> and V<n> are the Arm x<n> and v<n>.

#include "textflag.h"

// func dotQ8_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)
TEXT ·dotQ8_0RowsNEON(SB), NOSPLIT, $0-57
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	nb+40(FP), R5
	MOVD	out+48(FP), R6
	MOVBU	sdot+56(FP), R7

q8group:
	// R10..R13: the group's rows; when fewer than four are left (R2),
	// the missing ones repeat the last, computed and dropped.
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
	MOVD	R4, R15
	MOVD	R5, R9
	VEOR	V24.B16, V24.B16, V24.B16 // lane i: row i's sum

q8block:
	VLD1.P	32(R14), [V0.B16, V1.B16]
	WORD $0x4ddfc9e2 // ld1r {v2.4s}, [x15], #4
	WORD $0x0ddf4143 // ld1 {v3.h}[0], [x10], #2
	WORD $0x0ddf4963 // ld1 {v3.h}[1], [x11], #2
	WORD $0x0ddf5183 // ld1 {v3.h}[2], [x12], #2
	WORD $0x0ddf59a3 // ld1 {v3.h}[3], [x13], #2
	VLD1.P	32(R10), [V4.B16, V5.B16]
	VLD1.P	32(R11), [V6.B16, V7.B16]
	VLD1.P	32(R12), [V8.B16, V9.B16]
	VLD1.P	32(R13), [V10.B16, V11.B16]
	CBZ	R7, q8nodot
	VEOR	V16.B16, V16.B16, V16.B16
	WORD $0x4e809490 // sdot v16.4s, v4.16b, v0.16b
	WORD $0x4e8194b0 // sdot v16.4s, v5.16b, v1.16b
	VEOR	V17.B16, V17.B16, V17.B16
	WORD $0x4e8094d1 // sdot v17.4s, v6.16b, v0.16b
	WORD $0x4e8194f1 // sdot v17.4s, v7.16b, v1.16b
	VEOR	V18.B16, V18.B16, V18.B16
	WORD $0x4e809512 // sdot v18.4s, v8.16b, v0.16b
	WORD $0x4e819532 // sdot v18.4s, v9.16b, v1.16b
	VEOR	V19.B16, V19.B16, V19.B16
	WORD $0x4e809553 // sdot v19.4s, v10.16b, v0.16b
	WORD $0x4e819573 // sdot v19.4s, v11.16b, v1.16b
	B	q8sum

q8nodot:
	// |w·a| ≤ 128·127 (the activation quants lie in [-127, 127]):
	// two products fit an int16 lane.
	WORD $0x0e20c094 // smull v20.8h, v4.8b, v0.8b
	WORD $0x0e2180b4 // smlal v20.8h, v5.8b, v1.8b
	WORD $0x4e20c095 // smull2 v21.8h, v4.16b, v0.16b
	WORD $0x4e2180b5 // smlal2 v21.8h, v5.16b, v1.16b
	WORD $0x4e602a90 // saddlp v16.4s, v20.8h
	WORD $0x4e606ab0 // sadalp v16.4s, v21.8h
	WORD $0x0e20c0d4 // smull v20.8h, v6.8b, v0.8b
	WORD $0x0e2180f4 // smlal v20.8h, v7.8b, v1.8b
	WORD $0x4e20c0d5 // smull2 v21.8h, v6.16b, v0.16b
	WORD $0x4e2180f5 // smlal2 v21.8h, v7.16b, v1.16b
	WORD $0x4e602a91 // saddlp v17.4s, v20.8h
	WORD $0x4e606ab1 // sadalp v17.4s, v21.8h
	WORD $0x0e20c114 // smull v20.8h, v8.8b, v0.8b
	WORD $0x0e218134 // smlal v20.8h, v9.8b, v1.8b
	WORD $0x4e20c115 // smull2 v21.8h, v8.16b, v0.16b
	WORD $0x4e218135 // smlal2 v21.8h, v9.16b, v1.16b
	WORD $0x4e602a92 // saddlp v18.4s, v20.8h
	WORD $0x4e606ab2 // sadalp v18.4s, v21.8h
	WORD $0x0e20c154 // smull v20.8h, v10.8b, v0.8b
	WORD $0x0e218174 // smlal v20.8h, v11.8b, v1.8b
	WORD $0x4e20c155 // smull2 v21.8h, v10.16b, v0.16b
	WORD $0x4e218175 // smlal2 v21.8h, v11.16b, v1.16b
	WORD $0x4e602a93 // saddlp v19.4s, v20.8h
	WORD $0x4e606ab3 // sadalp v19.4s, v21.8h

q8sum:
	WORD $0x4eb1be14 // addp v20.4s, v16.4s, v17.4s
	WORD $0x4eb3be55 // addp v21.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4e21da94 // scvtf v20.4s, v20.4s
	WORD $0x0e217863 // fcvtl v3.4s, v3.4h
	WORD $0x6e22dc63 // fmul v3.4s, v3.4s, v2.4s
	WORD $0x4e34cc78 // fmla v24.4s, v3.4s, v20.4s
	SUBS	$1, R9, R9
	BNE	q8block

	CMP	$4, R2
	BLT	q8tail
	VST1.P	[V24.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	q8group
	RET

q8tail:
	FMOVS	F24, (R6)
	CMP	$2, R2
	BLT	q8done
	VMOV	V24.S[1], R19
	MOVW	R19, 4(R6)
	CMP	$3, R2
	BLT	q8done
	VMOV	V24.S[2], R19
	MOVW	R19, 8(R6)

q8done:
	RET

// func dotQ4_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)
TEXT ·dotQ4_0RowsNEON(SB), NOSPLIT, $0-57
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	nb+40(FP), R5
	MOVD	out+48(FP), R6
	MOVBU	sdot+56(FP), R7
	WORD $0x4f00e5fe // movi v30.16b, #15
	WORD $0x4f00e51f // movi v31.16b, #8

q4group:
	// R10..R13: the group's rows; when fewer than four are left (R2),
	// the missing ones repeat the last, computed and dropped.
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
	MOVD	R4, R15
	MOVD	R5, R9
	VEOR	V24.B16, V24.B16, V24.B16 // lane i: row i's sum

q4block:
	VLD1.P	32(R14), [V0.B16, V1.B16]
	WORD $0x4ddfc9e2 // ld1r {v2.4s}, [x15], #4
	WORD $0x0ddf4143 // ld1 {v3.h}[0], [x10], #2
	WORD $0x0ddf4963 // ld1 {v3.h}[1], [x11], #2
	WORD $0x0ddf5183 // ld1 {v3.h}[2], [x12], #2
	WORD $0x0ddf59a3 // ld1 {v3.h}[3], [x13], #2
	// Nibbles: low ones are values 0-15, high ones 16-31; minus 8.
	VLD1.P	16(R10), [V4.B16]
	VLD1.P	16(R11), [V6.B16]
	VLD1.P	16(R12), [V8.B16]
	VLD1.P	16(R13), [V10.B16]
	WORD $0x6f0c0485 // ushr v5.16b, v4.16b, #4
	WORD $0x4e3e1c84 // and v4.16b, v4.16b, v30.16b
	WORD $0x6e3f8484 // sub v4.16b, v4.16b, v31.16b
	WORD $0x6e3f84a5 // sub v5.16b, v5.16b, v31.16b
	WORD $0x6f0c04c7 // ushr v7.16b, v6.16b, #4
	WORD $0x4e3e1cc6 // and v6.16b, v6.16b, v30.16b
	WORD $0x6e3f84c6 // sub v6.16b, v6.16b, v31.16b
	WORD $0x6e3f84e7 // sub v7.16b, v7.16b, v31.16b
	WORD $0x6f0c0509 // ushr v9.16b, v8.16b, #4
	WORD $0x4e3e1d08 // and v8.16b, v8.16b, v30.16b
	WORD $0x6e3f8508 // sub v8.16b, v8.16b, v31.16b
	WORD $0x6e3f8529 // sub v9.16b, v9.16b, v31.16b
	WORD $0x6f0c054b // ushr v11.16b, v10.16b, #4
	WORD $0x4e3e1d4a // and v10.16b, v10.16b, v30.16b
	WORD $0x6e3f854a // sub v10.16b, v10.16b, v31.16b
	WORD $0x6e3f856b // sub v11.16b, v11.16b, v31.16b
	CBZ	R7, q4nodot
	VEOR	V16.B16, V16.B16, V16.B16
	WORD $0x4e809490 // sdot v16.4s, v4.16b, v0.16b
	WORD $0x4e8194b0 // sdot v16.4s, v5.16b, v1.16b
	VEOR	V17.B16, V17.B16, V17.B16
	WORD $0x4e8094d1 // sdot v17.4s, v6.16b, v0.16b
	WORD $0x4e8194f1 // sdot v17.4s, v7.16b, v1.16b
	VEOR	V18.B16, V18.B16, V18.B16
	WORD $0x4e809512 // sdot v18.4s, v8.16b, v0.16b
	WORD $0x4e819532 // sdot v18.4s, v9.16b, v1.16b
	VEOR	V19.B16, V19.B16, V19.B16
	WORD $0x4e809553 // sdot v19.4s, v10.16b, v0.16b
	WORD $0x4e819573 // sdot v19.4s, v11.16b, v1.16b
	B	q4sum

q4nodot:
	// |w·a| ≤ 8·128: two products fit an int16 lane.
	WORD $0x0e20c094 // smull v20.8h, v4.8b, v0.8b
	WORD $0x0e2180b4 // smlal v20.8h, v5.8b, v1.8b
	WORD $0x4e20c095 // smull2 v21.8h, v4.16b, v0.16b
	WORD $0x4e2180b5 // smlal2 v21.8h, v5.16b, v1.16b
	WORD $0x4e602a90 // saddlp v16.4s, v20.8h
	WORD $0x4e606ab0 // sadalp v16.4s, v21.8h
	WORD $0x0e20c0d4 // smull v20.8h, v6.8b, v0.8b
	WORD $0x0e2180f4 // smlal v20.8h, v7.8b, v1.8b
	WORD $0x4e20c0d5 // smull2 v21.8h, v6.16b, v0.16b
	WORD $0x4e2180f5 // smlal2 v21.8h, v7.16b, v1.16b
	WORD $0x4e602a91 // saddlp v17.4s, v20.8h
	WORD $0x4e606ab1 // sadalp v17.4s, v21.8h
	WORD $0x0e20c114 // smull v20.8h, v8.8b, v0.8b
	WORD $0x0e218134 // smlal v20.8h, v9.8b, v1.8b
	WORD $0x4e20c115 // smull2 v21.8h, v8.16b, v0.16b
	WORD $0x4e218135 // smlal2 v21.8h, v9.16b, v1.16b
	WORD $0x4e602a92 // saddlp v18.4s, v20.8h
	WORD $0x4e606ab2 // sadalp v18.4s, v21.8h
	WORD $0x0e20c154 // smull v20.8h, v10.8b, v0.8b
	WORD $0x0e218174 // smlal v20.8h, v11.8b, v1.8b
	WORD $0x4e20c155 // smull2 v21.8h, v10.16b, v0.16b
	WORD $0x4e218175 // smlal2 v21.8h, v11.16b, v1.16b
	WORD $0x4e602a93 // saddlp v19.4s, v20.8h
	WORD $0x4e606ab3 // sadalp v19.4s, v21.8h

q4sum:
	WORD $0x4eb1be14 // addp v20.4s, v16.4s, v17.4s
	WORD $0x4eb3be55 // addp v21.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4e21da94 // scvtf v20.4s, v20.4s
	WORD $0x0e217863 // fcvtl v3.4s, v3.4h
	WORD $0x6e22dc63 // fmul v3.4s, v3.4s, v2.4s
	WORD $0x4e34cc78 // fmla v24.4s, v3.4s, v20.4s
	SUBS	$1, R9, R9
	BNE	q4block

	CMP	$4, R2
	BLT	q4tail
	VST1.P	[V24.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	q4group
	RET

q4tail:
	FMOVS	F24, (R6)
	CMP	$2, R2
	BLT	q4done
	VMOV	V24.S[1], R19
	MOVW	R19, 4(R6)
	CMP	$3, R2
	BLT	q4done
	VMOV	V24.S[2], R19
	MOVW	R19, 8(R6)

q4done:
	RET

// func dotQ4KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)
TEXT ·dotQ4KRowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	bs+40(FP), R5
	MOVD	nb+48(FP), R8
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f00e5fe // movi v30.16b, #15

q4krow:
	MOVD	R0, R10
	MOVD	R3, R14
	MOVD	R4, R15
	MOVD	R5, R19
	MOVD	R8, R9
	VEOR	V31.B16, V31.B16, V31.B16 // the row's sum

q4kblock:
	// The eight 6-bit scales and mins (ggml's kmask unpacking): sc[0:4]
	// in R20, sc[4:8] in R25, m[0:4] in R24, m[4:8] in R23.
	MOVWU	4(R10), R20
	MOVWU	8(R10), R21
	MOVWU	12(R10), R22
	LSRW	$4, R22, R23
	ANDW	$0x0f0f0f0f, R23, R23
	LSRW	$6, R21, R24
	ANDW	$0x03030303, R24, R24
	ORRW	R24<<4, R23, R23
	ANDW	$0x3f3f3f3f, R21, R24
	ANDW	$0x0f0f0f0f, R22, R25
	LSRW	$6, R20, R21
	ANDW	$0x03030303, R21, R21
	ORRW	R21<<4, R25, R25
	ANDW	$0x3f3f3f3f, R20, R20
	VMOV	R20, V26.S[0]
	VMOV	R25, V26.S[1]
	VMOV	R24, V27.S[0]
	VMOV	R23, V27.S[1]
	MOVWU	(R10), R20
	VMOV	R20, V12.S[0] // d, dmin
	ADD	$16, R10, R11
	CBZ	R7, q4knodot
	VEOR	V16.B16, V16.B16, V16.B16
	VEOR	V17.B16, V17.B16, V17.B16
	VEOR	V18.B16, V18.B16, V18.B16
	VEOR	V19.B16, V19.B16, V19.B16
	VEOR	V20.B16, V20.B16, V20.B16
	VEOR	V21.B16, V21.B16, V21.B16
	VEOR	V22.B16, V22.B16, V22.B16
	VEOR	V23.B16, V23.B16, V23.B16
	// values 0-63: low nibbles × a[0:32], high × a[32:64]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x4e8094d0 // sdot v16.4s, v6.16b, v0.16b
	WORD $0x4e8194f0 // sdot v16.4s, v7.16b, v1.16b
	WORD $0x4e829511 // sdot v17.4s, v8.16b, v2.16b
	WORD $0x4e839531 // sdot v17.4s, v9.16b, v3.16b
	// values 64-127: low nibbles × a[64:96], high × a[96:128]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x4e8094d2 // sdot v18.4s, v6.16b, v0.16b
	WORD $0x4e8194f2 // sdot v18.4s, v7.16b, v1.16b
	WORD $0x4e829513 // sdot v19.4s, v8.16b, v2.16b
	WORD $0x4e839533 // sdot v19.4s, v9.16b, v3.16b
	// values 128-191: low nibbles × a[128:160], high × a[160:192]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x4e8094d4 // sdot v20.4s, v6.16b, v0.16b
	WORD $0x4e8194f4 // sdot v20.4s, v7.16b, v1.16b
	WORD $0x4e829515 // sdot v21.4s, v8.16b, v2.16b
	WORD $0x4e839535 // sdot v21.4s, v9.16b, v3.16b
	// values 192-255: low nibbles × a[192:224], high × a[224:256]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x4e8094d6 // sdot v22.4s, v6.16b, v0.16b
	WORD $0x4e8194f6 // sdot v22.4s, v7.16b, v1.16b
	WORD $0x4e829517 // sdot v23.4s, v8.16b, v2.16b
	WORD $0x4e839537 // sdot v23.4s, v9.16b, v3.16b
	B	q4ksum

q4knodot:
	// |w·a| ≤ 15·127: two products fit an int16 lane.
	// values 0-63: low nibbles × a[0:32], high × a[32:64]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x0e20c0ca // smull v10.8h, v6.8b, v0.8b
	WORD $0x0e2180ea // smlal v10.8h, v7.8b, v1.8b
	WORD $0x4e20c0cb // smull2 v11.8h, v6.16b, v0.16b
	WORD $0x4e2180eb // smlal2 v11.8h, v7.16b, v1.16b
	WORD $0x4e602950 // saddlp v16.4s, v10.8h
	WORD $0x4e606970 // sadalp v16.4s, v11.8h
	WORD $0x0e22c10a // smull v10.8h, v8.8b, v2.8b
	WORD $0x0e23812a // smlal v10.8h, v9.8b, v3.8b
	WORD $0x4e22c10b // smull2 v11.8h, v8.16b, v2.16b
	WORD $0x4e23812b // smlal2 v11.8h, v9.16b, v3.16b
	WORD $0x4e602951 // saddlp v17.4s, v10.8h
	WORD $0x4e606971 // sadalp v17.4s, v11.8h
	// values 64-127: low nibbles × a[64:96], high × a[96:128]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x0e20c0ca // smull v10.8h, v6.8b, v0.8b
	WORD $0x0e2180ea // smlal v10.8h, v7.8b, v1.8b
	WORD $0x4e20c0cb // smull2 v11.8h, v6.16b, v0.16b
	WORD $0x4e2180eb // smlal2 v11.8h, v7.16b, v1.16b
	WORD $0x4e602952 // saddlp v18.4s, v10.8h
	WORD $0x4e606972 // sadalp v18.4s, v11.8h
	WORD $0x0e22c10a // smull v10.8h, v8.8b, v2.8b
	WORD $0x0e23812a // smlal v10.8h, v9.8b, v3.8b
	WORD $0x4e22c10b // smull2 v11.8h, v8.16b, v2.16b
	WORD $0x4e23812b // smlal2 v11.8h, v9.16b, v3.16b
	WORD $0x4e602953 // saddlp v19.4s, v10.8h
	WORD $0x4e606973 // sadalp v19.4s, v11.8h
	// values 128-191: low nibbles × a[128:160], high × a[160:192]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x0e20c0ca // smull v10.8h, v6.8b, v0.8b
	WORD $0x0e2180ea // smlal v10.8h, v7.8b, v1.8b
	WORD $0x4e20c0cb // smull2 v11.8h, v6.16b, v0.16b
	WORD $0x4e2180eb // smlal2 v11.8h, v7.16b, v1.16b
	WORD $0x4e602954 // saddlp v20.4s, v10.8h
	WORD $0x4e606974 // sadalp v20.4s, v11.8h
	WORD $0x0e22c10a // smull v10.8h, v8.8b, v2.8b
	WORD $0x0e23812a // smlal v10.8h, v9.8b, v3.8b
	WORD $0x4e22c10b // smull2 v11.8h, v8.16b, v2.16b
	WORD $0x4e23812b // smlal2 v11.8h, v9.16b, v3.16b
	WORD $0x4e602955 // saddlp v21.4s, v10.8h
	WORD $0x4e606975 // sadalp v21.4s, v11.8h
	// values 192-255: low nibbles × a[192:224], high × a[224:256]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4e3e1c86 // and v6.16b, v4.16b, v30.16b
	WORD $0x4e3e1ca7 // and v7.16b, v5.16b, v30.16b
	WORD $0x6f0c0488 // ushr v8.16b, v4.16b, #4
	WORD $0x6f0c04a9 // ushr v9.16b, v5.16b, #4
	WORD $0x0e20c0ca // smull v10.8h, v6.8b, v0.8b
	WORD $0x0e2180ea // smlal v10.8h, v7.8b, v1.8b
	WORD $0x4e20c0cb // smull2 v11.8h, v6.16b, v0.16b
	WORD $0x4e2180eb // smlal2 v11.8h, v7.16b, v1.16b
	WORD $0x4e602956 // saddlp v22.4s, v10.8h
	WORD $0x4e606976 // sadalp v22.4s, v11.8h
	WORD $0x0e22c10a // smull v10.8h, v8.8b, v2.8b
	WORD $0x0e23812a // smlal v10.8h, v9.8b, v3.8b
	WORD $0x4e22c10b // smull2 v11.8h, v8.16b, v2.16b
	WORD $0x4e23812b // smlal2 v11.8h, v9.16b, v3.16b
	WORD $0x4e602957 // saddlp v23.4s, v10.8h
	WORD $0x4e606977 // sadalp v23.4s, v11.8h

q4ksum:
	// msum = Σ m[k]·(bs[2k] + bs[2k+1])
	VLD1.P	32(R19), [V14.H8, V15.H8]
	WORD $0x4e6fbdce // addp v14.8h, v14.8h, v15.8h
	WORD $0x2f08a77b // ushll v27.8h, v27.8b, #0
	WORD $0x0e6ec36f // smull v15.4s, v27.4h, v14.4h
	WORD $0x4e6e836f // smlal2 v15.4s, v27.8h, v14.8h
	WORD $0x4eb1b9ef // addv s15, v15.4s
	// isum = Σ sc[k]·(sub-block k's sum)
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb2be10 // addp v16.4s, v16.4s, v18.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb6be94 // addp v20.4s, v20.4s, v22.4s
	WORD $0x2f08a75a // ushll v26.8h, v26.8b, #0
	WORD $0x2f10a758 // ushll v24.4s, v26.4h, #0
	WORD $0x6f10a759 // ushll2 v25.4s, v26.8h, #0
	WORD $0x4eb89e10 // mul v16.4s, v16.4s, v24.4s
	WORD $0x4eb99690 // mla v16.4s, v20.4s, v25.4s
	WORD $0x4eb1ba10 // addv s16, v16.4s
	// kCombine: sum + ((d·da)·isum − (dmin·da)·msum), each step rounded
	WORD $0x6e0c05f0 // mov v16.s[1], v15.s[0]
	WORD $0x0e21da10 // scvtf v16.2s, v16.2s
	WORD $0x0e21798c // fcvtl v12.4s, v12.4h
	WORD $0x4ddfc9ed // ld1r {v13.4s}, [x15], #4
	WORD $0x2e2ddd8c // fmul v12.2s, v12.2s, v13.2s
	WORD $0x2e2cde10 // fmul v16.2s, v16.2s, v12.2s
	WORD $0x5e0c0611 // mov s17, v16.s[1]
	WORD $0x1e313a10 // fsub s16, s16, s17
	WORD $0x1e302bff // fadd s31, s31, s16
	MOVD	R11, R10
	SUBS	$1, R9, R9
	BNE	q4kblock

	FMOVS	F31, (R6)
	ADD	$4, R6, R6
	ADD	R1, R0, R0
	SUBS	$1, R2, R2
	BNE	q4krow
	RET

// func dotQ5KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)
TEXT ·dotQ5KRowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	bs+40(FP), R5
	MOVD	nb+48(FP), R8
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f00e42a // movi v10.16b, #1
	WORD $0x4f00e60b // movi v11.16b, #16

q5krow:
	MOVD	R0, R10
	MOVD	R3, R14
	MOVD	R4, R15
	MOVD	R5, R19
	MOVD	R8, R9
	VEOR	V31.B16, V31.B16, V31.B16 // the row's sum

q5kblock:
	// The scales and mins as for Q4_K: sc[0:4] in R20, sc[4:8] in R25,
	// m[0:4] in R24, m[4:8] in R23.
	MOVWU	4(R10), R20
	MOVWU	8(R10), R21
	MOVWU	12(R10), R22
	LSRW	$4, R22, R23
	ANDW	$0x0f0f0f0f, R23, R23
	LSRW	$6, R21, R24
	ANDW	$0x03030303, R24, R24
	ORRW	R24<<4, R23, R23
	ANDW	$0x3f3f3f3f, R21, R24
	ANDW	$0x0f0f0f0f, R22, R25
	LSRW	$6, R20, R21
	ANDW	$0x03030303, R21, R21
	ORRW	R21<<4, R25, R25
	ANDW	$0x3f3f3f3f, R20, R20
	VMOV	R20, V26.S[0]
	VMOV	R25, V26.S[1]
	VMOV	R24, V27.S[0]
	VMOV	R23, V27.S[1]
	MOVWU	(R10), R20
	VMOV	R20, V12.S[0] // d, dmin
	ADD	$16, R10, R11
	VLD1.P	32(R11), [V28.B16, V29.B16] // qh; R11 is then at qs
	CBZ	R7, q5knodot
	VEOR	V16.B16, V16.B16, V16.B16
	VEOR	V17.B16, V17.B16, V17.B16
	VEOR	V18.B16, V18.B16, V18.B16
	VEOR	V19.B16, V19.B16, V19.B16
	VEOR	V20.B16, V20.B16, V20.B16
	VEOR	V21.B16, V21.B16, V21.B16
	VEOR	V22.B16, V22.B16, V22.B16
	VEOR	V23.B16, V23.B16, V23.B16
	// values 0-63: nibbles of qs[0:32] with bits 0 (low) and 1 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x4e809490 // sdot v16.4s, v4.16b, v0.16b
	WORD $0x4e8194b0 // sdot v16.4s, v5.16b, v1.16b
	WORD $0x4e829511 // sdot v17.4s, v8.16b, v2.16b
	WORD $0x4e839531 // sdot v17.4s, v9.16b, v3.16b
	// values 64-127: nibbles of qs[32:64] with bits 2 (low) and 3 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x4e809492 // sdot v18.4s, v4.16b, v0.16b
	WORD $0x4e8194b2 // sdot v18.4s, v5.16b, v1.16b
	WORD $0x4e829513 // sdot v19.4s, v8.16b, v2.16b
	WORD $0x4e839533 // sdot v19.4s, v9.16b, v3.16b
	// values 128-191: nibbles of qs[64:96] with bits 4 (low) and 5 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x4e809494 // sdot v20.4s, v4.16b, v0.16b
	WORD $0x4e8194b4 // sdot v20.4s, v5.16b, v1.16b
	WORD $0x4e829515 // sdot v21.4s, v8.16b, v2.16b
	WORD $0x4e839535 // sdot v21.4s, v9.16b, v3.16b
	// values 192-255: nibbles of qs[96:128] with bits 6 (low) and 7 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x4e809496 // sdot v22.4s, v4.16b, v0.16b
	WORD $0x4e8194b6 // sdot v22.4s, v5.16b, v1.16b
	WORD $0x4e829517 // sdot v23.4s, v8.16b, v2.16b
	WORD $0x4e839537 // sdot v23.4s, v9.16b, v3.16b
	B	q5ksum

q5knodot:
	// |w·a| ≤ 31·127: two products fit an int16 lane.
	// values 0-63: nibbles of qs[0:32] with bits 0 (low) and 1 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x0e20c086 // smull v6.8h, v4.8b, v0.8b
	WORD $0x0e2180a6 // smlal v6.8h, v5.8b, v1.8b
	WORD $0x4e20c087 // smull2 v7.8h, v4.16b, v0.16b
	WORD $0x4e2180a7 // smlal2 v7.8h, v5.16b, v1.16b
	WORD $0x4e6028d0 // saddlp v16.4s, v6.8h
	WORD $0x4e6068f0 // sadalp v16.4s, v7.8h
	WORD $0x0e22c106 // smull v6.8h, v8.8b, v2.8b
	WORD $0x0e238126 // smlal v6.8h, v9.8b, v3.8b
	WORD $0x4e22c107 // smull2 v7.8h, v8.16b, v2.16b
	WORD $0x4e238127 // smlal2 v7.8h, v9.16b, v3.16b
	WORD $0x4e6028d1 // saddlp v17.4s, v6.8h
	WORD $0x4e6068f1 // sadalp v17.4s, v7.8h
	// values 64-127: nibbles of qs[32:64] with bits 2 (low) and 3 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x0e20c086 // smull v6.8h, v4.8b, v0.8b
	WORD $0x0e2180a6 // smlal v6.8h, v5.8b, v1.8b
	WORD $0x4e20c087 // smull2 v7.8h, v4.16b, v0.16b
	WORD $0x4e2180a7 // smlal2 v7.8h, v5.16b, v1.16b
	WORD $0x4e6028d2 // saddlp v18.4s, v6.8h
	WORD $0x4e6068f2 // sadalp v18.4s, v7.8h
	WORD $0x0e22c106 // smull v6.8h, v8.8b, v2.8b
	WORD $0x0e238126 // smlal v6.8h, v9.8b, v3.8b
	WORD $0x4e22c107 // smull2 v7.8h, v8.16b, v2.16b
	WORD $0x4e238127 // smlal2 v7.8h, v9.16b, v3.16b
	WORD $0x4e6028d3 // saddlp v19.4s, v6.8h
	WORD $0x4e6068f3 // sadalp v19.4s, v7.8h
	// values 128-191: nibbles of qs[64:96] with bits 4 (low) and 5 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x6f0e079c // ushr v28.16b, v28.16b, #2
	WORD $0x6f0e07bd // ushr v29.16b, v29.16b, #2
	WORD $0x0e20c086 // smull v6.8h, v4.8b, v0.8b
	WORD $0x0e2180a6 // smlal v6.8h, v5.8b, v1.8b
	WORD $0x4e20c087 // smull2 v7.8h, v4.16b, v0.16b
	WORD $0x4e2180a7 // smlal2 v7.8h, v5.16b, v1.16b
	WORD $0x4e6028d4 // saddlp v20.4s, v6.8h
	WORD $0x4e6068f4 // sadalp v20.4s, v7.8h
	WORD $0x0e22c106 // smull v6.8h, v8.8b, v2.8b
	WORD $0x0e238126 // smlal v6.8h, v9.8b, v3.8b
	WORD $0x4e22c107 // smull2 v7.8h, v8.16b, v2.16b
	WORD $0x4e238127 // smlal2 v7.8h, v9.16b, v3.16b
	WORD $0x4e6028d5 // saddlp v21.4s, v6.8h
	WORD $0x4e6068f5 // sadalp v21.4s, v7.8h
	// values 192-255: nibbles of qs[96:128] with bits 6 (low) and 7 (high) of qh
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	32(R11), [V4.B16, V5.B16]
	WORD $0x4f0b5788 // shl v8.16b, v28.16b, #3
	WORD $0x4f0b57a9 // shl v9.16b, v29.16b, #3
	WORD $0x4e2b1d08 // and v8.16b, v8.16b, v11.16b
	WORD $0x4e2b1d29 // and v9.16b, v9.16b, v11.16b
	WORD $0x6f0c4488 // sri v8.16b, v4.16b, #4
	WORD $0x6f0c44a9 // sri v9.16b, v5.16b, #4
	WORD $0x4e2a1f86 // and v6.16b, v28.16b, v10.16b
	WORD $0x4e2a1fa7 // and v7.16b, v29.16b, v10.16b
	WORD $0x6f0c54c4 // sli v4.16b, v6.16b, #4
	WORD $0x6f0c54e5 // sli v5.16b, v7.16b, #4
	WORD $0x0e20c086 // smull v6.8h, v4.8b, v0.8b
	WORD $0x0e2180a6 // smlal v6.8h, v5.8b, v1.8b
	WORD $0x4e20c087 // smull2 v7.8h, v4.16b, v0.16b
	WORD $0x4e2180a7 // smlal2 v7.8h, v5.16b, v1.16b
	WORD $0x4e6028d6 // saddlp v22.4s, v6.8h
	WORD $0x4e6068f6 // sadalp v22.4s, v7.8h
	WORD $0x0e22c106 // smull v6.8h, v8.8b, v2.8b
	WORD $0x0e238126 // smlal v6.8h, v9.8b, v3.8b
	WORD $0x4e22c107 // smull2 v7.8h, v8.16b, v2.16b
	WORD $0x4e238127 // smlal2 v7.8h, v9.16b, v3.16b
	WORD $0x4e6028d7 // saddlp v23.4s, v6.8h
	WORD $0x4e6068f7 // sadalp v23.4s, v7.8h

q5ksum:
	// msum = Σ m[k]·(bs[2k] + bs[2k+1])
	VLD1.P	32(R19), [V14.H8, V15.H8]
	WORD $0x4e6fbdce // addp v14.8h, v14.8h, v15.8h
	WORD $0x2f08a77b // ushll v27.8h, v27.8b, #0
	WORD $0x0e6ec36f // smull v15.4s, v27.4h, v14.4h
	WORD $0x4e6e836f // smlal2 v15.4s, v27.8h, v14.8h
	WORD $0x4eb1b9ef // addv s15, v15.4s
	// isum = Σ sc[k]·(sub-block k's sum)
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb2be10 // addp v16.4s, v16.4s, v18.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb6be94 // addp v20.4s, v20.4s, v22.4s
	WORD $0x2f08a75a // ushll v26.8h, v26.8b, #0
	WORD $0x2f10a758 // ushll v24.4s, v26.4h, #0
	WORD $0x6f10a759 // ushll2 v25.4s, v26.8h, #0
	WORD $0x4eb89e10 // mul v16.4s, v16.4s, v24.4s
	WORD $0x4eb99690 // mla v16.4s, v20.4s, v25.4s
	WORD $0x4eb1ba10 // addv s16, v16.4s
	// kCombine: sum + ((d·da)·isum − (dmin·da)·msum), each step rounded
	WORD $0x6e0c05f0 // mov v16.s[1], v15.s[0]
	WORD $0x0e21da10 // scvtf v16.2s, v16.2s
	WORD $0x0e21798c // fcvtl v12.4s, v12.4h
	WORD $0x4ddfc9ed // ld1r {v13.4s}, [x15], #4
	WORD $0x2e2ddd8c // fmul v12.2s, v12.2s, v13.2s
	WORD $0x2e2cde10 // fmul v16.2s, v16.2s, v12.2s
	WORD $0x5e0c0611 // mov s17, v16.s[1]
	WORD $0x1e313a10 // fsub s16, s16, s17
	WORD $0x1e302bff // fadd s31, s31, s16
	MOVD	R11, R10
	SUBS	$1, R9, R9
	BNE	q5kblock

	FMOVS	F31, (R6)
	ADD	$4, R6, R6
	ADD	R1, R0, R0
	SUBS	$1, R2, R2
	BNE	q5krow
	RET

// func dotQ6KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)
TEXT ·dotQ6KRowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	bs+40(FP), R5
	MOVD	nb+48(FP), R8
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f01e61c // movi v28.16b, #0x30
	WORD $0x4f00e47d // movi v29.16b, #3

q6krow:
	MOVD	R0, R10
	MOVD	R3, R14
	MOVD	R4, R15
	MOVD	R5, R19
	MOVD	R8, R9
	VEOR	V31.B16, V31.B16, V31.B16 // the row's sum

q6kblock:
	MOVD	R10, R11 // ql
	ADD	$128, R10, R12 // qh, then the scales and d
	CBZ	R7, q6knodot
	// values 0-127: ql[0:64], qh[0:32]; sub-block k (16 values) in V(8+k)
	VLD1.P	64(R11), [V8.B16, V9.B16, V10.B16, V11.B16]
	VLD1.P	32(R12), [V16.B16, V17.B16]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	64(R14), [V4.B16, V5.B16, V6.B16, V7.B16]
	// high nibbles first (4-7), then the low ones in place (0-3)
	WORD $0x4e3c1e0c // and v12.16b, v16.16b, v28.16b
	WORD $0x6f0c450c // sri v12.16b, v8.16b, #4
	WORD $0x4e3c1e2d // and v13.16b, v17.16b, v28.16b
	WORD $0x6f0c452d // sri v13.16b, v9.16b, #4
	WORD $0x6f0e060e // ushr v14.16b, v16.16b, #2
	WORD $0x4e3d1dd2 // and v18.16b, v14.16b, v29.16b
	WORD $0x6f0c454e // sri v14.16b, v10.16b, #4
	WORD $0x6f0e062f // ushr v15.16b, v17.16b, #2
	WORD $0x4e3d1df3 // and v19.16b, v15.16b, v29.16b
	WORD $0x6f0c456f // sri v15.16b, v11.16b, #4
	WORD $0x6f0c564a // sli v10.16b, v18.16b, #4
	WORD $0x6f0c566b // sli v11.16b, v19.16b, #4
	WORD $0x4e3d1e12 // and v18.16b, v16.16b, v29.16b
	WORD $0x6f0c5648 // sli v8.16b, v18.16b, #4
	WORD $0x4e3d1e33 // and v19.16b, v17.16b, v29.16b
	WORD $0x6f0c5669 // sli v9.16b, v19.16b, #4
	VEOR	V16.B16, V16.B16, V16.B16
	VEOR	V17.B16, V17.B16, V17.B16
	VEOR	V18.B16, V18.B16, V18.B16
	VEOR	V19.B16, V19.B16, V19.B16
	VEOR	V20.B16, V20.B16, V20.B16
	VEOR	V21.B16, V21.B16, V21.B16
	VEOR	V22.B16, V22.B16, V22.B16
	VEOR	V23.B16, V23.B16, V23.B16
	WORD $0x4e809510 // sdot v16.4s, v8.16b, v0.16b
	WORD $0x4e819531 // sdot v17.4s, v9.16b, v1.16b
	WORD $0x4e829552 // sdot v18.4s, v10.16b, v2.16b
	WORD $0x4e839573 // sdot v19.4s, v11.16b, v3.16b
	WORD $0x4e849594 // sdot v20.4s, v12.16b, v4.16b
	WORD $0x4e8595b5 // sdot v21.4s, v13.16b, v5.16b
	WORD $0x4e8695d6 // sdot v22.4s, v14.16b, v6.16b
	WORD $0x4e8795f7 // sdot v23.4s, v15.16b, v7.16b
	// the eight sub-block sums, in order, in V24 and V25
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb2be18 // addp v24.4s, v16.4s, v18.4s
	WORD $0x4eb6be99 // addp v25.4s, v20.4s, v22.4s
	// values 128-255: ql[64:128], qh[32:64]; sub-block k (16 values) in V(8+k)
	VLD1.P	64(R11), [V8.B16, V9.B16, V10.B16, V11.B16]
	VLD1.P	32(R12), [V16.B16, V17.B16]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	64(R14), [V4.B16, V5.B16, V6.B16, V7.B16]
	// high nibbles first (4-7), then the low ones in place (0-3)
	WORD $0x4e3c1e0c // and v12.16b, v16.16b, v28.16b
	WORD $0x6f0c450c // sri v12.16b, v8.16b, #4
	WORD $0x4e3c1e2d // and v13.16b, v17.16b, v28.16b
	WORD $0x6f0c452d // sri v13.16b, v9.16b, #4
	WORD $0x6f0e060e // ushr v14.16b, v16.16b, #2
	WORD $0x4e3d1dd2 // and v18.16b, v14.16b, v29.16b
	WORD $0x6f0c454e // sri v14.16b, v10.16b, #4
	WORD $0x6f0e062f // ushr v15.16b, v17.16b, #2
	WORD $0x4e3d1df3 // and v19.16b, v15.16b, v29.16b
	WORD $0x6f0c456f // sri v15.16b, v11.16b, #4
	WORD $0x6f0c564a // sli v10.16b, v18.16b, #4
	WORD $0x6f0c566b // sli v11.16b, v19.16b, #4
	WORD $0x4e3d1e12 // and v18.16b, v16.16b, v29.16b
	WORD $0x6f0c5648 // sli v8.16b, v18.16b, #4
	WORD $0x4e3d1e33 // and v19.16b, v17.16b, v29.16b
	WORD $0x6f0c5669 // sli v9.16b, v19.16b, #4
	VEOR	V16.B16, V16.B16, V16.B16
	VEOR	V17.B16, V17.B16, V17.B16
	VEOR	V18.B16, V18.B16, V18.B16
	VEOR	V19.B16, V19.B16, V19.B16
	VEOR	V20.B16, V20.B16, V20.B16
	VEOR	V21.B16, V21.B16, V21.B16
	VEOR	V22.B16, V22.B16, V22.B16
	VEOR	V23.B16, V23.B16, V23.B16
	WORD $0x4e809510 // sdot v16.4s, v8.16b, v0.16b
	WORD $0x4e819531 // sdot v17.4s, v9.16b, v1.16b
	WORD $0x4e829552 // sdot v18.4s, v10.16b, v2.16b
	WORD $0x4e839573 // sdot v19.4s, v11.16b, v3.16b
	WORD $0x4e849594 // sdot v20.4s, v12.16b, v4.16b
	WORD $0x4e8595b5 // sdot v21.4s, v13.16b, v5.16b
	WORD $0x4e8695d6 // sdot v22.4s, v14.16b, v6.16b
	WORD $0x4e8795f7 // sdot v23.4s, v15.16b, v7.16b
	// the eight sub-block sums, in order, in V26 and V27
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb2be1a // addp v26.4s, v16.4s, v18.4s
	WORD $0x4eb6be9b // addp v27.4s, v20.4s, v22.4s
	B	q6ksum

q6knodot:
	// |w·a| ≤ 63·128 fits an int16 lane.
	// values 0-127: ql[0:64], qh[0:32]; sub-block k (16 values) in V(8+k)
	VLD1.P	64(R11), [V8.B16, V9.B16, V10.B16, V11.B16]
	VLD1.P	32(R12), [V16.B16, V17.B16]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	64(R14), [V4.B16, V5.B16, V6.B16, V7.B16]
	// high nibbles first (4-7), then the low ones in place (0-3)
	WORD $0x4e3c1e0c // and v12.16b, v16.16b, v28.16b
	WORD $0x6f0c450c // sri v12.16b, v8.16b, #4
	WORD $0x4e3c1e2d // and v13.16b, v17.16b, v28.16b
	WORD $0x6f0c452d // sri v13.16b, v9.16b, #4
	WORD $0x6f0e060e // ushr v14.16b, v16.16b, #2
	WORD $0x4e3d1dd2 // and v18.16b, v14.16b, v29.16b
	WORD $0x6f0c454e // sri v14.16b, v10.16b, #4
	WORD $0x6f0e062f // ushr v15.16b, v17.16b, #2
	WORD $0x4e3d1df3 // and v19.16b, v15.16b, v29.16b
	WORD $0x6f0c456f // sri v15.16b, v11.16b, #4
	WORD $0x6f0c564a // sli v10.16b, v18.16b, #4
	WORD $0x6f0c566b // sli v11.16b, v19.16b, #4
	WORD $0x4e3d1e12 // and v18.16b, v16.16b, v29.16b
	WORD $0x6f0c5648 // sli v8.16b, v18.16b, #4
	WORD $0x4e3d1e33 // and v19.16b, v17.16b, v29.16b
	WORD $0x6f0c5669 // sli v9.16b, v19.16b, #4
	WORD $0x0e20c110 // smull v16.8h, v8.8b, v0.8b
	WORD $0x4e20c108 // smull2 v8.8h, v8.16b, v0.16b
	WORD $0x4e602a10 // saddlp v16.4s, v16.8h
	WORD $0x4e606910 // sadalp v16.4s, v8.8h
	WORD $0x0e21c131 // smull v17.8h, v9.8b, v1.8b
	WORD $0x4e21c129 // smull2 v9.8h, v9.16b, v1.16b
	WORD $0x4e602a31 // saddlp v17.4s, v17.8h
	WORD $0x4e606931 // sadalp v17.4s, v9.8h
	WORD $0x0e22c152 // smull v18.8h, v10.8b, v2.8b
	WORD $0x4e22c14a // smull2 v10.8h, v10.16b, v2.16b
	WORD $0x4e602a52 // saddlp v18.4s, v18.8h
	WORD $0x4e606952 // sadalp v18.4s, v10.8h
	WORD $0x0e23c173 // smull v19.8h, v11.8b, v3.8b
	WORD $0x4e23c16b // smull2 v11.8h, v11.16b, v3.16b
	WORD $0x4e602a73 // saddlp v19.4s, v19.8h
	WORD $0x4e606973 // sadalp v19.4s, v11.8h
	WORD $0x0e24c194 // smull v20.8h, v12.8b, v4.8b
	WORD $0x4e24c18c // smull2 v12.8h, v12.16b, v4.16b
	WORD $0x4e602a94 // saddlp v20.4s, v20.8h
	WORD $0x4e606994 // sadalp v20.4s, v12.8h
	WORD $0x0e25c1b5 // smull v21.8h, v13.8b, v5.8b
	WORD $0x4e25c1ad // smull2 v13.8h, v13.16b, v5.16b
	WORD $0x4e602ab5 // saddlp v21.4s, v21.8h
	WORD $0x4e6069b5 // sadalp v21.4s, v13.8h
	WORD $0x0e26c1d6 // smull v22.8h, v14.8b, v6.8b
	WORD $0x4e26c1ce // smull2 v14.8h, v14.16b, v6.16b
	WORD $0x4e602ad6 // saddlp v22.4s, v22.8h
	WORD $0x4e6069d6 // sadalp v22.4s, v14.8h
	WORD $0x0e27c1f7 // smull v23.8h, v15.8b, v7.8b
	WORD $0x4e27c1ef // smull2 v15.8h, v15.16b, v7.16b
	WORD $0x4e602af7 // saddlp v23.4s, v23.8h
	WORD $0x4e6069f7 // sadalp v23.4s, v15.8h
	// the eight sub-block sums, in order, in V24 and V25
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb2be18 // addp v24.4s, v16.4s, v18.4s
	WORD $0x4eb6be99 // addp v25.4s, v20.4s, v22.4s
	// values 128-255: ql[64:128], qh[32:64]; sub-block k (16 values) in V(8+k)
	VLD1.P	64(R11), [V8.B16, V9.B16, V10.B16, V11.B16]
	VLD1.P	32(R12), [V16.B16, V17.B16]
	VLD1.P	64(R14), [V0.B16, V1.B16, V2.B16, V3.B16]
	VLD1.P	64(R14), [V4.B16, V5.B16, V6.B16, V7.B16]
	// high nibbles first (4-7), then the low ones in place (0-3)
	WORD $0x4e3c1e0c // and v12.16b, v16.16b, v28.16b
	WORD $0x6f0c450c // sri v12.16b, v8.16b, #4
	WORD $0x4e3c1e2d // and v13.16b, v17.16b, v28.16b
	WORD $0x6f0c452d // sri v13.16b, v9.16b, #4
	WORD $0x6f0e060e // ushr v14.16b, v16.16b, #2
	WORD $0x4e3d1dd2 // and v18.16b, v14.16b, v29.16b
	WORD $0x6f0c454e // sri v14.16b, v10.16b, #4
	WORD $0x6f0e062f // ushr v15.16b, v17.16b, #2
	WORD $0x4e3d1df3 // and v19.16b, v15.16b, v29.16b
	WORD $0x6f0c456f // sri v15.16b, v11.16b, #4
	WORD $0x6f0c564a // sli v10.16b, v18.16b, #4
	WORD $0x6f0c566b // sli v11.16b, v19.16b, #4
	WORD $0x4e3d1e12 // and v18.16b, v16.16b, v29.16b
	WORD $0x6f0c5648 // sli v8.16b, v18.16b, #4
	WORD $0x4e3d1e33 // and v19.16b, v17.16b, v29.16b
	WORD $0x6f0c5669 // sli v9.16b, v19.16b, #4
	WORD $0x0e20c110 // smull v16.8h, v8.8b, v0.8b
	WORD $0x4e20c108 // smull2 v8.8h, v8.16b, v0.16b
	WORD $0x4e602a10 // saddlp v16.4s, v16.8h
	WORD $0x4e606910 // sadalp v16.4s, v8.8h
	WORD $0x0e21c131 // smull v17.8h, v9.8b, v1.8b
	WORD $0x4e21c129 // smull2 v9.8h, v9.16b, v1.16b
	WORD $0x4e602a31 // saddlp v17.4s, v17.8h
	WORD $0x4e606931 // sadalp v17.4s, v9.8h
	WORD $0x0e22c152 // smull v18.8h, v10.8b, v2.8b
	WORD $0x4e22c14a // smull2 v10.8h, v10.16b, v2.16b
	WORD $0x4e602a52 // saddlp v18.4s, v18.8h
	WORD $0x4e606952 // sadalp v18.4s, v10.8h
	WORD $0x0e23c173 // smull v19.8h, v11.8b, v3.8b
	WORD $0x4e23c16b // smull2 v11.8h, v11.16b, v3.16b
	WORD $0x4e602a73 // saddlp v19.4s, v19.8h
	WORD $0x4e606973 // sadalp v19.4s, v11.8h
	WORD $0x0e24c194 // smull v20.8h, v12.8b, v4.8b
	WORD $0x4e24c18c // smull2 v12.8h, v12.16b, v4.16b
	WORD $0x4e602a94 // saddlp v20.4s, v20.8h
	WORD $0x4e606994 // sadalp v20.4s, v12.8h
	WORD $0x0e25c1b5 // smull v21.8h, v13.8b, v5.8b
	WORD $0x4e25c1ad // smull2 v13.8h, v13.16b, v5.16b
	WORD $0x4e602ab5 // saddlp v21.4s, v21.8h
	WORD $0x4e6069b5 // sadalp v21.4s, v13.8h
	WORD $0x0e26c1d6 // smull v22.8h, v14.8b, v6.8b
	WORD $0x4e26c1ce // smull2 v14.8h, v14.16b, v6.16b
	WORD $0x4e602ad6 // saddlp v22.4s, v22.8h
	WORD $0x4e6069d6 // sadalp v22.4s, v14.8h
	WORD $0x0e27c1f7 // smull v23.8h, v15.8b, v7.8b
	WORD $0x4e27c1ef // smull2 v15.8h, v15.16b, v7.16b
	WORD $0x4e602af7 // saddlp v23.4s, v23.8h
	WORD $0x4e6069f7 // sadalp v23.4s, v15.8h
	// the eight sub-block sums, in order, in V26 and V27
	WORD $0x4eb1be10 // addp v16.4s, v16.4s, v17.4s
	WORD $0x4eb3be52 // addp v18.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4eb7bed6 // addp v22.4s, v22.4s, v23.4s
	WORD $0x4eb2be1a // addp v26.4s, v16.4s, v18.4s
	WORD $0x4eb6be9b // addp v27.4s, v20.4s, v22.4s

q6ksum:
	// isum − 32·msum = Σ sc[s]·(sub-block s's sum) − 32·Σ sc[s]·bs[s]
	VLD1.P	16(R12), [V0.B16]
	VLD1.P	32(R19), [V3.H8, V4.H8]
	WORD $0x0f08a401 // sxtl v1.8h, v0.8b
	WORD $0x4f08a402 // sxtl2 v2.8h, v0.16b
	WORD $0x0e63c025 // smull v5.4s, v1.4h, v3.4h
	WORD $0x4e638025 // smlal2 v5.4s, v1.8h, v3.8h
	WORD $0x0e648045 // smlal v5.4s, v2.4h, v4.4h
	WORD $0x4e648045 // smlal2 v5.4s, v2.8h, v4.8h
	WORD $0x0f10a426 // sxtl v6.4s, v1.4h
	WORD $0x4f10a427 // sxtl2 v7.4s, v1.8h
	WORD $0x0f10a448 // sxtl v8.4s, v2.4h
	WORD $0x4f10a449 // sxtl2 v9.4s, v2.8h
	WORD $0x4ea69f0a // mul v10.4s, v24.4s, v6.4s
	WORD $0x4ea7972a // mla v10.4s, v25.4s, v7.4s
	WORD $0x4ea8974a // mla v10.4s, v26.4s, v8.4s
	WORD $0x4ea9976a // mla v10.4s, v27.4s, v9.4s
	WORD $0x4f2554a5 // shl v5.4s, v5.4s, #5
	WORD $0x6ea5854a // sub v10.4s, v10.4s, v5.4s
	WORD $0x4eb1b94a // addv s10, v10.4s
	// sum + (d·da)·(isum − 32·msum), each step rounded
	WORD $0x5e21d94a // scvtf s10, s10
	WORD $0x7c40258b // ldr h11, [x12], #2
	WORD $0x1ee2416b // fcvt s11, h11
	WORD $0xbc4045ec // ldr s12, [x15], #4
	WORD $0x1e2c096b // fmul s11, s11, s12
	WORD $0x1e2a096a // fmul s10, s11, s10
	WORD $0x1e2a2bff // fadd s31, s31, s10
	MOVD	R12, R10
	SUBS	$1, R9, R9
	BNE	q6kblock

	FMOVS	F31, (R6)
	ADD	$4, R6, R6
	ADD	R1, R0, R0
	SUBS	$1, R2, R2
	BNE	q6krow
	RET
