//go:build !purego

#include "textflag.h"

// Multi-token kernels: each weight block is loaded and unpacked once and
// applied to four tokens. Per row and token they add the blocks in the
// same order and with the same roundings as the one-token kernels
// (dot_amd64.s, dotk_amd64.s), so MatMul's results equal MatVec's.

// Q8_0, two rows × four tokens. Y0-Y3: row 0 for tokens 0-3, Y4-Y7:
// row 1; Y8, Y9: |w| of the two rows; X10, X11: their scales; Y12: a
// token's quants; Y13: the product; Y14: the scale product; Y15:
// int16 ones. Args a: q at 0-24, d at 32-56, out at 64-88.

#define Q8_TOKEN(q, d, acc0, acc1) \
	VMOVDQU      (q)(AX*8), Y12 \
	VMULSS       (d)(AX*1), X10, X14 \
	VBROADCASTSS X14, Y14 \
	VPSIGNB      2(R10), Y12, Y13 \
	VPMADDUBSW   Y13, Y8, Y13 \
	VPMADDWD     Y15, Y13, Y13 \
	VCVTDQ2PS    Y13, Y13 \
	VFMADD231PS  Y14, Y13, acc0 \
	VMULSS       (d)(AX*1), X11, X14 \
	VBROADCASTSS X14, Y14 \
	VPSIGNB      2(R11), Y12, Y13 \
	VPMADDUBSW   Y13, Y9, Y13 \
	VPMADDWD     Y15, Y13, Y13 \
	VCVTDQ2PS    Y13, Y13 \
	VFMADD231PS  Y14, Y13, acc1

// REDUCE adds the eight lanes of Y into the low lane of X as the
// one-token Q8_0 kernel does.
#define REDUCE(Y, X) \
	VEXTRACTF128 $1, Y, X8 \
	VADDPS       X8, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// STORE2 writes rows 0 and 1 of one token and advances its output.
#define STORE2(off, X0r, X1r) \
	MOVQ   off(R9), R10 \
	VMOVSS X0r, (R10) \
	VMOVSS X1r, 4(R10) \
	ADDQ   $8, off(R9)

// func mulQ8_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)
TEXT ·mulQ8_0x2x4AVX2(SB), NOSPLIT, $0-40
	MOVQ a+32(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R12
	MOVQ 24(R9), R13
	MOVQ 32(R9), DX
	MOVQ 40(R9), BX
	MOVQ 48(R9), R14
	MOVQ 56(R9), CX
	MOVQ nb+16(FP), SI
	SHLQ $2, SI // AX steps 4 per block: d at (d)(AX*1), q at (q)(AX*8)
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

q8pair:
	MOVQ   w+0(FP), R10
	MOVQ   R10, R11
	ADDQ   rowBytes+8(FP), R11
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

q8block:
	VPABSB    2(R10), Y8
	VPABSB    2(R11), Y9
	VCVTPH2PS (R10), X10
	VCVTPH2PS (R11), X11
	Q8_TOKEN(DI, DX, Y0, Y4)
	Q8_TOKEN(R8, BX, Y1, Y5)
	Q8_TOKEN(R12, R14, Y2, Y6)
	Q8_TOKEN(R13, CX, Y3, Y7)
	ADDQ $34, R10
	ADDQ $34, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q8block

	REDUCE(Y0, X0)
	REDUCE(Y1, X1)
	REDUCE(Y2, X2)
	REDUCE(Y3, X3)
	REDUCE(Y4, X4)
	REDUCE(Y5, X5)
	REDUCE(Y6, X6)
	REDUCE(Y7, X7)
	STORE2(64, X0, X4)
	STORE2(72, X1, X5)
	STORE2(80, X2, X6)
	STORE2(88, X3, X7)

	MOVQ rowBytes+8(FP), R10
	SHLQ $1, R10
	ADDQ R10, w+0(FP)
	DECQ pairs+24(FP)
	JNZ  q8pair
	VZEROUPPER
	RET

// Q4_K, one row × four tokens. Per super-block the integer sums of the
// four tokens are reduced into the lanes of X0 (isum) and X1 (msum) and
// combined in float lane by lane, with the roundings of kCombine:
// sum + (float(d·dₐ)·float(isum) − float(dmin·dₐ)·float(msum)), sums
// in X13. Y0-Y3: isum lanes of tokens 0-3; Y6, Y7: low and high nibbles
// of 64 values; Y8, Y9: their sub-block scales; X12: the mins; Y14:
// bytes 0x0F. Args a: q at 0-24, out at 32-56, bs at 64-88, dk at
// 96-120.

#define Q4K_TOKEN(q, off, acc) \
	VPMADDUBSW off(q)(AX*8), Y6, Y10 \
	VPMADDWD   Y8, Y10, Y10 \
	VPADDD     Y10, acc, acc \
	VPMADDUBSW off+32(q)(AX*8), Y7, Y11 \
	VPMADDWD   Y9, Y11, Y11 \
	VPADDD     Y11, acc, acc

#define Q4K_PAIR(woff, off, s0, s1) \
	VMOVDQU      woff(R10), Y5 \
	VPAND        Y14, Y5, Y6 \
	VPSRLW       $4, Y5, Y7 \
	VPAND        Y14, Y7, Y7 \
	VPBROADCASTW s0(SP), Y8 \
	VPBROADCASTW s1(SP), Y9 \
	Q4K_TOKEN(DI, off, Y0) \
	Q4K_TOKEN(R8, off, Y1) \
	Q4K_TOKEN(R12, off, Y2) \
	Q4K_TOKEN(R13, off, Y3)

// MSUM sets X to one token's four mins·pair-sum products, its bsums
// pointer at off(R9).
#define MSUM(off, X, Xt) \
	MOVQ         off(R9), R11 \
	VMOVDQU      (R11)(AX*1), X \
	VMOVDQU      16(R11)(AX*1), Xt \
	VPHADDW      Xt, X, X \
	VPMADDWD     X, X12, X

// STORE1 writes lane i of X13 to one token's output and advances it.
#define STORE1(off, i) \
	MOVQ       off(R9), R11 \
	VEXTRACTPS $i, X13, (R11) \
	ADDQ       $4, off(R9)

// func mulQ4Kx4AVX2(w *byte, rowBytes, nb, n int, a *mmKArgs)
TEXT ·mulQ4Kx4AVX2(SB), NOSPLIT, $32-40
	MOVQ a+32(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R12
	MOVQ 24(R9), R13
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14

q4krow:
	MOVQ   w+0(FP), R10
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX // 32 per super-block: quants at (q)(AX*8), bsums at (bs)(AX*1)
	XORQ   DX, DX // 4 per super-block: scales at (dk)(DX*1)
	VXORPS X13, X13, X13

q4kblock:
	// Scales and mins (ggml's utmp/kmask unpacking) as bytes in X9:
	// scales 0-3, scales 4-7, mins 0-3, mins 4-7.
	MOVL    4(R10), R11
	ANDL    $0x3f3f3f3f, R11
	VMOVD   R11, X9
	MOVL    12(R10), R11
	ANDL    $0x0f0f0f0f, R11
	MOVL    4(R10), R14
	SHRL    $6, R14
	ANDL    $0x03030303, R14
	SHLL    $4, R14
	ORL     R14, R11
	VPINSRD $1, R11, X9, X9
	MOVL    8(R10), R11
	ANDL    $0x3f3f3f3f, R11
	VPINSRD $2, R11, X9, X9
	MOVL    12(R10), R11
	SHRL    $4, R11
	ANDL    $0x0f0f0f0f, R11
	MOVL    8(R10), R14
	SHRL    $6, R14
	ANDL    $0x03030303, R14
	SHLL    $4, R14
	ORL     R14, R11
	VPINSRD $3, R11, X9, X9
	VPMOVZXBW    X9, Y9
	VMOVDQU      Y9, 0(SP) // scales as int16 at 0-14, mins at 16-30
	VEXTRACTI128 $1, Y9, X12

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	Q4K_PAIR(16, 0, 0, 2)
	Q4K_PAIR(48, 64, 4, 6)
	Q4K_PAIR(80, 128, 8, 10)
	Q4K_PAIR(112, 192, 12, 14)

	// isum of tokens 0-3 into the lanes of X0
	VPHADDD      Y1, Y0, Y0
	VPHADDD      Y3, Y2, Y2
	VPHADDD      Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0

	// msum of tokens 0-3 into the lanes of X1
	MSUM(64, X1, X6)
	MSUM(72, X2, X6)
	MSUM(80, X3, X6)
	MSUM(88, X5, X6)
	VPHADDD X2, X1, X1
	VPHADDD X5, X3, X3
	VPHADDD X3, X1, X1

	VCVTPH2PS    (R10), X4
	VBROADCASTSS X4, X5
	VMOVSHDUP    X4, X6
	VBROADCASTSS X6, X6
	MOVQ         96(R9), R11
	VMOVSS       (R11)(DX*1), X7
	MOVQ         104(R9), R11
	VINSERTPS    $0x10, (R11)(DX*1), X7, X7
	MOVQ         112(R9), R11
	VINSERTPS    $0x20, (R11)(DX*1), X7, X7
	MOVQ         120(R9), R11
	VINSERTPS    $0x30, (R11)(DX*1), X7, X7
	VMULPS       X7, X5, X5
	VCVTDQ2PS    X0, X8
	VMULPS       X8, X5, X5
	VMULPS       X7, X6, X6
	VCVTDQ2PS    X1, X8
	VMULPS       X8, X6, X6
	VSUBPS       X6, X5, X5
	VADDPS       X5, X13, X13

	ADDQ $144, R10
	ADDQ $32, AX
	ADDQ $4, DX
	DECQ CX
	JNZ  q4kblock

	STORE1(32, 0)
	STORE1(40, 1)
	STORE1(48, 2)
	STORE1(56, 3)

	MOVQ rowBytes+8(FP), R10
	ADDQ R10, w+0(FP)
	DECQ n+24(FP)
	JNZ  q4krow
	VZEROUPPER
	RET

// Q4_K, two rows × four tokens: the one-row kernel above with each
// activation load shared by both rows and each token's bsum pair sums
// shared too. Per super-block the integer sums of row 0 fill lanes 0-3
// of Y0 (tokens 0-3) and row 1 lanes 4-7, likewise the mins sums in Y1,
// and the float combine runs on the eight lanes at once with the
// roundings of the one-row kernel, sums in Y15. Main loop: Y0-Y3 row 0,
// tokens 0-3; Y4-Y7 row 1; Y8, Y10: the two rows' nibbles of one
// sub-block; Y9, Y11: their scales; Y12, Y13 temporaries; Y14 bytes
// 0x0F. Stack: row 0 scales/mins as int16 at 0-30, row 1 at 32-62, the
// mins of both rows at 64-94.

// Q4K_SCALES unpacks the scales and mins of the super-block at R (as
// the one-row kernel) into X, then zero-extends them to int16 in Y.
#define Q4K_SCALES(R, X, Y) \
	MOVL      4(R), SI \
	ANDL      $0x3f3f3f3f, SI \
	VMOVD     SI, X \
	MOVL      12(R), SI \
	ANDL      $0x0f0f0f0f, SI \
	MOVL      4(R), R14 \
	SHRL      $6, R14 \
	ANDL      $0x03030303, R14 \
	SHLL      $4, R14 \
	ORL       R14, SI \
	VPINSRD   $1, SI, X, X \
	MOVL      8(R), SI \
	ANDL      $0x3f3f3f3f, SI \
	VPINSRD   $2, SI, X, X \
	MOVL      12(R), SI \
	SHRL      $4, SI \
	ANDL      $0x0f0f0f0f, SI \
	MOVL      8(R), R14 \
	SHRL      $6, R14 \
	ANDL      $0x03030303, R14 \
	SHLL      $4, R14 \
	ORL       R14, SI \
	VPINSRD   $3, SI, X, X \
	VPMOVZXBW X, Y

#define Q4K2_LO(woff) \
	VMOVDQU woff(R10), Y8 \
	VPAND   Y14, Y8, Y8 \
	VMOVDQU woff(R11), Y10 \
	VPAND   Y14, Y10, Y10

#define Q4K2_HI(woff) \
	VMOVDQU woff(R10), Y8 \
	VPSRLW  $4, Y8, Y8 \
	VPAND   Y14, Y8, Y8 \
	VMOVDQU woff(R11), Y10 \
	VPSRLW  $4, Y10, Y10 \
	VPAND   Y14, Y10, Y10

#define Q4K2_TOKEN(q, off, accA, accB) \
	VMOVDQU    off(q)(AX*8), Y13 \
	VPMADDUBSW Y13, Y8, Y12 \
	VPMADDWD   Y9, Y12, Y12 \
	VPADDD     Y12, accA, accA \
	VPMADDUBSW Y13, Y10, Y12 \
	VPMADDWD   Y11, Y12, Y12 \
	VPADDD     Y12, accB, accB

// Q4K2_SUB applies one sub-block (nibbles in Y8, Y10) with row 0's
// scale at sA(SP) and row 1's at sB(SP) to the four tokens.
#define Q4K2_SUB(off, sA, sB) \
	VPBROADCASTW sA(SP), Y9 \
	VPBROADCASTW sB(SP), Y11 \
	Q4K2_TOKEN(DI, off, Y0, Y4) \
	Q4K2_TOKEN(R8, off, Y1, Y5) \
	Q4K2_TOKEN(R12, off, Y2, Y6) \
	Q4K2_TOKEN(R13, off, Y3, Y7)

#define Q4K2_PAIR(j) \
	Q4K2_LO(16+32*j) \
	Q4K2_SUB(64*j, 4*j, 32+4*j) \
	Q4K2_HI(16+32*j) \
	Q4K2_SUB(64*j+32, 4*j+2, 34+4*j)

// MSUM2 sets Y to one token's mins·pair-sum products, row 0 in the low
// lane and row 1 in the high, its bsums pointer at off(R9), the mins
// of both rows at mins.
#define MSUM2(off, Y, X, Xt, mins) \
	MOVQ        off(R9), SI \
	VMOVDQU     (SI)(AX*1), X \
	VMOVDQU     16(SI)(AX*1), Xt \
	VPHADDW     Xt, X, X \
	VINSERTI128 $1, X, Y, Y \
	VPMADDWD    mins, Y, Y

// STORE2K writes lane i of X15 (row 0) and of X13 (row 1) to one
// token's output and advances it.
#define STORE2K(off, i) \
	MOVQ       off(R9), SI \
	VEXTRACTPS $i, X15, (SI) \
	VEXTRACTPS $i, X13, 4(SI) \
	ADDQ       $8, off(R9)

// func mulQ4Kx2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmKArgs)
TEXT ·mulQ4Kx2x4AVX2(SB), NOSPLIT, $96-40
	MOVQ a+32(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R12
	MOVQ 24(R9), R13
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14

q4k2pair:
	MOVQ   w+0(FP), R10
	MOVQ   R10, R11
	ADDQ   rowBytes+8(FP), R11
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX // 32 per super-block: quants at (q)(AX*8), bsums at (bs)(AX*1)
	XORQ   DX, DX // 4 per super-block: scales at (dk)(DX*1)
	VXORPS Y15, Y15, Y15

q4k2block:
	Q4K_SCALES(R10, X8, Y8)
	Q4K_SCALES(R11, X9, Y9)
	VMOVDQU    Y8, 0(SP)
	VMOVDQU    Y9, 32(SP)
	VPERM2I128 $0x31, Y9, Y8, Y8
	VMOVDQU    Y8, 64(SP)

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	Q4K2_PAIR(0)
	Q4K2_PAIR(1)
	Q4K2_PAIR(2)
	Q4K2_PAIR(3)

	// isum: row 0, tokens 0-3 into the lanes of X0; row 1 into X4;
	// then row 1 to the high lane of Y0
	VPHADDD      Y1, Y0, Y0
	VPHADDD      Y3, Y2, Y2
	VPHADDD      Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0
	VPHADDD      Y5, Y4, Y4
	VPHADDD      Y7, Y6, Y6
	VPHADDD      Y6, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD       X5, X4, X4
	VINSERTI128  $1, X4, Y0, Y0

	// msum: row 0 tokens 0-3 in the low lane of Y1, row 1 in the high
	MSUM2(64, Y1, X1, X6, 64(SP))
	MSUM2(72, Y2, X2, X6, 64(SP))
	MSUM2(80, Y3, X3, X6, 64(SP))
	MSUM2(88, Y5, X5, X6, 64(SP))
	VPHADDD Y2, Y1, Y1
	VPHADDD Y5, Y3, Y3
	VPHADDD Y3, Y1, Y1

	VCVTPH2PS    (R10), X4
	VCVTPH2PS    (R11), X5
	VBROADCASTSS X4, X6
	VBROADCASTSS X5, X7
	VINSERTF128  $1, X7, Y6, Y6 // d
	VMOVSHDUP    X4, X4
	VBROADCASTSS X4, X4
	VMOVSHDUP    X5, X5
	VBROADCASTSS X5, X5
	VINSERTF128  $1, X5, Y4, Y4 // dmin
	MOVQ         96(R9), SI
	VMOVSS       (SI)(DX*1), X7
	MOVQ         104(R9), SI
	VINSERTPS    $0x10, (SI)(DX*1), X7, X7
	MOVQ         112(R9), SI
	VINSERTPS    $0x20, (SI)(DX*1), X7, X7
	MOVQ         120(R9), SI
	VINSERTPS    $0x30, (SI)(DX*1), X7, X7
	VINSERTF128  $1, X7, Y7, Y7
	VMULPS       Y7, Y6, Y6
	VCVTDQ2PS    Y0, Y8
	VMULPS       Y8, Y6, Y6
	VMULPS       Y7, Y4, Y4
	VCVTDQ2PS    Y1, Y8
	VMULPS       Y8, Y4, Y4
	VSUBPS       Y4, Y6, Y6
	VADDPS       Y6, Y15, Y15

	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $32, AX
	ADDQ $4, DX
	DECQ CX
	JNZ  q4k2block

	VEXTRACTF128 $1, Y15, X13
	STORE2K(32, 0)
	STORE2K(40, 1)
	STORE2K(48, 2)
	STORE2K(56, 3)

	MOVQ rowBytes+8(FP), R10
	SHLQ $1, R10
	ADDQ R10, w+0(FP)
	DECQ pairs+24(FP)
	JNZ  q4k2pair
	VZEROUPPER
	RET

// Q4_0, two rows × four tokens, with the arithmetic of the one-token
// row kernel (dotq_amd64.s): per row and token the nibbles times the
// quants less 8 times the lane sums, converted and accumulated with
// d·dₐ by FMA, reduced as REDUCE8TO. Y0-Y3: row 0 for tokens 0-3, Y4-Y7:
// row 1; Y8, Y9: the two rows' spread nibbles; X10, X11: their scales;
// Y12 bytes 0x08; Y13 a token's offsets; Y14, Y15 temporaries. Stack:
// bytes 0x0F at 0, int16 ones at 32. Args a as for Q8_0.

#define Q40_NIB(R, X, Y) \
	VMOVDQU     2(R), X \
	VPSRLW      $4, X, X14 \
	VINSERTI128 $1, X14, Y, Y \
	VPAND       0(SP), Y, Y

#define Q40_TOKEN(q, d, accA, accB) \
	VPMADDUBSW   (q)(AX*8), Y12, Y13 \
	VPMADDWD     32(SP), Y13, Y13 \
	VPMADDUBSW   (q)(AX*8), Y8, Y14 \
	VPMADDWD     32(SP), Y14, Y14 \
	VPSUBD       Y13, Y14, Y14 \
	VCVTDQ2PS    Y14, Y14 \
	VMULSS       (d)(AX*1), X10, X15 \
	VBROADCASTSS X15, Y15 \
	VFMADD231PS  Y15, Y14, accA \
	VPMADDUBSW   (q)(AX*8), Y9, Y14 \
	VPMADDWD     32(SP), Y14, Y14 \
	VPSUBD       Y13, Y14, Y14 \
	VCVTDQ2PS    Y14, Y14 \
	VMULSS       (d)(AX*1), X11, X15 \
	VBROADCASTSS X15, Y15 \
	VFMADD231PS  Y15, Y14, accB

// func mulQ4_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)
TEXT ·mulQ4_0x2x4AVX2(SB), NOSPLIT, $64-40
	MOVQ a+32(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R12
	MOVQ 24(R9), R13
	MOVQ 32(R9), DX
	MOVQ 40(R9), BX
	MOVQ 48(R9), R14
	MOVQ 56(R9), CX
	MOVQ nb+16(FP), SI
	SHLQ $2, SI // AX steps 4 per block: d at (d)(AX*1), q at (q)(AX*8)
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	VMOVDQU Y14, 0(SP)
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15
	VMOVDQU Y15, 32(SP)
	MOVQ $0x0808080808080808, AX
	MOVQ AX, X12
	VPBROADCASTQ X12, Y12

q40pair:
	MOVQ   w+0(FP), R10
	MOVQ   R10, R11
	ADDQ   rowBytes+8(FP), R11
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

q40block:
	Q40_NIB(R10, X8, Y8)
	Q40_NIB(R11, X9, Y9)
	VCVTPH2PS (R10), X10
	VCVTPH2PS (R11), X11
	Q40_TOKEN(DI, DX, Y0, Y4)
	Q40_TOKEN(R8, BX, Y1, Y5)
	Q40_TOKEN(R12, R14, Y2, Y6)
	Q40_TOKEN(R13, CX, Y3, Y7)
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q40block

	REDUCE(Y0, X0)
	REDUCE(Y1, X1)
	REDUCE(Y2, X2)
	REDUCE(Y3, X3)
	REDUCE(Y4, X4)
	REDUCE(Y5, X5)
	REDUCE(Y6, X6)
	REDUCE(Y7, X7)
	STORE2(64, X0, X4)
	STORE2(72, X1, X5)
	STORE2(80, X2, X6)
	STORE2(88, X3, X7)

	MOVQ rowBytes+8(FP), R10
	SHLQ $1, R10
	ADDQ R10, w+0(FP)
	DECQ pairs+24(FP)
	JNZ  q40pair
	VZEROUPPER
	RET
