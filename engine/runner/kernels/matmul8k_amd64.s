//go:build !purego

#include "textflag.h"
#include "k8_amd64.h"

// Q5_K and Q6_K, one row × eight tokens with AVX-512 (BW, VL, VNNI and
// GFNI), after mulQ4Kx8AVX2 (matmul8_amd64.s): a row's quants are
// formed once per super-block, 64 values to a register as the row
// kernels of dotk512_amd64.s form them, and applied to eight tokens
// whose quants are memory operands of VPMADDUBSW, VPDPWSSD adding the
// products times the sub-block scales. The row kernels repeat the
// quant forming (three GFNI/OR instructions per 64 values) for every
// token; here it is spread over eight. The integer sums per super-block
// and token are the row kernels' exact integers and the float combine
// has their roundings, so the results are MatVec's bits.
//
// GP registers as in mulQ4Kx8AVX2: DI, R8, R11, R12, R13, R14, BX, DX
// the tokens' quants (at offset AX, 256 per super-block); R10 the
// super-block; SI the packed token data (tokenPack); R9 the args; CX
// super-blocks left. Z0-Z7 the isum lanes of tokens 0-7; Y15 the eight
// sums.

// GF2P8AFFINEQB matrices (row for result bit i in byte 7−i): low
// nibble in the low 256 bits, high nibble (bits 4-7 to 0-3) in the high
// 256 bits; then Q5_K pair 0's fifth bits, qh bit 0 to bit 4 (low half)
// and qh bit 1 to bit 4 (high half), pair j being this shifted left by
// 2j; then Q6_K's qh bits 0-1 to bits 4-5 (low half) and 2-3 (high
// half), bits 4-5 and 6-7 being this shifted left by 4.
DATA k8gf<>+0(SB)/8, $0x0102040800000000
DATA k8gf<>+8(SB)/8, $0x0102040800000000
DATA k8gf<>+16(SB)/8, $0x0102040800000000
DATA k8gf<>+24(SB)/8, $0x0102040800000000
DATA k8gf<>+32(SB)/8, $0x1020408000000000
DATA k8gf<>+40(SB)/8, $0x1020408000000000
DATA k8gf<>+48(SB)/8, $0x1020408000000000
DATA k8gf<>+56(SB)/8, $0x1020408000000000
DATA k8gf<>+64(SB)/8, $0x01000000
DATA k8gf<>+72(SB)/8, $0x01000000
DATA k8gf<>+80(SB)/8, $0x01000000
DATA k8gf<>+88(SB)/8, $0x01000000
DATA k8gf<>+96(SB)/8, $0x02000000
DATA k8gf<>+104(SB)/8, $0x02000000
DATA k8gf<>+112(SB)/8, $0x02000000
DATA k8gf<>+120(SB)/8, $0x02000000
DATA k8gf<>+128(SB)/8, $0x01020000
DATA k8gf<>+136(SB)/8, $0x01020000
DATA k8gf<>+144(SB)/8, $0x01020000
DATA k8gf<>+152(SB)/8, $0x01020000
DATA k8gf<>+160(SB)/8, $0x04080000
DATA k8gf<>+168(SB)/8, $0x04080000
DATA k8gf<>+176(SB)/8, $0x04080000
DATA k8gf<>+184(SB)/8, $0x04080000
GLOBL k8gf<>(SB), RODATA|NOPTR, $192

// The scale unpacking of matmul8_amd64.s (k4shift, k4masklo,
// k4maskhi), which are private to that file.
DATA k8unpack<>+0(SB)/4, $0
DATA k8unpack<>+4(SB)/4, $0
DATA k8unpack<>+8(SB)/4, $0
DATA k8unpack<>+12(SB)/4, $4
DATA k8unpack<>+16(SB)/4, $0x3f3f3f3f
DATA k8unpack<>+20(SB)/4, $0x0f0f0f0f
DATA k8unpack<>+24(SB)/4, $0x3f3f3f3f
DATA k8unpack<>+28(SB)/4, $0x0f0f0f0f
DATA k8unpack<>+32(SB)/4, $0
DATA k8unpack<>+36(SB)/4, $0x30303030
DATA k8unpack<>+40(SB)/4, $0
DATA k8unpack<>+44(SB)/4, $0x30303030
GLOBL k8unpack<>(SB), RODATA|NOPTR, $48

// Q6_K's VPERMW indexes (bytes, widened on load): register k holds
// values 64k to 64k+63, so its product words 8i to 8i+7 take scale
// 4k+i: byte n of the table is n/8.
DATA k8perm6<>+0(SB)/8, $0x0000000000000000
DATA k8perm6<>+8(SB)/8, $0x0101010101010101
DATA k8perm6<>+16(SB)/8, $0x0202020202020202
DATA k8perm6<>+24(SB)/8, $0x0303030303030303
DATA k8perm6<>+32(SB)/8, $0x0404040404040404
DATA k8perm6<>+40(SB)/8, $0x0505050505050505
DATA k8perm6<>+48(SB)/8, $0x0606060606060606
DATA k8perm6<>+56(SB)/8, $0x0707070707070707
DATA k8perm6<>+64(SB)/8, $0x0808080808080808
DATA k8perm6<>+72(SB)/8, $0x0909090909090909
DATA k8perm6<>+80(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA k8perm6<>+88(SB)/8, $0x0b0b0b0b0b0b0b0b
DATA k8perm6<>+96(SB)/8, $0x0c0c0c0c0c0c0c0c
DATA k8perm6<>+104(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA k8perm6<>+112(SB)/8, $0x0e0e0e0e0e0e0e0e
DATA k8perm6<>+120(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL k8perm6<>(SB), RODATA|NOPTR, $128

// K8TOKENS applies the 64 quants in Q (matching the activation at
// off(token)(AX*1)) with the scales in S to the eight tokens' sums:
// VPDPWSSD onto them (K8TOKENS) or VPMADDWD setting them (K8TOKENS0).
#define K8TOK(q, off, Q, S, acc) \
	VPMADDUBSW off(q)(AX*1), Q, Z12 \
	VPDPWSSD   S, Z12, acc

#define K8TOKENS(off, Q, S) \
	K8TOK(DI, off, Q, S, Z0) \
	K8TOK(R8, off, Q, S, Z1) \
	K8TOK(R11, off, Q, S, Z2) \
	K8TOK(R12, off, Q, S, Z3) \
	K8TOK(R13, off, Q, S, Z4) \
	K8TOK(R14, off, Q, S, Z5) \
	K8TOK(BX, off, Q, S, Z6) \
	K8TOK(DX, off, Q, S, Z7)

#define K8TOK0(q, off, Q, S, acc) \
	VPMADDUBSW off(q)(AX*1), Q, Z12 \
	VPMADDWD   S, Z12, acc

#define K8TOKENS0(off, Q, S) \
	K8TOK0(DI, off, Q, S, Z0) \
	K8TOK0(R8, off, Q, S, Z1) \
	K8TOK0(R11, off, Q, S, Z2) \
	K8TOK0(R12, off, Q, S, Z3) \
	K8TOK0(R13, off, Q, S, Z4) \
	K8TOK0(R14, off, Q, S, Z5) \
	K8TOK0(BX, off, Q, S, Z6) \
	K8TOK0(DX, off, Q, S, Z7)

// Q5_K: the Q4_K eight-token kernel on 64-value vectors, with the fifth bit of each quant from qh (bit 2j
// of qh[l] for value l of sub-block 2j, bit 2j+1 for sub-block 2j+1),
// moved to bit 4 by pair j's matrix (Z16-Z19) from qh in both halves of
// Z20. The token pack has Q4_K's layout (packK56: bsum pair sums, then
// dₐ, 160 bytes per super-block). Z8 the pair's quants, Z10 its scales
// (sub-block 2j in the low half, 2j+1 in the high), Z31 the nibble
// matrices. Stack: scales as int16 at 0-14, mins at 16-30.

// Q5K8_PAIR applies sub-blocks 2j and 2j+1 to the eight tokens.
#define Q5K8_PAIR(j, M) \
	VBROADCASTI64X4 48+32*j(R10), Z8 \
	VGF2P8AFFINEQB  $0, Z31, Z8, Z8 \
	VGF2P8AFFINEQB  $0, M, Z20, Z9 \
	VPORQ           Z9, Z8, Z8 \
	VPBROADCASTW    4*j(SP), Y10 \
	VPBROADCASTW    4*j+2(SP), Y11 \
	VINSERTI64X4    $1, Y11, Z10, Z10 \
	K8TOKENS(64*j, Z8, Z10)

#define Q5K8_PAIR0 \
	VBROADCASTI64X4 48(R10), Z8 \
	VGF2P8AFFINEQB  $0, Z31, Z8, Z8 \
	VGF2P8AFFINEQB  $0, Z16, Z20, Z9 \
	VPORQ           Z9, Z8, Z8 \
	VPBROADCASTW    0(SP), Y10 \
	VPBROADCASTW    2(SP), Y11 \
	VINSERTI64X4    $1, Y11, Z10, Z10 \
	K8TOKENS0(0, Z8, Z10)

// func mulQ5Kx8AVX512(w *byte, rowBytes, nb, n int, a *mmK8Args)
TEXT ·mulQ5Kx8AVX512(SB), NOSPLIT, $32-40
	MOVQ      a+32(FP), R9
	K8LOADQ
	VMOVDQU64 k8gf<>+0(SB), Z31
	VMOVDQU64 k8gf<>+64(SB), Z16
	VPSLLQ    $2, Z16, Z17
	VPSLLQ    $4, Z16, Z18
	VPSLLQ    $6, Z16, Z19

q5k8row:
	MOVQ   w+0(FP), R10
	MOVQ   128(R9), SI
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX
	VXORPS Y15, Y15, Y15

q5k8block:
	VMOVDQU   4(R10), X8
	VPSHUFD   $0x98, X8, X9
	VPSRLVD   k8unpack<>+0(SB), X9, X9
	VPAND     k8unpack<>+16(SB), X9, X9
	VPSHUFD   $0x50, X8, X8
	VPSRLD    $2, X8, X8
	VPAND     k8unpack<>+32(SB), X8, X8
	VPOR      X8, X9, X9
	VPMOVZXBW X9, Y9
	VMOVDQU   Y9, 0(SP)

	VBROADCASTI64X4 16(R10), Z20
	Q5K8_PAIR0
	Q5K8_PAIR(1, Z17)
	Q5K8_PAIR(2, Z18)
	Q5K8_PAIR(3, Z19)
	K8FOLD
	K8REDUCE

	K8COMBINE

	ADDQ $176, R10
	ADDQ $256, AX
	ADDQ $160, SI
	DECQ CX
	JNZ  q5k8block

	K8STOREALL
	JNZ q5k8row
	VZEROUPPER
	RET

// Q6_K: per half h of a super-block, ql (64 bytes at 64h) and qh (32
// bytes at 128+32h) give two registers of 64 quants as in
// dotQ6KRowsAVX512, values 0-63 and 64-127 of the half (Z16-Z19 for the
// super-block's four registers); the sixteen int8 scales as words are
// spread to the four registers' sub-blocks by VPERMW (Z20-Z23). The −32
// offset meets the activation through the token pack's bsums (packK56:
// token t's sixteen bsums at 32t, then dₐ at 256, 288 bytes per
// super-block): VPDPWSSD with the scales times −32 (at most 4096 in
// magnitude, so still words) subtracts 32·msum from each token's isum
// lanes, and the combine is float(d·dₐ)·float(isum − 32·msum), as the
// row kernels round it. Matrices: Z31 low nibbles, Z30 high nibbles,
// Z29 and Z28 qh's bits for each. Z24-Z27 the VPERMW indexes, Y13 the
// scales times −32.

// Q6K8_HALF forms the quants of the half whose ql is at off and qh at
// qh: values 0-63 in ZL, 64-127 in ZH.
#define Q6K8_HALF(off, qh, ZL, ZH) \
	VMOVDQU64       off(R10), Z8 \
	VBROADCASTI64X4 qh(R10), Z9 \
	VGF2P8AFFINEQB  $0, Z31, Z8, ZL \
	VGF2P8AFFINEQB  $0, Z29, Z9, Z10 \
	VPORQ           Z10, ZL, ZL \
	VGF2P8AFFINEQB  $0, Z30, Z8, ZH \
	VGF2P8AFFINEQB  $0, Z28, Z9, Z10 \
	VPORQ           Z10, ZH, ZH

// K8MSUM6 subtracts 32 times token t's msum (its bsums at 32t(SI))
// from its lanes in Y.
#define K8MSUM6(t, Y) \
	VPDPWSSD 32*t(SI), Y13, Y

// func mulQ6Kx8AVX512(w *byte, rowBytes, nb, n int, a *mmK8Args)
TEXT ·mulQ6Kx8AVX512(SB), NOSPLIT, $0-40
	MOVQ         a+32(FP), R9
	K8LOADQ
	VPBROADCASTQ k8gf<>+0(SB), Z31
	VPBROADCASTQ k8gf<>+32(SB), Z30
	VMOVDQU64    k8gf<>+128(SB), Z29
	VPSLLQ       $4, Z29, Z28
	VPMOVZXBW    k8perm6<>+0(SB), Z24
	VPMOVZXBW    k8perm6<>+32(SB), Z25
	VPMOVZXBW    k8perm6<>+64(SB), Z26
	VPMOVZXBW    k8perm6<>+96(SB), Z27

q6k8row:
	MOVQ   w+0(FP), R10
	MOVQ   128(R9), SI
	MOVQ   nb+16(FP), CX
	XORQ   AX, AX
	VXORPS Y15, Y15, Y15

q6k8block:
	VPMOVSXBW 192(R10), Y11
	VPERMW    Z11, Z24, Z20
	VPERMW    Z11, Z25, Z21
	VPERMW    Z11, Z26, Z22
	VPERMW    Z11, Z27, Z23
	VPSLLW    $5, Y11, Y11
	VPXOR     Y13, Y13, Y13
	VPSUBW    Y11, Y13, Y13

	Q6K8_HALF(0, 128, Z16, Z17)
	Q6K8_HALF(64, 160, Z18, Z19)
	K8TOKENS0(0, Z16, Z20)
	K8TOKENS(64, Z17, Z21)
	K8TOKENS(128, Z18, Z22)
	K8TOKENS(192, Z19, Z23)
	K8FOLD
	K8MSUM6(0, Y0)
	K8MSUM6(1, Y1)
	K8MSUM6(2, Y2)
	K8MSUM6(3, Y3)
	K8MSUM6(4, Y4)
	K8MSUM6(5, Y5)
	K8MSUM6(6, Y6)
	K8MSUM6(7, Y7)
	K8REDUCE

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
	JNZ q6k8row
	VZEROUPPER
	RET
