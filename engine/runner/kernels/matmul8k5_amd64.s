//go:build !purego

#include "textflag.h"
#include "k8_amd64.h"

// Q5_K, one row × eight tokens with AVX2 alone: mulQ4Kx8AVX2
// (matmul8_amd64.s) with the fifth bits, formed as dotQ5KRowsAVX2
// forms them (qh shifted so that bits 2j and 2j+1 sit at bit 4 of each
// byte, masked with 0x10, OR'd into the nibbles of sub-blocks 2j and
// 2j+1), once per super-block for the eight tokens instead of once per
// token. The integer sums are the row kernel's exact integers and
// K8COMBINE has its roundings, so the results are MatVec's bits.
// Registers as in mulQ4Kx8AVX2; Y12 and Y13 carry qh and its shifts
// before the token products take them back. Stack: scales as int16 at
// 0-14, mins at 16-30, bytes 0x10 at 32.

// The scale unpacking constants of mulQ4Kx8AVX2.
DATA k5shift<>+0(SB)/4, $0
DATA k5shift<>+4(SB)/4, $0
DATA k5shift<>+8(SB)/4, $0
DATA k5shift<>+12(SB)/4, $4
GLOBL k5shift<>(SB), RODATA|NOPTR, $16

DATA k5masklo<>+0(SB)/4, $0x3f3f3f3f
DATA k5masklo<>+4(SB)/4, $0x0f0f0f0f
DATA k5masklo<>+8(SB)/4, $0x3f3f3f3f
DATA k5masklo<>+12(SB)/4, $0x0f0f0f0f
GLOBL k5masklo<>(SB), RODATA|NOPTR, $16

DATA k5maskhi<>+0(SB)/4, $0
DATA k5maskhi<>+4(SB)/4, $0x30303030
DATA k5maskhi<>+8(SB)/4, $0
DATA k5maskhi<>+12(SB)/4, $0x30303030
GLOBL k5maskhi<>(SB), RODATA|NOPTR, $16

// Q5K8_NIB splits the nibbles of sub-blocks 2j and 2j+1 (at 48+32j)
// into Y8 and Y9 and loads qh into Y12.
#define Q5K8_NIB(j) \
	VMOVDQU 48+32*j(R10), Y8 \
	VPSRLW  $4, Y8, Y9 \
	VPAND   Y14, Y8, Y8 \
	VPAND   Y14, Y9, Y9 \
	VMOVDQU 16(R10), Y12

// Q5K8_OR ORs into Y the fifth bits left at bit 4 of Y13's bytes.
#define Q5K8_OR(Y) \
	VPAND 32(SP), Y13, Y13 \
	VPOR  Y13, Y, Y

// Q5K8_SL, Q5K8_SR and Q5K8_ID move qh (Y12) left or right by k bits,
// or not at all, into Y13 and OR its fifth bits into Y.
#define Q5K8_SL(k, Y) \
	VPSLLW $k, Y12, Y13 \
	Q5K8_OR(Y)

#define Q5K8_SR(k, Y) \
	VPSRLW $k, Y12, Y13 \
	Q5K8_OR(Y)

#define Q5K8_ID(Y) \
	VMOVDQU Y12, Y13 \
	Q5K8_OR(Y)

// Q5K8_TOKEN is mulQ4Kx8AVX2's Q4K8_TOKEN (macros do not cross files):
// the 64 values in Y8 (sub-block 2j) and Y9 (2j+1) applied to one
// token, its quants at off(q)(AX*1).
#define Q5K8_TOKEN(q, off, acc) \
	VPMADDUBSW off(q)(AX*1), Y8, Y12 \
	VPMADDWD   Y10, Y12, Y12 \
	VPADDD     Y12, acc, acc \
	VPMADDUBSW off+32(q)(AX*1), Y9, Y13 \
	VPMADDWD   Y11, Y13, Y13 \
	VPADDD     Y13, acc, acc

// Q5K8_TOKENS applies sub-blocks 2j and 2j+1 (Y8, Y9) to the eight
// tokens.
#define Q5K8_TOKENS(j) \
	VPBROADCASTW 4*j(SP), Y10 \
	VPBROADCASTW 4*j+2(SP), Y11 \
	Q5K8_TOKEN(DI, 64*j, Y0) \
	Q5K8_TOKEN(R8, 64*j, Y1) \
	Q5K8_TOKEN(R11, 64*j, Y2) \
	Q5K8_TOKEN(R12, 64*j, Y3) \
	Q5K8_TOKEN(R13, 64*j, Y4) \
	Q5K8_TOKEN(R14, 64*j, Y5) \
	Q5K8_TOKEN(BX, 64*j, Y6) \
	Q5K8_TOKEN(DX, 64*j, Y7)

// func mulQ5Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)
TEXT ·mulQ5Kx8AVX2(SB), NOSPLIT, $64-40
	MOVQ         a+32(FP), R9
	K8LOADQ
	MOVQ         $0x0f0f0f0f0f0f0f0f, AX
	MOVQ         AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ         $0x1010101010101010, AX
	MOVQ         AX, X13
	VPBROADCASTQ X13, Y13
	VMOVDQU      Y13, 32(SP)

q5k8row:
	MOVQ   w+0(FP), R10
	MOVQ   128(R9), SI
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX
	VXORPS Y15, Y15, Y15

q5k8block:
	// Scales then mins as int16 on the stack, as mulQ4Kx8AVX2.
	VMOVDQU   4(R10), X8
	VPSHUFD   $0x98, X8, X9
	VPSRLVD   k5shift<>(SB), X9, X9
	VPAND     k5masklo<>(SB), X9, X9
	VPSHUFD   $0x50, X8, X8
	VPSRLD    $2, X8, X8
	VPAND     k5maskhi<>(SB), X8, X8
	VPOR      X8, X9, X9
	VPMOVZXBW X9, Y9
	VMOVDQU   Y9, 0(SP)

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	Q5K8_NIB(0)
	Q5K8_SL(4, Y8)
	Q5K8_SL(3, Y9)
	Q5K8_TOKENS(0)
	Q5K8_NIB(1)
	Q5K8_SL(2, Y8)
	Q5K8_SL(1, Y9)
	Q5K8_TOKENS(1)
	Q5K8_NIB(2)
	Q5K8_ID(Y8)
	Q5K8_SR(1, Y9)
	Q5K8_TOKENS(2)
	Q5K8_NIB(3)
	Q5K8_SR(2, Y8)
	Q5K8_SR(3, Y9)
	Q5K8_TOKENS(3)

	K8REDUCE

	K8COMBINE

	ADDQ $176, R10
	ADDQ $256, AX
	ADDQ $160, SI
	DECQ CX
	JNZ  q5k8block

	K8STOREALL
	JNZ  q5k8row
	VZEROUPPER
	RET

// Q6_K, one row × eight tokens with AVX2 alone, after mulQ6Kx8AVX512:
// each 32-value quarter's six-bit quants are formed once per super-block
// as dotQ6KRowsAVX2 forms them (ql nibble | qh pair << 4) and applied to
// the eight tokens with the quarter's two sub-block scales (VPMADDUBSW,
// VPMADDWD); each token's −32·Σ scale·bsum (the token pack's bsums) is
// added in, then the row kernel's combine float(d·dₐ)·float(isum) with
// its roundings, so the results are MatVec's bits. Registers: Y0-Y7 the
// tokens' isum lanes; Y8 a quarter's quants; Y9 its scales; Y10 a
// product; Y11, Y12 ql and qh; Y13 bytes 0x03; Y14 bytes 0x0F; Y15 the
// eight sums. Stack: the sixteen scales as int16 at 0, times −32 at 32.

// Q6K8_QUARTER forms quarter q of half h (ql at 64h, or 64h+32 for odd
// q, its high nibbles for q ≥ 2; qh at 128+32h, bits 2q and 2q+1; scales
// 8h+2q and 8h+2q+1) and
// applies it to the eight tokens (quants at 128h+32q).
#define Q6K8_QUARTER(h, q, QLOFF, QLSH, QHSH) \
	VMOVDQU      QLOFF(R10), Y11 \
	VPSRLW       $QLSH, Y11, Y11 \
	VPAND        Y14, Y11, Y11 \
	VMOVDQU      128+32*h(R10), Y12 \
	VPSRLW       $QHSH, Y12, Y12 \
	VPAND        Y13, Y12, Y12 \
	VPSLLW       $4, Y12, Y12 \
	VPOR         Y12, Y11, Y8 \
	VPBROADCASTW 16*h+4*q(SP), X9 \
	VPBROADCASTW 16*h+4*q+2(SP), X10 \
	VINSERTI128  $1, X10, Y9, Y9 \
	Q6K8_TOKEN(DI, 128*h+32*q, Y0) \
	Q6K8_TOKEN(R8, 128*h+32*q, Y1) \
	Q6K8_TOKEN(R11, 128*h+32*q, Y2) \
	Q6K8_TOKEN(R12, 128*h+32*q, Y3) \
	Q6K8_TOKEN(R13, 128*h+32*q, Y4) \
	Q6K8_TOKEN(R14, 128*h+32*q, Y5) \
	Q6K8_TOKEN(BX, 128*h+32*q, Y6) \
	Q6K8_TOKEN(DX, 128*h+32*q, Y7)

#define Q6K8_TOKEN(qp, off, acc) \
	VPMADDUBSW off(qp)(AX*1), Y8, Y10 \
	VPMADDWD   Y9, Y10, Y10 \
	VPADDD     Y10, acc, acc

// Q6K8_MSUM adds token t's −32·Σ scale·bsum lanes into acc.
#define Q6K8_MSUM(t, acc) \
	VPMADDWD 32*t(SI), Y9, Y10 \
	VPADDD   Y10, acc, acc

// func mulQ6Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)
TEXT ·mulQ6Kx8AVX2(SB), NOSPLIT, $64-40
	MOVQ         a+32(FP), R9
	K8LOADQ
	MOVQ         $0x0f0f0f0f0f0f0f0f, AX
	MOVQ         AX, X14
	VPBROADCASTQ X14, Y14

q6k8row:
	// K8STOREALL takes Y13: set per row.
	MOVQ         $0x0303030303030303, AX
	MOVQ         AX, X13
	VPBROADCASTQ X13, Y13
	MOVQ   w+0(FP), R10
	MOVQ   128(R9), SI
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX
	VXORPS Y15, Y15, Y15

q6k8block:
	VPMOVSXBW 192(R10), Y9 // sixteen scales as int16
	VMOVDQU   Y9, 0(SP)
	VPSLLW    $5, Y9, Y9
	VPXOR     Y10, Y10, Y10
	VPSUBW    Y9, Y10, Y9
	VMOVDQU   Y9, 32(SP)

	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	Q6K8_QUARTER(0, 0, 0, 0, 0)
	Q6K8_QUARTER(0, 1, 32, 0, 2)
	Q6K8_QUARTER(0, 2, 0, 4, 4)
	Q6K8_QUARTER(0, 3, 32, 4, 6)
	Q6K8_QUARTER(1, 0, 64, 0, 0)
	Q6K8_QUARTER(1, 1, 96, 0, 2)
	Q6K8_QUARTER(1, 2, 64, 4, 4)
	Q6K8_QUARTER(1, 3, 96, 4, 6)

	VMOVDQU 32(SP), Y9
	Q6K8_MSUM(0, Y0)
	Q6K8_MSUM(1, Y1)
	Q6K8_MSUM(2, Y2)
	Q6K8_MSUM(3, Y3)
	Q6K8_MSUM(4, Y4)
	Q6K8_MSUM(5, Y5)
	Q6K8_MSUM(6, Y6)
	Q6K8_MSUM(7, Y7)
	K8REDUCE

	// Y15 += float(d·dₐ)·float(isum − 32·msum) per token
	VPBROADCASTW 208(R10), X4
	VCVTPH2PS    X4, Y4
	VMULPS       256(SI), Y4, Y4
	VCVTDQ2PS    Y0, Y8
	VMULPS       Y8, Y4, Y4
	VADDPS       Y4, Y15, Y15

	ADDQ $210, R10
	ADDQ $256, AX
	ADDQ $288, SI
	DECQ CX
	JNZ  q6k8block

	K8STOREALL
	JNZ  q6k8row
	VZEROUPPER
	RET
