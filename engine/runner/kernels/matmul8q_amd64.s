//go:build !purego

#include "textflag.h"

// Q4_0, Q4_1, Q5_0 and Q5_1 (and Q8_0, see q8Pack16AVX512), sixteen
// rows × three tokens with AVX-512 (VNNI). The one-token row kernels
// keep, per row and token, eight int32 lanes per block (lane k: values
// 4k to 4k+3 of the block, less 8 or 16 times the lane's activation sum
// for Q4_0 and Q5_0), converted and accumulated with the block's d·dₐ
// by FMA into eight float lanes, reduced as REDUCE8TO (dotq_amd64.s);
// Q4_1 and Q5_1 add, after the reduction, m·dₐ·S accumulated block by
// block by FMA. Here the lanes are transposed: a register holds lane k
// of sixteen rows, so the scale vector of a block and token (sixteen
// rows' d times one dₐ) serves all eight lane registers, one VPDPBUSD
// with the token's four quants broadcast makes sixteen lane sums, and
// the reduction is seven vertical adds in REDUCE8TO's order. The
// roundings are the row kernels' lane for lane and the m·dₐ·S chains
// theirs too, so the bits are the same.
//
// The rows' side is packed once per tile of sixteen rows for every
// token (q32Pack16AVX512): per block the eight lane registers' quants
// (64 bytes each: row r's four quants of lane k, fifth bits included,
// in dword r) and the sixteen rows' d, and m where the type has one, as
// float32: 576 or 640 bytes. The tokens' side is packed once per
// product: per block the eight lanes' −8·Σa or −16·Σa, the start values
// of the VPDPBUSD sums (q32OffsAVX2), or float(S) for the types with a
// minimum.
//
// Three tokens because their 24 lane sums, three scale vectors, two
// lane registers and three VPDPBUSD sums take the 32 registers. Per
// sixteen products the loop needs a VPDPBUSD and an FMA, which share two
// pipes, and two broadcast loads (quants and offset); the loads, not the
// arithmetic, bound it (Q4_1 and Q5_1, whose sums start at zero, run
// about a fifth faster). Making the weights the signed side (the
// activations offset by 128) would drop the offsets but needs a
// correction per row and lane beside each lane register: that packing,
// 1088 bytes a block, no longer stays in L1 and ran slower.

// The kernels' argument handling, defined before the first function
// because vet checks the arguments a macro names against the function
// that precedes it.

// Q32ARGS loads the arguments and the three tokens' pointers, and zeroes
// the block index.
#define Q32ARGS \
	MOVQ wt+0(FP), SI \
	MOVQ nb+8(FP), CX \
	MOVQ a+16(FP), R9 \
	MOVQ 0(R9), DI \
	MOVQ 8(R9), R8 \
	MOVQ 16(R9), R10 \
	MOVQ 24(R9), R11 \
	MOVQ 32(R9), R12 \
	MOVQ 40(R9), R13 \
	MOVQ 48(R9), BX \
	MOVQ 56(R9), DX \
	MOVQ 64(R9), R14 \
	XORQ AX, AX

// Q32STORE3 stores the three tokens' sums for the rows set in mask.
#define Q32STORE3 \
	MOVWLZX mask+24(FP), AX \
	KMOVW   AX, K1 \
	MOVQ    72(R9), SI \
	VMOVUPS Z0, K1, (SI) \
	MOVQ    80(R9), SI \
	VMOVUPS Z8, K1, (SI) \
	MOVQ    88(R9), SI \
	VMOVUPS Z16, K1, (SI)

// func q32OffsAVX2(q *int8, nb int, o *int32, mul int)
//
// o[8b+k] = −mul·(quants 4k to 4k+3 of block b): VPMADDUBSW's pair sums
// are exact for mul up to 128 (they lie within [−256·mul, 254·mul], so
// at worst −32768) and VPMADDWD against −1 negates.
TEXT ·q32OffsAVX2(SB), NOSPLIT, $0-32
	MOVQ q+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ o+16(FP), DI
	MOVQ mul+24(FP), AX
	MOVQ AX, X13
	VPBROADCASTB X13, Y13
	VPCMPEQW Y15, Y15, Y15

q32offs:
	VPMADDUBSW (SI), Y13, Y0
	VPMADDWD   Y15, Y0, Y0
	VMOVDQU    Y0, (DI)
	ADDQ       $32, SI
	ADDQ       $32, DI
	DECQ       CX
	JNZ        q32offs
	VZEROUPPER
	RET

// VPSHUFB patterns for the fifth bits: pattern j fills each dword with
// its byte j (qh byte j holds the bits of lanes 2j and 2j+1).
DATA q32shuf<>+0(SB)/8, $0x0404040400000000
DATA q32shuf<>+8(SB)/8, $0x0c0c0c0c08080808
DATA q32shuf<>+16(SB)/8, $0x0505050501010101
DATA q32shuf<>+24(SB)/8, $0x0d0d0d0d09090909
DATA q32shuf<>+32(SB)/8, $0x0606060602020202
DATA q32shuf<>+40(SB)/8, $0x0e0e0e0e0a0a0a0a
DATA q32shuf<>+48(SB)/8, $0x0707070703030303
DATA q32shuf<>+56(SB)/8, $0x0f0f0f0f0b0b0b0b
GLOBL q32shuf<>(SB), RODATA|NOPTR, $64

// P16FIRST and P16LANE load the 16 nibble bytes of the block of row i
// (its offset at 8i(R9) from R8) into 128-bit lane l of Z.
#define P16FIRST(i, X) \
	MOVQ    8*i(R9), R10 \
	VMOVDQU (R8)(R10*1), X

#define P16LANE(i, l, Z) \
	MOVQ         8*i(R9), R10 \
	VINSERTI32X4 $l, (R8)(R10*1), Z, Z

// P16HIBIT adds 16 to the bytes of lane register W whose qh bits (the
// dword per row in Z24, byte j of it through pattern PAT, selector SEL)
// are set.
#define P16HIBIT(PAT, SEL, W) \
	VPSHUFB  PAT, Z24, Z25 \
	VPTESTMB SEL, Z25, K2 \
	VPADDB   Z29, W, K2, W

// P16SCALES converts the low words of the dwords in Z to float32 at
// off(DI).
#define P16SCALES(Z, off) \
	VPMOVDW   Z, Y25 \
	VCVTPH2PS Y25, Z25 \
	VMOVUPS   Z25, off(DI)

// func q32Pack16AVX512(w *byte, rows *q32Rows, nb int, dst *byte)
//
// Rows at w + rows.off[i] (i < 16, repeats where a tile has fewer). The
// dwords of the rows' 16 nibble bytes are transposed four by four within
// 128-bit lanes: lane l of Z0-Z3 holds rows 4l to 4l+3, so dword r of
// the results is row r; the low nibbles make lane registers 0-3, the
// high ones 4-7. The scales come by gather, one dword per row (d, then
// m in the high word where the type has one), as do the qh words.
//
// Registers: Z16-Z23 the lane registers; Z8-Z11 the VPSHUFB patterns,
// Z26, Z27 the bit selectors of even and odd lanes; Z29 bytes 0x10; Z30
// the rows' offsets (int32); Z31 bytes 0x0F. GP: SI the block of row 0,
// R8 its nibbles, R9 rows, BX the block size, DX the packed block size,
// R11 the nibbles' offset in a block, R12 qh's (negative: none), R13 the
// minimum's flag.
TEXT ·q32Pack16AVX512(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ rows+8(FP), R9
	MOVQ nb+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ 192(R9), BX
	MOVQ 200(R9), R11
	MOVQ 208(R9), R12
	MOVQ 216(R9), R13
	MOVQ 224(R9), DX
	VMOVDQU32 128(R9), Z30
	MOVL      $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	MOVL      $0x10101010, AX
	VPBROADCASTD AX, Z29
	MOVL      $0x08040201, AX
	VPBROADCASTD AX, Z26
	MOVL      $0x80402010, AX
	VPBROADCASTD AX, Z27
	VBROADCASTI32X4 q32shuf<>+0(SB), Z8
	VBROADCASTI32X4 q32shuf<>+16(SB), Z9
	VBROADCASTI32X4 q32shuf<>+32(SB), Z10
	VBROADCASTI32X4 q32shuf<>+48(SB), Z11

q32pack:
	LEAQ (SI)(R11*1), R8
	P16FIRST(0, X0)
	P16LANE(4, 1, Z0)
	P16LANE(8, 2, Z0)
	P16LANE(12, 3, Z0)
	P16FIRST(1, X1)
	P16LANE(5, 1, Z1)
	P16LANE(9, 2, Z1)
	P16LANE(13, 3, Z1)
	P16FIRST(2, X2)
	P16LANE(6, 1, Z2)
	P16LANE(10, 2, Z2)
	P16LANE(14, 3, Z2)
	P16FIRST(3, X3)
	P16LANE(7, 1, Z3)
	P16LANE(11, 2, Z3)
	P16LANE(15, 3, Z3)
	VPUNPCKLDQ  Z1, Z0, Z4
	VPUNPCKHDQ  Z1, Z0, Z5
	VPUNPCKLDQ  Z3, Z2, Z6
	VPUNPCKHDQ  Z3, Z2, Z7
	VPUNPCKLQDQ Z6, Z4, Z0
	VPUNPCKHQDQ Z6, Z4, Z1
	VPUNPCKLQDQ Z7, Z5, Z2
	VPUNPCKHQDQ Z7, Z5, Z3
	VPANDD      Z31, Z0, Z16
	VPANDD      Z31, Z1, Z17
	VPANDD      Z31, Z2, Z18
	VPANDD      Z31, Z3, Z19
	VPSRLD      $4, Z0, Z0
	VPSRLD      $4, Z1, Z1
	VPSRLD      $4, Z2, Z2
	VPSRLD      $4, Z3, Z3
	VPANDD      Z31, Z0, Z20
	VPANDD      Z31, Z1, Z21
	VPANDD      Z31, Z2, Z22
	VPANDD      Z31, Z3, Z23

	TESTQ R12, R12
	JS    q32nohi
	LEAQ       (SI)(R12*1), R8
	KXNORW     K1, K1, K1
	VPXORD     Z24, Z24, Z24
	VPGATHERDD (R8)(Z30*1), K1, Z24
	P16HIBIT(Z8, Z26, Z16)
	P16HIBIT(Z8, Z27, Z17)
	P16HIBIT(Z9, Z26, Z18)
	P16HIBIT(Z9, Z27, Z19)
	P16HIBIT(Z10, Z26, Z20)
	P16HIBIT(Z10, Z27, Z21)
	P16HIBIT(Z11, Z26, Z22)
	P16HIBIT(Z11, Z27, Z23)

q32nohi:
	VMOVDQU32 Z16, 0(DI)
	VMOVDQU32 Z17, 64(DI)
	VMOVDQU32 Z18, 128(DI)
	VMOVDQU32 Z19, 192(DI)
	VMOVDQU32 Z20, 256(DI)
	VMOVDQU32 Z21, 320(DI)
	VMOVDQU32 Z22, 384(DI)
	VMOVDQU32 Z23, 448(DI)

	KXNORW     K1, K1, K1
	VPXORD     Z24, Z24, Z24
	VPGATHERDD (SI)(Z30*1), K1, Z24
	P16SCALES(Z24, 512)
	TESTQ      R13, R13
	JZ         q32nomin
	VPSRLD     $16, Z24, Z24
	P16SCALES(Z24, 576)

q32nomin:
	ADDQ BX, SI
	ADDQ DX, DI
	DECQ CX
	JNZ  q32pack
	VZEROUPPER
	RET

// Kernels. Registers: Z0-Z7, Z8-Z15, Z16-Z23 the three tokens' lane
// sums; Z24-Z26 their scale vectors; Z27, Z28 lane registers; Z29-Z31
// the VPDPBUSD sums. Pointers: DI, R8, R10 the tokens' quants; R11-R13
// their dₐ; BX, DX, R14 their offsets or float(S), at index AX (4 per
// block); SI the packed rows; R9 the args.

#define Q32ZERO \
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

// Q32SCALES sets the three tokens' scale vectors d·dₐ.
#define Q32SCALES \
	VMOVUPS     512(SI), Z29 \
	VMULPS.BCST (R11)(AX*1), Z29, Z24 \
	VMULPS.BCST (R12)(AX*1), Z29, Z25 \
	VMULPS.BCST (R13)(AX*1), Z29, Z26

// Q32LANE applies lane register k (loaded into ZW) to the three tokens,
// accumulating into A0-A2, the VPDPBUSD sums starting at the tokens'
// offsets.
#define Q32LANE(k, ZW, A0, A1, A2) \
	VMOVDQU32     64*k(SI), ZW \
	VPBROADCASTD  4*k(BX)(AX*8), Z29 \
	VPDPBUSD.BCST 4*k(DI)(AX*8), ZW, Z29 \
	VCVTDQ2PS     Z29, Z29 \
	VFMADD231PS   Z24, Z29, A0 \
	VPBROADCASTD  4*k(DX)(AX*8), Z30 \
	VPDPBUSD.BCST 4*k(R8)(AX*8), ZW, Z30 \
	VCVTDQ2PS     Z30, Z30 \
	VFMADD231PS   Z25, Z30, A1 \
	VPBROADCASTD  4*k(R14)(AX*8), Z31 \
	VPDPBUSD.BCST 4*k(R10)(AX*8), ZW, Z31 \
	VCVTDQ2PS     Z31, Z31 \
	VFMADD231PS   Z26, Z31, A2

// Q32MLANE is Q32LANE with the sums starting at zero.
#define Q32MLANE(k, ZW, A0, A1, A2) \
	VMOVDQU32     64*k(SI), ZW \
	VPXORD        Z29, Z29, Z29 \
	VPDPBUSD.BCST 4*k(DI)(AX*8), ZW, Z29 \
	VCVTDQ2PS     Z29, Z29 \
	VFMADD231PS   Z24, Z29, A0 \
	VPXORD        Z30, Z30, Z30 \
	VPDPBUSD.BCST 4*k(R8)(AX*8), ZW, Z30 \
	VCVTDQ2PS     Z30, Z30 \
	VFMADD231PS   Z25, Z30, A1 \
	VPXORD        Z31, Z31, Z31 \
	VPDPBUSD.BCST 4*k(R10)(AX*8), ZW, Z31 \
	VCVTDQ2PS     Z31, Z31 \
	VFMADD231PS   Z26, Z31, A2

// Q32REDUCE adds a token's eight lane registers into the first in
// REDUCE8TO's order: ((k0+k4)+(k1+k5)) + ((k2+k6)+(k3+k7)).
#define Q32REDUCE(L0, L1, L2, L3, L4, L5, L6, L7) \
	VADDPS L4, L0, L0 \
	VADDPS L5, L1, L1 \
	VADDPS L6, L2, L2 \
	VADDPS L7, L3, L3 \
	VADDPS L1, L0, L0 \
	VADDPS L3, L2, L2 \
	VADDPS L2, L0, L0

#define Q32REDUCE3 \
	Q32REDUCE(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	Q32REDUCE(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q32REDUCE(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)

// func mulQ32x16x3AVX512(wt *byte, nb int, a *mmQ32Args, mask uint16)
//
// Q4_0 and Q5_0 (and Q8_0): wt is q32Pack16AVX512's (q8Pack16AVX512's)
// packing of nb blocks of a tile's rows (576 bytes each), a's offsets
// q32OffsAVX2's; row r of token t goes to a.out[t][r] for the bits r
// set in mask.
TEXT ·mulQ32x16x3AVX512(SB), NOSPLIT, $0-26
	Q32ARGS
	Q32ZERO

q32block:
	Q32SCALES
	Q32LANE(0, Z27, Z0, Z8, Z16)
	Q32LANE(1, Z28, Z1, Z9, Z17)
	Q32LANE(2, Z27, Z2, Z10, Z18)
	Q32LANE(3, Z28, Z3, Z11, Z19)
	Q32LANE(4, Z27, Z4, Z12, Z20)
	Q32LANE(5, Z28, Z5, Z13, Z21)
	Q32LANE(6, Z27, Z6, Z14, Z22)
	Q32LANE(7, Z28, Z7, Z15, Z23)
	ADDQ $576, SI
	ADDQ $4, AX
	DECQ CX
	JNZ  q32block

	Q32REDUCE3
	Q32STORE3
	VZEROUPPER
	RET

// func mulQ32Mx16x3AVX512(wt *byte, nb int, a *mmQ32Args, mask uint16)
//
// Q4_1 and Q5_1: mulQ32x16x3AVX512 with the packing's m (640 bytes a
// block) and float(S) in place of the offsets. The m·dₐ·S sums go first,
// block by block, onto the stack, and are added after the reduction.
TEXT ·mulQ32Mx16x3AVX512(SB), NOSPLIT, $192-26
	Q32ARGS
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2

q32mmin:
	VMOVUPS          576(SI), Z3
	VMULPS.BCST      (R11)(AX*1), Z3, Z4
	VFMADD231PS.BCST (BX)(AX*1), Z4, Z0
	VMULPS.BCST      (R12)(AX*1), Z3, Z5
	VFMADD231PS.BCST (DX)(AX*1), Z5, Z1
	VMULPS.BCST      (R13)(AX*1), Z3, Z6
	VFMADD231PS.BCST (R14)(AX*1), Z6, Z2
	ADDQ             $640, SI
	ADDQ             $4, AX
	DECQ             CX
	JNZ              q32mmin
	VMOVUPS          Z0, 0(SP)
	VMOVUPS          Z1, 64(SP)
	VMOVUPS          Z2, 128(SP)

	MOVQ wt+0(FP), SI
	MOVQ nb+8(FP), CX
	XORQ AX, AX
	Q32ZERO

q32mblock:
	Q32SCALES
	Q32MLANE(0, Z27, Z0, Z8, Z16)
	Q32MLANE(1, Z28, Z1, Z9, Z17)
	Q32MLANE(2, Z27, Z2, Z10, Z18)
	Q32MLANE(3, Z28, Z3, Z11, Z19)
	Q32MLANE(4, Z27, Z4, Z12, Z20)
	Q32MLANE(5, Z28, Z5, Z13, Z21)
	Q32MLANE(6, Z27, Z6, Z14, Z22)
	Q32MLANE(7, Z28, Z7, Z15, Z23)
	ADDQ $640, SI
	ADDQ $4, AX
	DECQ CX
	JNZ  q32mblock

	Q32REDUCE3
	VADDPS 0(SP), Z0, Z0
	VADDPS 64(SP), Z8, Z8
	VADDPS 128(SP), Z16, Z16
	Q32STORE3
	VZEROUPPER
	RET

// Q8_0 runs through the same kernel as Q4_0 (mulQ32x16x3AVX512): a
// packed block of the same shape, its quants made unsigned as w+128
// (w XOR 0x80) and the sums started at −128·Σa of the lane
// (q32OffsAVX2 with mul 128; the pair sums 128·(a+a') lie within
// [−32768, 32512], so VPMADDUBSW stays exact). Σ(w+128)·a − 128·Σa is
// Σw·a exactly, the lane sum of dotQ8_0RowsAVX2, and the rest (d·dₐ,
// the FMA into eight lanes, the reduction) is the same arithmetic, so
// the bits are the same.

// Q8HALF transposes sixteen bytes of each row at R8 (four lanes) into
// D0-D3 (dword r: row r's lane) and makes them unsigned.
#define Q8HALF(D0, D1, D2, D3) \
	P16FIRST(0, X0) \
	P16LANE(4, 1, Z0) \
	P16LANE(8, 2, Z0) \
	P16LANE(12, 3, Z0) \
	P16FIRST(1, X1) \
	P16LANE(5, 1, Z1) \
	P16LANE(9, 2, Z1) \
	P16LANE(13, 3, Z1) \
	P16FIRST(2, X2) \
	P16LANE(6, 1, Z2) \
	P16LANE(10, 2, Z2) \
	P16LANE(14, 3, Z2) \
	P16FIRST(3, X3) \
	P16LANE(7, 1, Z3) \
	P16LANE(11, 2, Z3) \
	P16LANE(15, 3, Z3) \
	VPUNPCKLDQ  Z1, Z0, Z4 \
	VPUNPCKHDQ  Z1, Z0, Z5 \
	VPUNPCKLDQ  Z3, Z2, Z6 \
	VPUNPCKHDQ  Z3, Z2, Z7 \
	VPUNPCKLQDQ Z6, Z4, Z0 \
	VPUNPCKHQDQ Z6, Z4, Z1 \
	VPUNPCKLQDQ Z7, Z5, Z2 \
	VPUNPCKHQDQ Z7, Z5, Z3 \
	VPXORD      Z31, Z0, D0 \
	VPXORD      Z31, Z1, D1 \
	VPXORD      Z31, Z2, D2 \
	VPXORD      Z31, Z3, D3

// func q8Pack16AVX512(w *byte, rows *q32Rows, nb int, dst *byte)
//
// q32Pack16AVX512 for Q8_0 rows (34-byte blocks, packed in 576 bytes):
// the first sixteen quant bytes of the rows make lane registers 0-3,
// the last sixteen 4-7. Registers: Z16-Z23 the lane registers, Z30 the
// rows' offsets (int32), Z31 bytes 0x80; SI the block of row 0, R8 its
// quants, R9 rows.
TEXT ·q8Pack16AVX512(SB), NOSPLIT, $0-32
	MOVQ         w+0(FP), SI
	MOVQ         rows+8(FP), R9
	MOVQ         nb+16(FP), CX
	MOVQ         dst+24(FP), DI
	VMOVDQU32    128(R9), Z30
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z31

q8pack:
	LEAQ 2(SI), R8
	Q8HALF(Z16, Z17, Z18, Z19)
	LEAQ 18(SI), R8
	Q8HALF(Z20, Z21, Z22, Z23)
	VMOVDQU32 Z16, 0(DI)
	VMOVDQU32 Z17, 64(DI)
	VMOVDQU32 Z18, 128(DI)
	VMOVDQU32 Z19, 192(DI)
	VMOVDQU32 Z20, 256(DI)
	VMOVDQU32 Z21, 320(DI)
	VMOVDQU32 Z22, 384(DI)
	VMOVDQU32 Z23, 448(DI)

	KXNORW     K1, K1, K1
	VPXORD     Z24, Z24, Z24
	VPGATHERDD (SI)(Z30*1), K1, Z24
	P16SCALES(Z24, 512)

	ADDQ $34, SI
	ADDQ $576, DI
	DECQ CX
	JNZ  q8pack
	VZEROUPPER
	RET
