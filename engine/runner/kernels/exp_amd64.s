//go:build !purego

#include "textflag.h"

// exp32 of exp.go eight lanes at a time: the same float32 operations in
// the same order, each rounded on its own (no fused multiply-add), so
// the bits are the portable code's.

DATA expc<>+0(SB)/4, $0xc2aeac4f  // expLo -87.33654
DATA expc<>+4(SB)/4, $0x42b0c0a5  // expHi 88.37626
DATA expc<>+8(SB)/4, $0x3fb8aa3b  // log2(e)
DATA expc<>+12(SB)/4, $0x3f000000 // 0.5
DATA expc<>+16(SB)/4, $0x3f318000 // C1
DATA expc<>+20(SB)/4, $0xb95e8083 // C2
DATA expc<>+24(SB)/4, $0x39506967 // P0
DATA expc<>+28(SB)/4, $0x3ab743ce // P1
DATA expc<>+32(SB)/4, $0x3c088908 // P2
DATA expc<>+36(SB)/4, $0x3d2aa9c1 // P3
DATA expc<>+40(SB)/4, $0x3e2aaaaa // P4
DATA expc<>+44(SB)/4, $0x3f000000 // P5
DATA expc<>+48(SB)/4, $0x3f800000 // 1
DATA expc<>+52(SB)/4, $127
GLOBL expc<>(SB), RODATA|NOPTR, $56

// EXPSTEP adds the polynomial coefficient at expc+off to Y5.
#define EXPSTEP(off) \
	VBROADCASTSS expc<>+off(SB), Y6 \
	VADDPS       Y6, Y5, Y5

// func expF32AVX2(dst, src *float32, n int)
// n is a multiple of 8.
TEXT ·expF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   expdone
	VBROADCASTSS expc<>+0(SB), Y15
	VBROADCASTSS expc<>+4(SB), Y14
	VBROADCASTSS expc<>+8(SB), Y13
	VBROADCASTSS expc<>+12(SB), Y12
	VBROADCASTSS expc<>+16(SB), Y11
	VBROADCASTSS expc<>+20(SB), Y10
	VBROADCASTSS expc<>+48(SB), Y9
	VPBROADCASTD expc<>+52(SB), Y8

exploop:
	VMOVUPS (SI), Y0
	VCMPPS  $3, Y0, Y0, Y7     // NaN lanes
	VMAXPS  Y15, Y0, Y1        // clamp (a NaN lane is restored at the end)
	VMINPS  Y14, Y1, Y1
	VMULPS  Y13, Y1, Y2
	VADDPS  Y12, Y2, Y2
	VROUNDPS $1, Y2, Y2        // n = floor(x·log2e + 0.5)
	VMULPS  Y11, Y2, Y3
	VSUBPS  Y3, Y1, Y1
	VMULPS  Y10, Y2, Y3
	VSUBPS  Y3, Y1, Y1         // x − n·C1 − n·C2
	VMULPS  Y1, Y1, Y4         // z
	VBROADCASTSS expc<>+24(SB), Y5
	VMULPS  Y1, Y5, Y5         // P0·x
	EXPSTEP(28)
	VMULPS  Y1, Y5, Y5
	EXPSTEP(32)
	VMULPS  Y1, Y5, Y5
	EXPSTEP(36)
	VMULPS  Y1, Y5, Y5
	EXPSTEP(40)
	VMULPS  Y1, Y5, Y5
	EXPSTEP(44)
	VMULPS  Y4, Y5, Y5
	VADDPS  Y1, Y5, Y5
	VADDPS  Y9, Y5, Y5         // y + 1
	VCVTPS2DQ Y2, Y2           // n is integral: exact
	VPADDD  Y8, Y2, Y2
	VPSLLD  $23, Y2, Y2        // 2^n
	VMULPS  Y2, Y5, Y5
	VBLENDVPS Y7, Y0, Y5, Y5   // NaN in, NaN out
	VMOVUPS Y5, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     exploop

expdone:
	VZEROUPPER
	RET
