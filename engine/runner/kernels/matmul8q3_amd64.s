//go:build !purego

#include "textflag.h"

// Q8_0, Q4_1, Q5_0 and Q5_1, two rows × four tokens with AVX2 alone, with
// the arithmetic of the row kernels (dotQ8_0RowsAVX2 in dot_amd64.s, the
// others in dotq5_amd64.s) lane for lane: per row, token and block the
// eight exact int32 lane sums, converted and accumulated by FMA with
// d·dₐ into eight float lanes, reduced as REDUCE8TO; the types with a
// minimum accumulate (m·dₐ)·float(S) by FMA beside and add it after the
// reduction. Each row's block is loaded and unpacked (absolute values,
// spread nibbles, fifth bits) once for four tokens instead of once per
// token, and what the tokens alone decide comes from the token pack
// (packQ32x4): per group of four and block the four dₐ and float(S) side
// by side, so that one VMULPS makes a row's four products d·dₐ (m·dₐ)
// with the row kernel's VMULSS roundings, and, for Q5_0, each token's
// lanes' −16·Σa (q32OffsAVX2), one VPADDD instead of the row kernel's
// VPSUBD of sums recomputed per block.
//
// Registers: Y0-Y3 row 0 for tokens 0-3, Y4-Y7 row 1; Y8, Y9 the rows'
// unpacked quants (Q8_0: |w|); X10, X11 the rows' four (m·dₐ)·S sums
// (Q8_0: Y10, Y11 the weights' sign masks); Y12 bytes 0x0F (Q8_0: a
// temporary); Y13 int16 ones; Y14, Y15 temporaries. GP: DI, R8, R12, R13 the
// tokens' quants; DX, BX, R14, CX their offsets (Q5_0); R9 the pack (32
// bytes a block); R10, R11 the rows; AX 4 per block; SI the end. Stack:
// the two rows' four d·dₐ at 0 and 16, their (m·dₐ)·S sums at 32 and 48
// before the stores.

// mmQ32x4Args (matmul8q3_amd64.go): q [4]*int8 at 0, o [4]*int32 at 32,
// out [4]*float32 at 64, pk *float32 at 96.

// byte j of q3shuf picks byte j/8 of the broadcast qh, q3sel bit j%8
// (dotq5_amd64.s's q5shuf, q5sel and q5x10).
DATA q3shuf<>+0(SB)/8, $0x0000000000000000
DATA q3shuf<>+8(SB)/8, $0x0101010101010101
DATA q3shuf<>+16(SB)/8, $0x0202020202020202
DATA q3shuf<>+24(SB)/8, $0x0303030303030303
GLOBL q3shuf<>(SB), RODATA|NOPTR, $32

DATA q3sel<>+0(SB)/8, $0x8040201008040201
DATA q3sel<>+8(SB)/8, $0x8040201008040201
DATA q3sel<>+16(SB)/8, $0x8040201008040201
DATA q3sel<>+24(SB)/8, $0x8040201008040201
GLOBL q3sel<>(SB), RODATA|NOPTR, $32

DATA q3x10<>+0(SB)/8, $0x1010101010101010
DATA q3x10<>+8(SB)/8, $0x1010101010101010
DATA q3x10<>+16(SB)/8, $0x1010101010101010
DATA q3x10<>+24(SB)/8, $0x1010101010101010
GLOBL q3x10<>(SB), RODATA|NOPTR, $32

// Q3_ARGS loads the tokens' quant pointers (and their offsets with
// OFFS), the block count as AX's end and the constants.
#define Q3_ARGS \
	MOVQ         a+32(FP), R9 \
	MOVQ         0(R9), DI \
	MOVQ         8(R9), R8 \
	MOVQ         16(R9), R12 \
	MOVQ         24(R9), R13 \
	MOVQ         nb+16(FP), SI \
	SHLQ         $2, SI \
	MOVQ         $0x0f0f0f0f0f0f0f0f, AX \
	MOVQ         AX, X12 \
	VPBROADCASTQ X12, Y12 \
	VPCMPEQW     Y13, Y13, Y13 \
	VPSRLW       $15, Y13, Y13

#define Q3_OFFS \
	MOVQ 32(R9), DX \
	MOVQ 40(R9), BX \
	MOVQ 48(R9), R14 \
	MOVQ 56(R9), CX

// Q3_PAIR starts a pair of rows: their pointers, the pack and zeroed
// accumulators.
#define Q3_PAIR \
	MOVQ   a+32(FP), R9 \
	MOVQ   96(R9), R9 \
	MOVQ   w+0(FP), R10 \
	MOVQ   R10, R11 \
	ADDQ   rowBytes+8(FP), R11 \
	XORQ   AX, AX \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS X10, X10, X10 \
	VXORPS X11, X11, X11

// Q3_NIB spreads the 16 bytes at Q to 32 quants in Y (NIBBLES).
#define Q3_NIB(Q, X, Y) \
	VMOVDQU     Q, X \
	VPSRLW      $4, X, X14 \
	VINSERTI128 $1, X14, Y, Y \
	VPAND       Y12, Y, Y

// Q3_HI ors 0x10 into byte j of Y where bit j of the 32 bits at QH is
// set (HIBITS).
#define Q3_HI(QH, Y) \
	VPBROADCASTD QH, Y14 \
	VPSHUFB      q3shuf<>(SB), Y14, Y14 \
	VPAND        q3sel<>(SB), Y14, Y14 \
	VPCMPEQB     q3sel<>(SB), Y14, Y14 \
	VPAND        q3x10<>(SB), Y14, Y14 \
	VPOR         Y14, Y, Y

// Q3_SCALE sets off(SP) to the row's d (fp16 at R) times the four
// tokens' dₐ.
#define Q3_SCALE(R, off) \
	VCVTPH2PS    (R), X14 \
	VBROADCASTSS X14, X14 \
	VMULPS       (R9)(AX*8), X14, X14 \
	VMOVUPS      X14, off(SP)

// Q3_SCALEM is Q3_SCALE for d, m at R, adding (m·dₐ)·float(S) of the
// four tokens into MACC.
#define Q3_SCALEM(R, off, MACC) \
	VCVTPH2PS    (R), X14 \
	VBROADCASTSS X14, X15 \
	VMULPS       (R9)(AX*8), X15, X15 \
	VMOVUPS      X15, off(SP) \
	VMOVSHDUP    X14, X14 \
	VBROADCASTSS X14, X14 \
	VMULPS       (R9)(AX*8), X14, X14 \
	VFMADD231PS  16(R9)(AX*8), X14, MACC

// Q3_ACC converts the lane sums in Y14 and accumulates them into ACC
// with the product at off(SP).
#define Q3_ACC(off, ACC) \
	VCVTDQ2PS    Y14, Y14 \
	VBROADCASTSS off(SP), Y15 \
	VFMADD231PS  Y15, Y14, ACC

// Q3_TOKEN is token i's step for the unsigned quants in Y8 and Y9.
#define Q3_TOKEN(q, i, accA, accB) \
	VPMADDUBSW (q)(AX*8), Y8, Y14 \
	VPMADDWD   Y13, Y14, Y14 \
	Q3_ACC(4*i, accA) \
	VPMADDUBSW (q)(AX*8), Y9, Y14 \
	VPMADDWD   Y13, Y14, Y14 \
	Q3_ACC(16+4*i, accB)

// Q3_TOKENO is Q3_TOKEN with the token's lane offsets at (o).
#define Q3_TOKENO(q, o, i, accA, accB) \
	VPMADDUBSW (q)(AX*8), Y8, Y14 \
	VPMADDWD   Y13, Y14, Y14 \
	VPADDD     (o)(AX*8), Y14, Y14 \
	Q3_ACC(4*i, accA) \
	VPMADDUBSW (q)(AX*8), Y9, Y14 \
	VPMADDWD   Y13, Y14, Y14 \
	VPADDD     (o)(AX*8), Y14, Y14 \
	Q3_ACC(16+4*i, accB)

// Q3_TOKEN8 is Q3_TOKEN for Q8_0: the token's quants take the sign of
// each row's weights, whose absolute values are in Y8 and Y9 and whose
// sign masks (0xFF where negative) are in Y10 and Y11: (a ⊕ m) − m is
// VPSIGNB's −a where the weight is negative and a elsewhere (where it is
// 0 the product is 0 either way), in two operations any vector port
// runs instead of one that competes with the multiplies.
#define Q3_TOKEN8(q, i, accA, accB) \
	VMOVDQU      (q)(AX*8), Y15 \
	VPXOR        Y10, Y15, Y14 \
	VPSUBB       Y10, Y14, Y14 \
	VPMADDUBSW   Y14, Y8, Y14 \
	VPMADDWD     Y13, Y14, Y14 \
	VCVTDQ2PS    Y14, Y14 \
	VBROADCASTSS 4*i(SP), Y12 \
	VFMADD231PS  Y12, Y14, accA \
	VPXOR        Y11, Y15, Y14 \
	VPSUBB       Y11, Y14, Y14 \
	VPMADDUBSW   Y14, Y9, Y14 \
	VPMADDWD     Y13, Y14, Y14 \
	Q3_ACC(16+4*i, accB)

// Q3_ROWS8 sets Y8, Y9 to the two rows' |w| and Y10, Y11 to their sign
// masks.
#define Q3_ROWS8 \
	VMOVDQU  2(R10), Y8 \
	VMOVDQU  2(R11), Y9 \
	VPXOR    Y14, Y14, Y14 \
	VPCMPGTB Y8, Y14, Y10 \
	VPCMPGTB Y9, Y14, Y11 \
	VPABSB   Y8, Y8 \
	VPABSB   Y9, Y9

// Q3_REDUCE is REDUCE8TO.
#define Q3_REDUCE(Y, X) \
	VEXTRACTF128 $1, Y, X15 \
	VADDPS       X15, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

#define Q3_REDUCEALL \
	Q3_REDUCE(Y0, X0) \
	Q3_REDUCE(Y1, X1) \
	Q3_REDUCE(Y2, X2) \
	Q3_REDUCE(Y3, X3) \
	Q3_REDUCE(Y4, X4) \
	Q3_REDUCE(Y5, X5) \
	Q3_REDUCE(Y6, X6) \
	Q3_REDUCE(Y7, X7)

// Q3_ADDMIN adds each row's and token's (m·dₐ)·S sum after the
// reduction, as the row kernels' VADDSS does.
#define Q3_ADDMIN \
	VMOVUPS X10, 32(SP) \
	VMOVUPS X11, 48(SP) \
	VADDSS  32(SP), X0, X0 \
	VADDSS  36(SP), X1, X1 \
	VADDSS  40(SP), X2, X2 \
	VADDSS  44(SP), X3, X3 \
	VADDSS  48(SP), X4, X4 \
	VADDSS  52(SP), X5, X5 \
	VADDSS  56(SP), X6, X6 \
	VADDSS  60(SP), X7, X7

// Q3_STORE writes rows 0 and 1 of token t and advances its output.
#define Q3_STORE(t, XA, XB) \
	MOVQ   64+8*t(R9), R10 \
	VMOVSS XA, (R10) \
	VMOVSS XB, 4(R10) \
	ADDQ   $8, 64+8*t(R9)

#define Q3_STOREALL \
	MOVQ a+32(FP), R9 \
	Q3_STORE(0, X0, X4) \
	Q3_STORE(1, X1, X5) \
	Q3_STORE(2, X2, X6) \
	Q3_STORE(3, X3, X7)

// Q3_NEXT moves to the next pair of rows, or falls through after the
// last.
#define Q3_NEXT(label) \
	MOVQ rowBytes+8(FP), R10 \
	SHLQ $1, R10 \
	ADDQ R10, w+0(FP) \
	DECQ pairs+24(FP) \
	JNZ  label

// func mulQ8_0x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)
TEXT ·mulQ8_0x2x4PkAVX2(SB), NOSPLIT, $64-40
	Q3_ARGS

q80pair:
	Q3_PAIR

q80block:
	Q3_ROWS8
	Q3_SCALE(R10, 0)
	Q3_SCALE(R11, 16)
	Q3_TOKEN8(DI, 0, Y0, Y4)
	Q3_TOKEN8(R8, 1, Y1, Y5)
	Q3_TOKEN8(R12, 2, Y2, Y6)
	Q3_TOKEN8(R13, 3, Y3, Y7)
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q80block

	Q3_REDUCEALL
	Q3_STOREALL
	Q3_NEXT(q80pair)
	VZEROUPPER
	RET

// func mulQ4_1x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)
TEXT ·mulQ4_1x2x4PkAVX2(SB), NOSPLIT, $64-40
	Q3_ARGS

q41pair:
	Q3_PAIR

q41block:
	Q3_NIB(4(R10), X8, Y8)
	Q3_NIB(4(R11), X9, Y9)
	Q3_SCALEM(R10, 0, X10)
	Q3_SCALEM(R11, 16, X11)
	Q3_TOKEN(DI, 0, Y0, Y4)
	Q3_TOKEN(R8, 1, Y1, Y5)
	Q3_TOKEN(R12, 2, Y2, Y6)
	Q3_TOKEN(R13, 3, Y3, Y7)
	ADDQ $20, R10
	ADDQ $20, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q41block

	Q3_REDUCEALL
	Q3_ADDMIN
	Q3_STOREALL
	Q3_NEXT(q41pair)
	VZEROUPPER
	RET

// func mulQ5_1x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)
TEXT ·mulQ5_1x2x4PkAVX2(SB), NOSPLIT, $64-40
	Q3_ARGS

q51pair:
	Q3_PAIR

q51block:
	Q3_NIB(8(R10), X8, Y8)
	Q3_HI(4(R10), Y8)
	Q3_NIB(8(R11), X9, Y9)
	Q3_HI(4(R11), Y9)
	Q3_SCALEM(R10, 0, X10)
	Q3_SCALEM(R11, 16, X11)
	Q3_TOKEN(DI, 0, Y0, Y4)
	Q3_TOKEN(R8, 1, Y1, Y5)
	Q3_TOKEN(R12, 2, Y2, Y6)
	Q3_TOKEN(R13, 3, Y3, Y7)
	ADDQ $24, R10
	ADDQ $24, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q51block

	Q3_REDUCEALL
	Q3_ADDMIN
	Q3_STOREALL
	Q3_NEXT(q51pair)
	VZEROUPPER
	RET

// func mulQ5_0x2x4PkAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ32x4Args)
TEXT ·mulQ5_0x2x4PkAVX2(SB), NOSPLIT, $64-40
	Q3_ARGS
	Q3_OFFS

q50pair:
	Q3_PAIR

q50block:
	Q3_NIB(6(R10), X8, Y8)
	Q3_HI(2(R10), Y8)
	Q3_NIB(6(R11), X9, Y9)
	Q3_HI(2(R11), Y9)
	Q3_SCALE(R10, 0)
	Q3_SCALE(R11, 16)
	Q3_TOKENO(DI, DX, 0, Y0, Y4)
	Q3_TOKENO(R8, BX, 1, Y1, Y5)
	Q3_TOKENO(R12, R14, 2, Y2, Y6)
	Q3_TOKENO(R13, CX, 3, Y3, Y7)
	ADDQ $22, R10
	ADDQ $22, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q50block

	Q3_REDUCEALL
	Q3_STOREALL
	Q3_NEXT(q50pair)
	VZEROUPPER
	RET
