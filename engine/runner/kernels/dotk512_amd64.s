//go:build !purego

#include "textflag.h"
#include "rows_amd64.h"

// Row kernels with AVX-512 (F, BW, VL, VNNI and GFNI): Q4_K, Q5_K and
// Q6_K here, Q4_0 at the end of the file.
//
// K-quant rows with AVX-512, four rows per
// pass against one activation: the AVX2 kernels of dotk_amd64.s spend
// most of their instructions per row and super-block on work that is
// scalar or 32 values wide (scale unpacking, one sub-block scale
// broadcast per 32 values, two reductions to scalars and the scalar
// float combine). Here:
//
//   - the quants of 64 values come from one GF2P8AFFINEQB (a per-byte
//     bit matrix: the low nibble in one half of the register, the high
//     nibble in the other, or qh's bits moved to bit 4 and 5), so a
//     register matches 64 consecutive activation quants;
//   - VPMADDUBSW (unsigned quants × signed activation quants, pair sums
//     far below 2^15) then VPDPWSSD against the sub-block scales as
//     int16 (picked per register with VPERMW from the row's unpacked
//     scales) sums a row's integer isum in one 16-lane accumulator;
//   - the scales of four rows are unpacked in one register, their mins
//     (or Q6_K's scales) meet the activation's bsums in one VPMADDWD,
//     and the four rows' isums and msums are reduced together to the
//     lanes of one register;
//   - the float combine runs on the four rows at once, lane by lane with
//     the roundings of kCombine (the scalar kernels' order), so each row
//     gets the bits of the portable and AVX2 kernels.
//
// Rows go four at a time; the last n mod 4 rows go one at a time through
// the same code with all four row pointers on that row (the lanes then
// compute the same value and lane 0 is stored), so a row's value does
// not depend on its position.
//
// Registers shared by the kernels: Z31 the nibble matrices (low nibble
// in the low 256 bits, high nibble in the high 256 bits); Z28-Z30 the
// scale unpacking masks and shifts (as matmul8_amd64.s, four times);
// Z20-Z27 the VPERMW indexes; Z16-Z19 the qh matrices of Q5_K's four
// pairs or Z16-Z19 Q6_K's four quant matrices; Y15 the four rows' sums (lanes 0, 2, 4,
// 6). GP: SI the group's first row, BX rowBytes, CX rows left, R9 out,
// R10-R13 the four rows' current super-block, DI the activation quants,
// DX dₐ, R8 the bsums, AX super-blocks left.

// GF2P8AFFINEQB matrices (row for result bit i in byte 7−i): the low
// nibble (bits 0-3 kept) and the high nibble (bits 4-7 to 0-3).
DATA kgf<>+0(SB)/8, $0x0102040800000000
DATA kgf<>+8(SB)/8, $0x0102040800000000
DATA kgf<>+16(SB)/8, $0x0102040800000000
DATA kgf<>+24(SB)/8, $0x0102040800000000
DATA kgf<>+32(SB)/8, $0x1020408000000000
DATA kgf<>+40(SB)/8, $0x1020408000000000
DATA kgf<>+48(SB)/8, $0x1020408000000000
DATA kgf<>+56(SB)/8, $0x1020408000000000
// Q5_K pair 0: qh bit 0 to bit 4 (low half), qh bit 1 to bit 4 (high
// half); pair j is this shifted left by 2j.
DATA kgf<>+64(SB)/8, $0x01000000
DATA kgf<>+72(SB)/8, $0x01000000
DATA kgf<>+80(SB)/8, $0x01000000
DATA kgf<>+88(SB)/8, $0x01000000
DATA kgf<>+96(SB)/8, $0x02000000
DATA kgf<>+104(SB)/8, $0x02000000
DATA kgf<>+112(SB)/8, $0x02000000
DATA kgf<>+120(SB)/8, $0x02000000
// Q6_K: qh bits 0-1 to bits 4-5 (low half), bits 2-3 (high half); bits
// 4-5 and 6-7 are this shifted left by 4.
DATA kgf<>+128(SB)/8, $0x01020000
DATA kgf<>+136(SB)/8, $0x01020000
DATA kgf<>+144(SB)/8, $0x01020000
DATA kgf<>+152(SB)/8, $0x01020000
DATA kgf<>+160(SB)/8, $0x04080000
DATA kgf<>+168(SB)/8, $0x04080000
DATA kgf<>+176(SB)/8, $0x04080000
DATA kgf<>+184(SB)/8, $0x04080000
GLOBL kgf<>(SB), RODATA|NOPTR, $192

// Scale unpacking (see matmul8_amd64.s): shifts, low and high masks.
DATA kunpack<>+0(SB)/4, $0
DATA kunpack<>+4(SB)/4, $0
DATA kunpack<>+8(SB)/4, $0
DATA kunpack<>+12(SB)/4, $4
DATA kunpack<>+16(SB)/4, $0x3f3f3f3f
DATA kunpack<>+20(SB)/4, $0x0f0f0f0f
DATA kunpack<>+24(SB)/4, $0x3f3f3f3f
DATA kunpack<>+28(SB)/4, $0x0f0f0f0f
DATA kunpack<>+32(SB)/4, $0
DATA kunpack<>+36(SB)/4, $0x30303030
DATA kunpack<>+40(SB)/4, $0
DATA kunpack<>+44(SB)/4, $0x30303030
GLOBL kunpack<>(SB), RODATA|NOPTR, $48

// VPERMW indexes (as bytes, widened on load) for Q4_K and Q5_K: for row
// parity p (the row's half of the scale register) and pair j, words
// 0-15 pick scale 2j and words 16-31 scale 2j+1 of the row: 8 × 32
// bytes, p major.
DATA kpermk<>+0(SB)/8, $0x0000000000000000
DATA kpermk<>+8(SB)/8, $0x0000000000000000
DATA kpermk<>+16(SB)/8, $0x0101010101010101
DATA kpermk<>+24(SB)/8, $0x0101010101010101
DATA kpermk<>+32(SB)/8, $0x0202020202020202
DATA kpermk<>+40(SB)/8, $0x0202020202020202
DATA kpermk<>+48(SB)/8, $0x0303030303030303
DATA kpermk<>+56(SB)/8, $0x0303030303030303
DATA kpermk<>+64(SB)/8, $0x0404040404040404
DATA kpermk<>+72(SB)/8, $0x0404040404040404
DATA kpermk<>+80(SB)/8, $0x0505050505050505
DATA kpermk<>+88(SB)/8, $0x0505050505050505
DATA kpermk<>+96(SB)/8, $0x0606060606060606
DATA kpermk<>+104(SB)/8, $0x0606060606060606
DATA kpermk<>+112(SB)/8, $0x0707070707070707
DATA kpermk<>+120(SB)/8, $0x0707070707070707
DATA kpermk<>+128(SB)/8, $0x1010101010101010
DATA kpermk<>+136(SB)/8, $0x1010101010101010
DATA kpermk<>+144(SB)/8, $0x1111111111111111
DATA kpermk<>+152(SB)/8, $0x1111111111111111
DATA kpermk<>+160(SB)/8, $0x1212121212121212
DATA kpermk<>+168(SB)/8, $0x1212121212121212
DATA kpermk<>+176(SB)/8, $0x1313131313131313
DATA kpermk<>+184(SB)/8, $0x1313131313131313
DATA kpermk<>+192(SB)/8, $0x1414141414141414
DATA kpermk<>+200(SB)/8, $0x1414141414141414
DATA kpermk<>+208(SB)/8, $0x1515151515151515
DATA kpermk<>+216(SB)/8, $0x1515151515151515
DATA kpermk<>+224(SB)/8, $0x1616161616161616
DATA kpermk<>+232(SB)/8, $0x1616161616161616
DATA kpermk<>+240(SB)/8, $0x1717171717171717
DATA kpermk<>+248(SB)/8, $0x1717171717171717
GLOBL kpermk<>(SB), RODATA|NOPTR, $256

// VPERMW indexes for Q6_K: for row parity p and register k (values
// 64k to 64k+63 of the super-block), dword lanes 4i to 4i+3 pick scale
// 4k+i of the row.
DATA kperm6<>+0(SB)/8, $0x0000000000000000
DATA kperm6<>+8(SB)/8, $0x0101010101010101
DATA kperm6<>+16(SB)/8, $0x0202020202020202
DATA kperm6<>+24(SB)/8, $0x0303030303030303
DATA kperm6<>+32(SB)/8, $0x0404040404040404
DATA kperm6<>+40(SB)/8, $0x0505050505050505
DATA kperm6<>+48(SB)/8, $0x0606060606060606
DATA kperm6<>+56(SB)/8, $0x0707070707070707
DATA kperm6<>+64(SB)/8, $0x0808080808080808
DATA kperm6<>+72(SB)/8, $0x0909090909090909
DATA kperm6<>+80(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA kperm6<>+88(SB)/8, $0x0b0b0b0b0b0b0b0b
DATA kperm6<>+96(SB)/8, $0x0c0c0c0c0c0c0c0c
DATA kperm6<>+104(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA kperm6<>+112(SB)/8, $0x0e0e0e0e0e0e0e0e
DATA kperm6<>+120(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA kperm6<>+128(SB)/8, $0x1010101010101010
DATA kperm6<>+136(SB)/8, $0x1111111111111111
DATA kperm6<>+144(SB)/8, $0x1212121212121212
DATA kperm6<>+152(SB)/8, $0x1313131313131313
DATA kperm6<>+160(SB)/8, $0x1414141414141414
DATA kperm6<>+168(SB)/8, $0x1515151515151515
DATA kperm6<>+176(SB)/8, $0x1616161616161616
DATA kperm6<>+184(SB)/8, $0x1717171717171717
DATA kperm6<>+192(SB)/8, $0x1818181818181818
DATA kperm6<>+200(SB)/8, $0x1919191919191919
DATA kperm6<>+208(SB)/8, $0x1a1a1a1a1a1a1a1a
DATA kperm6<>+216(SB)/8, $0x1b1b1b1b1b1b1b1b
DATA kperm6<>+224(SB)/8, $0x1c1c1c1c1c1c1c1c
DATA kperm6<>+232(SB)/8, $0x1d1d1d1d1d1d1d1d
DATA kperm6<>+240(SB)/8, $0x1e1e1e1e1e1e1e1e
DATA kperm6<>+248(SB)/8, $0x1f1f1f1f1f1f1f1f
GLOBL kperm6<>(SB), RODATA|NOPTR, $256

// KSTART loads the activation pointers and zeroes the sums.
#define KSTART \
	MOVQ   q+24(FP), DI \
	MOVQ   d+32(FP), DX \
	MOVQ   bs+40(FP), R8 \
	MOVQ   nb+48(FP), AX \
	VXORPS Y15, Y15, Y15

// KSTORE writes the group's sums (lanes 0, 2, 4, 6 of Y15) and moves to
// the next group: four rows, or the one row of a short group.
#define KSTORE \
	CMPQ         CX, $4 \
	JLT          8(PC) \
	VEXTRACTF128 $1, Y15, X8 \
	VSHUFPS      $0x88, X8, X15, X15 \
	VMOVUPS      X15, (R9) \
	ADDQ         $16, R9 \
	LEAQ         (SI)(BX*4), SI \
	SUBQ         $4, CX \
	JMP          5(PC) \
	VMOVSS       X15, (R9) \
	ADDQ         $4, R9 \
	ADDQ         BX, SI \
	DECQ         CX

// KPREFETCH asks for one cache line of each row far ahead: into L1 at
// near bytes, into L2 at far bytes. Decode streams every weight from
// memory once, and the hardware prefetchers alone (or a prefetch a few
// super-blocks ahead) leave too few lines in flight on a machine with
// long memory latency: they stop at each 4 KiB page and a row group of
// short rows ends before their stream is established. Measured on a
// Q4_K kernel over 192 MiB of 2048- and 5632-column rows: 576 bytes
// ahead in L1 streamed 16-20 GB/s on one core, 4.6 KiB in L1 with
// 13.5 KiB in L2 27-31 GB/s, as fast as a plain read loop.
#define KPREFETCH(near, far) \
	PREFETCHT0 near(R10) \
	PREFETCHT0 near(R11) \
	PREFETCHT0 near(R12) \
	PREFETCHT0 near(R13) \
	PREFETCHT1 far(R10) \
	PREFETCHT1 far(R11) \
	PREFETCHT1 far(R12) \
	PREFETCHT1 far(R13)

// KPREFETCH3 and KPREFETCH4 cover the three or four lines a row
// advances by per pass (144 to 192 bytes, up to 256).
#define KPREFETCH3 \
	KPREFETCH(4608, 13824) \
	KPREFETCH(4672, 13888) \
	KPREFETCH(4736, 13952)

#define KPREFETCH4 \
	KPREFETCH3 \
	KPREFETCH(4800, 14016)

// KUNPACK unpacks the packed 6-bit scales and mins of the four rows
// (12 bytes at 4(R10) etc.) into words: Z4 rows 0 and 1, Z5 rows 2 and
// 3, each row as eight scales then eight mins. Clobbers Z2, Z3.
#define KUNPACK \
	VMOVDQU       4(R10), X2 \
	VINSERTI32X4  $1, 4(R11), Z2, Z2 \
	VINSERTI32X4  $2, 4(R12), Z2, Z2 \
	VINSERTI32X4  $3, 4(R13), Z2, Z2 \
	VPSHUFD       $0x98, Z2, Z3 \
	VPSRLVD       Z30, Z3, Z3 \
	VPANDD        Z29, Z3, Z3 \
	VPSHUFD       $0x50, Z2, Z2 \
	VPSRLD        $2, Z2, Z2 \
	VPANDD        Z28, Z2, Z2 \
	VPORD         Z2, Z3, Z3 \
	VPMOVZXBW     Y3, Z4 \
	VEXTRACTI64X4 $1, Z3, Y3 \
	VPMOVZXBW     Y3, Z5

// KMSUM: the mins · bsum pair sums of the four rows in Z6 (rows 0, 1)
// and Z7 (rows 2, 3): Z1 = [0, ps, 0, ps] against [sc, m, sc, m], so
// only the mins count. Clobbers Z0, Z1.
#define KMSUM \
	VMOVDQU       (R8), Y0 \
	VEXTRACTI128  $1, Y0, X1 \
	VPHADDW       X1, X0, X0 \
	VPXOR         X1, X1, X1 \
	VINSERTI128   $1, X0, Y1, Y1 \
	VINSERTI64X4  $1, Y1, Z1, Z1 \
	VPMADDWD      Z1, Z4, Z6 \
	VPMADDWD      Z1, Z5, Z7

// Q4K5_QUANTS_Q4 puts the 64 quants of pair j of row R in Z: low
// nibbles (sub-block 2j) in the low half, high nibbles in the high.
#define Q4K5_QUANTS_Q4(R, j, Z, T) \
	VBROADCASTI64X4 16+32*j(R), Z \
	VGF2P8AFFINEQB  $0, Z31, Z, Z

// KPAIR0 and KPAIR: the products of 64 quants in Z with the activation
// at 64·j(DI), the pair's scales picked from table TB by index IX,
// into (KPAIR0: set) or onto (KPAIR) the row's accumulator ACC.
#define KPAIR0(j, Z, S, TB, IX, ACC) \
	VPMADDUBSW 64*j(DI), Z, Z \
	VPERMW     TB, IX, S \
	VPMADDWD   S, Z, ACC

#define KPAIR(j, Z, S, TB, IX, ACC) \
	VPMADDUBSW 64*j(DI), Z, Z \
	VPERMW     TB, IX, S \
	VPDPWSSD   S, Z, ACC

// Q4KROW sums row R's isum lanes into ACC (scales in TB, indexes
// IX0-IX3 for its parity).
#define Q4KROW(R, TB, IX0, IX1, IX2, IX3, ACC, Z, S) \
	Q4K5_QUANTS_Q4(R, 0, Z, S) \
	KPAIR0(0, Z, S, TB, IX0, ACC) \
	Q4K5_QUANTS_Q4(R, 1, Z, S) \
	KPAIR(1, Z, S, TB, IX1, ACC) \
	Q4K5_QUANTS_Q4(R, 2, Z, S) \
	KPAIR(2, Z, S, TB, IX2, ACC) \
	Q4K5_QUANTS_Q4(R, 3, Z, S) \
	KPAIR(3, Z, S, TB, IX3, ACC)

// KREDUCE: the isums of the four rows (Z10-Z13) into X10 and their
// msums (Z6, Z7) into X6, row r in lane r.
#define KREDUCE \
	VEXTRACTI64X4 $1, Z10, Y8 \
	VPADDD        Y8, Y10, Y10 \
	VEXTRACTI64X4 $1, Z11, Y8 \
	VPADDD        Y8, Y11, Y11 \
	VEXTRACTI64X4 $1, Z12, Y8 \
	VPADDD        Y8, Y12, Y12 \
	VEXTRACTI64X4 $1, Z13, Y8 \
	VPADDD        Y8, Y13, Y13 \
	VPHADDD       Y11, Y10, Y10 \
	VPHADDD       Y13, Y12, Y12 \
	VPHADDD       Y12, Y10, Y10 \
	VEXTRACTI128  $1, Y10, X11 \
	VPADDD        X11, X10, X10 \
	VEXTRACTI64X4 $1, Z6, Y8 \
	VEXTRACTI64X4 $1, Z7, Y9 \
	VPHADDD       Y8, Y6, Y6 \
	VPHADDD       Y9, Y7, Y7 \
	VPHADDD       Y7, Y6, Y6 \
	VEXTRACTI128  $1, Y6, X8 \
	VPADDD        X8, X6, X6

// KCOMBINE4: for each row r (lane r of X10 isum, X6 msum; d and dmin
// fp16 at (R10) etc.), lanes 2r of Y15 += float(d·dₐ)·float(isum) −
// float(dmin·dₐ)·float(msum), each product and the difference rounded
// as kCombine rounds them. Clobbers Y8, Y9, X10.
#define KCOMBINE4 \
	VMOVD        (R10), X8 \
	VPINSRD      $1, (R11), X8, X8 \
	VPINSRD      $2, (R12), X8, X8 \
	VPINSRD      $3, (R13), X8, X8 \
	VCVTPH2PS    X8, Y8 \
	VBROADCASTSS (DX), Y9 \
	VMULPS       Y9, Y8, Y8 \
	VPUNPCKLDQ   X6, X10, X9 \
	VPUNPCKHDQ   X6, X10, X10 \
	VINSERTI128  $1, X10, Y9, Y9 \
	VCVTDQ2PS    Y9, Y9 \
	VMULPS       Y9, Y8, Y8 \
	VMOVSHDUP    Y8, Y9 \
	VSUBPS       Y9, Y8, Y8 \
	VADDPS       Y8, Y15, Y15

// KCONSTS loads the shared constants (Z20-Z31).
#define KCONSTS(perm) \
	VMOVDQU64       kgf<>+0(SB), Z31 \
	VBROADCASTI32X4 kunpack<>+0(SB), Z30 \
	VBROADCASTI32X4 kunpack<>+16(SB), Z29 \
	VBROADCASTI32X4 kunpack<>+32(SB), Z28 \
	KPERM(perm)

// KPERM loads the VPERMW indexes (Z20-Z27).
#define KPERM(perm) \
	VPMOVZXBW       perm<>+0(SB), Z20 \
	VPMOVZXBW       perm<>+32(SB), Z21 \
	VPMOVZXBW       perm<>+64(SB), Z22 \
	VPMOVZXBW       perm<>+96(SB), Z23 \
	VPMOVZXBW       perm<>+128(SB), Z24 \
	VPMOVZXBW       perm<>+160(SB), Z25 \
	VPMOVZXBW       perm<>+192(SB), Z26 \
	VPMOVZXBW       perm<>+224(SB), Z27

// func dotQ4KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ4KRowsAVX512(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KCONSTS(kpermk)

q4kgroup:
	ROWS4
	KSTART

q4kblock:
	KPREFETCH3
	KUNPACK
	KMSUM
	Q4KROW(R10, Z4, Z20, Z21, Z22, Z23, Z10, Z8, Z9)
	Q4KROW(R11, Z4, Z24, Z25, Z26, Z27, Z11, Z14, Z17)
	Q4KROW(R12, Z5, Z20, Z21, Z22, Z23, Z12, Z8, Z9)
	Q4KROW(R13, Z5, Z24, Z25, Z26, Z27, Z13, Z14, Z17)
	KREDUCE
	KCOMBINE4

	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $144, R12
	ADDQ $144, R13
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ AX
	JNZ  q4kblock

	KSTORE
	TESTQ CX, CX
	JNZ   q4kgroup
	VZEROUPPER
	RET

// Q5KROW sums row R's isum lanes into ACC: Q4KROW with the fifth bit of
// each quant from qh (bit 2j of qh[l] for value l of sub-block 2j, bit
// 2j+1 for sub-block 2j+1), moved to bit 4 by the pair's matrix
// (Z16-Z19) from qh in both halves of H.
#define Q5KQUANTS(R, j, Z, S, H, M) \
	VBROADCASTI64X4 48+32*j(R), Z \
	VGF2P8AFFINEQB  $0, Z31, Z, Z \
	VGF2P8AFFINEQB  $0, M, H, S \
	VPORQ           S, Z, Z

#define Q5KROW(R, TB, IX0, IX1, IX2, IX3, ACC, Z, S, H) \
	VBROADCASTI64X4 16(R), H \
	Q5KQUANTS(R, 0, Z, S, H, Z16) \
	KPAIR0(0, Z, S, TB, IX0, ACC) \
	Q5KQUANTS(R, 1, Z, S, H, Z17) \
	KPAIR(1, Z, S, TB, IX1, ACC) \
	Q5KQUANTS(R, 2, Z, S, H, Z18) \
	KPAIR(2, Z, S, TB, IX2, ACC) \
	Q5KQUANTS(R, 3, Z, S, H, Z19) \
	KPAIR(3, Z, S, TB, IX3, ACC)

// func dotQ5KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ5KRowsAVX512(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KCONSTS(kpermk)
	VMOVDQU64 kgf<>+64(SB), Z16
	VPSLLQ    $2, Z16, Z17
	VPSLLQ    $4, Z16, Z18
	VPSLLQ    $6, Z16, Z19

q5kgroup:
	ROWS4
	KSTART

q5kblock:
	KPREFETCH3
	KUNPACK
	KMSUM
	Q5KROW(R10, Z4, Z20, Z21, Z22, Z23, Z10, Z8, Z9, Z2)
	Q5KROW(R11, Z4, Z24, Z25, Z26, Z27, Z11, Z14, Z0, Z3)
	Q5KROW(R12, Z5, Z20, Z21, Z22, Z23, Z12, Z8, Z9, Z2)
	Q5KROW(R13, Z5, Z24, Z25, Z26, Z27, Z13, Z14, Z0, Z3)
	KREDUCE
	KCOMBINE4

	ADDQ $176, R10
	ADDQ $176, R11
	ADDQ $176, R12
	ADDQ $176, R13
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ AX
	JNZ  q5kblock

	KSTORE
	TESTQ CX, CX
	JNZ   q5kgroup
	VZEROUPPER
	RET

// Q6_K: per half h of a super-block, ql (64 bytes at 64h) and qh (32
// bytes at 128+32h) give two registers of 64 quants: the low nibbles of
// ql with qh's bits 0-1 (values 0-31) and 2-3 (values 32-63) as bits
// 4-5, then the high nibbles with bits 4-5 and 6-7 (values 64-127): each
// matches 64 consecutive activation quants. Matrices: Z16 low nibbles,
// Z17 high nibbles, Z18 and Z19 qh's bits for each. The sixteen int8
// scales of rows 0 and 1 as words are in Z4, rows 2 and 3 in Z5; the
// −32 offset meets the activation through msum = Σ scale·bsum, and the
// float combine float(d·dₐ)·float(isum − 32·msum) is done for the four
// rows in the lanes of X15.

// Q6KREG builds the 64 quants of one register in Z from QL and QH with
// matrices MQ (nibbles) and MH (qh bits), clobbering S.
#define Q6KREG(QL, QH, MQ, MH, Z, S) \
	VGF2P8AFFINEQB $0, MQ, QL, Z \
	VGF2P8AFFINEQB $0, MH, QH, S \
	VPORQ          S, Z, Z

#define Q6KROW(R, TB, IX0, IX1, IX2, IX3, ACC, Z, S, QL, QH) \
	VMOVDQU64       0(R), QL \
	VBROADCASTI64X4 128(R), QH \
	Q6KREG(QL, QH, Z16, Z18, Z, S) \
	KPAIR0(0, Z, S, TB, IX0, ACC) \
	Q6KREG(QL, QH, Z17, Z19, Z, S) \
	KPAIR(1, Z, S, TB, IX1, ACC) \
	VMOVDQU64       64(R), QL \
	VBROADCASTI64X4 160(R), QH \
	Q6KREG(QL, QH, Z16, Z18, Z, S) \
	KPAIR(2, Z, S, TB, IX2, ACC) \
	Q6KREG(QL, QH, Z17, Z19, Z, S) \
	KPAIR(3, Z, S, TB, IX3, ACC)

// K6SCALES: the scales of the four rows as words (Z4, Z5) and their
// products with the bsums (Z6, Z7: eight dwords per row). Clobbers Z1,
// Y2.
#define K6SCALES \
	VPMOVSXBW       192(R10), Y4 \
	VPMOVSXBW       192(R11), Y2 \
	VINSERTI64X4    $1, Y2, Z4, Z4 \
	VPMOVSXBW       192(R12), Y5 \
	VPMOVSXBW       192(R13), Y2 \
	VINSERTI64X4    $1, Y2, Z5, Z5 \
	VBROADCASTI64X4 (R8), Z1 \
	VPMADDWD        Z1, Z4, Z6 \
	VPMADDWD        Z1, Z5, Z7

// K6COMBINE4: lane r of X15 += float(d·dₐ)·float(isum − 32·msum) for
// row r (isum in X10, msum in X6, d fp16 at 208(R10) etc.).
#define K6COMBINE4 \
	VPSLLD       $5, X6, X6 \
	VPSUBD       X6, X10, X10 \
	VCVTDQ2PS    X10, X10 \
	MOVWLZX      208(R10), R14 \
	VMOVD        R14, X8 \
	VPINSRW      $1, 208(R11), X8, X8 \
	VPINSRW      $2, 208(R12), X8, X8 \
	VPINSRW      $3, 208(R13), X8, X8 \
	VCVTPH2PS    X8, X8 \
	VBROADCASTSS (DX), X9 \
	VMULPS       X9, X8, X8 \
	VMULPS       X10, X8, X8 \
	VADDPS       X8, X15, X15

// K6STORE is KSTORE for sums in lanes 0-3.
#define K6STORE \
	CMPQ    CX, $4 \
	JLT     6(PC) \
	VMOVUPS X15, (R9) \
	ADDQ    $16, R9 \
	LEAQ    (SI)(BX*4), SI \
	SUBQ    $4, CX \
	JMP     5(PC) \
	VMOVSS  X15, (R9) \
	ADDQ    $4, R9 \
	ADDQ    BX, SI \
	DECQ    CX

// func dotQ6KRowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ6KRowsAVX512(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KPERM(kperm6)
	VPBROADCASTQ kgf<>+0(SB), Z16
	VPBROADCASTQ kgf<>+32(SB), Z17
	VMOVDQU64    kgf<>+128(SB), Z18
	VPSLLQ       $4, Z18, Z19

q6kgroup:
	ROWS4
	KSTART

q6kblock:
	KPREFETCH4
	K6SCALES
	Q6KROW(R10, Z4, Z20, Z21, Z22, Z23, Z10, Z8, Z9, Z2, Z3)
	Q6KROW(R11, Z4, Z24, Z25, Z26, Z27, Z11, Z14, Z28, Z29, Z30)
	Q6KROW(R12, Z5, Z20, Z21, Z22, Z23, Z12, Z8, Z9, Z2, Z3)
	Q6KROW(R13, Z5, Z24, Z25, Z26, Z27, Z13, Z14, Z28, Z29, Z30)
	KREDUCE
	K6COMBINE4

	ADDQ $210, R10
	ADDQ $210, R11
	ADDQ $210, R12
	ADDQ $210, R13
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ AX
	JNZ  q6kblock

	K6STORE
	TESTQ CX, CX
	JNZ   q6kgroup
	VZEROUPPER
	RET

// Q4_0, four rows per pass with AVX-512, with the arithmetic of
// dotQ4_0RowsAVX2 (dotq_amd64.s) lane for lane, so the bits are the
// same: per block and row eight int32 lane sums (lane i: values 4i to
// 4i+3 of the block's 32-byte [low nibbles | high nibbles] vector) less
// 8 times the lane's activation sum, converted and accumulated with the
// block's d·dₐ by FMA into eight float lanes, reduced at the end of the
// row in REDUCE8TO's order.
//
// Two blocks go in one register: the 16 nibble bytes of block b in
// 128-bit lanes 0-1 and of block b+1 in lanes 2-3 (one VPERMB from the
// row's bytes), one GF2P8AFFINEQB leaving the low nibbles in
// lanes 0 and 2 and the high nibbles in 1 and 3, so the register
// matches the 64 activation quants of the two blocks as they lie in
// memory. VPDPBUSD adds the products onto the lanes' −8·Σa offsets
// (computed once per pair of blocks for the four rows): the lanes are
// the AVX2 kernel's, its VPMADDUBSW pair sums being exact here too.
// The scales d·dₐ of eight blocks of a row come from one VPERMT2W
// gathering the fp16 d of the blocks (18 bytes apart) from 128 bytes of
// the row, one conversion and one multiply by the eight dₐ; stored on
// the stack, they are broadcast from memory by the FMAs. Blocks beyond
// the last multiple of eight go one at a time.
//
// Registers: Y0-Y3 the four rows' float lanes; Z31 the nibble matrices
// (low, high, low, high per 128 bits); Z30 bytes 0x08; Z29 the VPERMT2W
// index; Z27, Z28 the VPERMB indexes; Z5 the pair's offsets. Stack: d·dₐ of the chunk's eight blocks
// for rows 0-3 at 0, 32, 64, 96.

DATA q40gf<>+0(SB)/8, $0x0102040800000000
DATA q40gf<>+8(SB)/8, $0x0102040800000000
DATA q40gf<>+16(SB)/8, $0x1020408000000000
DATA q40gf<>+24(SB)/8, $0x1020408000000000
// VPERMT2W index (bytes, widened): word 9k is block k's d.
DATA q40gf<>+32(SB)/8, $0x3f362d241b120900
DATA q40gf<>+40(SB)/8, $0 // VPMOVZXBW reads 16 bytes; words 8-15 are unused
GLOBL q40gf<>(SB), RODATA|NOPTR, $48

// VPERMB indexes placing the nibble bytes of two blocks as [b, b, b+1,
// b+1] from a 64-byte window: the window at the pair (pairs 0-2 of a
// chunk), or ending with the chunk (pair 3, so no read passes the
// chunk's 144 bytes).
DATA q40perm<>+0(SB)/8, $0x0908070605040302
DATA q40perm<>+8(SB)/8, $0x11100f0e0d0c0b0a
DATA q40perm<>+16(SB)/8, $0x0908070605040302
DATA q40perm<>+24(SB)/8, $0x11100f0e0d0c0b0a
DATA q40perm<>+32(SB)/8, $0x1b1a191817161514
DATA q40perm<>+40(SB)/8, $0x232221201f1e1d1c
DATA q40perm<>+48(SB)/8, $0x1b1a191817161514
DATA q40perm<>+56(SB)/8, $0x232221201f1e1d1c
DATA q40perm<>+64(SB)/8, $0x2524232221201f1e
DATA q40perm<>+72(SB)/8, $0x2d2c2b2a29282726
DATA q40perm<>+80(SB)/8, $0x2524232221201f1e
DATA q40perm<>+88(SB)/8, $0x2d2c2b2a29282726
DATA q40perm<>+96(SB)/8, $0x3736353433323130
DATA q40perm<>+104(SB)/8, $0x3f3e3d3c3b3a3938
DATA q40perm<>+112(SB)/8, $0x3736353433323130
DATA q40perm<>+120(SB)/8, $0x3f3e3d3c3b3a3938
GLOBL q40perm<>(SB), RODATA|NOPTR, $128

// Q40SCALES stores d·dₐ of the chunk's eight blocks of row R at off(SP).
#define Q40SCALES(R, off) \
	VMOVDQU64 (R), Z4 \
	VPERMT2W  64(R), Z29, Z4 \
	VCVTPH2PS X4, Y4 \
	VMULPS    (DX), Y4, Y4 \
	VMOVUPS   Y4, off(SP)

// Q40ROWPAIR accumulates blocks 2p and 2p+1 of the chunk of row R into
// ACC, their scales at so(SP) and so+4(SP).
#define Q40ROWPAIR(R, woff, IX, aoff, so, ACC) \
	VPERMB           woff(R), IX, Z7 \
	VGF2P8AFFINEQB   $0, Z31, Z7, Z7 \
	VMOVDQA64        Z5, Z8 \
	VPDPBUSD         aoff(DI), Z7, Z8 \
	VCVTDQ2PS        Z8, Z8 \
	VFMADD231PS.BCST so(SP), Y8, ACC \
	VEXTRACTF64X4    $1, Z8, Y8 \
	VFMADD231PS.BCST so+4(SP), Y8, ACC

// Q40PAIR: blocks 2p and 2p+1 of the chunk for the four rows.
#define Q40PAIR(woff, IX, aoff, so) \
	VPXOR     Y5, Y5, Y5 \
	VPDPBUSD  aoff(DI), Z30, Z5 \
	VPXOR     Y6, Y6, Y6 \
	VPSUBD    Z5, Z6, Z5 \
	Q40ROWPAIR(R10, woff, IX, aoff, so, Y0) \
	Q40ROWPAIR(R11, woff, IX, aoff, so+32, Y1) \
	Q40ROWPAIR(R12, woff, IX, aoff, so+64, Y2) \
	Q40ROWPAIR(R13, woff, IX, aoff, so+96, Y3)

// Q40ONE accumulates the block at R into ACC (offsets in Y5).
#define Q40ONE(R, ACC) \
	VBROADCASTI32X4 2(R), Y7 \
	VGF2P8AFFINEQB  $0, Y31, Y7, Y7 \
	VMOVDQA         Y5, Y8 \
	VPDPBUSD        (DI), Y7, Y8 \
	VCVTDQ2PS       Y8, Y8 \
	VCVTPH2PS       (R), X9 \
	VMULSS          (DX), X9, X9 \
	VBROADCASTSS    X9, Y9 \
	VFMADD231PS     Y9, Y8, ACC

// R8REDUCE adds the eight float lanes of Y into the low lane of X, as
// REDUCE8TO in dotq_amd64.s.
#define R8REDUCE(Y, X) \
	VEXTRACTF128 $1, Y, X4 \
	VADDPS       X4, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// func dotQ4_0RowsAVX512(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)
TEXT ·dotQ4_0RowsAVX512(SB), NOSPLIT, $128-56
	MOVQ         w+0(FP), SI
	MOVQ         rowBytes+8(FP), BX
	MOVQ         n+16(FP), CX
	MOVQ         out+48(FP), R9
	VBROADCASTI32X4 q40gf<>+0(SB), Z31
	VINSERTI32X4 $1, q40gf<>+16(SB), Z31, Z31
	VINSERTI32X4 $3, q40gf<>+16(SB), Z31, Z31
	VPMOVZXBW    q40gf<>+32(SB), Y29
	MOVL         $0x08080808, AX
	VPBROADCASTD AX, Z30
	VMOVDQU64    q40perm<>+0(SB), Z28
	VMOVDQU64    q40perm<>+64(SB), Z27

q40group:
	ROWS4
	MOVQ   q+24(FP), DI
	MOVQ   d+32(FP), DX
	MOVQ   nb+40(FP), AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ   AX, $8
	JLT    q40single

q40chunk:
	KPREFETCH3
	Q40SCALES(R10, 0)
	Q40SCALES(R11, 32)
	Q40SCALES(R12, 64)
	Q40SCALES(R13, 96)
	Q40PAIR(0, Z28, 0, 0)
	Q40PAIR(36, Z28, 64, 8)
	Q40PAIR(72, Z28, 128, 16)
	Q40PAIR(80, Z27, 192, 24)
	ADDQ $144, R10
	ADDQ $144, R11
	ADDQ $144, R12
	ADDQ $144, R13
	ADDQ $256, DI
	ADDQ $32, DX
	SUBQ $8, AX
	CMPQ AX, $8
	JGE  q40chunk

q40single:
	TESTQ AX, AX
	JZ    q40end

q40one:
	VPXOR    Y5, Y5, Y5
	VPDPBUSD (DI), Y30, Y5
	VPXOR    Y6, Y6, Y6
	VPSUBD   Y5, Y6, Y5
	Q40ONE(R10, Y0)
	Q40ONE(R11, Y1)
	Q40ONE(R12, Y2)
	Q40ONE(R13, Y3)
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $18, R12
	ADDQ $18, R13
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ AX
	JNZ  q40one

q40end:
	R8REDUCE(Y0, X0)
	CMPQ CX, $4
	JLT  q40store1
	R8REDUCE(Y1, X1)
	R8REDUCE(Y2, X2)
	R8REDUCE(Y3, X3)
	VMOVSS X0, 0(R9)
	VMOVSS X1, 4(R9)
	VMOVSS X2, 8(R9)
	VMOVSS X3, 12(R9)
	ADDQ   $16, R9
	LEAQ   (SI)(BX*4), SI
	SUBQ   $4, CX
	JNZ    q40group
	VZEROUPPER
	RET

q40store1:
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q40group
	VZEROUPPER
	RET
