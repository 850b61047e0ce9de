//go:build !purego

#include "textflag.h"

// The float GEMM: F16, BF16 and F32 rows against several tokens at
// once, on rows held as float32 (a tile of F16 or BF16 rows is converted
// once by cvtF16F32AVX2 or cvtBF16F32AVX2, F32 rows copied), so the
// weights of a tile are converted and loaded once per group of tokens
// instead of once per token, and the inner loop is nothing but loads and multiply-adds.
//
// Every (row, token) sum is formed as dotF16RowsAVX2 forms an F16
// row's, lane for lane and rounding for rounding, so MatMul's results
// equal MatVec's bit for bit (F32 rows take the one-row kernel for
// MatVec too, dotF32MatRows): 32 sums per product, one per column mod
// 32, in four chains of eight (values 0-7, 8-15, 16-23, 24-31 of each
// 32), advanced in column order by fused multiply-adds; here a pair's
// sums are two zmm registers (chains 0|1 and 2|3) or four ymm
// registers, folded as (c0+c1) + (c2+c3), then the halves and two
// horizontal adds. Every sum starts at +0.
//
// gemmArgs: w[4] row pointers (a tile of fewer rows repeats its last),
// x[3] token pointers, out[3] where row w[0] of each token goes, the
// number of 32-column blocks, the number of rows to store, the sums'
// store and flags. A group of fewer than three tokens repeats its last
// token: the repeat writes the same values to the same place.
//
// The columns come in blocks (the caller's gemmKC) so that a tile's rows
// and a few tokens stay in L1 together: a call with flag 1 starts from
// the sums it left at acc, one without from +0; a call with flag 2
// folds and stores the products, one without leaves its sums at acc.
// The sums go through memory unchanged, so the blocks change nothing of
// the arithmetic.
#define A_W0 0
#define A_W1 8
#define A_W2 16
#define A_W3 24
#define A_X0 32
#define A_X1 40
#define A_X2 48
#define A_O0 56
#define A_O1 64
#define A_O2 72
#define A_NB 80
#define A_NR 88
#define A_ACC 96
#define A_FL 104
#define A_NG 112
#define A_WS 120

// NEXTGROUP moves a's rows, outputs and sums on to the next group of
// rows (wstep rows on, acc bytes further) and loops while groups remain.
#define NEXTGROUP(wstep, accb, top) \
	MOVQ A_WS(DX), CX \
	ADDQ CX, A_W0(DX) \
	ADDQ CX, A_W1(DX) \
	ADDQ CX, A_W2(DX) \
	ADDQ CX, A_W3(DX) \
	ADDQ $(4*wstep), A_O0(DX) \
	ADDQ $(4*wstep), A_O1(DX) \
	ADDQ $(4*wstep), A_O2(DX) \
	ADDQ $accb, A_ACC(DX) \
	DECQ A_NG(DX) \
	JNZ  top

// ---- AVX-512: four rows × three tokens -------------------------------
//
// Z0-Z23 the sums, pair p = 3r + t in Z(2p) (columns 0-15 of each 32)
// and Z(2p+1) (16-31); Z24-Z27 the four rows' sixteen values, Z28 a
// token's, Z28 and Z29 temporaries of the fold. AX the byte offset into every row and
// token, BX its end.

#define LOADW(off) \
	VMOVUPS off(SI)(AX*1), Z24 \
	VMOVUPS off(DI)(AX*1), Z25 \
	VMOVUPS off(R8)(AX*1), Z26 \
	VMOVUPS off(R9)(AX*1), Z27

// FMA4(xp, off, a, b, c, d): token xp's sixteen values against the four
// rows into the sums a-d (rows 0-3).
#define FMA4(xp, off, a, b, c, d) \
	VMOVUPS     off(xp)(AX*1), Z28 \
	VFMADD231PS Z24, Z28, a \
	VFMADD231PS Z25, Z28, b \
	VFMADD231PS Z26, Z28, c \
	VFMADD231PS Z27, Z28, d

// REDSTORE reduces lanes 0-7 of Z0 as REDUCE8 does and stores the sum.
#define REDSTORE(dst) \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS       X1, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VMOVSS       X0, dst

// F16FOLD leaves (c0+c1)+(c2+c3) of the pair (a, b) in lanes 0-7 of Z0.
#define F16FOLD(a, b) \
	VEXTRACTF64X4 $1, a, Y28 \
	VADDPS        Z28, a, a \
	VEXTRACTF64X4 $1, b, Y29 \
	VADDPS        Z29, b, b \
	VADDPS        b, a, Z0

#define ZEROACC512 \
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

// ACC512 moves the 24 sums between registers and memory.
#define ACC512L(m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23) \
	VMOVUPS m0, Z0 \
	VMOVUPS m1, Z1 \
	VMOVUPS m2, Z2 \
	VMOVUPS m3, Z3 \
	VMOVUPS m4, Z4 \
	VMOVUPS m5, Z5 \
	VMOVUPS m6, Z6 \
	VMOVUPS m7, Z7 \
	VMOVUPS m8, Z8 \
	VMOVUPS m9, Z9 \
	VMOVUPS m10, Z10 \
	VMOVUPS m11, Z11 \
	VMOVUPS m12, Z12 \
	VMOVUPS m13, Z13 \
	VMOVUPS m14, Z14 \
	VMOVUPS m15, Z15 \
	VMOVUPS m16, Z16 \
	VMOVUPS m17, Z17 \
	VMOVUPS m18, Z18 \
	VMOVUPS m19, Z19 \
	VMOVUPS m20, Z20 \
	VMOVUPS m21, Z21 \
	VMOVUPS m22, Z22 \
	VMOVUPS m23, Z23

#define ACC512S(m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11, m12, m13, m14, m15, m16, m17, m18, m19, m20, m21, m22, m23) \
	VMOVUPS Z0, m0 \
	VMOVUPS Z1, m1 \
	VMOVUPS Z2, m2 \
	VMOVUPS Z3, m3 \
	VMOVUPS Z4, m4 \
	VMOVUPS Z5, m5 \
	VMOVUPS Z6, m6 \
	VMOVUPS Z7, m7 \
	VMOVUPS Z8, m8 \
	VMOVUPS Z9, m9 \
	VMOVUPS Z10, m10 \
	VMOVUPS Z11, m11 \
	VMOVUPS Z12, m12 \
	VMOVUPS Z13, m13 \
	VMOVUPS Z14, m14 \
	VMOVUPS Z15, m15 \
	VMOVUPS Z16, m16 \
	VMOVUPS Z17, m17 \
	VMOVUPS Z18, m18 \
	VMOVUPS Z19, m19 \
	VMOVUPS Z20, m20 \
	VMOVUPS Z21, m21 \
	VMOVUPS Z22, m22 \
	VMOVUPS Z23, m23

#define SETUP512 \
	MOVQ A_W0(DX), SI \
	MOVQ A_W1(DX), DI \
	MOVQ A_W2(DX), R8 \
	MOVQ A_W3(DX), R9 \
	MOVQ A_X0(DX), R10 \
	MOVQ A_X1(DX), R11 \
	MOVQ A_X2(DX), R12 \
	MOVQ A_NB(DX), BX \
	SHLQ $7, BX \
	XORQ AX, AX \
	MOVQ A_ACC(DX), R13 \
	MOVQ A_FL(DX), CX \
	TESTQ $1, CX \
	JNZ  resume \
	ZEROACC512 \
	JMP  start \
resume: \
	ACC512L((R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), 640(R13), 704(R13), 768(R13), 832(R13), 896(R13), 960(R13), 1024(R13), 1088(R13), 1152(R13), 1216(R13), 1280(R13), 1344(R13), 1408(R13), 1472(R13)) \
start:

// STORE512(fold) folds and stores every pair of the rows asked for.
#define STOREROW512(fold, r, a0, b0, a1, b1, a2, b2) \
	fold(a0, b0) \
	REDSTORE(4*r(R10)) \
	fold(a1, b1) \
	REDSTORE(4*r(R11)) \
	fold(a2, b2) \
	REDSTORE(4*r(R12))

#define STORE512(fold, done) \
	MOVQ A_O0(DX), R10 \
	MOVQ A_O1(DX), R11 \
	MOVQ A_O2(DX), R12 \
	MOVQ A_NR(DX), CX \
	STOREROW512(fold, 0, Z0, Z1, Z2, Z3, Z4, Z5) \
	CMPQ CX, $1 \
	JLE  done \
	STOREROW512(fold, 1, Z6, Z7, Z8, Z9, Z10, Z11) \
	CMPQ CX, $2 \
	JLE  done \
	STOREROW512(fold, 2, Z12, Z13, Z14, Z15, Z16, Z17) \
	CMPQ CX, $3 \
	JLE  done \
	STOREROW512(fold, 3, Z18, Z19, Z20, Z21, Z22, Z23)

// func gemmx4x3AVX512(a *gemmArgs)
TEXT ·gemmx4x3AVX512(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DX

f16zg:
	SETUP512

f16z:
	LOADW(0)
	FMA4(R10, 0, Z0, Z6, Z12, Z18)
	FMA4(R11, 0, Z2, Z8, Z14, Z20)
	FMA4(R12, 0, Z4, Z10, Z16, Z22)
	LOADW(64)
	FMA4(R10, 64, Z1, Z7, Z13, Z19)
	FMA4(R11, 64, Z3, Z9, Z15, Z21)
	FMA4(R12, 64, Z5, Z11, Z17, Z23)
	ADDQ $128, AX
	CMPQ AX, BX
	JLT  f16z

	MOVQ  A_FL(DX), CX
	TESTQ $2, CX
	JNZ   fold
	ACC512S((R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), 640(R13), 704(R13), 768(R13), 832(R13), 896(R13), 960(R13), 1024(R13), 1088(R13), 1152(R13), 1216(R13), 1280(R13), 1344(R13), 1408(R13), 1472(R13))
	JMP   f16zdone

fold:
	STORE512(F16FOLD, f16zdone)

f16zdone:
	NEXTGROUP(4, 1536, f16zg)
	VZEROUPPER
	RET

// ---- AVX2: one row × three tokens ------------------------------------
//
// Y0-Y11 the sums, token t's four chains in Y(4t)-Y(4t+3); Y12 the
// row's eight values, Y13 a temporary of the fold. Only w[0] is read
// and row 0 stored, a group being one row. The rows are prefetched as
// dotF16RowsAVX2 prefetches its own (2 KiB ahead into L1, 8 KiB into
// L2), for dotF32MatRows, whose rows stream from memory.

#define FMA3(off, a, b, c) \
	VMOVUPS     off(SI)(AX*1), Y12 \
	VFMADD231PS off(R10)(AX*1), Y12, a \
	VFMADD231PS off(R11)(AX*1), Y12, b \
	VFMADD231PS off(R12)(AX*1), Y12, c

#define RED2(a, x, dst) \
	VEXTRACTF128 $1, a, X13 \
	VADDPS       X13, x, x \
	VHADDPS      x, x, x \
	VHADDPS      x, x, x \
	VMOVSS       x, dst

// As dotF16RowsAVX2 folds: (c0+c1)+(c2+c3).
#define F16FOLD2(c0, c1, c2, c3) \
	VADDPS c1, c0, c0 \
	VADDPS c3, c2, c2 \
	VADDPS c2, c0, c0

#define SETUP2 \
	MOVQ   A_W0(DX), SI \
	MOVQ   A_X0(DX), R10 \
	MOVQ   A_X1(DX), R11 \
	MOVQ   A_X2(DX), R12 \
	MOVQ   A_NB(DX), BX \
	SHLQ   $7, BX \
	XORQ   AX, AX \
	MOVQ   A_ACC(DX), R13 \
	MOVQ   A_FL(DX), CX \
	TESTQ  $1, CX \
	JNZ    resume \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	JMP    start \
resume: \
	ACC2((R13), 32(R13), 64(R13), 96(R13), 128(R13), 160(R13), 192(R13), 224(R13), 256(R13), 288(R13), 320(R13), 352(R13), Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11) \
start:

// ACC2 moves twelve values: ACC2(sources..., destinations...).
#define ACC2(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11) \
	VMOVUPS s0, d0 \
	VMOVUPS s1, d1 \
	VMOVUPS s2, d2 \
	VMOVUPS s3, d3 \
	VMOVUPS s4, d4 \
	VMOVUPS s5, d5 \
	VMOVUPS s6, d6 \
	VMOVUPS s7, d7 \
	VMOVUPS s8, d8 \
	VMOVUPS s9, d9 \
	VMOVUPS s10, d10 \
	VMOVUPS s11, d11

#define STORE2(fold) \
	MOVQ A_O0(DX), R10 \
	MOVQ A_O1(DX), R11 \
	MOVQ A_O2(DX), R12 \
	fold(Y0, Y1, Y2, Y3) \
	RED2(Y0, X0, (R10)) \
	fold(Y4, Y5, Y6, Y7) \
	RED2(Y4, X4, (R11)) \
	fold(Y8, Y9, Y10, Y11) \
	RED2(Y8, X8, (R12))

// func gemmx1x3AVX2(a *gemmArgs)
TEXT ·gemmx1x3AVX2(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DX

f16yg:
	SETUP2

f16y:
	PREFETCHT0 2048(SI)(AX*1)
	PREFETCHT0 2112(SI)(AX*1)
	PREFETCHT1 8192(SI)(AX*1)
	PREFETCHT1 8256(SI)(AX*1)
	FMA3(0, Y0, Y4, Y8)
	FMA3(32, Y1, Y5, Y9)
	FMA3(64, Y2, Y6, Y10)
	FMA3(96, Y3, Y7, Y11)
	ADDQ $128, AX
	CMPQ AX, BX
	JLT  f16y

	MOVQ  A_FL(DX), CX
	TESTQ $2, CX
	JNZ   fold
	ACC2(Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, (R13), 32(R13), 64(R13), 96(R13), 128(R13), 160(R13), 192(R13), 224(R13), 256(R13), 288(R13), 320(R13), 352(R13))
	JMP   f16ynext

fold:
	STORE2(F16FOLD2)

f16ynext:
	NEXTGROUP(1, 384, f16yg)
	VZEROUPPER
	RET

// func cvtF16F32AVX2(dst *float32, src *byte, n int)
// n is a positive multiple of 8.
TEXT ·cvtF16F32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

cvtloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       cvtloop
	VZEROUPPER
	RET

// func fmaPeakAVX512(n int)
// n rounds of 24 independent fused multiply-adds on zmm registers: the
// peak the GEMM's inner loop is compared with (no loads at all).
TEXT ·fmaPeakAVX512(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	ZEROACC512
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25

peakz:
	VFMADD231PS Z24, Z25, Z0
	VFMADD231PS Z24, Z25, Z1
	VFMADD231PS Z24, Z25, Z2
	VFMADD231PS Z24, Z25, Z3
	VFMADD231PS Z24, Z25, Z4
	VFMADD231PS Z24, Z25, Z5
	VFMADD231PS Z24, Z25, Z6
	VFMADD231PS Z24, Z25, Z7
	VFMADD231PS Z24, Z25, Z8
	VFMADD231PS Z24, Z25, Z9
	VFMADD231PS Z24, Z25, Z10
	VFMADD231PS Z24, Z25, Z11
	VFMADD231PS Z24, Z25, Z12
	VFMADD231PS Z24, Z25, Z13
	VFMADD231PS Z24, Z25, Z14
	VFMADD231PS Z24, Z25, Z15
	VFMADD231PS Z24, Z25, Z16
	VFMADD231PS Z24, Z25, Z17
	VFMADD231PS Z24, Z25, Z18
	VFMADD231PS Z24, Z25, Z19
	VFMADD231PS Z24, Z25, Z20
	VFMADD231PS Z24, Z25, Z21
	VFMADD231PS Z24, Z25, Z22
	VFMADD231PS Z24, Z25, Z23
	DECQ        CX
	JNZ         peakz
	VZEROUPPER
	RET

// func fmaPeakAVX2(n int)
// n rounds of 12 independent fused multiply-adds on ymm registers.
TEXT ·fmaPeakAVX2(SB), NOSPLIT, $0-8
	MOVQ   n+0(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13

peaky:
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y13, Y4
	VFMADD231PS Y12, Y13, Y5
	VFMADD231PS Y12, Y13, Y6
	VFMADD231PS Y12, Y13, Y7
	VFMADD231PS Y12, Y13, Y8
	VFMADD231PS Y12, Y13, Y9
	VFMADD231PS Y12, Y13, Y10
	VFMADD231PS Y12, Y13, Y11
	DECQ        CX
	JNZ         peaky
	VZEROUPPER
	RET

// func prefetchL2(p uintptr, lines int)
// Asks for the lines 64-byte lines from p into L2, reading nothing.
TEXT ·prefetchL2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ lines+8(FP), CX
	TESTQ CX, CX
	JLE  pfdone

pfloop:
	PREFETCHT1 (SI)
	ADDQ       $64, SI
	DECQ       CX
	JNZ        pfloop

pfdone:
	RET

// ---- AVX-512: four rows × six tokens, in two passes --------------------
//
// A pair's 32 lanes are two zmm of sums, chains 0|1 (values 0-15 of each
// 32 columns) and 2|3 (values 16-31), which never meet until the fold;
// so the first pass forms every pair's chains 0|1 over the whole row and
// leaves them at acc, the second forms chains 2|3 and folds: one zmm per
// pair, 24 pairs in Z0-Z23, where the four-row × three-token kernel
// holds twelve in the same registers, and ten loads per 24 multiply-adds
// instead of seven per twelve. The caller lays out every row and token
// in halves (values 0-15 of each 32 columns, then values 16-31), so a
// pass reads memory in order. Z(6r+t) the sums of row r and token t,
// Z24-Z27 the rows' values, Z28-Z31 the tokens'.

// FMA46(z, a, b, c, d): the token in z against the four rows.
#define FMA46(z, a, b, c, d) \
	VFMADD231PS Z24, z, a \
	VFMADD231PS Z25, z, b \
	VFMADD231PS Z26, z, c \
	VFMADD231PS Z27, z, d

// FOLD46(p, z, y) folds pair p, its first pass's sums at acc (R13), its
// second's in z (y its low half), as F16FOLD and REDSTORE fold a pair of
// the four-row × three-token kernel, into out[p] (AX): the same
// additions of the same lanes, in EVEX forms (z may be Z16-Z23, which
// VHADDPS cannot name; VMOVSHDUP and VPERMILPS pick the lanes instead).
#define FOLD46(p, z, y) \
	VMOVUPS       (64*p)(R13), Z24 \
	VEXTRACTF64X4 $1, Z24, Y25 \
	VADDPS        Y25, Y24, Y24 \
	VEXTRACTF64X4 $1, z, Y25 \
	VADDPS        Y25, y, Y25 \
	VADDPS        Y25, Y24, Y24 \
	VEXTRACTF32X4 $1, Y24, X25 \
	VADDPS        X25, X24, X24 \
	VMOVSHDUP     X24, X25 \
	VADDPS        X25, X24, X24 \
	VPERMILPS     $2, X24, X25 \
	VADDPS        X25, X24, X24 \
	VMOVSS        X24, (4*p)(AX)

// PF46 asks for the four rows (SI + r·DI, R8 the fourth) into L1 four
// 64-byte steps ahead.
#define PF46 \
	PREFETCHT0 256(SI) \
	PREFETCHT0 256(SI)(DI*1) \
	PREFETCHT0 256(SI)(DI*2) \
	PREFETCHT0 256(R8)

// CVT46STEP stores a converted step's rows (Z24-Z27) at the tile (R9 +
// r·AX, R14 the fourth), multiplies them into the six tokens as g46loop
// does, and steps the weights by DX, the tile and tokens by 64 bytes,
// leaving the flags of the count's decrement.
#define CVT46STEP \
	VMOVUPS Z24, (R9) \
	VMOVUPS Z25, (R9)(AX*1) \
	VMOVUPS Z26, (R9)(AX*2) \
	VMOVUPS Z27, (R14) \
	VMOVUPS (R10), Z28 \
	FMA46(Z28, Z0, Z6, Z12, Z18) \
	VMOVUPS (R10)(R11*1), Z29 \
	FMA46(Z29, Z1, Z7, Z13, Z19) \
	VMOVUPS (R10)(R11*2), Z30 \
	FMA46(Z30, Z2, Z8, Z14, Z20) \
	VMOVUPS (R12), Z31 \
	FMA46(Z31, Z3, Z9, Z15, Z21) \
	VMOVUPS (R12)(R11*1), Z28 \
	FMA46(Z28, Z4, Z10, Z16, Z22) \
	VMOVUPS (R12)(R11*2), Z29 \
	FMA46(Z29, Z5, Z11, Z17, Z23) \
	ADDQ    DX, SI \
	ADDQ    DX, R8 \
	ADDQ    $64, R9 \
	ADDQ    $64, R14 \
	ADDQ    $64, R10 \
	ADDQ    $64, R12 \
	DECQ    BX

// func gemmx4x6AVX512(w *float32, ws int, x *float32, xs int, nb int, acc *float32, fl int, acc0 *float32, out *float32, src *byte, ss int, sst int)
// Rows w + r·ws and tokens x + t·xs (bytes) over nb 16-value steps. The
// 24 sums start from zero, or (fl&1) from those at acc (24 × 64 bytes),
// so a row may run in blocks of columns with the same additions in the
// same order as in one call; they are left at acc, or (fl&2) folded with
// the first pass's sums at acc0 into out[6r+t]. The rows, which stream
// from L2 while the tokens stay in L1, are asked for into L1 four steps
// ahead: on one Xeon core that ran the GEMM 1-7 % faster.
//
// With fl&4 (F16) or fl&8 (BF16) the rows are not read at
// w but converted from the weights' own rows src + r·ss, a step's 16
// values sst bytes after the last's (a half's values interleave with
// the other's), and stored at w as they are used: a tile's first token
// group lays the tile out while it multiplies, where a conversion pass
// of its own, waiting on memory with no multiply-adds to hide it behind,
// cost 5-15 % of the GEMM on one Xeon core.
TEXT ·gemmx4x6AVX512(SB), NOSPLIT, $0-96
	MOVQ w+0(FP), SI
	MOVQ ws+8(FP), DI
	LEAQ (SI)(DI*2), R8
	ADDQ DI, R8
	MOVQ x+16(FP), R10
	MOVQ xs+24(FP), R11
	LEAQ (R10)(R11*2), R12
	ADDQ R11, R12
	MOVQ nb+32(FP), BX
	MOVQ acc+40(FP), R13
	MOVQ fl+48(FP), CX
	TESTQ $1, CX
	JNZ  g46resume
	ZEROACC512
	JMP  g46start

g46resume:
	ACC512L((R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), 640(R13), 704(R13), 768(R13), 832(R13), 896(R13), 960(R13), 1024(R13), 1088(R13), 1152(R13), 1216(R13), 1280(R13), 1344(R13), 1408(R13), 1472(R13))

g46start:
	TESTQ $12, CX
	JZ    g46loop
	MOVQ  SI, R9
	MOVQ  DI, AX
	MOVQ  R8, R14
	MOVQ  src+72(FP), SI
	MOVQ  ss+80(FP), DI
	LEAQ  (SI)(DI*2), R8
	ADDQ  DI, R8
	MOVQ  sst+88(FP), DX
	TESTQ $8, CX
	JNZ   g46bf16

g46f16:
	PF46
	VCVTPH2PS  (SI), Z24
	VCVTPH2PS  (SI)(DI*1), Z25
	VCVTPH2PS  (SI)(DI*2), Z26
	VCVTPH2PS  (R8), Z27
	CVT46STEP
	JNZ        g46f16
	JMP        g46end

g46bf16:
	PF46
	VPMOVZXWD  (SI), Z24
	VPMOVZXWD  (SI)(DI*1), Z25
	VPMOVZXWD  (SI)(DI*2), Z26
	VPMOVZXWD  (R8), Z27
	VPSLLD     $16, Z24, Z24
	VPSLLD     $16, Z25, Z25
	VPSLLD     $16, Z26, Z26
	VPSLLD     $16, Z27, Z27
	CVT46STEP
	JNZ        g46bf16
	JMP        g46end

g46loop:
	PF46
	VMOVUPS (SI), Z24
	VMOVUPS (SI)(DI*1), Z25
	VMOVUPS (SI)(DI*2), Z26
	VMOVUPS (R8), Z27
	VMOVUPS (R10), Z28
	FMA46(Z28, Z0, Z6, Z12, Z18)
	VMOVUPS (R10)(R11*1), Z29
	FMA46(Z29, Z1, Z7, Z13, Z19)
	VMOVUPS (R10)(R11*2), Z30
	FMA46(Z30, Z2, Z8, Z14, Z20)
	VMOVUPS (R12), Z31
	FMA46(Z31, Z3, Z9, Z15, Z21)
	VMOVUPS (R12)(R11*1), Z28
	FMA46(Z28, Z4, Z10, Z16, Z22)
	VMOVUPS (R12)(R11*2), Z29
	FMA46(Z29, Z5, Z11, Z17, Z23)
	ADDQ    $64, SI
	ADDQ    $64, R8
	ADDQ    $64, R10
	ADDQ    $64, R12
	DECQ    BX
	JNZ     g46loop

g46end:
	TESTQ $2, CX
	JNZ  g46fold
	ACC512S((R13), 64(R13), 128(R13), 192(R13), 256(R13), 320(R13), 384(R13), 448(R13), 512(R13), 576(R13), 640(R13), 704(R13), 768(R13), 832(R13), 896(R13), 960(R13), 1024(R13), 1088(R13), 1152(R13), 1216(R13), 1280(R13), 1344(R13), 1408(R13), 1472(R13))
	VZEROUPPER
	RET

g46fold:
	MOVQ acc0+56(FP), R13
	MOVQ out+64(FP), AX
	FOLD46(0, Z0, Y0)
	FOLD46(1, Z1, Y1)
	FOLD46(2, Z2, Y2)
	FOLD46(3, Z3, Y3)
	FOLD46(4, Z4, Y4)
	FOLD46(5, Z5, Y5)
	FOLD46(6, Z6, Y6)
	FOLD46(7, Z7, Y7)
	FOLD46(8, Z8, Y8)
	FOLD46(9, Z9, Y9)
	FOLD46(10, Z10, Y10)
	FOLD46(11, Z11, Y11)
	FOLD46(12, Z12, Y12)
	FOLD46(13, Z13, Y13)
	FOLD46(14, Z14, Y14)
	FOLD46(15, Z15, Y15)
	FOLD46(16, Z16, Y16)
	FOLD46(17, Z17, Y17)
	FOLD46(18, Z18, Y18)
	FOLD46(19, Z19, Y19)
	FOLD46(20, Z20, Y20)
	FOLD46(21, Z21, Y21)
	FOLD46(22, Z22, Y22)
	FOLD46(23, Z23, Y23)
	VZEROUPPER
	RET

// The halves' layout (gemmx4x6AVX512): n values (a positive multiple of
// 32) of src to float32, values 0-15 of each 32 to d0, 16-31 to d1, in
// order.

// func splitF16F32AVX512(d0, d1 *float32, src *byte, n int)
TEXT ·splitF16F32AVX512(SB), NOSPLIT, $0-32
	MOVQ d0+0(FP), DI
	MOVQ d1+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $5, CX

spf16:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, (R8)
	ADDQ      $64, SI
	ADDQ      $64, DI
	ADDQ      $64, R8
	DECQ      CX
	JNZ       spf16
	VZEROUPPER
	RET

// func splitBF16F32AVX512(d0, d1 *float32, src *byte, n int)
TEXT ·splitBF16F32AVX512(SB), NOSPLIT, $0-32
	MOVQ d0+0(FP), DI
	MOVQ d1+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $5, CX

spbf16:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPSLLD    $16, Z0, Z0
	VPSLLD    $16, Z1, Z1
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, (R8)
	ADDQ      $64, SI
	ADDQ      $64, DI
	ADDQ      $64, R8
	DECQ      CX
	JNZ       spbf16
	VZEROUPPER
	RET

// func splitF32AVX512(d0, d1 *float32, src *byte, n int)
TEXT ·splitF32AVX512(SB), NOSPLIT, $0-32
	MOVQ d0+0(FP), DI
	MOVQ d1+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $5, CX

spf32:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, (R8)
	ADDQ    $128, SI
	ADDQ    $64, DI
	ADDQ    $64, R8
	DECQ    CX
	JNZ     spf32
	VZEROUPPER
	RET
