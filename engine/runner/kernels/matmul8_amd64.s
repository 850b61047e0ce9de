//go:build !purego

#include "textflag.h"
#include "k8_amd64.h"

// Q4_K, one row × eight tokens with AVX2 (CPUs with AVX-512 run the
// sixteen-row kernel of matmul16k_amd64.s). A row's nibbles are unpacked once per
// super-block and applied to eight tokens, whose quants are memory
// operands of VPMADDUBSW: with one row no activation load is shared, so
// each token costs three instructions per sub-block (product, scale,
// add), fewer than the two-row × four-token kernel's three and a half,
// and the per-super-block work (scales, integer reductions, the float
// combine) is spread over eight tokens instead of four.
//
// What depends on the tokens alone is packed once per product by the Go
// side (mulQ4K8): per super-block the pair sums of each token's bsums
// (eight int16; tokens 0 and 4, 1 and 5, 2 and 6, 3 and 7 share a 32-byte
// row so that VPMADDWD against the mins and two VPHADDD rounds leave the
// eight tokens' msums in token order) and the eight tokens' dₐ.
//
// Per super-block and token the sums are the exact integers of the other
// kernels, combined in float lane by lane with the roundings of kCombine:
// sum + (float(d·dₐ)·float(isum) − float(dmin·dₐ)·float(msum)).
//
// Registers: Y0-Y7 isum lanes of tokens 0-7; Y8, Y9 low and high
// nibbles of 64 values; Y10, Y11 their sub-block scales; Y12, Y13
// products; Y14 bytes 0x0F; Y15 the eight sums. Pointers: DI, R8, R11,
// R12, R13, R14, BX, DX the tokens' quants (at offset AX, 256 per
// super-block); R10 the super-block; SI the packed token data; R9 the
// args. Stack: scales as int16 at 0-14, mins at 16-30.

// The scale unpacking of ggml (utmp/kmask) on the three dwords u0-u2 of
// the packed scales, four lanes at once: [u0, u2, u1, u2] shifted by
// [0, 0, 0, 4] and masked gives the low bits of scales 0-3, 4-7 and
// mins 0-3, 4-7; [u0, u0, u1, u1] shifted by 2 and masked gives the two
// high bits of scales 4-7 and mins 4-7.
DATA k4shift<>+0(SB)/4, $0
DATA k4shift<>+4(SB)/4, $0
DATA k4shift<>+8(SB)/4, $0
DATA k4shift<>+12(SB)/4, $4
GLOBL k4shift<>(SB), RODATA|NOPTR, $16

DATA k4masklo<>+0(SB)/4, $0x3f3f3f3f
DATA k4masklo<>+4(SB)/4, $0x0f0f0f0f
DATA k4masklo<>+8(SB)/4, $0x3f3f3f3f
DATA k4masklo<>+12(SB)/4, $0x0f0f0f0f
GLOBL k4masklo<>(SB), RODATA|NOPTR, $16

DATA k4maskhi<>+0(SB)/4, $0
DATA k4maskhi<>+4(SB)/4, $0x30303030
DATA k4maskhi<>+8(SB)/4, $0
DATA k4maskhi<>+12(SB)/4, $0x30303030
GLOBL k4maskhi<>(SB), RODATA|NOPTR, $16

// Q4K8_TOKEN applies the 64 values in Y8 (sub-block 2j) and Y9
// (sub-block 2j+1) to one token, its quants at off(q)(AX*1).
#define Q4K8_TOKEN(q, off, acc) \
	VPMADDUBSW off(q)(AX*1), Y8, Y12 \
	VPMADDWD   Y10, Y12, Y12 \
	VPADDD     Y12, acc, acc \
	VPMADDUBSW off+32(q)(AX*1), Y9, Y13 \
	VPMADDWD   Y11, Y13, Y13 \
	VPADDD     Y13, acc, acc

// Q4K8_PAIR applies sub-blocks 2j and 2j+1 to the eight tokens.
#define Q4K8_PAIR(j) \
	VMOVDQU      16+32*j(R10), Y8 \
	VPSRLW       $4, Y8, Y9 \
	VPAND        Y14, Y8, Y8 \
	VPAND        Y14, Y9, Y9 \
	VPBROADCASTW 4*j(SP), Y10 \
	VPBROADCASTW 4*j+2(SP), Y11 \
	Q4K8_TOKEN(DI, 64*j, Y0) \
	Q4K8_TOKEN(R8, 64*j, Y1) \
	Q4K8_TOKEN(R11, 64*j, Y2) \
	Q4K8_TOKEN(R12, 64*j, Y3) \
	Q4K8_TOKEN(R13, 64*j, Y4) \
	Q4K8_TOKEN(R14, 64*j, Y5) \
	Q4K8_TOKEN(BX, 64*j, Y6) \
	Q4K8_TOKEN(DX, 64*j, Y7)

// func mulQ4Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)
TEXT ·mulQ4Kx8AVX2(SB), NOSPLIT, $32-40
	MOVQ a+32(FP), R9
	K8LOADQ
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14

q4k8row:
	MOVQ   w+0(FP), R10
	MOVQ   128(R9), SI
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX
	VXORPS Y15, Y15, Y15

q4k8block:
	// Scales then mins as int16 on the stack.
	VMOVDQU   4(R10), X8
	VPSHUFD   $0x98, X8, X9
	VPSRLVD   k4shift<>(SB), X9, X9
	VPAND     k4masklo<>(SB), X9, X9
	VPSHUFD   $0x50, X8, X8
	VPSRLD    $2, X8, X8
	VPAND     k4maskhi<>(SB), X8, X8
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
	Q4K8_PAIR(0)
	Q4K8_PAIR(1)
	Q4K8_PAIR(2)
	Q4K8_PAIR(3)

	// isum of tokens 0-7 into the lanes of Y0
	K8REDUCE

	K8COMBINE

	ADDQ $144, R10
	ADDQ $256, AX
	ADDQ $160, SI
	DECQ CX
	JNZ  q4k8block

	K8STOREALL
	JNZ  q4k8row
	VZEROUPPER
	RET
