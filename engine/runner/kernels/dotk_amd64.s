//go:build !purego

#include "textflag.h"
#include "rows_amd64.h"

// K-quant rows against the 256-value activation form, with AVX2. Per
// row and super-block the integer sums (exact) are combined in float in
// the order of the portable kernels (kCombine), so both paths, and the
// AVX-512 kernels, give the same bits: sum + (float(d·dₐ)·float(isum) −
// float(dmin·dₐ)·float(msum)).
//
// Decode streams every weight from memory once, so these kernels are
// built to keep up with memory rather than to minimise instructions per
// row:
//
//   - four rows go per pass against one activation (the last n mod 4
//     one at a time, with all four row pointers on that row, as
//     dotk512_amd64.s does), so the scale unpacking, the reductions
//     and the float combine run on four rows at once: the packed 6-bit
//     scales of two rows unpack in one register, the four rows' int32
//     lane sums and msums reduce to the lanes of one register each, and
//     the combine works lane by lane with kCombine's roundings;
//   - nibbles times activation quants go through VPMADDUBSW (unsigned
//     weights, signed activations; the pair sums stay far below 2^15,
//     2·63·128 at most, for Q6_K), then VPMADDWD applies the sub-block
//     scales as int16, each picked into every word of a register by one
//     VPSHUFB from the row's unpacked scales: no scale goes through a
//     general register or the stack;
//   - each row's lines are prefetched far ahead (KPREFETCH), which is
//     what lets one core stream at memory speed.
//
// Registers: Y14 bytes 0x0F; Y10-Y13 the four rows' isum lanes; Y7 the
// four rows' sums (lanes 0, 2, 4, 6; Q6_K lanes 0-3); Y15 the current
// row's scales in both lanes. GP: SI the group's first row, BX
// rowBytes, CX rows left, R9 out, R10-R13 the four rows' current
// super-block, DI the activation quants, DX dₐ, R8 the bsums, AX
// super-blocks left.

// VPSHUFB masks for Q4_K and Q5_K: mask k (32 bytes at 32k) makes every
// word of both lanes the zero-extended scale byte k of the lane.
DATA ksc4<>+0(SB)/8, $0x8000800080008000
DATA ksc4<>+8(SB)/8, $0x8000800080008000
DATA ksc4<>+16(SB)/8, $0x8000800080008000
DATA ksc4<>+24(SB)/8, $0x8000800080008000
DATA ksc4<>+32(SB)/8, $0x8001800180018001
DATA ksc4<>+40(SB)/8, $0x8001800180018001
DATA ksc4<>+48(SB)/8, $0x8001800180018001
DATA ksc4<>+56(SB)/8, $0x8001800180018001
DATA ksc4<>+64(SB)/8, $0x8002800280028002
DATA ksc4<>+72(SB)/8, $0x8002800280028002
DATA ksc4<>+80(SB)/8, $0x8002800280028002
DATA ksc4<>+88(SB)/8, $0x8002800280028002
DATA ksc4<>+96(SB)/8, $0x8003800380038003
DATA ksc4<>+104(SB)/8, $0x8003800380038003
DATA ksc4<>+112(SB)/8, $0x8003800380038003
DATA ksc4<>+120(SB)/8, $0x8003800380038003
DATA ksc4<>+128(SB)/8, $0x8004800480048004
DATA ksc4<>+136(SB)/8, $0x8004800480048004
DATA ksc4<>+144(SB)/8, $0x8004800480048004
DATA ksc4<>+152(SB)/8, $0x8004800480048004
DATA ksc4<>+160(SB)/8, $0x8005800580058005
DATA ksc4<>+168(SB)/8, $0x8005800580058005
DATA ksc4<>+176(SB)/8, $0x8005800580058005
DATA ksc4<>+184(SB)/8, $0x8005800580058005
DATA ksc4<>+192(SB)/8, $0x8006800680068006
DATA ksc4<>+200(SB)/8, $0x8006800680068006
DATA ksc4<>+208(SB)/8, $0x8006800680068006
DATA ksc4<>+216(SB)/8, $0x8006800680068006
DATA ksc4<>+224(SB)/8, $0x8007800780078007
DATA ksc4<>+232(SB)/8, $0x8007800780078007
DATA ksc4<>+240(SB)/8, $0x8007800780078007
DATA ksc4<>+248(SB)/8, $0x8007800780078007
GLOBL ksc4<>(SB), RODATA|NOPTR, $256
// VPSHUFB mask widening the eight mins (bytes 8-15 of a lane) to words.
DATA kmin4<>+0(SB)/8, $0x800b800a80098008
DATA kmin4<>+8(SB)/8, $0x800f800e800d800c
DATA kmin4<>+16(SB)/8, $0x800b800a80098008
DATA kmin4<>+24(SB)/8, $0x800f800e800d800c
GLOBL kmin4<>(SB), RODATA|NOPTR, $32
// VPSHUFB masks for Q6_K: mask t (32 bytes at 32t) puts word 2t of
// the lane in every word of the low lane and word 2t+1 in the high.
DATA ksc6<>+0(SB)/8, $0x0100010001000100
DATA ksc6<>+8(SB)/8, $0x0100010001000100
DATA ksc6<>+16(SB)/8, $0x0302030203020302
DATA ksc6<>+24(SB)/8, $0x0302030203020302
DATA ksc6<>+32(SB)/8, $0x0504050405040504
DATA ksc6<>+40(SB)/8, $0x0504050405040504
DATA ksc6<>+48(SB)/8, $0x0706070607060706
DATA ksc6<>+56(SB)/8, $0x0706070607060706
DATA ksc6<>+64(SB)/8, $0x0908090809080908
DATA ksc6<>+72(SB)/8, $0x0908090809080908
DATA ksc6<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA ksc6<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA ksc6<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA ksc6<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA ksc6<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA ksc6<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL ksc6<>(SB), RODATA|NOPTR, $128
// Scale unpacking per 128-bit lane (as KUNPACK in dotk512_amd64.s):
// the shifts, then the low and high masks.
DATA kunp2<>+0(SB)/4, $0x00000000
DATA kunp2<>+4(SB)/4, $0x00000000
DATA kunp2<>+8(SB)/4, $0x00000000
DATA kunp2<>+12(SB)/4, $0x00000004
DATA kunp2<>+16(SB)/4, $0x00000000
DATA kunp2<>+20(SB)/4, $0x00000000
DATA kunp2<>+24(SB)/4, $0x00000000
DATA kunp2<>+28(SB)/4, $0x00000004
DATA kunp2<>+32(SB)/4, $0x3f3f3f3f
DATA kunp2<>+36(SB)/4, $0x0f0f0f0f
DATA kunp2<>+40(SB)/4, $0x3f3f3f3f
DATA kunp2<>+44(SB)/4, $0x0f0f0f0f
DATA kunp2<>+48(SB)/4, $0x3f3f3f3f
DATA kunp2<>+52(SB)/4, $0x0f0f0f0f
DATA kunp2<>+56(SB)/4, $0x3f3f3f3f
DATA kunp2<>+60(SB)/4, $0x0f0f0f0f
DATA kunp2<>+64(SB)/4, $0x00000000
DATA kunp2<>+68(SB)/4, $0x30303030
DATA kunp2<>+72(SB)/4, $0x00000000
DATA kunp2<>+76(SB)/4, $0x30303030
DATA kunp2<>+80(SB)/4, $0x00000000
DATA kunp2<>+84(SB)/4, $0x30303030
DATA kunp2<>+88(SB)/4, $0x00000000
DATA kunp2<>+92(SB)/4, $0x30303030
GLOBL kunp2<>(SB), RODATA|NOPTR, $96

DATA k10<>+0(SB)/8, $0x1010101010101010
DATA k10<>+8(SB)/8, $0x1010101010101010
DATA k10<>+16(SB)/8, $0x1010101010101010
DATA k10<>+24(SB)/8, $0x1010101010101010
GLOBL k10<>(SB), RODATA|NOPTR, $32

// KPREFETCH asks for one cache line of each row far ahead: into L1 at
// near bytes, into L2 at far bytes (the distances of dotk512_amd64.s,
// measured there: a prefetch a few super-blocks ahead leaves too few
// lines in flight on a machine with long memory latency, and the
// hardware prefetchers stop at each 4 KiB page).
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
// advances by per super-block (144 to 192 bytes, up to 256).
#define KPREFETCH3 \
	KPREFETCH(4608, 13824) \
	KPREFETCH(4672, 13888) \
	KPREFETCH(4736, 13952)

#define KPREFETCH4 \
	KPREFETCH3 \
	KPREFETCH(4800, 14016)

// KSTART loads the activation pointers and zeroes the sums.
#define KSTART \
	MOVQ   q+24(FP), DI \
	MOVQ   d+32(FP), DX \
	MOVQ   bs+40(FP), R8 \
	MOVQ   nb+48(FP), AX \
	VXORPS Y7, Y7, Y7

// KUNPACK2 unpacks the packed 6-bit scales and mins (12 bytes at 4(RA)
// and 4(RB), ggml's utmp/kmask trick) into the bytes of D: per lane
// (RA's low, RB's high) eight scales then eight mins. Clobbers Y2, Y3.
#define KUNPACK2(RA, RB, D) \
	VMOVDQU     4(RA), X2 \
	VINSERTI128 $1, 4(RB), Y2, Y2 \
	VPSHUFD     $0x98, Y2, Y3 \
	VPSRLVD     kunp2<>+0(SB), Y3, Y3 \
	VPAND       kunp2<>+32(SB), Y3, Y3 \
	VPSHUFD     $0x50, Y2, Y2 \
	VPSRLD      $2, Y2, Y2 \
	VPAND       kunp2<>+64(SB), Y2, Y2 \
	VPOR        Y2, Y3, D

// KSCALE puts sub-block k's scale (a byte of Y15's lanes) in every word
// of S.
#define KSCALE(k, S) \
	VPSHUFB ksc4<>+32*(k)(SB), Y15, S

// KACC adds the pair's two products (Y1, Y0) to ACC; the first pair
// sets it.
#define KACC0(ACC) \
	VPADDD Y1, Y0, ACC

#define KACC(ACC) \
	VPADDD Y1, Y0, Y0 \
	VPADDD Y0, ACC, ACC

// Q4KPAIR: pair j of row R (32 bytes at 16+32j: low nibbles sub-block
// 2j, high nibbles 2j+1) against the activation at 64j(DI), scaled,
// into Y1 and Y0.
#define Q4KPAIR(R, j) \
	VMOVDQU    16+32*j(R), Y0 \
	VPAND      Y14, Y0, Y1 \
	VPSRLW     $4, Y0, Y0 \
	VPAND      Y14, Y0, Y0 \
	VPMADDUBSW 64*j(DI), Y1, Y1 \
	VPMADDUBSW 64*j+32(DI), Y0, Y0 \
	KSCALE(2*j, Y2) \
	KSCALE(2*j+1, Y3) \
	VPMADDWD   Y2, Y1, Y1 \
	VPMADDWD   Y3, Y0, Y0

// Q4KROW sums row R's isum lanes into ACC, its scales in the lane of
// SC that VPERMQ's P selects (0x44 low, 0xEE high).
#define Q4KROW(R, SC, P, ACC) \
	VPERMQ $P, SC, Y15 \
	Q4KPAIR(R, 0) \
	KACC0(ACC) \
	Q4KPAIR(R, 1) \
	KACC(ACC) \
	Q4KPAIR(R, 2) \
	KACC(ACC) \
	Q4KPAIR(R, 3) \
	KACC(ACC)

// KMSUM: the four rows' msums (mins · the sub-blocks' activation sums,
// pairs of bsums) into X6, row r in lane r; mins in bytes 8-15 of the
// lanes of Y4 (rows 0, 1) and Y5 (rows 2, 3). Clobbers Y0, Y1, Y8.
#define KMSUM \
	VMOVDQU      (R8), Y0 \
	VEXTRACTI128 $1, Y0, X1 \
	VPHADDW      X1, X0, X0 \
	VINSERTI128  $1, X0, Y0, Y0 \
	VPSHUFB      kmin4<>(SB), Y4, Y1 \
	VPMADDWD     Y0, Y1, Y6 \
	VPSHUFB      kmin4<>(SB), Y5, Y1 \
	VPMADDWD     Y0, Y1, Y8 \
	VPHADDD      Y8, Y6, Y6 \
	VPHADDD      Y6, Y6, Y6 \
	VEXTRACTI128 $1, Y6, X8 \
	VPUNPCKLDQ   X8, X6, X6

// KREDUCE: the isum lanes of the four rows (Y10-Y13) into X10, row r in
// lane r. Clobbers X11.
#define KREDUCE \
	VPHADDD      Y11, Y10, Y10 \
	VPHADDD      Y13, Y12, Y12 \
	VPHADDD      Y12, Y10, Y10 \
	VEXTRACTI128 $1, Y10, X11 \
	VPADDD       X11, X10, X10

// KCOMBINE4: for each row r (lane r of X10 isum, X6 msum; d and dmin
// fp16 at (R10) etc.), lane 2r of Y7 += float(d·dₐ)·float(isum) −
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
	VADDPS       Y8, Y7, Y7

// KNEXT advances the four rows and the activation by one super-block of
// bb bytes.
#define KNEXT(bb) \
	ADDQ $bb, R10 \
	ADDQ $bb, R11 \
	ADDQ $bb, R12 \
	ADDQ $bb, R13 \
	ADDQ $256, DI \
	ADDQ $4, DX \
	ADDQ $32, R8

// KCONST0F sets Y14 to bytes 0x0F.
#define KCONST0F \
	MOVQ         $0x0f0f0f0f0f0f0f0f, R14 \
	MOVQ         R14, X14 \
	VPBROADCASTQ X14, Y14

// func dotQ4KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ4KRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KCONST0F

q4kgroup:
	ROWS4
	KSTART

q4kblock:
	KPREFETCH3
	KUNPACK2(R10, R11, Y4)
	KUNPACK2(R12, R13, Y5)
	Q4KROW(R10, Y4, 0x44, Y10)
	Q4KROW(R11, Y4, 0xEE, Y11)
	Q4KROW(R12, Y5, 0x44, Y12)
	Q4KROW(R13, Y5, 0xEE, Y13)
	KMSUM
	KREDUCE
	KCOMBINE4
	KNEXT(144)
	DECQ AX
	JNZ  q4kblock

	CMPQ CX, $4
	JLT  q4kone
	VEXTRACTF128 $1, Y7, X8
	VSHUFPS      $0x88, X8, X7, X7
	VMOVUPS      X7, (R9)
	ADDQ         $16, R9
	LEAQ         (SI)(BX*4), SI
	SUBQ         $4, CX
	JNZ          q4kgroup
	VZEROUPPER
	RET

q4kone:
	VMOVSS X7, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q4kgroup
	VZEROUPPER
	RET

// Q5KPAIR is Q4KPAIR with the fifth bits: Y2 and Y3 hold qh shifted so
// that bits 2j and 2j+1 sit at bit 4 of each byte (a 16-bit shift of at
// most four places left or three right keeps bit 4 of each byte from
// its own byte), masked here with 0x10.
#define Q5KPAIR(R, j) \
	VMOVDQU    48+32*j(R), Y0 \
	VPAND      Y14, Y0, Y1 \
	VPSRLW     $4, Y0, Y0 \
	VPAND      Y14, Y0, Y0 \
	VPAND      k10<>(SB), Y2, Y2 \
	VPOR       Y2, Y1, Y1 \
	VPAND      k10<>(SB), Y3, Y3 \
	VPOR       Y3, Y0, Y0 \
	VPMADDUBSW 64*j(DI), Y1, Y1 \
	VPMADDUBSW 64*j+32(DI), Y0, Y0 \
	KSCALE(2*j, Y2) \
	KSCALE(2*j+1, Y3) \
	VPMADDWD   Y2, Y1, Y1 \
	VPMADDWD   Y3, Y0, Y0

// Q5KROW is Q4KROW for Q5_K, qh (32 bytes at 16(R)) in Y6.
#define Q5KROW(R, SC, P, ACC) \
	VPERMQ  $P, SC, Y15 \
	VMOVDQU 16(R), Y6 \
	VPSLLW  $4, Y6, Y2 \
	VPSLLW  $3, Y6, Y3 \
	Q5KPAIR(R, 0) \
	KACC0(ACC) \
	VPSLLW  $2, Y6, Y2 \
	VPSLLW  $1, Y6, Y3 \
	Q5KPAIR(R, 1) \
	KACC(ACC) \
	VMOVDQA Y6, Y2 \
	VPSRLW  $1, Y6, Y3 \
	Q5KPAIR(R, 2) \
	KACC(ACC) \
	VPSRLW  $2, Y6, Y2 \
	VPSRLW  $3, Y6, Y3 \
	Q5KPAIR(R, 3) \
	KACC(ACC)

// func dotQ5KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ5KRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KCONST0F

q5kgroup:
	ROWS4
	KSTART

q5kblock:
	KPREFETCH3
	KUNPACK2(R10, R11, Y4)
	KUNPACK2(R12, R13, Y5)
	Q5KROW(R10, Y4, 0x44, Y10)
	Q5KROW(R11, Y4, 0xEE, Y11)
	Q5KROW(R12, Y5, 0x44, Y12)
	Q5KROW(R13, Y5, 0xEE, Y13)
	KMSUM
	KREDUCE
	KCOMBINE4
	KNEXT(176)
	DECQ AX
	JNZ  q5kblock

	CMPQ CX, $4
	JLT  q5kone
	VEXTRACTF128 $1, Y7, X8
	VSHUFPS      $0x88, X8, X7, X7
	VMOVUPS      X7, (R9)
	ADDQ         $16, R9
	LEAQ         (SI)(BX*4), SI
	SUBQ         $4, CX
	JNZ          q5kgroup
	VZEROUPPER
	RET

q5kone:
	VMOVSS X7, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q5kgroup
	VZEROUPPER
	RET

// Q6_K: per half h of a super-block, ql (64 bytes at 64h) and qh (32
// bytes at 128+32h) give four registers of 32 quants: ql's low nibbles
// of bytes 0-31 with qh's bits 0-1 as bits 4-5 (values 0-31 of the
// half), of bytes 32-63 with bits 2-3, then the high nibbles with bits
// 4-5 and 6-7; each register's low lane is one 16-value sub-block, its
// high lane the next. The row's sixteen int8 scales as words: Y15 words
// 0-7 in both lanes, Y5 words 8-15. The −32 offset meets the activation
// through msum = Σ scale·bsum, subtracted (times 32) from the isum
// lanes, exact as the portable kernel's int32 isum − 32·msum is; the
// float combine float(d·dₐ)·float(isum − 32·msum) is done for the four
// rows in the lanes of X7. Y4 holds bytes 0x30.

// Q6KQ: one register of quants (nibbles in Y3, qh's bits moved to bits
// 4-5 in Y8 before the mask) against the activation at aoff(DI), the
// scales of mask t from SC, onto ACC.
#define Q6KQ(aoff, SC, t, ACC) \
	VPAND      Y4, Y8, Y8 \
	VPOR       Y8, Y3, Y3 \
	VPMADDUBSW aoff(DI), Y3, Y3 \
	VPSHUFB    ksc6<>+32*t(SB), SC, Y8 \
	VPMADDWD   Y8, Y3, Y3 \
	VPADDD     Y3, ACC, ACC

#define Q6KHALF(R, h, SC, ACC) \
	VMOVDQU 64*h(R), Y0 \
	VMOVDQU 64*h+32(R), Y1 \
	VMOVDQU 128+32*h(R), Y2 \
	VPAND   Y14, Y0, Y3 \
	VPSLLW  $4, Y2, Y8 \
	Q6KQ(128*h, SC, 0, ACC) \
	VPAND   Y14, Y1, Y3 \
	VPSLLW  $2, Y2, Y8 \
	Q6KQ(128*h+32, SC, 1, ACC) \
	VPSRLW  $4, Y0, Y3 \
	VPAND   Y14, Y3, Y3 \
	VMOVDQA Y2, Y8 \
	Q6KQ(128*h+64, SC, 2, ACC) \
	VPSRLW  $4, Y1, Y3 \
	VPAND   Y14, Y3, Y3 \
	VPSRLW  $2, Y2, Y8 \
	Q6KQ(128*h+96, SC, 3, ACC)

// Q6KROW sets ACC to row R's isum − 32·msum lanes.
#define Q6KROW(R, ACC) \
	VPMOVSXBW 192(R), Y9 \
	VPMADDWD  (R8), Y9, ACC \
	VPSLLD    $5, ACC, ACC \
	VPXOR     Y0, Y0, Y0 \
	VPSUBD    ACC, Y0, ACC \
	VPERMQ    $0x44, Y9, Y15 \
	VPERMQ    $0xEE, Y9, Y5 \
	Q6KHALF(R, 0, Y15, ACC) \
	Q6KHALF(R, 1, Y5, ACC)

// func dotQ6KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ6KRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	KCONST0F
	MOVQ         $0x3030303030303030, R14
	MOVQ         R14, X4
	VPBROADCASTQ X4, Y4

q6kgroup:
	ROWS4
	KSTART

q6kblock:
	KPREFETCH4
	Q6KROW(R10, Y10)
	Q6KROW(R11, Y11)
	Q6KROW(R12, Y12)
	Q6KROW(R13, Y13)
	KREDUCE

	// lane r of X7 += float(d·dₐ)·float(isum − 32·msum) for row r
	VCVTDQ2PS    X10, X10
	MOVWLZX      208(R10), R14
	VMOVD        R14, X8
	VPINSRW      $1, 208(R11), X8, X8
	VPINSRW      $2, 208(R12), X8, X8
	VPINSRW      $3, 208(R13), X8, X8
	VCVTPH2PS    X8, X8
	VBROADCASTSS (DX), X9
	VMULPS       X9, X8, X8
	VMULPS       X10, X8, X8
	VADDPS       X8, X7, X7

	KNEXT(210)
	DECQ AX
	JNZ  q6kblock

	CMPQ    CX, $4
	JLT     q6kone
	VMOVUPS X7, (R9)
	ADDQ    $16, R9
	LEAQ    (SI)(BX*4), SI
	SUBQ    $4, CX
	JNZ     q6kgroup
	VZEROUPPER
	RET

q6kone:
	VMOVSS X7, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q6kgroup
	VZEROUPPER
	RET
