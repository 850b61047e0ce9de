//go:build !purego

#include "textflag.h"

// BF16 rows against bf16 activations with VDPBF16PS (AVX512_BF16): each
// instruction multiplies 32 bf16 pairs and adds them into sixteen
// float32 lanes, twice the multiply-adds of VFMADD231PS on zmm.
//
// Every (row, token) sum is formed alike here, in the four-row ×
// six-token GEMM kernel and in the one-row decode kernel,
// and as dotBF16DPGeneric emulates it: sixteen lanes, lane l taking
// columns 2l+1 then 2l of each 32-column block in column order, each
// product exact and each addition rounded to nearest even, inputs that
// are denormal read as zero and denormal sums flushed to zero; then the
// lanes folded as FOLDDP does. MatMul and MatVec of a BF16 matrix
// therefore give the same bits.

// VDPBF16(s2, s1, d): Z(d) += the pair products of Z(s1) and Z(s2)
// (VDPBF16PS zmm, register operands only). The Go assembler does not
// know the instruction, so this writes its EVEX encoding
// (EVEX.512.F3.0F38.W0 52 /r): R, X, B and R' are the inverted high
// bits of d and s2, vvvv and V' the inverted bits of s1, pp = F3,
// mm = 0F38, L'L = 512. The arithmetic uses + and * alone, the bits
// being disjoint.
#define VDPBF16(s2, s1, d) \
	BYTE $0x62; \
	BYTE $((((31-(d))/8)%2)*128 + (((31-(s2))/16)%2)*64 + (((31-(s2))/8)%2)*32 + (((31-(d))/16)%2)*16 + 2); \
	BYTE $((15-((s1)%16))*8 + 6); \
	BYTE $(64 + (((31-(s1))/16)%2)*8); \
	BYTE $0x52; \
	BYTE $(192 + ((d)%8)*8 + ((s2)%8))

// FOLDDP(z, y, dst) stores the sum of the sixteen lanes of z (y its
// low half) as (s4[0]+s4[1]) + (s4[2]+s4[3]), s8[l] = z[l] + z[l+8] and
// s4[l] = s8[l] + s8[l+4]; Z24 and Z25 are its temporaries. EVEX forms
// only (no VHADDPS), so that z may be any of Z0-Z23.
#define FOLDDP(z, y, dst) \
	VEXTRACTF64X4 $1, z, Y24 \
	VADDPS        Y24, y, Y24 \
	VEXTRACTF32X4 $1, Y24, X25 \
	VADDPS        X25, X24, X24 \
	VMOVSHDUP     X24, X25 \
	VADDPS        X25, X24, X24 \
	VPERMILPS     $2, X24, X25 \
	VADDPS        X25, X24, X24 \
	VMOVSS        X24, dst

// ZERO24 sets Z0-Z23 to +0.
#define ZERO24 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12 \
	VPXORD Z13, Z13, Z13 \
	VPXORD Z14, Z14, Z14 \
	VPXORD Z15, Z15, Z15 \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19 \
	VPXORD Z20, Z20, Z20 \
	VPXORD Z21, Z21, Z21 \
	VPXORD Z22, Z22, Z22 \
	VPXORD Z23, Z23, Z23

// func bf16dp4x6AVX512(w *byte, ws int, x *uint16, xs int, nb int, out *float32)
// Rows w, w+ws, w+2ws, w+3ws (bf16) against tokens x, x+xs, … x+5xs
// (bf16, bytes apart) over nb 32-column blocks; out[6r+t] gets row r's
// product with token t. Z(6r+t) the sums, Z24-Z27 the rows' values,
// Z28-Z31 the tokens'.
TEXT ·bf16dp4x6AVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ ws+8(FP), DI
	LEAQ (SI)(DI*2), R8
	ADDQ DI, R8
	MOVQ x+16(FP), R10
	MOVQ xs+24(FP), R11
	LEAQ (R10)(R11*2), R12
	ADDQ R11, R12
	LEAQ (R12)(R11*1), R13
	MOVQ nb+32(FP), BX
	ZERO24

dp46loop:
	VMOVUPS (SI), Z24
	VMOVUPS (SI)(DI*1), Z25
	VMOVUPS (SI)(DI*2), Z26
	VMOVUPS (R8), Z27
	VMOVUPS (R10), Z28
	VDPBF16(28, 24, 0)
	VDPBF16(28, 25, 6)
	VDPBF16(28, 26, 12)
	VDPBF16(28, 27, 18)
	VMOVUPS (R10)(R11*1), Z29
	VDPBF16(29, 24, 1)
	VDPBF16(29, 25, 7)
	VDPBF16(29, 26, 13)
	VDPBF16(29, 27, 19)
	VMOVUPS (R10)(R11*2), Z30
	VDPBF16(30, 24, 2)
	VDPBF16(30, 25, 8)
	VDPBF16(30, 26, 14)
	VDPBF16(30, 27, 20)
	VMOVUPS (R12), Z31
	VDPBF16(31, 24, 3)
	VDPBF16(31, 25, 9)
	VDPBF16(31, 26, 15)
	VDPBF16(31, 27, 21)
	VMOVUPS (R13), Z28
	VDPBF16(28, 24, 4)
	VDPBF16(28, 25, 10)
	VDPBF16(28, 26, 16)
	VDPBF16(28, 27, 22)
	VMOVUPS (R13)(R11*1), Z29
	VDPBF16(29, 24, 5)
	VDPBF16(29, 25, 11)
	VDPBF16(29, 26, 17)
	VDPBF16(29, 27, 23)
	ADDQ    $64, SI
	ADDQ    $64, R8
	ADDQ    $64, R10
	ADDQ    $64, R12
	ADDQ    $64, R13
	DECQ    BX
	JNZ     dp46loop

	MOVQ out+40(FP), AX
	FOLDDP(Z0, Y0, 0(AX))
	FOLDDP(Z1, Y1, 4(AX))
	FOLDDP(Z2, Y2, 8(AX))
	FOLDDP(Z3, Y3, 12(AX))
	FOLDDP(Z4, Y4, 16(AX))
	FOLDDP(Z5, Y5, 20(AX))
	FOLDDP(Z6, Y6, 24(AX))
	FOLDDP(Z7, Y7, 28(AX))
	FOLDDP(Z8, Y8, 32(AX))
	FOLDDP(Z9, Y9, 36(AX))
	FOLDDP(Z10, Y10, 40(AX))
	FOLDDP(Z11, Y11, 44(AX))
	FOLDDP(Z12, Y12, 48(AX))
	FOLDDP(Z13, Y13, 52(AX))
	FOLDDP(Z14, Y14, 56(AX))
	FOLDDP(Z15, Y15, 60(AX))
	FOLDDP(Z16, Y16, 64(AX))
	FOLDDP(Z17, Y17, 68(AX))
	FOLDDP(Z18, Y18, 72(AX))
	FOLDDP(Z19, Y19, 76(AX))
	FOLDDP(Z20, Y20, 80(AX))
	FOLDDP(Z21, Y21, 84(AX))
	FOLDDP(Z22, Y22, 88(AX))
	FOLDDP(Z23, Y23, 92(AX))
	VZEROUPPER
	RET

// func bf16dp1x1AVX512(w *byte, rowBytes, n int, x *uint16, nb int, out *float32)
// n rows w, w+rowBytes, … against one token over nb 32-column blocks,
// out[i] row i's product: one row at a time, whose sums are one chain of
// VDPBF16PS. A decode step streams the rows from memory, which one
// stream did faster here than four rows at a time (on one Zen 4 core,
// 22 against 13 GB/s); prefetching 2 KiB ahead into L1 and 8 KiB into
// L2, as dotF16RowsAVX2 does, made no difference (15-16 GB/s, as that
// kernel's), so there is none.
TEXT ·bf16dp1x1AVX512(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+40(FP), R9

dp11row:
	MOVQ   SI, R8
	MOVQ   x+24(FP), R10
	MOVQ   nb+32(FP), BX
	VPXORD Z0, Z0, Z0

dp11loop:
	VMOVUPS    (R10), Z28
	VMOVUPS    (R8), Z24
	VDPBF16(28, 24, 0)
	ADDQ       $64, R8
	ADDQ       $64, R10
	DECQ       BX
	JNZ        dp11loop

	FOLDDP(Z0, Y0, (R9))
	ADDQ $4, R9
	ADDQ rowBytes+8(FP), SI
	DECQ CX
	JNZ  dp11row
	VZEROUPPER
	RET

// func cvtF32BF16AVX512(dst *uint16, src *float32, n int)
// n a positive multiple of 16. As gguf.F32ToBF16 (ggml's rounding):
// u + 0x7fff + bit 16 of u, the top half; a NaN keeps its top half with
// the quiet bit (64) set.
TEXT ·cvtF32BF16AVX512(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $4, CX
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z16
	MOVL         $1, AX
	VPBROADCASTD AX, Z17
	MOVL         $0x7fffffff, AX
	VPBROADCASTD AX, Z18
	MOVL         $0x7f800000, AX
	VPBROADCASTD AX, Z19
	MOVL         $64, AX
	VPBROADCASTD AX, Z20

cvtbf:
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z1
	VPANDD    Z17, Z1, Z2
	VPADDD    Z16, Z2, Z2
	VPADDD    Z0, Z2, Z2
	VPSRLD    $16, Z2, Z2
	VPANDD    Z18, Z0, Z3
	VPCMPUD   $6, Z19, Z3, K1
	VPORD     Z20, Z1, K1, Z2
	VPMOVDW   Z2, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       cvtbf
	VZEROUPPER
	RET

// func cvtBF16F32AVX2(dst *float32, src *byte, n int)
// n a positive multiple of 8: a bfloat16 is the top half of a float32.
TEXT ·cvtBF16F32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

cvtbf32:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       cvtbf32
	VZEROUPPER
	RET
