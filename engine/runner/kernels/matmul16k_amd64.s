//go:build !purego

#include "textflag.h"

// Q4_K, sixteen rows × four tokens with AVX-512 (VNNI), the scheme of
// the sixteen-row kernels of matmul8q_amd64.s: a tile's rows are packed
// once for every token (packQ4K16AVX512) so that a register holds the
// same four-value lane of sixteen rows, and one VPDPBUSD against a
// token's four quants broadcast makes sixteen rows' lane sums.
//
// The packed super-block, 5248 bytes: per sub-block s (32 values) the
// eight lane registers (row r's four 4-bit quants of lane k, as bytes,
// in dword r), the rows' scales as int32 and their mins as an int16
// pair (m, m); then the rows' d and dmin as float32. Per sub-block and
// token the eight VPDPBUSD sums (at most 32·15·128 in magnitude) are
// multiplied by the scales and added into the token's isum, and one
// VPDPWSSD of the mins against the token's two bsums of the sub-block
// adds into its msum: the exact integers of the row kernels, as sums are
// free of order. The combine per super-block is kCombine's, rounding for
// rounding, lane by lane, so the bits are the row kernels'.
//
// Four tokens because the isum, msum and float sums of each, the eight
// lane registers and the temporaries fit the 32 registers with room;
// six fit too but ran only a few percent faster at 128 tokens, and a
// short batch pads more of its last pass. The tokens' bsums and dₐ are
// packed once per product (packK16) in 256 bytes a super-block so that
// the quants' index reaches them too.
//
// Registers: Z0-Z7 lane registers (temporaries in the combine); Z8-Z11
// isum, Z12-Z15 msum, Z16-Z19 float sums of tokens 0-3; Z20, Z21 the
// VPDPBUSD sums; Z22 the mins. Pointers: DI, R8, R10, R11 the tokens'
// quants (256 bytes a super-block, at AX·8); BX the pass data (256 bytes
// a super-block: bsums of token t at 32t, dₐ at 192+4t, at AX·8); SI the
// packed rows; AX 32 per super-block; CX the super-blocks left.

// K16TOK applies sub-block s (lane registers Z0-Z7, mins Z22) to token
// t (quants at q).
#define K16TOK(s, t, q, T, ISUM, MSUM) \
	VPXORD        T, T, T \
	VPDPBUSD.BCST 32*s+0(q)(AX*8), Z0, T \
	VPDPBUSD.BCST 32*s+4(q)(AX*8), Z1, T \
	VPDPBUSD.BCST 32*s+8(q)(AX*8), Z2, T \
	VPDPBUSD.BCST 32*s+12(q)(AX*8), Z3, T \
	VPDPBUSD.BCST 32*s+16(q)(AX*8), Z4, T \
	VPDPBUSD.BCST 32*s+20(q)(AX*8), Z5, T \
	VPDPBUSD.BCST 32*s+24(q)(AX*8), Z6, T \
	VPDPBUSD.BCST 32*s+28(q)(AX*8), Z7, T \
	VPMULLD       640*s+512(SI), T, T \
	VPADDD        T, ISUM, ISUM \
	VPDPWSSD.BCST 32*t+4*s(BX)(AX*8), Z22, MSUM

// K16SUB applies sub-block s to the four tokens.
#define K16SUB(s) \
	VMOVDQU32 640*s+0(SI), Z0 \
	VMOVDQU32 640*s+64(SI), Z1 \
	VMOVDQU32 640*s+128(SI), Z2 \
	VMOVDQU32 640*s+192(SI), Z3 \
	VMOVDQU32 640*s+256(SI), Z4 \
	VMOVDQU32 640*s+320(SI), Z5 \
	VMOVDQU32 640*s+384(SI), Z6 \
	VMOVDQU32 640*s+448(SI), Z7 \
	VMOVDQU32 640*s+576(SI), Z22 \
	K16TOK(s, 0, DI, Z20, Z8, Z12) \
	K16TOK(s, 1, R8, Z21, Z9, Z13) \
	K16TOK(s, 2, R10, Z20, Z10, Z14) \
	K16TOK(s, 3, R11, Z21, Z11, Z15)

// K16COMBINE adds token t's super-block to its float sum F: F +
// (float(d·dₐ)·float(isum) − float(dmin·dₐ)·float(msum)), as kCombine.
// Z0 and Z1 hold d and dmin.
#define K16COMBINE(t, ISUM, MSUM, F) \
	VMULPS.BCST 192+4*t(BX)(AX*8), Z0, Z2 \
	VCVTDQ2PS   ISUM, Z3 \
	VMULPS      Z3, Z2, Z2 \
	VMULPS.BCST 192+4*t(BX)(AX*8), Z1, Z4 \
	VCVTDQ2PS   MSUM, Z5 \
	VMULPS      Z5, Z4, Z4 \
	VSUBPS      Z4, Z2, Z2 \
	VADDPS      Z2, F, F

// func mulQ4Kx16x4AVX512(wt *byte, nb int, a *mmK16Args, mask uint16)
TEXT ·mulQ4Kx16x4AVX512(SB), NOSPLIT, $0-26
	MOVQ wt+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ a+16(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R10
	MOVQ 24(R9), R11
	MOVQ 32(R9), BX
	XORQ AX, AX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

k16sb:
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	K16SUB(0)
	K16SUB(1)
	K16SUB(2)
	K16SUB(3)
	K16SUB(4)
	K16SUB(5)
	K16SUB(6)
	K16SUB(7)
	VMOVUPS 5120(SI), Z0
	VMOVUPS 5184(SI), Z1
	K16COMBINE(0, Z8, Z12, Z16)
	K16COMBINE(1, Z9, Z13, Z17)
	K16COMBINE(2, Z10, Z14, Z18)
	K16COMBINE(3, Z11, Z15, Z19)
	ADDQ $5248, SI
	ADDQ $32, AX
	DECQ CX
	JNZ  k16sb

	MOVWLZX mask+24(FP), AX
	KMOVW   AX, K1
	MOVQ    40(R9), SI
	VMOVUPS Z16, K1, (SI)
	MOVQ    48(R9), SI
	VMOVUPS Z17, K1, (SI)
	MOVQ    56(R9), SI
	VMOVUPS Z18, K1, (SI)
	MOVQ    64(R9), SI
	VMOVUPS Z19, K1, (SI)
	VZEROUPPER
	RET

// K16GATHER sets Z to dword off of the sixteen rows' super-blocks.
#define K16GATHER(off, Z) \
	KXNORW     K1, K1, K1 \
	VPGATHERDD off(SI)(Z30*1), K1, Z

// K16LANE packs lane k of sub-blocks 2j (low nibbles) and 2j+1 (high).
#define K16LANE(j, k, Z) \
	K16GATHER(16+32*j+4*k, Z) \
	VPANDD    Z31, Z, Z17 \
	VMOVDQU32 Z17, 1280*j+64*k(DI) \
	VPSRLD    $4, Z, Z \
	VPANDD    Z31, Z, Z \
	VMOVDQU32 Z, 1280*j+640+64*k(DI)

#define K16PAIR(j) \
	K16LANE(j, 0, Z0) \
	K16LANE(j, 1, Z1) \
	K16LANE(j, 2, Z2) \
	K16LANE(j, 3, Z3) \
	K16LANE(j, 4, Z4) \
	K16LANE(j, 5, Z5) \
	K16LANE(j, 6, Z6) \
	K16LANE(j, 7, Z7)

// K16SCALES unpacks scales and mins j and j+4 as kScales does, from the
// rows' dwords u0-u2 of the packed scales in Z8-Z10.
#define K16SCALES(j) \
	VPSRLD    $(8*j), Z8, Z11 \
	VPANDD    Z29, Z11, Z11 \
	VMOVDQU32 Z11, 640*j+512(DI) \
	VPSRLD    $(8*j), Z9, Z12 \
	VPANDD    Z29, Z12, Z12 \
	VPMULLD   Z26, Z12, Z12 \
	VMOVDQU32 Z12, 640*j+576(DI) \
	VPSRLD    $(8*j), Z10, Z13 \
	VPANDD    Z28, Z13, Z13 \
	VPSRLD    $(8*j+2), Z8, Z14 \
	VPANDD    Z27, Z14, Z14 \
	VPORD     Z14, Z13, Z13 \
	VMOVDQU32 Z13, 640*j+3072(DI) \
	VPSRLD    $(8*j+4), Z10, Z13 \
	VPANDD    Z28, Z13, Z13 \
	VPSRLD    $(8*j+2), Z9, Z14 \
	VPANDD    Z27, Z14, Z14 \
	VPORD     Z14, Z13, Z13 \
	VPMULLD   Z26, Z13, Z13 \
	VMOVDQU32 Z13, 640*j+3136(DI)

// func packQ4K16AVX512(w *byte, off *int32, nb int, dst *byte)
//
// Packs nb super-blocks of the sixteen rows at w + off[i] into dst
// (k16Block words each) by gathers, one dword of sixteen rows at a time.
// Registers: Z30 the rows' offsets; Z31 bytes 0x0F; Z29 63; Z28 15; Z27
// 0x30; Z26 0x10001 (a min as the pair (m, m)).
TEXT ·packQ4K16AVX512(SB), NOSPLIT, $0-32
	MOVQ         w+0(FP), SI
	MOVQ         off+8(FP), R9
	MOVQ         nb+16(FP), CX
	MOVQ         dst+24(FP), DI
	VMOVDQU32    (R9), Z30
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	MOVL         $63, AX
	VPBROADCASTD AX, Z29
	MOVL         $15, AX
	VPBROADCASTD AX, Z28
	MOVL         $0x30, AX
	VPBROADCASTD AX, Z27
	MOVL         $0x10001, AX
	VPBROADCASTD AX, Z26

k16pack:
	K16PAIR(0)
	K16PAIR(1)
	K16PAIR(2)
	K16PAIR(3)
	K16GATHER(4, Z8)
	K16GATHER(8, Z9)
	K16GATHER(12, Z10)
	K16SCALES(0)
	K16SCALES(1)
	K16SCALES(2)
	K16SCALES(3)
	K16GATHER(0, Z15)
	VPMOVDW   Z15, Y16
	VCVTPH2PS Y16, Z16
	VMOVUPS   Z16, 5120(DI)
	VPSRLD    $16, Z15, Z15
	VPMOVDW   Z15, Y16
	VCVTPH2PS Y16, Z16
	VMOVUPS   Z16, 5184(DI)
	ADDQ      $144, SI
	ADDQ      $5248, DI
	DECQ      CX
	JNZ       k16pack
	VZEROUPPER
	RET

// K5LANE packs lane k of sub-blocks 2j and 2j+1 of Q5_K rows: the low
// and high nibbles of the quants' dword (as K16LANE), each with its fifth
// bit from the rows' qh dword of lane k in Z18 (bit 2j, resp. 2j+1, of
// each byte), moved to bit 4 by LOP/HOP $LN/$HN and masked with Z25.
#define K5LANE(j, k, LOP, LN, HOP, HN) \
	K16GATHER(48+32*j+4*k, Z17) \
	LOP       $(LN), Z18, Z19 \
	VPANDD    Z25, Z19, Z19 \
	VPANDD    Z31, Z17, Z20 \
	VPORD     Z19, Z20, Z20 \
	VMOVDQU32 Z20, 1280*j+64*k(DI) \
	HOP       $(HN), Z18, Z19 \
	VPANDD    Z25, Z19, Z19 \
	VPSRLD    $4, Z17, Z17 \
	VPANDD    Z31, Z17, Z17 \
	VPORD     Z19, Z17, Z17 \
	VMOVDQU32 Z17, 1280*j+640+64*k(DI)

// K5LANES packs lane k of all eight sub-blocks.
#define K5LANES(k) \
	K16GATHER(16+4*k, Z18) \
	K5LANE(0, k, VPSLLD, 4, VPSLLD, 3) \
	K5LANE(1, k, VPSLLD, 2, VPSLLD, 1) \
	K5LANE(2, k, VPSLLD, 0, VPSRLD, 1) \
	K5LANE(3, k, VPSRLD, 2, VPSRLD, 3)

// func packQ5K16AVX512(w *byte, off *int32, nb int, dst *byte)
//
// packQ4K16AVX512 for Q5_K super-blocks (176 bytes: d, dmin, the twelve
// scale bytes as Q4_K's, qh at 16, the quants at 48): the same packed
// layout, the lane registers holding 5-bit quants, so that
// mulQ4Kx16x4AVX512 runs Q5_K rows unchanged (a sub-block's VPDPBUSD
// sums stay below 32·31·128). Registers as packQ4K16AVX512's, and Z25
// bytes 0x10.
TEXT ·packQ5K16AVX512(SB), NOSPLIT, $0-32
	MOVQ         w+0(FP), SI
	MOVQ         off+8(FP), R9
	MOVQ         nb+16(FP), CX
	MOVQ         dst+24(FP), DI
	VMOVDQU32    (R9), Z30
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	MOVL         $63, AX
	VPBROADCASTD AX, Z29
	MOVL         $15, AX
	VPBROADCASTD AX, Z28
	MOVL         $0x30, AX
	VPBROADCASTD AX, Z27
	MOVL         $0x10001, AX
	VPBROADCASTD AX, Z26
	MOVL         $0x10101010, AX
	VPBROADCASTD AX, Z25

k5pack:
	K5LANES(0)
	K5LANES(1)
	K5LANES(2)
	K5LANES(3)
	K5LANES(4)
	K5LANES(5)
	K5LANES(6)
	K5LANES(7)
	K16GATHER(4, Z8)
	K16GATHER(8, Z9)
	K16GATHER(12, Z10)
	K16SCALES(0)
	K16SCALES(1)
	K16SCALES(2)
	K16SCALES(3)
	K16GATHER(0, Z15)
	VPMOVDW   Z15, Y16
	VCVTPH2PS Y16, Z16
	VMOVUPS   Z16, 5120(DI)
	VPSRLD    $16, Z15, Z15
	VPMOVDW   Z15, Y16
	VCVTPH2PS Y16, Z16
	VMOVUPS   Z16, 5184(DI)
	ADDQ      $176, SI
	ADDQ      $5248, DI
	DECQ      CX
	JNZ       k5pack
	VZEROUPPER
	RET

// Q6_K, sixteen rows × four tokens, the scheme of the Q4_K kernel above.
// A Q6_K sub-block of 32 values has two scales (signed, one per sixteen
// values) and no min: the lane sums of lanes 0-3 and 4-7 are multiplied
// by their scales apart, and the −32 offset of the quants is the min
// term, 32·scale against the token's bsum of each sixteen, made by one
// VPDPWSSD per sub-block. The combine is dotQ6KGeneric's, F +
// float(d·dₐ)·float(isum − msum), lane by lane, so the bits are the row
// kernels'.
//
// The packed super-block, 5696 bytes: per sub-block s (704 bytes) the
// eight lane registers (6-bit quants), the rows' two scales as int32
// (at 512 and 576) and the pair (32·scale₀, 32·scale₁) as int16 (at
// 640); then the rows' d as float32 (at 5632).

// K6TOK applies sub-block s to token t (quants at q), with temporaries
// T0 and T1.
#define K6TOK(s, t, q, T0, T1, ISUM, MSUM) \
	VPXORD        T0, T0, T0 \
	VPXORD        T1, T1, T1 \
	VPDPBUSD.BCST 32*s+0(q)(AX*8), Z0, T0 \
	VPDPBUSD.BCST 32*s+16(q)(AX*8), Z4, T1 \
	VPDPBUSD.BCST 32*s+4(q)(AX*8), Z1, T0 \
	VPDPBUSD.BCST 32*s+20(q)(AX*8), Z5, T1 \
	VPDPBUSD.BCST 32*s+8(q)(AX*8), Z2, T0 \
	VPDPBUSD.BCST 32*s+24(q)(AX*8), Z6, T1 \
	VPDPBUSD.BCST 32*s+12(q)(AX*8), Z3, T0 \
	VPDPBUSD.BCST 32*s+28(q)(AX*8), Z7, T1 \
	VPMULLD       704*s+512(SI), T0, T0 \
	VPMULLD       704*s+576(SI), T1, T1 \
	VPADDD        T0, ISUM, ISUM \
	VPADDD        T1, ISUM, ISUM \
	VPDPWSSD.BCST 32*t+4*s(BX)(AX*8), Z22, MSUM

// K6SUB applies sub-block s to the four tokens.
#define K6SUB(s) \
	VMOVDQU32 704*s+0(SI), Z0 \
	VMOVDQU32 704*s+64(SI), Z1 \
	VMOVDQU32 704*s+128(SI), Z2 \
	VMOVDQU32 704*s+192(SI), Z3 \
	VMOVDQU32 704*s+256(SI), Z4 \
	VMOVDQU32 704*s+320(SI), Z5 \
	VMOVDQU32 704*s+384(SI), Z6 \
	VMOVDQU32 704*s+448(SI), Z7 \
	VMOVDQU32 704*s+640(SI), Z22 \
	K6TOK(s, 0, DI, Z20, Z21, Z8, Z12) \
	K6TOK(s, 1, R8, Z23, Z24, Z9, Z13) \
	K6TOK(s, 2, R10, Z20, Z21, Z10, Z14) \
	K6TOK(s, 3, R11, Z23, Z24, Z11, Z15)

// K6COMBINE adds token t's super-block to its float sum F: F +
// float(d·dₐ)·float(isum − msum). Z0 holds d.
#define K6COMBINE(t, ISUM, MSUM, F) \
	VMULPS.BCST 192+4*t(BX)(AX*8), Z0, Z2 \
	VPSUBD      MSUM, ISUM, Z3 \
	VCVTDQ2PS   Z3, Z3 \
	VMULPS      Z3, Z2, Z2 \
	VADDPS      Z2, F, F

// func mulQ6Kx16x4AVX512(wt *byte, nb int, a *mmK16Args, mask uint16)
TEXT ·mulQ6Kx16x4AVX512(SB), NOSPLIT, $0-26
	MOVQ wt+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ a+16(FP), R9
	MOVQ 0(R9), DI
	MOVQ 8(R9), R8
	MOVQ 16(R9), R10
	MOVQ 24(R9), R11
	MOVQ 32(R9), BX
	XORQ AX, AX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

k6sb:
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	K6SUB(0)
	K6SUB(1)
	K6SUB(2)
	K6SUB(3)
	K6SUB(4)
	K6SUB(5)
	K6SUB(6)
	K6SUB(7)
	VMOVUPS 5632(SI), Z0
	K6COMBINE(0, Z8, Z12, Z16)
	K6COMBINE(1, Z9, Z13, Z17)
	K6COMBINE(2, Z10, Z14, Z18)
	K6COMBINE(3, Z11, Z15, Z19)
	ADDQ $5696, SI
	ADDQ $32, AX
	DECQ CX
	JNZ  k6sb

	MOVWLZX mask+24(FP), AX
	KMOVW   AX, K1
	MOVQ    40(R9), SI
	VMOVUPS Z16, K1, (SI)
	MOVQ    48(R9), SI
	VMOVUPS Z17, K1, (SI)
	MOVQ    56(R9), SI
	VMOVUPS Z18, K1, (SI)
	MOVQ    64(R9), SI
	VMOVUPS Z19, K1, (SI)
	VZEROUPPER
	RET

// K6Q packs lane k of sub-blocks 4h+p (the low nibbles of the ql dword
// at 64h+32p+4k) and 4h+p+2 (its high nibbles), each with its two high
// bits from the rows' qh dword in Z18 (bits 2p, resp. 2p+4, of each
// byte), moved to bits 4-5 by LOP/HOP $LN/$HN and masked with Z25.
#define K6Q(h, p, k, LOP, LN, HOP, HN) \
	K16GATHER(64*h+32*p+4*k, Z17) \
	LOP       $(LN), Z18, Z19 \
	VPANDD    Z25, Z19, Z19 \
	VPANDD    Z31, Z17, Z20 \
	VPORD     Z19, Z20, Z20 \
	VMOVDQU32 Z20, 704*(4*h+p)+64*k(DI) \
	HOP       $(HN), Z18, Z19 \
	VPANDD    Z25, Z19, Z19 \
	VPSRLD    $4, Z17, Z17 \
	VPANDD    Z31, Z17, Z17 \
	VPORD     Z19, Z17, Z17 \
	VMOVDQU32 Z17, 704*(4*h+p+2)+64*k(DI)

// K6LANES packs lane k of the four sub-blocks of half h.
#define K6LANES(h, k) \
	K16GATHER(128+32*h+4*k, Z18) \
	K6Q(h, 0, k, VPSLLD, 4, VPSLLD, 0) \
	K6Q(h, 1, k, VPSLLD, 2, VPSRLD, 2)

#define K6HALF(h) \
	K6LANES(h, 0) \
	K6LANES(h, 1) \
	K6LANES(h, 2) \
	K6LANES(h, 3) \
	K6LANES(h, 4) \
	K6LANES(h, 5) \
	K6LANES(h, 6) \
	K6LANES(h, 7)

// K6SCALE stores sub-block s's scales, sign-extended from Z9 (scale₀)
// and Z10 (scale₁), and their pair (32·scale₀, 32·scale₁).
#define K6SCALE(s) \
	VMOVDQU32 Z9, 704*(s)+512(DI) \
	VMOVDQU32 Z10, 704*(s)+576(DI) \
	VPSLLD    $5, Z9, Z11 \
	VPANDD    Z24, Z11, Z11 \
	VPSLLD    $21, Z10, Z12 \
	VPORD     Z12, Z11, Z11 \
	VMOVDQU32 Z11, 704*(s)+640(DI)

// K6SCALES unpacks the scale bytes 4q-4q+3: those of sub-blocks 2q and
// 2q+1.
#define K6SCALES(q) \
	K16GATHER(192+4*q, Z8) \
	VPSLLD $24, Z8, Z9 \
	VPSRAD $24, Z9, Z9 \
	VPSLLD $16, Z8, Z10 \
	VPSRAD $24, Z10, Z10 \
	K6SCALE(2*q) \
	VPSLLD $8, Z8, Z9 \
	VPSRAD $24, Z9, Z9 \
	VPSRAD $24, Z8, Z10 \
	K6SCALE(2*q+1)

// func packQ6K16AVX512(w *byte, off *int32, nb int, dst *byte)
//
// Packs nb Q6_K super-blocks (210 bytes: ql at 0, qh at 128, the sixteen
// scales at 192, d at 208) of the sixteen rows at w + off[i] into dst
// (k6Block words each) for mulQ6Kx16x4AVX512. d is gathered from the
// dword at 206, which ends with the super-block. Registers: Z30 the
// rows' offsets; Z31 bytes 0x0F; Z25 bytes 0x30; Z24 0xFFFF.
TEXT ·packQ6K16AVX512(SB), NOSPLIT, $0-32
	MOVQ         w+0(FP), SI
	MOVQ         off+8(FP), R9
	MOVQ         nb+16(FP), CX
	MOVQ         dst+24(FP), DI
	VMOVDQU32    (R9), Z30
	MOVL         $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	MOVL         $0x30303030, AX
	VPBROADCASTD AX, Z25
	MOVL         $0xffff, AX
	VPBROADCASTD AX, Z24

k6pack:
	K6HALF(0)
	K6HALF(1)
	K6SCALES(0)
	K6SCALES(1)
	K6SCALES(2)
	K6SCALES(3)
	K16GATHER(206, Z15)
	VPSRLD    $16, Z15, Z15
	VPMOVDW   Z15, Y16
	VCVTPH2PS Y16, Z16
	VMOVUPS   Z16, 5632(DI)
	ADDQ      $210, SI
	ADDQ      $5696, DI
	DECQ      CX
	JNZ       k6pack
	VZEROUPPER
	RET
