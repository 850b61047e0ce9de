//go:build !purego

// NEON kernels for the Q4_1, Q5_0 and Q5_1 row products on arm64, four
// rows at a time against the 32-value activation form, as Q4_0's in
// dot_arm64.s: each row's block sum is exact (SDOT, or SMULL/SMLAL with
// pairwise widening adds without the dot-product extension) and the
// float steps are the portable kernel's, so the results equal the
// portable kernels' as compiled for arm64 bit for bit. Q5_0's block adds
// (d·dₐ)·isum fused into the row's sum (FMLA), as the compiler fuses
// dotQ5_0Generic's; Q4_1 and Q5_1 round every step of
// sum + ((d·dₐ)·isum + (m·dₐ)·s), as their explicit conversions demand.
//
// The fifth bits: TBL spreads qh's bytes 0 and 1 (values 0-15) and 2 and
// 3 (values 16-31) over eight lanes each, CMTST against (1, 2, ..., 128)
// turns each lane's own bit into a 0xff/0x00 mask, and that selects 16.
// Q5_0 subtracts 16·(1 − bit) instead of adding 16·bit, which is q − 16
// in one step.
//
// Go's assembler has no mnemonics for most of these vector operations,
// so they are written as WORD encodings; the comment on each is the
// instruction in the Arm syntax (any AArch64 assembler reproduces the
// word, e.g. llvm-mc -triple=aarch64 -mattr=+dotprod -show-encoding).
// Go's R<n> and V<n> are the Arm x<n> and v<n>.

#include "textflag.h"

// func dotQ4_1RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)
TEXT ·dotQ4_1RowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	s+40(FP), R8
	MOVD	nb+48(FP), R5
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f00e5fe // movi v30.16b, #15

q41group:
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
	MOVD	R8, R19
	MOVD	R5, R9
	VEOR	V24.B16, V24.B16, V24.B16 // lane i: row i's sum

q41block:
	VLD1.P	32(R14), [V0.B16, V1.B16]
	WORD $0x4ddfc9e2 // ld1r {v2.4s}, [x15], #4
	WORD $0x0ddf4143 // ld1 {v3.h}[0], [x10], #2
	WORD $0x0ddf4156 // ld1 {v22.h}[0], [x10], #2
	WORD $0x0ddf4963 // ld1 {v3.h}[1], [x11], #2
	WORD $0x0ddf4976 // ld1 {v22.h}[1], [x11], #2
	WORD $0x0ddf5183 // ld1 {v3.h}[2], [x12], #2
	WORD $0x0ddf5196 // ld1 {v22.h}[2], [x12], #2
	WORD $0x0ddf59a3 // ld1 {v3.h}[3], [x13], #2
	WORD $0x0ddf59b6 // ld1 {v22.h}[3], [x13], #2
	VLD1.P	16(R10), [V4.B16]
	VLD1.P	16(R11), [V6.B16]
	VLD1.P	16(R12), [V8.B16]
	VLD1.P	16(R13), [V10.B16]
	// Nibbles: low ones are values 0-15, high ones 16-31.
	WORD $0x6f0c0485 // ushr v5.16b, v4.16b, #4
	WORD $0x4e3e1c84 // and v4.16b, v4.16b, v30.16b
	WORD $0x6f0c04c7 // ushr v7.16b, v6.16b, #4
	WORD $0x4e3e1cc6 // and v6.16b, v6.16b, v30.16b
	WORD $0x6f0c0509 // ushr v9.16b, v8.16b, #4
	WORD $0x4e3e1d08 // and v8.16b, v8.16b, v30.16b
	WORD $0x6f0c054b // ushr v11.16b, v10.16b, #4
	WORD $0x4e3e1d4a // and v10.16b, v10.16b, v30.16b
	CBZ	R7, q41nodot
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
	B	q41sum

q41nodot:
	// |w·a| ≤ 15·127: two products fit an int16 lane.
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

q41sum:
	WORD $0x4eb1be14 // addp v20.4s, v16.4s, v17.4s
	WORD $0x4eb3be55 // addp v21.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4e21da94 // scvtf v20.4s, v20.4s
	WORD $0x0e217863 // fcvtl v3.4s, v3.4h
	WORD $0x6e22dc63 // fmul v3.4s, v3.4s, v2.4s
	// sum + ((d·da)·isum + (m·da)·s), each step rounded
	WORD $0x4ddfca77 // ld1r {v23.4s}, [x19], #4
	WORD $0x4e21daf7 // scvtf v23.4s, v23.4s
	WORD $0x0e217ad6 // fcvtl v22.4s, v22.4h
	WORD $0x6e22ded6 // fmul v22.4s, v22.4s, v2.4s
	WORD $0x6e34dc74 // fmul v20.4s, v3.4s, v20.4s
	WORD $0x6e37ded7 // fmul v23.4s, v22.4s, v23.4s
	WORD $0x4e37d694 // fadd v20.4s, v20.4s, v23.4s
	WORD $0x4e34d718 // fadd v24.4s, v24.4s, v20.4s
	SUBS	$1, R9, R9
	BNE	q41block

	CMP	$4, R2
	BLT	q41tail
	VST1.P	[V24.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	q41group
	RET

q41tail:
	FMOVS	F24, (R6)
	CMP	$2, R2
	BLT	q41done
	VMOV	V24.S[1], R20
	MOVW	R20, 4(R6)
	CMP	$3, R2
	BLT	q41done
	VMOV	V24.S[2], R20
	MOVW	R20, 8(R6)

q41done:
	RET

// func dotQ5_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)
TEXT ·dotQ5_0RowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	s+40(FP), R8
	MOVD	nb+48(FP), R5
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f00e5fe // movi v30.16b, #15
	// TBL indices spreading qh bytes 0,1 (V25) and 2,3 (V26) over eight
	// lanes each, and each lane's bit (V27)
	MOVD	$0x0101010101010101, R20
	VEOR	V25.B16, V25.B16, V25.B16
	VMOV	R20, V25.D[1]
	MOVD	$0x0202020202020202, R20
	VMOV	R20, V26.D[0]
	MOVD	$0x0303030303030303, R20
	VMOV	R20, V26.D[1]
	MOVD	$0x8040201008040201, R20
	WORD $0x4e080e9b // dup v27.2d, x20
	WORD $0x4f00e61c // movi v28.16b, #16

q50group:
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
	MOVD	R8, R19
	MOVD	R5, R9
	VEOR	V24.B16, V24.B16, V24.B16 // lane i: row i's sum

q50block:
	VLD1.P	32(R14), [V0.B16, V1.B16]
	WORD $0x4ddfc9e2 // ld1r {v2.4s}, [x15], #4
	WORD $0x0ddf4143 // ld1 {v3.h}[0], [x10], #2
	WORD $0x0ddf814c // ld1 {v12.s}[0], [x10], #4
	WORD $0x0ddf4963 // ld1 {v3.h}[1], [x11], #2
	WORD $0x0ddf816d // ld1 {v13.s}[0], [x11], #4
	WORD $0x0ddf5183 // ld1 {v3.h}[2], [x12], #2
	WORD $0x0ddf818e // ld1 {v14.s}[0], [x12], #4
	WORD $0x0ddf59a3 // ld1 {v3.h}[3], [x13], #2
	WORD $0x0ddf81af // ld1 {v15.s}[0], [x13], #4
	VLD1.P	16(R10), [V4.B16]
	VLD1.P	16(R11), [V6.B16]
	VLD1.P	16(R12), [V8.B16]
	VLD1.P	16(R13), [V10.B16]
	// Nibbles: low ones are values 0-15, high ones 16-31; the fifth bit
	// from qh; minus 16, as q − 16·(1 − bit).
	WORD $0x6f0c0485 // ushr v5.16b, v4.16b, #4
	WORD $0x4e3e1c84 // and v4.16b, v4.16b, v30.16b
	WORD $0x4e190194 // tbl v20.16b, {v12.16b}, v25.16b
	WORD $0x4e1a0195 // tbl v21.16b, {v12.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e741f94 // bic v20.16b, v28.16b, v20.16b
	WORD $0x4e751f95 // bic v21.16b, v28.16b, v21.16b
	WORD $0x6e348484 // sub v4.16b, v4.16b, v20.16b
	WORD $0x6e3584a5 // sub v5.16b, v5.16b, v21.16b
	WORD $0x6f0c04c7 // ushr v7.16b, v6.16b, #4
	WORD $0x4e3e1cc6 // and v6.16b, v6.16b, v30.16b
	WORD $0x4e1901b4 // tbl v20.16b, {v13.16b}, v25.16b
	WORD $0x4e1a01b5 // tbl v21.16b, {v13.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e741f94 // bic v20.16b, v28.16b, v20.16b
	WORD $0x4e751f95 // bic v21.16b, v28.16b, v21.16b
	WORD $0x6e3484c6 // sub v6.16b, v6.16b, v20.16b
	WORD $0x6e3584e7 // sub v7.16b, v7.16b, v21.16b
	WORD $0x6f0c0509 // ushr v9.16b, v8.16b, #4
	WORD $0x4e3e1d08 // and v8.16b, v8.16b, v30.16b
	WORD $0x4e1901d4 // tbl v20.16b, {v14.16b}, v25.16b
	WORD $0x4e1a01d5 // tbl v21.16b, {v14.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e741f94 // bic v20.16b, v28.16b, v20.16b
	WORD $0x4e751f95 // bic v21.16b, v28.16b, v21.16b
	WORD $0x6e348508 // sub v8.16b, v8.16b, v20.16b
	WORD $0x6e358529 // sub v9.16b, v9.16b, v21.16b
	WORD $0x6f0c054b // ushr v11.16b, v10.16b, #4
	WORD $0x4e3e1d4a // and v10.16b, v10.16b, v30.16b
	WORD $0x4e1901f4 // tbl v20.16b, {v15.16b}, v25.16b
	WORD $0x4e1a01f5 // tbl v21.16b, {v15.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e741f94 // bic v20.16b, v28.16b, v20.16b
	WORD $0x4e751f95 // bic v21.16b, v28.16b, v21.16b
	WORD $0x6e34854a // sub v10.16b, v10.16b, v20.16b
	WORD $0x6e35856b // sub v11.16b, v11.16b, v21.16b
	CBZ	R7, q50nodot
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
	B	q50sum

q50nodot:
	// |w·a| ≤ 16·128: two products fit an int16 lane.
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

q50sum:
	WORD $0x4eb1be14 // addp v20.4s, v16.4s, v17.4s
	WORD $0x4eb3be55 // addp v21.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4e21da94 // scvtf v20.4s, v20.4s
	WORD $0x0e217863 // fcvtl v3.4s, v3.4h
	WORD $0x6e22dc63 // fmul v3.4s, v3.4s, v2.4s
	// sum + (d·da)·isum, fused as the compiled portable kernel does
	WORD $0x4e34cc78 // fmla v24.4s, v3.4s, v20.4s
	SUBS	$1, R9, R9
	BNE	q50block

	CMP	$4, R2
	BLT	q50tail
	VST1.P	[V24.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	q50group
	RET

q50tail:
	FMOVS	F24, (R6)
	CMP	$2, R2
	BLT	q50done
	VMOV	V24.S[1], R20
	MOVW	R20, 4(R6)
	CMP	$3, R2
	BLT	q50done
	VMOV	V24.S[2], R20
	MOVW	R20, 8(R6)

q50done:
	RET

// func dotQ5_1RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32, sdot bool)
TEXT ·dotQ5_1RowsNEON(SB), NOSPLIT, $0-65
	MOVD	w+0(FP), R0
	MOVD	rowBytes+8(FP), R1
	MOVD	n+16(FP), R2
	MOVD	q+24(FP), R3
	MOVD	d+32(FP), R4
	MOVD	s+40(FP), R8
	MOVD	nb+48(FP), R5
	MOVD	out+56(FP), R6
	MOVBU	sdot+64(FP), R7
	WORD $0x4f00e5fe // movi v30.16b, #15
	// TBL indices spreading qh bytes 0,1 (V25) and 2,3 (V26) over eight
	// lanes each, and each lane's bit (V27)
	MOVD	$0x0101010101010101, R20
	VEOR	V25.B16, V25.B16, V25.B16
	VMOV	R20, V25.D[1]
	MOVD	$0x0202020202020202, R20
	VMOV	R20, V26.D[0]
	MOVD	$0x0303030303030303, R20
	VMOV	R20, V26.D[1]
	MOVD	$0x8040201008040201, R20
	WORD $0x4e080e9b // dup v27.2d, x20
	WORD $0x4f00e61c // movi v28.16b, #16

q51group:
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
	MOVD	R8, R19
	MOVD	R5, R9
	VEOR	V24.B16, V24.B16, V24.B16 // lane i: row i's sum

q51block:
	VLD1.P	32(R14), [V0.B16, V1.B16]
	WORD $0x4ddfc9e2 // ld1r {v2.4s}, [x15], #4
	WORD $0x0ddf4143 // ld1 {v3.h}[0], [x10], #2
	WORD $0x0ddf4156 // ld1 {v22.h}[0], [x10], #2
	WORD $0x0ddf814c // ld1 {v12.s}[0], [x10], #4
	WORD $0x0ddf4963 // ld1 {v3.h}[1], [x11], #2
	WORD $0x0ddf4976 // ld1 {v22.h}[1], [x11], #2
	WORD $0x0ddf816d // ld1 {v13.s}[0], [x11], #4
	WORD $0x0ddf5183 // ld1 {v3.h}[2], [x12], #2
	WORD $0x0ddf5196 // ld1 {v22.h}[2], [x12], #2
	WORD $0x0ddf818e // ld1 {v14.s}[0], [x12], #4
	WORD $0x0ddf59a3 // ld1 {v3.h}[3], [x13], #2
	WORD $0x0ddf59b6 // ld1 {v22.h}[3], [x13], #2
	WORD $0x0ddf81af // ld1 {v15.s}[0], [x13], #4
	VLD1.P	16(R10), [V4.B16]
	VLD1.P	16(R11), [V6.B16]
	VLD1.P	16(R12), [V8.B16]
	VLD1.P	16(R13), [V10.B16]
	// Nibbles: low ones are values 0-15, high ones 16-31; the fifth bit
	// from qh.
	WORD $0x6f0c0485 // ushr v5.16b, v4.16b, #4
	WORD $0x4e3e1c84 // and v4.16b, v4.16b, v30.16b
	WORD $0x4e190194 // tbl v20.16b, {v12.16b}, v25.16b
	WORD $0x4e1a0195 // tbl v21.16b, {v12.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e3c1e94 // and v20.16b, v20.16b, v28.16b
	WORD $0x4e3c1eb5 // and v21.16b, v21.16b, v28.16b
	WORD $0x4eb41c84 // orr v4.16b, v4.16b, v20.16b
	WORD $0x4eb51ca5 // orr v5.16b, v5.16b, v21.16b
	WORD $0x6f0c04c7 // ushr v7.16b, v6.16b, #4
	WORD $0x4e3e1cc6 // and v6.16b, v6.16b, v30.16b
	WORD $0x4e1901b4 // tbl v20.16b, {v13.16b}, v25.16b
	WORD $0x4e1a01b5 // tbl v21.16b, {v13.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e3c1e94 // and v20.16b, v20.16b, v28.16b
	WORD $0x4e3c1eb5 // and v21.16b, v21.16b, v28.16b
	WORD $0x4eb41cc6 // orr v6.16b, v6.16b, v20.16b
	WORD $0x4eb51ce7 // orr v7.16b, v7.16b, v21.16b
	WORD $0x6f0c0509 // ushr v9.16b, v8.16b, #4
	WORD $0x4e3e1d08 // and v8.16b, v8.16b, v30.16b
	WORD $0x4e1901d4 // tbl v20.16b, {v14.16b}, v25.16b
	WORD $0x4e1a01d5 // tbl v21.16b, {v14.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e3c1e94 // and v20.16b, v20.16b, v28.16b
	WORD $0x4e3c1eb5 // and v21.16b, v21.16b, v28.16b
	WORD $0x4eb41d08 // orr v8.16b, v8.16b, v20.16b
	WORD $0x4eb51d29 // orr v9.16b, v9.16b, v21.16b
	WORD $0x6f0c054b // ushr v11.16b, v10.16b, #4
	WORD $0x4e3e1d4a // and v10.16b, v10.16b, v30.16b
	WORD $0x4e1901f4 // tbl v20.16b, {v15.16b}, v25.16b
	WORD $0x4e1a01f5 // tbl v21.16b, {v15.16b}, v26.16b
	WORD $0x4e3b8e94 // cmtst v20.16b, v20.16b, v27.16b
	WORD $0x4e3b8eb5 // cmtst v21.16b, v21.16b, v27.16b
	WORD $0x4e3c1e94 // and v20.16b, v20.16b, v28.16b
	WORD $0x4e3c1eb5 // and v21.16b, v21.16b, v28.16b
	WORD $0x4eb41d4a // orr v10.16b, v10.16b, v20.16b
	WORD $0x4eb51d6b // orr v11.16b, v11.16b, v21.16b
	CBZ	R7, q51nodot
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
	B	q51sum

q51nodot:
	// |w·a| ≤ 31·127: two products fit an int16 lane.
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

q51sum:
	WORD $0x4eb1be14 // addp v20.4s, v16.4s, v17.4s
	WORD $0x4eb3be55 // addp v21.4s, v18.4s, v19.4s
	WORD $0x4eb5be94 // addp v20.4s, v20.4s, v21.4s
	WORD $0x4e21da94 // scvtf v20.4s, v20.4s
	WORD $0x0e217863 // fcvtl v3.4s, v3.4h
	WORD $0x6e22dc63 // fmul v3.4s, v3.4s, v2.4s
	// sum + ((d·da)·isum + (m·da)·s), each step rounded
	WORD $0x4ddfca77 // ld1r {v23.4s}, [x19], #4
	WORD $0x4e21daf7 // scvtf v23.4s, v23.4s
	WORD $0x0e217ad6 // fcvtl v22.4s, v22.4h
	WORD $0x6e22ded6 // fmul v22.4s, v22.4s, v2.4s
	WORD $0x6e34dc74 // fmul v20.4s, v3.4s, v20.4s
	WORD $0x6e37ded7 // fmul v23.4s, v22.4s, v23.4s
	WORD $0x4e37d694 // fadd v20.4s, v20.4s, v23.4s
	WORD $0x4e34d718 // fadd v24.4s, v24.4s, v20.4s
	SUBS	$1, R9, R9
	BNE	q51block

	CMP	$4, R2
	BLT	q51tail
	VST1.P	[V24.S4], 16(R6)
	ADD	R1<<2, R0, R0
	SUBS	$4, R2, R2
	BNE	q51group
	RET

q51tail:
	FMOVS	F24, (R6)
	CMP	$2, R2
	BLT	q51done
	VMOV	V24.S[1], R20
	MOVW	R20, 4(R6)
	CMP	$3, R2
	BLT	q51done
	VMOV	V24.S[2], R20
	MOVW	R20, 8(R6)

q51done:
	RET
