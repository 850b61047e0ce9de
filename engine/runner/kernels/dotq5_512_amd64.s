//go:build !purego

#include "textflag.h"
#include "rows_amd64.h"

// Q4_1, Q5_0 and Q5_1 rows with AVX-512, four rows per pass, with the
// arithmetic of the AVX2 kernels of dotq5_amd64.s lane for lane, so the
// bits are the same: per block and row eight int32 lane sums (lane i:
// values 4i to 4i+3 of the block), Q5_0's less 16 times the lane's
// activation sum, converted and accumulated with the block's d·dₐ by
// FMA into eight float lanes, reduced at the end of the row in
// REDUCE8TO's order; Q4_1's and Q5_1's m·dₐ·S accumulated by FMA, block
// by block, into a scalar per row added after the reduction.
//
// As in the Q4_0 kernel of dotk512_amd64.s, two blocks go in one
// register: one VPERMB puts the 16 nibble bytes of block b in 128-bit
// lanes 0-1 and those of block b+1 in lanes 2-3, one GF2P8AFFINEQB
// leaves the low nibbles in lanes 0 and 2 and the high nibbles in 1 and
// 3, so the register matches the 64 activation quants of the two blocks
// as they lie in memory, and one VPDPBUSD sums the products onto the
// lanes' start values (zero, or Q5_0's −16·Σa computed once per pair of
// blocks for the four rows): the AVX2 kernels' VPMADDUBSW pair sums are
// exact, so the lanes are theirs. Q5's fifth bits: a second VPERMB puts
// qh byte j/8 of the block in byte j, VPTESTMB against bit j mod 8 makes
// the pair's 64-bit mask, and a masked VPADDB adds 16 where it is set.
//
// The scales of eight blocks (a chunk) of a row come from one VPERMT2W
// over the chunk's first 128 bytes and one masked VPERMW over its last
// 64 (for the blocks beyond), one conversion and one multiply by the
// eight dₐ (twice, for m and d); d·dₐ is stored on the stack and
// broadcast from there by the FMAs. The m·dₐ of the four rows are
// transposed so that one FMA per block, on the four rows' scalars in
// the lanes of X10, follows the AVX2 kernels' chain of each row.
//
// The scales are computed a chunk ahead, into the other of two buffers
// and register sets, and the chunk's m·dₐ·S FMAs are spread between its
// pairs: the latency of the scales (loads, permutes, conversion, store)
// and the chain of X10 are then off the path of the rows' FMA chains.
// Measured here, these loops retire about three instructions per cycle
// whatever their mix, so they keep the count low: one offset register
// for the rows (R14), one index for the activation (AX), the loop
// unrolled twice for the buffers. Blocks beyond the last multiple of
// eight go one at a time.
//
// Rows go four at a time; the last n mod 4 rows go one at a time through
// the same code with all four row pointers on that row (lane 0 is
// stored), so a row's value does not depend on its position. No read
// passes the end of a chunk (eight blocks) or block.
//
// Registers: Y0-Y3 the four rows' float lanes, X10 their m·dₐ·S sums;
// Z31 the nibble matrices (low, high, low, high per 128 bits); Z30
// bytes 0x10; Z29 and Z28 the VPERMT2W and VPERMW scale indexes, K2 the
// words the latter fills; Z27, Z26 the nibble VPERMB indexes (pairs 0-2,
// pair 3), Z25, Z24 the qh ones; Z23 the bit of each byte; Z21 the
// pair's activation quants. Q4_1 and Q5_1: Z16-Z19 the four rows'
// scales, Z22 the chunk's dₐ twice, the transposed m·dₐ in Y11-Y14 (set
// A) or Y5, Y6, Y15, Y20 (set B). Q5_0: Z5 the pair's offsets, Z20
// bytes 0x80, Z19 bytes −16, Z18 dwords 8192. GP: SI the group's first
// row (in the chunk loop the last chunk's AX, in the single blocks the
// end's), BX rowBytes, CX rows left, R9 out, R10-R13 the four rows, R14
// the offset in them, DI the activation quants, DX dₐ, R8 the block
// sums, AX 4 times the block index. Stack: the buffers of sets A and B
// at 0 and 128, d·dₐ of the chunk's eight blocks for rows 0-3 at +0,
// +32, +64, +96; Q4_1 and Q5_1 float(S) of the chunk at 256 (A) and
// 288 (B).

// GF2P8AFFINEQB matrices (low nibble, high nibble to bits 0-3), then
// the bit selectors for VPTESTMB.
DATA q5gf<>+0(SB)/8, $0x0102040800000000
DATA q5gf<>+8(SB)/8, $0x0102040800000000
DATA q5gf<>+16(SB)/8, $0x1020408000000000
DATA q5gf<>+24(SB)/8, $0x1020408000000000
DATA q5gf<>+32(SB)/8, $0x8040201008040201
GLOBL q5gf<>(SB), RODATA|NOPTR, $40

// Per type: the VPERMB indexes for the nibble bytes of a pair of blocks
// as [b, b, b+1, b+1] from a 64-byte window, at the pair for pairs 0-2
// of a chunk and ending with the chunk for pair 3 (64 bytes each); for
// Q5 the same for the qh bytes (byte j: qh byte j/8 mod 4 of the block);
// then the scale indexes as bytes (widened on load): VPERMT2W over the
// chunk's first 128 bytes, VPERMW over its last 64; Q5_0 words 0-7 d of
// blocks 0-7, Q4_1 and Q5_1 words 0-7 m and 8-15 d.
DATA q41idx<>+0(SB)/8, $0x0b0a090807060504
DATA q41idx<>+8(SB)/8, $0x131211100f0e0d0c
DATA q41idx<>+16(SB)/8, $0x0b0a090807060504
DATA q41idx<>+24(SB)/8, $0x131211100f0e0d0c
DATA q41idx<>+32(SB)/8, $0x1f1e1d1c1b1a1918
DATA q41idx<>+40(SB)/8, $0x2726252423222120
DATA q41idx<>+48(SB)/8, $0x1f1e1d1c1b1a1918
DATA q41idx<>+56(SB)/8, $0x2726252423222120
DATA q41idx<>+64(SB)/8, $0x232221201f1e1d1c
DATA q41idx<>+72(SB)/8, $0x2b2a292827262524
DATA q41idx<>+80(SB)/8, $0x232221201f1e1d1c
DATA q41idx<>+88(SB)/8, $0x2b2a292827262524
DATA q41idx<>+96(SB)/8, $0x3736353433323130
DATA q41idx<>+104(SB)/8, $0x3f3e3d3c3b3a3938
DATA q41idx<>+112(SB)/8, $0x3736353433323130
DATA q41idx<>+120(SB)/8, $0x3f3e3d3c3b3a3938
DATA q41idx<>+128(SB)/8, $0x003d33291f150b01
DATA q41idx<>+136(SB)/8, $0x003c32281e140a00
DATA q41idx<>+144(SB)/8, $0x1700000000000000
DATA q41idx<>+152(SB)/8, $0x1600000000000000
GLOBL q41idx<>(SB), RODATA|NOPTR, $160

DATA q50idx<>+0(SB)/8, $0x0d0c0b0a09080706
DATA q50idx<>+8(SB)/8, $0x1514131211100f0e
DATA q50idx<>+16(SB)/8, $0x0d0c0b0a09080706
DATA q50idx<>+24(SB)/8, $0x1514131211100f0e
DATA q50idx<>+32(SB)/8, $0x232221201f1e1d1c
DATA q50idx<>+40(SB)/8, $0x2b2a292827262524
DATA q50idx<>+48(SB)/8, $0x232221201f1e1d1c
DATA q50idx<>+56(SB)/8, $0x2b2a292827262524
DATA q50idx<>+64(SB)/8, $0x21201f1e1d1c1b1a
DATA q50idx<>+72(SB)/8, $0x2928272625242322
DATA q50idx<>+80(SB)/8, $0x21201f1e1d1c1b1a
DATA q50idx<>+88(SB)/8, $0x2928272625242322
DATA q50idx<>+96(SB)/8, $0x3736353433323130
DATA q50idx<>+104(SB)/8, $0x3f3e3d3c3b3a3938
DATA q50idx<>+112(SB)/8, $0x3736353433323130
DATA q50idx<>+120(SB)/8, $0x3f3e3d3c3b3a3938
DATA q50idx<>+128(SB)/8, $0x0202020202020202
DATA q50idx<>+136(SB)/8, $0x0303030303030303
DATA q50idx<>+144(SB)/8, $0x0404040404040404
DATA q50idx<>+152(SB)/8, $0x0505050505050505
DATA q50idx<>+160(SB)/8, $0x1818181818181818
DATA q50idx<>+168(SB)/8, $0x1919191919191919
DATA q50idx<>+176(SB)/8, $0x1a1a1a1a1a1a1a1a
DATA q50idx<>+184(SB)/8, $0x1b1b1b1b1b1b1b1b
DATA q50idx<>+192(SB)/8, $0x1616161616161616
DATA q50idx<>+200(SB)/8, $0x1717171717171717
DATA q50idx<>+208(SB)/8, $0x1818181818181818
DATA q50idx<>+216(SB)/8, $0x1919191919191919
DATA q50idx<>+224(SB)/8, $0x2c2c2c2c2c2c2c2c
DATA q50idx<>+232(SB)/8, $0x2d2d2d2d2d2d2d2d
DATA q50idx<>+240(SB)/8, $0x2e2e2e2e2e2e2e2e
DATA q50idx<>+248(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA q50idx<>+256(SB)/8, $0x0000372c21160b00
DATA q50idx<>+264(SB)/8, $0x0000000000000000
DATA q50idx<>+272(SB)/8, $0x150a000000000000
DATA q50idx<>+280(SB)/8, $0x0000000000000000
GLOBL q50idx<>(SB), RODATA|NOPTR, $288

DATA q51idx<>+0(SB)/8, $0x0f0e0d0c0b0a0908
DATA q51idx<>+8(SB)/8, $0x1716151413121110
DATA q51idx<>+16(SB)/8, $0x0f0e0d0c0b0a0908
DATA q51idx<>+24(SB)/8, $0x1716151413121110
DATA q51idx<>+32(SB)/8, $0x2726252423222120
DATA q51idx<>+40(SB)/8, $0x2f2e2d2c2b2a2928
DATA q51idx<>+48(SB)/8, $0x2726252423222120
DATA q51idx<>+56(SB)/8, $0x2f2e2d2c2b2a2928
DATA q51idx<>+64(SB)/8, $0x1f1e1d1c1b1a1918
DATA q51idx<>+72(SB)/8, $0x2726252423222120
DATA q51idx<>+80(SB)/8, $0x1f1e1d1c1b1a1918
DATA q51idx<>+88(SB)/8, $0x2726252423222120
DATA q51idx<>+96(SB)/8, $0x3736353433323130
DATA q51idx<>+104(SB)/8, $0x3f3e3d3c3b3a3938
DATA q51idx<>+112(SB)/8, $0x3736353433323130
DATA q51idx<>+120(SB)/8, $0x3f3e3d3c3b3a3938
DATA q51idx<>+128(SB)/8, $0x0404040404040404
DATA q51idx<>+136(SB)/8, $0x0505050505050505
DATA q51idx<>+144(SB)/8, $0x0606060606060606
DATA q51idx<>+152(SB)/8, $0x0707070707070707
DATA q51idx<>+160(SB)/8, $0x1c1c1c1c1c1c1c1c
DATA q51idx<>+168(SB)/8, $0x1d1d1d1d1d1d1d1d
DATA q51idx<>+176(SB)/8, $0x1e1e1e1e1e1e1e1e
DATA q51idx<>+184(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA q51idx<>+192(SB)/8, $0x1414141414141414
DATA q51idx<>+200(SB)/8, $0x1515151515151515
DATA q51idx<>+208(SB)/8, $0x1616161616161616
DATA q51idx<>+216(SB)/8, $0x1717171717171717
DATA q51idx<>+224(SB)/8, $0x2c2c2c2c2c2c2c2c
DATA q51idx<>+232(SB)/8, $0x2d2d2d2d2d2d2d2d
DATA q51idx<>+240(SB)/8, $0x2e2e2e2e2e2e2e2e
DATA q51idx<>+248(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA q51idx<>+256(SB)/8, $0x00003d3125190d01
DATA q51idx<>+264(SB)/8, $0x00003c3024180c00
DATA q51idx<>+272(SB)/8, $0x1509000000000000
DATA q51idx<>+280(SB)/8, $0x1408000000000000
GLOBL q51idx<>(SB), RODATA|NOPTR, $288

// Q5START zeroes the offsets and the sums and sets SI to the last
// chunk's AX, the flags by its sign (negative: no whole chunk).
#define Q5START \
	XORQ   AX, AX \
	XORQ   R14, R14 \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS X10, X10, X10 \
	MOVQ   nb+48(FP), SI \
	ANDQ   $-8, SI \
	SHLQ   $2, SI \
	SUBQ   $32, SI

// Q5CONSTS loads the arguments, the shared constants and the type's
// indexes from T.
#define Q5CONSTS(T) \
	MOVQ            w+0(FP), SI \
	MOVQ            rowBytes+8(FP), BX \
	MOVQ            n+16(FP), CX \
	MOVQ            q+24(FP), DI \
	MOVQ            d+32(FP), DX \
	MOVQ            s+40(FP), R8 \
	MOVQ            out+56(FP), R9 \
	VBROADCASTI32X4 q5gf<>+0(SB), Z31 \
	VINSERTI32X4    $1, q5gf<>+16(SB), Z31, Z31 \
	VINSERTI32X4    $3, q5gf<>+16(SB), Z31, Z31 \
	VPBROADCASTQ    q5gf<>+32(SB), Z23 \
	MOVL            $0x10101010, AX \
	VPBROADCASTD    AX, Z30 \
	VMOVDQU64       T+0(SB), Z27 \
	VMOVDQU64       T+64(SB), Z26

// Q5PREFETCH asks for one line of each row far ahead (see KPREFETCH in
// dotk512_amd64.s): into L1 at near bytes, into L2 at far bytes.
#define Q5PREFETCH(near, far) \
	PREFETCHT0 near(R10)(R14*1) \
	PREFETCHT0 near(R11)(R14*1) \
	PREFETCHT0 near(R12)(R14*1) \
	PREFETCHT0 near(R13)(R14*1) \
	PREFETCHT1 far(R10)(R14*1) \
	PREFETCHT1 far(R11)(R14*1) \
	PREFETCHT1 far(R12)(R14*1) \
	PREFETCHT1 far(R13)(R14*1)

// Q5PREFETCH3 covers the three lines a row advances by per chunk (160
// to 192 bytes).
#define Q5PREFETCH3 \
	Q5PREFETCH(4608, 13824) \
	Q5PREFETCH(4672, 13888) \
	Q5PREFETCH(4736, 13952)

// Q5REDUCE adds the eight float lanes of Y into the low lane of X, as
// REDUCE8TO in dotq5_amd64.s.
#define Q5REDUCE(Y, X) \
	VEXTRACTF128 $1, Y, X4 \
	VADDPS       X4, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// Q5STORE4 writes the four rows' sums (X0 reduced already) plus X10
// and moves to the next group.
#define Q5STORE4 \
	Q5REDUCE(Y1, X1) \
	Q5REDUCE(Y2, X2) \
	Q5REDUCE(Y3, X3) \
	VINSERTPS $0x10, X1, X0, X0 \
	VINSERTPS $0x20, X2, X0, X0 \
	VINSERTPS $0x30, X3, X0, X0 \
	VADDPS    X10, X0, X0 \
	VMOVUPS   X0, (R9) \
	ADDQ      $16, R9 \
	LEAQ      (R10)(BX*4), SI \
	SUBQ      $4, CX

// Q5STORE1 writes the one row of a short group (X0 reduced, plus X10).
#define Q5STORE1 \
	VADDSS X10, X0, X0 \
	VMOVSS X0, (R9) \
	ADDQ   $4, R9 \
	LEAQ   (R10)(BX*1), SI \
	DECQ   CX

// NIBS puts the 64 quants of the pair of blocks in the window at
// woff(R) in Z7 (index IX).
#define NIBS(R, woff, IX) \
	VPERMB         woff(R)(R14*1), IX, Z7 \
	VGF2P8AFFINEQB $0, Z31, Z7, Z7

// HIGHS adds 16 to the quants in Z7 whose bit in the pair's qh is set
// (index IX). Clobbers Z9.
#define HIGHS(R, woff, IX) \
	VPERMB   woff(R)(R14*1), IX, Z9 \
	VPTESTMB Z23, Z9, K1 \
	VPADDB   Z30, Z7, K1, Z7

// PAIRSUM adds the products of Z7 with the activation in Z21 onto Z8
// and accumulates the two blocks' lanes into ACC with the scales at
// so(SP) and so+4(SP).
#define PAIRSUM(so, ACC) \
	VPDPBUSD         Z21, Z7, Z8 \
	VCVTDQ2PS        Z8, Z8 \
	VFMADD231PS.BCST so(SP), Y8, ACC \
	VEXTRACTF64X4    $1, Z8, Y8 \
	VFMADD231PS.BCST so+4(SP), Y8, ACC

// MINSCALES puts m·dₐ of the eight blocks rb bytes on in row R in the
// low half of Z (Y its low half) and stores their d·dₐ at off(SP).
#define MINSCALES(R, rb, w3, off, Y, Z) \
	VMOVDQU64     rb(R)(R14*1), Z \
	VPERMT2W      rb+64(R)(R14*1), Z29, Z \
	VPERMW        rb+w3(R)(R14*1), Z28, K2, Z \
	VCVTPH2PS     Y, Z \
	VMULPS        Z22, Z, Z \
	VEXTRACTF64X4 $1, Z, off(SP)

// MINPREP computes the scales of the chunk rb bytes on in the rows (ab
// bytes on in dₐ and S): d·dₐ into the buffer at buf(SP), float(S) at
// sb(SP), and the m·dₐ of the four rows transposed to O0-O3: block k
// of the four rows in lanes 0-3 of O(k mod 4) for k < 4, lanes 4-7 for
// k ≥ 4. Clobbers Z4, Z16-Z19, Z22.
#define MINPREP(rb, ab, w3, buf, sb, O0, O1, O2, O3) \
	VBROADCASTF64X4 ab(DX)(AX*1), Z22 \
	VCVTDQ2PS       ab(R8)(AX*1), Y4 \
	VMOVUPS         Y4, sb(SP) \
	MINSCALES(R10, rb, w3, buf, Y16, Z16) \
	MINSCALES(R11, rb, w3, buf+32, Y17, Z17) \
	MINSCALES(R12, rb, w3, buf+64, Y18, Z18) \
	MINSCALES(R13, rb, w3, buf+96, Y19, Z19) \
	VUNPCKLPS       Y17, Y16, Y4 \
	VUNPCKHPS       Y17, Y16, Y16 \
	VUNPCKLPS       Y19, Y18, Y22 \
	VUNPCKHPS       Y19, Y18, Y18 \
	VUNPCKLPD       Y22, Y4, O0 \
	VUNPCKHPD       Y22, Y4, O1 \
	VUNPCKLPD       Y18, Y16, O2 \
	VUNPCKHPD       Y18, Y16, O3

// MINPREPA and MINPREPB: MINPREP into buffer and register set A (d·dₐ
// at 0, S at 256, m·dₐ in Y11-Y14) or B (128, 288, Y5, Y6, Y15, Y20).
#define MINPREPA(rb, ab, w3) MINPREP(rb, ab, w3, 0, 256, Y11, Y12, Y13, Y14)
#define MINPREPB(rb, ab, w3) MINPREP(rb, ab, w3, 128, 288, Y5, Y6, Y15, Y20)

// CHAIN adds m·dₐ·float(S) of blocks k and k+1 (lanes of XA and XB, S
// at sb(SP)) onto X10 in block order.
#define CHAIN(sb, XA, XB) \
	VFMADD231PS.BCST sb(SP), XA, X10 \
	VFMADD231PS.BCST sb+4(SP), XB, X10

// HIGHLANES moves the lanes 4-7 of the four registers down.
#define HIGHLANES(Y0r, X0r, Y1r, X1r, Y2r, X2r, Y3r, X3r) \
	VEXTRACTF32X4 $1, Y0r, X0r \
	VEXTRACTF32X4 $1, Y1r, X1r \
	VEXTRACTF32X4 $1, Y2r, X2r \
	VEXTRACTF32X4 $1, Y3r, X3r

// MINONEHEAD: the block's dₐ in X11 and float(S) in X5, broadcast.
#define MINONEHEAD \
	VBROADCASTSS (DX)(AX*1), X11 \
	VCVTSI2SSL   (R8)(AX*1), X5, X5 \
	VBROADCASTSS X5, X5

// MINONESUM accumulates the quants in Y7 of the block at R into ACC and
// puts its m·dₐ in lane IMM>>4 of X13 (IMM a VINSERTPS immediate).
#define MINONESUM(R, ACC, IMM) \
	VPXOR        Y8, Y8, Y8 \
	VPDPBUSD     (DI)(AX*8), Y7, Y8 \
	VCVTDQ2PS    Y8, Y8 \
	VCVTPH2PS    (R)(R14*1), X9 \
	VMULPS       X11, X9, X9 \
	VBROADCASTSS X9, Y12 \
	VFMADD231PS  Y12, Y8, ACC \
	VINSERTPS    $IMM, X9, X13, X13

// Q41PAIR: blocks 2p and 2p+1 of the chunk (window woff, nibble index
// IX, activation at aoff, scales at so(SP)) for the four rows.
#define Q41ROWPAIR(R, woff, IX, so, ACC) \
	NIBS(R, woff, IX) \
	VPXORD Z8, Z8, Z8 \
	PAIRSUM(so, ACC)

#define Q41PAIR(woff, IX, aoff, so) \
	VMOVDQU64 aoff(DI)(AX*8), Z21 \
	Q41ROWPAIR(R10, woff, IX, so, Y0) \
	Q41ROWPAIR(R11, woff, IX, so+32, Y1) \
	Q41ROWPAIR(R12, woff, IX, so+64, Y2) \
	Q41ROWPAIR(R13, woff, IX, so+96, Y3)

// Q41PAIRSA and Q41PAIRSB: the chunk's four pairs with the scales of
// set A or B, the chunk's m·dₐ·S chain between them.
#define Q41PAIRSA \
	Q41PAIR(0, Z27, 0, 0) \
	CHAIN(256, X11, X12) \
	Q41PAIR(40, Z27, 64, 8) \
	CHAIN(264, X13, X14) \
	HIGHLANES(Y11, X11, Y12, X12, Y13, X13, Y14, X14) \
	Q41PAIR(80, Z27, 128, 16) \
	CHAIN(272, X11, X12) \
	Q41PAIR(96, Z26, 192, 24) \
	CHAIN(280, X13, X14)

#define Q41PAIRSB \
	Q41PAIR(0, Z27, 0, 128) \
	CHAIN(288, X5, X6) \
	Q41PAIR(40, Z27, 64, 136) \
	CHAIN(296, X15, X20) \
	HIGHLANES(Y5, X5, Y6, X6, Y15, X15, Y20, X20) \
	Q41PAIR(80, Z27, 128, 144) \
	CHAIN(304, X5, X6) \
	Q41PAIR(96, Z26, 192, 152) \
	CHAIN(312, X15, X20)

// Q41ONE: the block at R onto ACC, its m·dₐ to X13.
#define Q41ONE(R, ACC, IMM) \
	VBROADCASTI32X4 4(R)(R14*1), Y7 \
	VGF2P8AFFINEQB  $0, Y31, Y7, Y7 \
	MINONESUM(R, ACC, IMM)

// func dotQ4_1RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ4_1RowsAVX512(SB), NOSPLIT, $320-64
	Q5CONSTS(q41idx<>)
	VPMOVZXBW q41idx<>+128(SB), Y29
	VPMOVZXBW q41idx<>+144(SB), Y28
	MOVL      $0x8080, AX
	KMOVW     AX, K2

q41group:
	ROWS4
	Q5START
	JLT q41single
	MINPREPA(0, 0, 96)
	CMPQ AX, SI

	// Two copies of the chunk, alternating the scale buffers: the next
	// chunk's scales are computed while this one's are in use. Flags:
	// AX against SI (less: a next chunk).
q41chunkA:
	Q5PREFETCH3
	JGE q41pairsA
	MINPREPB(160, 32, 96)

q41pairsA:
	Q41PAIRSA
	ADDQ $160, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JGT  q41single
	Q5PREFETCH3
	JGE  q41pairsB
	MINPREPA(160, 32, 96)

q41pairsB:
	Q41PAIRSB
	ADDQ $160, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JLE  q41chunkA

q41single:
	MOVQ nb+48(FP), SI
	SHLQ $2, SI
	CMPQ AX, SI
	JGE  q41end

q41one:
	MINONEHEAD
	Q41ONE(R10, Y0, 0x40)
	Q41ONE(R11, Y1, 0x50)
	Q41ONE(R12, Y2, 0x60)
	Q41ONE(R13, Y3, 0x70)
	VFMADD231PS X5, X13, X10
	ADDQ $20, R14
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q41one

q41end:
	Q5REDUCE(Y0, X0)
	CMPQ CX, $4
	JLT  q41end1
	Q5STORE4
	JNZ  q41group
	VZEROUPPER
	RET

q41end1:
	Q5STORE1
	JNZ q41group
	VZEROUPPER
	RET

// Q51ROWPAIR, Q51PAIR, Q51PAIRSA and Q51PAIRSB: Q41's for Q5_1 (qh
// index HX).
#define Q51ROWPAIR(R, woff, IX, HX, so, ACC) \
	NIBS(R, woff, IX) \
	HIGHS(R, woff, HX) \
	VPXORD Z8, Z8, Z8 \
	PAIRSUM(so, ACC)

#define Q51PAIR(woff, IX, HX, aoff, so) \
	VMOVDQU64 aoff(DI)(AX*8), Z21 \
	Q51ROWPAIR(R10, woff, IX, HX, so, Y0) \
	Q51ROWPAIR(R11, woff, IX, HX, so+32, Y1) \
	Q51ROWPAIR(R12, woff, IX, HX, so+64, Y2) \
	Q51ROWPAIR(R13, woff, IX, HX, so+96, Y3)

#define Q51PAIRSA \
	Q51PAIR(0, Z27, Z25, 0, 0) \
	CHAIN(256, X11, X12) \
	Q51PAIR(48, Z27, Z25, 64, 8) \
	CHAIN(264, X13, X14) \
	HIGHLANES(Y11, X11, Y12, X12, Y13, X13, Y14, X14) \
	Q51PAIR(96, Z27, Z25, 128, 16) \
	CHAIN(272, X11, X12) \
	Q51PAIR(128, Z26, Z24, 192, 24) \
	CHAIN(280, X13, X14)

#define Q51PAIRSB \
	Q51PAIR(0, Z27, Z25, 0, 128) \
	CHAIN(288, X5, X6) \
	Q51PAIR(48, Z27, Z25, 64, 136) \
	CHAIN(296, X15, X20) \
	HIGHLANES(Y5, X5, Y6, X6, Y15, X15, Y20, X20) \
	Q51PAIR(96, Z27, Z25, 128, 144) \
	CHAIN(304, X5, X6) \
	Q51PAIR(128, Z26, Z24, 192, 152) \
	CHAIN(312, X15, X20)

// Q51ONE is Q41ONE for Q5_1.
#define Q51ONE(R, ACC, IMM) \
	VBROADCASTI32X4 8(R)(R14*1), Y7 \
	VGF2P8AFFINEQB  $0, Y31, Y7, Y7 \
	KMOVD           4(R)(R14*1), K1 \
	VPADDB          Y30, Y7, K1, Y7 \
	MINONESUM(R, ACC, IMM)

// func dotQ5_1RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ5_1RowsAVX512(SB), NOSPLIT, $320-64
	Q5CONSTS(q51idx<>)
	VMOVDQU64 q51idx<>+128(SB), Z25
	VMOVDQU64 q51idx<>+192(SB), Z24
	VPMOVZXBW q51idx<>+256(SB), Y29
	VPMOVZXBW q51idx<>+272(SB), Y28
	MOVL      $0xc0c0, AX
	KMOVW     AX, K2

q51group:
	ROWS4
	Q5START
	JLT q51single
	MINPREPA(0, 0, 128)
	CMPQ AX, SI

q51chunkA:
	Q5PREFETCH3
	JGE q51pairsA
	MINPREPB(192, 32, 128)

q51pairsA:
	Q51PAIRSA
	ADDQ $192, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JGT  q51single
	Q5PREFETCH3
	JGE  q51pairsB
	MINPREPA(192, 32, 128)

q51pairsB:
	Q51PAIRSB
	ADDQ $192, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JLE  q51chunkA

q51single:
	MOVQ nb+48(FP), SI
	SHLQ $2, SI
	CMPQ AX, SI
	JGE  q51end

q51one:
	MINONEHEAD
	Q51ONE(R10, Y0, 0x40)
	Q51ONE(R11, Y1, 0x50)
	Q51ONE(R12, Y2, 0x60)
	Q51ONE(R13, Y3, 0x70)
	VFMADD231PS X5, X13, X10
	ADDQ $24, R14
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q51one

q51end:
	Q5REDUCE(Y0, X0)
	CMPQ CX, $4
	JLT  q51end1
	Q5STORE4
	JNZ  q51group
	VZEROUPPER
	RET

q51end1:
	Q5STORE1
	JNZ q51group
	VZEROUPPER
	RET

// Q50OFFS sets Z5 to −16 times the lane sums of the activation in Z21:
// the products of −16 with a+128 (a XOR 0x80, unsigned) onto 8192.
#define Q50OFFS \
	VPXORD    Z21, Z20, Z9 \
	VMOVDQA64 Z18, Z5 \
	VPDPBUSD  Z19, Z9, Z5

// Q50ROWPAIR, Q50PAIR, Q50PAIRS: as Q51's, the lanes starting at the
// pair's offsets.
#define Q50ROWPAIR(R, woff, IX, HX, so, ACC) \
	NIBS(R, woff, IX) \
	HIGHS(R, woff, HX) \
	VMOVDQA64 Z5, Z8 \
	PAIRSUM(so, ACC)

#define Q50PAIR(woff, IX, HX, aoff, so) \
	VMOVDQU64 aoff(DI)(AX*8), Z21 \
	Q50OFFS \
	Q50ROWPAIR(R10, woff, IX, HX, so, Y0) \
	Q50ROWPAIR(R11, woff, IX, HX, so+32, Y1) \
	Q50ROWPAIR(R12, woff, IX, HX, so+64, Y2) \
	Q50ROWPAIR(R13, woff, IX, HX, so+96, Y3)

#define Q50PAIRS(buf) \
	Q50PAIR(0, Z27, Z25, 0, buf) \
	Q50PAIR(44, Z27, Z25, 64, buf+8) \
	Q50PAIR(88, Z27, Z25, 128, buf+16) \
	Q50PAIR(112, Z26, Z24, 192, buf+24)

// Q50SCALES stores d·dₐ of the eight blocks rb bytes on in row R at
// off(SP), with dₐ at ab.
#define Q50SCALES(R, rb, ab, off) \
	VMOVDQU64 rb(R)(R14*1), Z4 \
	VPERMT2W  rb+64(R)(R14*1), Z29, Z4 \
	VPERMW    rb+112(R)(R14*1), Z28, K2, Z4 \
	VCVTPH2PS X4, Y4 \
	VMULPS    ab(DX)(AX*1), Y4, Y4 \
	VMOVUPS   Y4, off(SP)

// Q50PREP: Q50SCALES for the four rows into the buffer at buf(SP).
#define Q50PREP(rb, ab, buf) \
	Q50SCALES(R10, rb, ab, buf) \
	Q50SCALES(R11, rb, ab, buf+32) \
	Q50SCALES(R12, rb, ab, buf+64) \
	Q50SCALES(R13, rb, ab, buf+96)

// Q50ONE accumulates the block at R into ACC (offsets in Y5).
#define Q50ONE(R, ACC) \
	VBROADCASTI32X4 6(R)(R14*1), Y7 \
	VGF2P8AFFINEQB  $0, Y31, Y7, Y7 \
	KMOVD           2(R)(R14*1), K1 \
	VPADDB          Y30, Y7, K1, Y7 \
	VMOVDQA         Y5, Y8 \
	VPDPBUSD        (DI)(AX*8), Y7, Y8 \
	VCVTDQ2PS       Y8, Y8 \
	VCVTPH2PS       (R)(R14*1), X9 \
	VMULSS          (DX)(AX*1), X9, X9 \
	VBROADCASTSS    X9, Y9 \
	VFMADD231PS     Y9, Y8, ACC

// func dotQ5_0RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, s *int32, nb int, out *float32)
TEXT ·dotQ5_0RowsAVX512(SB), NOSPLIT, $256-64
	Q5CONSTS(q50idx<>)
	VMOVDQU64    q50idx<>+128(SB), Z25
	VMOVDQU64    q50idx<>+192(SB), Z24
	VPMOVZXBW    q50idx<>+256(SB), Y29
	VPMOVZXBW    q50idx<>+272(SB), Y28
	MOVL         $0x80808080, AX
	VPBROADCASTD AX, Z20
	MOVL         $0xf0f0f0f0, AX
	VPBROADCASTD AX, Z19
	MOVL         $8192, AX
	VPBROADCASTD AX, Z18
	MOVL         $0xc0, AX
	KMOVW        AX, K2

q50group:
	ROWS4
	Q5START
	JLT q50single
	Q50PREP(0, 0, 0)
	CMPQ AX, SI

q50chunkA:
	Q5PREFETCH3
	JGE q50pairsA
	Q50PREP(176, 32, 128)

q50pairsA:
	Q50PAIRS(0)
	ADDQ $176, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JGT  q50single
	Q5PREFETCH3
	JGE  q50pairsB
	Q50PREP(176, 32, 0)

q50pairsB:
	Q50PAIRS(128)
	ADDQ $176, R14
	ADDQ $32, AX
	CMPQ AX, SI
	JLE  q50chunkA

q50single:
	MOVQ nb+48(FP), SI
	SHLQ $2, SI
	CMPQ AX, SI
	JGE  q50end

q50one:
	VPXOR    Y5, Y5, Y5
	VPDPBUSD (DI)(AX*8), Y30, Y5
	VPXOR    Y6, Y6, Y6
	VPSUBD   Y5, Y6, Y5
	Q50ONE(R10, Y0)
	Q50ONE(R11, Y1)
	Q50ONE(R12, Y2)
	Q50ONE(R13, Y3)
	ADDQ $22, R14
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q50one

q50end:
	Q5REDUCE(Y0, X0)
	CMPQ CX, $4
	JLT  q50end1
	Q5REDUCE(Y1, X1)
	Q5REDUCE(Y2, X2)
	Q5REDUCE(Y3, X3)
	VINSERTPS $0x10, X1, X0, X0
	VINSERTPS $0x20, X2, X0, X0
	VINSERTPS $0x30, X3, X0, X0
	VMOVUPS   X0, (R9)
	ADDQ      $16, R9
	LEAQ      (R10)(BX*4), SI
	SUBQ      $4, CX
	JNZ       q50group
	VZEROUPPER
	RET

q50end1:
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	LEAQ   (R10)(BX*1), SI
	DECQ   CX
	JNZ    q50group
	VZEROUPPER
	RET
