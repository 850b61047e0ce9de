//go:build !purego

#include "textflag.h"

// Q4_1, Q5_0 and Q5_1 rows against the 32-value activation form (ggml's
// vec_dot_q4_1_q8_1, q5_0_q8_0, q5_1_q8_1). The quants are spread to 32
// bytes in the activation's order (low lane: values 0-15 from the low
// nibbles, high lane: values 16-31 from the high nibbles), the fifth bit
// of Q5 set from qh (bit j for value j), and multiplied unsigned by the
// signed activation quants (VPMADDUBSW: pair sums within ±2·31·128),
// widened to int32 by VPMADDWD against ones: exact integer sums, then
// converted and accumulated with d·dₐ by FMA.
//
// Q5_0 stores q − 16: the offset comes off per int32 lane as 16 times the
// lane's activation sum, computed once per block for all rows. Q4_1 and
// Q5_1 store v = q·d + m: the minimum meets the activation through its
// block sum S, m·dₐ·S accumulated per row in a scalar added after the
// lanes are reduced.
//
// Rows go four at a time sharing the activation, then one at a time; a
// row's arithmetic is the same either way, so its value does not depend
// on its position. AX steps 4 per block: dₐ at (DX)(AX*1), S at
// (R12)(AX*1), quants at (DI)(AX*8).
//
// Registers: Y4 activation quants, X9 dₐ, X5 float(S) (Q4_1, Q5_1) or
// Y5 16·(lane sums of a) (Q5_0), Y14 bytes 0x0F, Y15 int16 ones.

// byte j of q5shuf picks byte j/8 of the broadcast qh, q5sel bit j%8.
DATA q5shuf<>+0(SB)/8, $0x0000000000000000
DATA q5shuf<>+8(SB)/8, $0x0101010101010101
DATA q5shuf<>+16(SB)/8, $0x0202020202020202
DATA q5shuf<>+24(SB)/8, $0x0303030303030303
GLOBL q5shuf<>(SB), RODATA|NOPTR, $32

DATA q5sel<>+0(SB)/8, $0x8040201008040201
DATA q5sel<>+8(SB)/8, $0x8040201008040201
DATA q5sel<>+16(SB)/8, $0x8040201008040201
DATA q5sel<>+24(SB)/8, $0x8040201008040201
GLOBL q5sel<>(SB), RODATA|NOPTR, $32

DATA q5x10<>+0(SB)/8, $0x1010101010101010
DATA q5x10<>+8(SB)/8, $0x1010101010101010
DATA q5x10<>+16(SB)/8, $0x1010101010101010
DATA q5x10<>+24(SB)/8, $0x1010101010101010
GLOBL q5x10<>(SB), RODATA|NOPTR, $32

// NIBBLES spreads the 16 bytes at Q to 32 quants in Y6. Clobbers X8.
#define NIBBLES(Q) \
	VMOVDQU     Q, X6 \
	VPSRLW      $4, X6, X8 \
	VINSERTI128 $1, X8, Y6, Y6 \
	VPAND       Y14, Y6, Y6

// HIBITS sets Y7 to 0x10 in byte j where bit j of the 32 bits at QH is
// set, 0 elsewhere.
#define HIBITS(QH, SHUF, SEL, X10) \
	VPBROADCASTD QH, Y7 \
	VPSHUFB      SHUF, Y7, Y7 \
	VPAND        SEL, Y7, Y7 \
	VPCMPEQB     SEL, Y7, Y7 \
	VPAND        X10, Y7, Y7

// ISUM turns the quants in Y6 into eight int32 sums with the activation.
#define ISUM \
	VPMADDUBSW Y4, Y6, Y6 \
	VPMADDWD   Y15, Y6, Y6

// SCALED accumulates Y6 (int32 sums) into ACC with d (fp16 at H)·dₐ.
#define SCALED(H, ACC) \
	VCVTDQ2PS    Y6, Y6 \
	VCVTPH2PS    H, X8 \
	VMULSS       X9, X8, X8 \
	VBROADCASTSS X8, Y8 \
	VFMADD231PS  Y8, Y6, ACC

// SCALEDMIN is SCALED for d, m at H, adding m·dₐ·S into MACC.
#define SCALEDMIN(H, ACC, MACC) \
	VCVTDQ2PS    Y6, Y6 \
	VCVTPH2PS    H, X8 \
	VMOVSHDUP    X8, X7 \
	VMULSS       X9, X8, X8 \
	VBROADCASTSS X8, Y8 \
	VFMADD231PS  Y8, Y6, ACC \
	VMULSS       X9, X7, X7 \
	VFMADD231SS  X5, X7, MACC

// ACTMIN loads block AX/4 of the activation with its sum.
#define ACTMIN \
	VMOVDQU    (DI)(AX*8), Y4 \
	VMOVSS     (DX)(AX*1), X9 \
	VCVTSI2SSL (R12)(AX*1), X5, X5

// ACT50 loads block AX/4 of the activation with 16·(its lane sums).
#define ACT50 \
	VMOVDQU    (DI)(AX*8), Y4 \
	VPMADDUBSW Y4, Y13, Y5 \
	VPMADDWD   Y15, Y5, Y5 \
	VMOVSS     (DX)(AX*1), X9

// REDUCE8TO adds the eight float lanes of Y into the low lane of X;
// the rows with a minimum then add their scalar m·dₐ·S sum.
#define REDUCE8TO(Y, X) \
	VEXTRACTF128 $1, Y, X4 \
	VADDPS       X4, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// The four-row loops of Q4_1 and Q5_1 take two blocks per pass and ask,
// once a pass, for one line of each row far ahead (Q5PREFETCH), as the
// K-quant kernels do: decode streams the weights from memory once, and
// these loops are bound by their instruction count as much as by
// memory. The nibbles spread by one broadcast of the 16 bytes to both
// lanes, a shift of the high lane's dwords by 4 (VPSRLVD against
// q5shift) and the mask. The four rows' d and m of a block are
// converted and multiplied by dₐ in one register (Y8: d·dₐ, m·dₐ of row
// r in lanes 2r, 2r+1), the m·dₐ·S FMAs of the four rows run on the odd
// lanes of Y10 (the even lanes' products are not used), and VPERMPS
// (indexes in Y11-Y13) broadcasts each row's d·dₐ: the same roundings,
// lane for lane, as the one-row code's scalars.

DATA q5shift<>+0(SB)/8, $0
DATA q5shift<>+8(SB)/8, $0
DATA q5shift<>+16(SB)/8, $0x0000000400000004
DATA q5shift<>+24(SB)/8, $0x0000000400000004
GLOBL q5shift<>(SB), RODATA|NOPTR, $32

// Q5PREFETCH asks for one line of each of the four rows (R10, R10+BX,
// R11, R11+BX) 4608 bytes ahead into L1 and 13824 ahead into L2 (the
// distances of dotk_amd64.s). A row advances by at most 48 bytes a
// pass, so no line is missed.
#define Q5PREFETCH \
	PREFETCHT0 4608(R10) \
	PREFETCHT0 4608(R10)(BX*1) \
	PREFETCHT0 4608(R11) \
	PREFETCHT0 4608(R11)(BX*1) \
	PREFETCHT1 13824(R10) \
	PREFETCHT1 13824(R10)(BX*1) \
	PREFETCHT1 13824(R11) \
	PREFETCHT1 13824(R11)(BX*1)

// SPREAD spreads the 16 bytes at Q to 32 quants in Y6, SH the shifts.
#define SPREAD(Q, SH) \
	VBROADCASTI128 Q, Y6 \
	VPSRLVD        SH, Y6, Y6 \
	VPAND          Y14, Y6, Y6

// MINSCALES4 sets Y8 to d·dₐ, m·dₐ of the four rows' block at offset
// OFF (lanes 2r, 2r+1 for row r) and adds m·dₐ·S of block AX/4+k to the
// odd lanes of Y10. Clobbers Y5, Y7.
#define MINSCALES4(OFF, k) \
	VMOVD        OFF(R10), X8 \
	VPINSRD      $1, OFF(R10)(BX*1), X8, X8 \
	VPINSRD      $2, OFF(R11), X8, X8 \
	VPINSRD      $3, OFF(R11)(BX*1), X8, X8 \
	VCVTPH2PS    X8, Y8 \
	VBROADCASTSS (4*k)(DX)(AX*1), Y7 \
	VMULPS       Y7, Y8, Y8 \
	VCVTSI2SSL   (4*k)(R12)(AX*1), X5, X5 \
	VBROADCASTSS X5, Y5 \
	VFMADD231PS  Y5, Y8, Y10

// MINROW accumulates into ACC the int32 sums in Y6 with the d·dₐ in
// every lane of Y7.
#define MINROW(ACC) \
	VPMADDUBSW  Y4, Y6, Y6 \
	VPMADDWD    Y15, Y6, Y6 \
	VCVTDQ2PS   Y6, Y6 \
	VFMADD231PS Y7, Y6, ACC

// MINCONSTS sets Y9 to q5shift and Y11-Y13 to the VPERMPS indexes of
// lanes 2, 4 and 6.
#define MINCONSTS \
	VMOVDQU      q5shift<>(SB), Y9 \
	MOVL         $2, AX \
	MOVD         AX, X11 \
	VPBROADCASTD X11, Y11 \
	MOVL         $4, AX \
	MOVD         AX, X12 \
	VPBROADCASTD X12, Y12 \
	MOVL         $6, AX \
	MOVD         AX, X13 \
	VPBROADCASTD X13, Y13

// MINREDUCE4 reduces the four rows' lanes and adds their m·dₐ·S sums
// (the odd lanes of Y10), then stores them. Clobbers X4, X5, X10.
#define MINREDUCE4 \
	REDUCE8TO(Y0, X0) \
	VMOVSHDUP    X10, X5 \
	VADDSS       X5, X0, X0 \
	REDUCE8TO(Y1, X1) \
	VPSHUFD      $0xFF, X10, X5 \
	VADDSS       X5, X1, X1 \
	VEXTRACTF128 $1, Y10, X10 \
	REDUCE8TO(Y2, X2) \
	VMOVSHDUP    X10, X5 \
	VADDSS       X5, X2, X2 \
	REDUCE8TO(Y3, X3) \
	VPSHUFD      $0xFF, X10, X5 \
	VADDSS       X5, X3, X3 \
	VMOVSS       X0, 0(R9) \
	VMOVSS       X1, 4(R9) \
	VMOVSS       X2, 8(R9) \
	VMOVSS       X3, 12(R9)

// Q41BLOCK4 accumulates block k (from R10, R11) of the four Q4_1 rows.
#define Q41BLOCK4(k) \
	VMOVDQU      (32*k)(DI)(AX*8), Y4 \
	MINSCALES4(20*k, k) \
	SPREAD(4+20*k(R10), Y9) \
	VBROADCASTSS X8, Y7 \
	MINROW(Y0) \
	SPREAD(4+20*k(R10)(BX*1), Y9) \
	VPERMPS      Y8, Y11, Y7 \
	MINROW(Y1) \
	SPREAD(4+20*k(R11), Y9) \
	VPERMPS      Y8, Y12, Y7 \
	MINROW(Y2) \
	SPREAD(4+20*k(R11)(BX*1), Y9) \
	VPERMPS      Y8, Y13, Y7 \
	MINROW(Y3)

// Q51SPREAD spreads row R's Q5_1 block at offset OFF, fifth bits
// included, into Y6.
#define Q51SPREAD(OFF, R) \
	HIBITS(4+OFF(R), q5shuf<>(SB), q5sel<>(SB), q5x10<>(SB)) \
	SPREAD(8+OFF(R), Y9) \
	VPOR Y7, Y6, Y6

#define Q51SPREADX(OFF, R) \
	HIBITS(4+OFF(R)(BX*1), q5shuf<>(SB), q5sel<>(SB), q5x10<>(SB)) \
	SPREAD(8+OFF(R)(BX*1), Y9) \
	VPOR Y7, Y6, Y6

// Q51BLOCK4 accumulates block k (from R10, R11) of the four Q5_1 rows.
#define Q51BLOCK4(k) \
	VMOVDQU      (32*k)(DI)(AX*8), Y4 \
	MINSCALES4(24*k, k) \
	Q51SPREAD(24*k, R10) \
	VBROADCASTSS X8, Y7 \
	MINROW(Y0) \
	Q51SPREADX(24*k, R10) \
	VPERMPS      Y8, Y11, Y7 \
	MINROW(Y1) \
	Q51SPREAD(24*k, R11) \
	VPERMPS      Y8, Y12, Y7 \
	MINROW(Y2) \
	Q51SPREADX(24*k, R11) \
	VPERMPS      Y8, Y13, Y7 \
	MINROW(Y3)

// func dotQ4_1RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ4_1RowsAVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ s+40(FP), R12
	MOVQ nb+48(FP), R8
	MOVQ out+56(FP), R9
	SHLQ $2, R8
	LEAQ -4(R8), R13 // below it, two blocks are left
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

	MINCONSTS

	CMPQ CX, $4
	JLT  q41tail

q41group:
	MOVQ SI, R10
	LEAQ (SI)(BX*2), R11
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y10, Y10, Y10
	CMPQ AX, R13
	JGE  q41glast

q41gpair:
	Q5PREFETCH
	Q41BLOCK4(0)
	Q41BLOCK4(1)
	ADDQ $40, R10
	ADDQ $40, R11
	ADDQ $8, AX
	CMPQ AX, R13
	JLT  q41gpair

q41glast:
	CMPQ AX, R8
	JGE  q41gdone
	Q41BLOCK4(0)

q41gdone:
	MINREDUCE4

	LEAQ (SI)(BX*4), SI
	ADDQ $16, R9
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  q41group

q41tail:
	TESTQ CX, CX
	JZ    q41done

q41row:
	MOVQ SI, R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS X10, X10, X10

q41rblock:
	ACTMIN
	NIBBLES(4(R10))
	ISUM
	SCALEDMIN((R10), Y0, X10)
	ADDQ $20, R10
	ADDQ $4, AX
	CMPQ AX, R8
	JLT  q41rblock

	REDUCE8TO(Y0, X0)
	VADDSS X10, X0, X0
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q41row

q41done:
	VZEROUPPER
	RET

// The four-row loop of Q5_0 converts the four rows' d of a block at
// once (SCALES50, as dotQ4_0RowsAVX2's SCALES4) and spreads the nibbles
// by SPREAD: the same roundings as the one-row code, with fewer
// shuffles and multiplies per row. Y9 holds q5shift, Y10 a row's d·dₐ;
// the four products wait at (R12).
#define SCALES50 \
	VMOVD        (R10), X8 \
	VPINSRW      $1, (R10)(BX*1), X8, X8 \
	VPINSRW      $2, (R11), X8, X8 \
	VPINSRW      $3, (R11)(BX*1), X8, X8 \
	VCVTPH2PS    X8, X8 \
	VBROADCASTSS (DX)(AX*1), X10 \
	VMULPS       X10, X8, X8 \
	VMOVUPS      X8, (R12)

// Q50ROW4 accumulates into ACC the block of row r whose qh is at QH and
// nibbles at QS.
#define Q50ROW4(QH, QS, r, ACC) \
	HIBITS(QH, Y12, Y11, Y13) \
	SPREAD(QS, Y9) \
	VPOR         Y7, Y6, Y6 \
	ISUM \
	VPSUBD       Y5, Y6, Y6 \
	VCVTDQ2PS    Y6, Y6 \
	VBROADCASTSS (4*r)(R12), Y10 \
	VFMADD231PS  Y10, Y6, ACC

// func dotQ5_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ5_0RowsAVX2(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	LEAQ 15(SP), R12
	ANDQ $-16, R12 // SCALES50's 16 bytes, aligned (Q5_0 reads no s)
	MOVQ nb+48(FP), R8
	MOVQ out+56(FP), R9
	SHLQ $2, R8
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15
	VMOVDQU q5shuf<>(SB), Y12
	VMOVDQU q5sel<>(SB), Y11
	VMOVDQU q5x10<>(SB), Y13
	VMOVDQU q5shift<>(SB), Y9

	CMPQ CX, $4
	JLT  q50tail

q50group:
	MOVQ SI, R10
	LEAQ (SI)(BX*2), R11
	LEAQ (SI)(BX*8), R14 // two groups ahead
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

q50gblock:
	PREFETCHT0 (R14)
	PREFETCHT0 64(R14)
	ADDQ       $88, R14
	VMOVDQU    (DI)(AX*8), Y4
	VPMADDUBSW Y4, Y13, Y5
	VPMADDWD   Y15, Y5, Y5
	SCALES50
	Q50ROW4(2(R10), 6(R10), 0, Y0)
	Q50ROW4(2(R10)(BX*1), 6(R10)(BX*1), 1, Y1)
	Q50ROW4(2(R11), 6(R11), 2, Y2)
	Q50ROW4(2(R11)(BX*1), 6(R11)(BX*1), 3, Y3)
	ADDQ $22, R10
	ADDQ $22, R11
	ADDQ $4, AX
	CMPQ AX, R8
	JLT  q50gblock

	REDUCE8TO(Y0, X0)
	REDUCE8TO(Y1, X1)
	REDUCE8TO(Y2, X2)
	REDUCE8TO(Y3, X3)
	VMOVSS X0, 0(R9)
	VMOVSS X1, 4(R9)
	VMOVSS X2, 8(R9)
	VMOVSS X3, 12(R9)

	LEAQ (SI)(BX*4), SI
	ADDQ $16, R9
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  q50group

q50tail:
	TESTQ CX, CX
	JZ    q50done

q50row:
	MOVQ SI, R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0

q50rblock:
	ACT50
	HIBITS(2(R10), Y12, Y11, Y13)
	NIBBLES(6(R10))
	VPOR Y7, Y6, Y6
	ISUM
	VPSUBD Y5, Y6, Y6
	SCALED((R10), Y0)
	ADDQ $22, R10
	ADDQ $4, AX
	CMPQ AX, R8
	JLT  q50rblock

	REDUCE8TO(Y0, X0)
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q50row

q50done:
	VZEROUPPER
	RET

// func dotQ5_1RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ5_1RowsAVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ s+40(FP), R12
	MOVQ nb+48(FP), R8
	MOVQ out+56(FP), R9
	SHLQ $2, R8
	LEAQ -4(R8), R13 // below it, two blocks are left
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

	MINCONSTS

	CMPQ CX, $4
	JLT  q51tail

q51group:
	MOVQ SI, R10
	LEAQ (SI)(BX*2), R11
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y10, Y10, Y10
	CMPQ AX, R13
	JGE  q51glast

q51gpair:
	Q5PREFETCH
	Q51BLOCK4(0)
	Q51BLOCK4(1)
	ADDQ $48, R10
	ADDQ $48, R11
	ADDQ $8, AX
	CMPQ AX, R13
	JLT  q51gpair

q51glast:
	CMPQ AX, R8
	JGE  q51gdone
	Q51BLOCK4(0)

q51gdone:
	MINREDUCE4

	LEAQ (SI)(BX*4), SI
	ADDQ $16, R9
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  q51group

q51tail:
	TESTQ CX, CX
	JZ    q51done

q51row:
	MOVQ SI, R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS X10, X10, X10

q51rblock:
	ACTMIN
	HIBITS(4(R10), q5shuf<>(SB), q5sel<>(SB), q5x10<>(SB))
	NIBBLES(8(R10))
	VPOR Y7, Y6, Y6
	ISUM
	SCALEDMIN((R10), Y0, X10)
	ADDQ $24, R10
	ADDQ $4, AX
	CMPQ AX, R8
	JLT  q51rblock

	REDUCE8TO(Y0, X0)
	VADDSS X10, X0, X0
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q51row

q51done:
	VZEROUPPER
	RET
