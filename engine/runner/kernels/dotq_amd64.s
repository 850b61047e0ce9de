//go:build !purego

#include "textflag.h"

// REDUCE8 adds the eight float lanes of Y0 into the low lane of X0, in
// the same order as the Q8_0 kernel.
#define REDUCE8 \
	VEXTRACTF128 $1, Y0, X4 \
	VADDPS       X4, X0, X0 \
	VHADDPS      X0, X0, X0 \
	VHADDPS      X0, X0, X0

// Q4_0 block: fp16 d, then 16 bytes whose low nibbles are values 0-15
// and high nibbles values 16-31, each q − 8. The nibbles are spread to
// 32 bytes (low lane: low nibbles, high lane: high nibbles, matching the
// activation's order: the 16 bytes broadcast to both lanes, the high
// lane's dwords shifted right by 4, then masked) and multiplied unsigned
// by the signed activation quants (VPMADDUBSW: pair sums within
// ±2·15·128), widened to int32 by VPMADDWD against ones; the offset
// comes off per int32 lane as 8 times the lane's activation sum,
// computed once per block for all rows, so the integer sums are exact.
// They are converted and accumulated with d·dₐ by FMA. Rows go four at a
// time sharing the activation, then one at a time; a row's arithmetic is
// the same either way, so its value does not depend on its position.
//
// Decode streams the weights from memory once, and these loops are
// bound by their instruction count as much as by memory: the four-row
// loop takes two blocks per pass and asks, once a pass, for one line of
// each row far ahead (Q32PREFETCH), as the K-quant kernels do.
//
// Registers: Y4 activation quants, Y5 8·(lane sums of a), X9 dₐ,
// Y12 the spreading shifts, Y13 bytes 0x08, Y14 bytes 0x0F, Y15 int16
// ones.

// q32shift: the dword shifts that leave a block's low nibbles in the
// low lane and its high nibbles in the high lane (before the mask).
DATA q32shift<>+0(SB)/8, $0
DATA q32shift<>+8(SB)/8, $0
DATA q32shift<>+16(SB)/8, $0x0000000400000004
DATA q32shift<>+24(SB)/8, $0x0000000400000004
GLOBL q32shift<>(SB), RODATA|NOPTR, $32

// Q32PREFETCH asks for one line of each of the four rows (R10, R10+BX,
// R11, R11+BX) 4608 bytes ahead into L1 and 13824 ahead into L2: the
// distances of the K-quant kernels (dotk_amd64.s, dotk512_amd64.s).
// Once per pass of two blocks: a row advances by at most 48 bytes, so
// no line is missed.
#define Q32PREFETCH \
	PREFETCHT0 4608(R10) \
	PREFETCHT0 4608(R10)(BX*1) \
	PREFETCHT0 4608(R11) \
	PREFETCHT0 4608(R11)(BX*1) \
	PREFETCHT1 13824(R10) \
	PREFETCHT1 13824(R10)(BX*1) \
	PREFETCHT1 13824(R11) \
	PREFETCHT1 13824(R11)(BX*1)

// Q40SUM sets Y6 to the eight float lanes of the block whose nibbles
// are at Q: its integer lane sums against the activation (Y4), less the
// lanes' 8·Σa (Y5).
#define Q40SUM(Q) \
	VBROADCASTI128 Q, Y6 \
	VPSRLVD        Y12, Y6, Y6 \
	VPAND          Y14, Y6, Y6 \
	VPMADDUBSW     Y4, Y6, Y6 \
	VPMADDWD       Y15, Y6, Y6 \
	VPSUBD         Y5, Y6, Y6 \
	VCVTDQ2PS      Y6, Y6

// Q40ROW accumulates into ACC one block of the row whose block starts at
// H (scale) with its nibbles at Q. Clobbers Y6, Y8.
#define Q40ROW(Q, H, ACC) \
	Q40SUM(Q) \
	VCVTPH2PS      H, X8 \
	VMULSS         X9, X8, X8 \
	VBROADCASTSS   X8, Y8 \
	VFMADD231PS    Y8, Y6, ACC

// Q40ACT loads block AX/4+k of the activation.
#define Q40ACT(k) \
	VMOVDQU    (32*k)(DI)(AX*8), Y4 \
	VPMADDUBSW Y4, Y13, Y5 \
	VPMADDWD   Y15, Y5, Y5 \
	VMOVSS     (4*k)(DX)(AX*1), X9

// SCALES4 stores at (R12) the four rows' d·dₐ of their block at offset
// OFF, dₐ that of block AX/4+k: their four fp16 d gathered into one
// register's words (VMOVD brings the first d's block neighbour along,
// which the first VPINSRW replaces), converted and multiplied by dₐ at
// once, where each row did so apart (VCVTPH2PS, VMULSS, VBROADCASTSS: the
// same roundings, lane for lane). Each row then broadcasts its product
// from memory, a load rather than a shuffle: over four rows that is
// seven vector multiplies and shuffles fewer on ports the integer sums
// need. Clobbers X8, X10.
#define SCALES4(OFF, k) \
	VMOVD        OFF(R10), X8 \
	VPINSRW      $1, OFF(R10)(BX*1), X8, X8 \
	VPINSRW      $2, OFF(R11), X8, X8 \
	VPINSRW      $3, OFF(R11)(BX*1), X8, X8 \
	VCVTPH2PS    X8, X8 \
	VBROADCASTSS (4*k)(DX)(AX*1), X10 \
	VMULPS       X10, X8, X8 \
	VMOVUPS      X8, (R12)

// Q40ROW4 is Q40ROW with row r's d·dₐ at 4r(R12). Clobbers Y6, Y8.
#define Q40ROW4(Q, r, ACC) \
	Q40SUM(Q) \
	VBROADCASTSS   (4*r)(R12), Y8 \
	VFMADD231PS    Y8, Y6, ACC

// Q40BLOCK4 accumulates block k (from R10, R11) of the four rows.
#define Q40BLOCK4(k) \
	VMOVDQU    (32*k)(DI)(AX*8), Y4 \
	VPMADDUBSW Y4, Y13, Y5 \
	VPMADDWD   Y15, Y5, Y5 \
	SCALES4(18*k, k) \
	Q40ROW4(2+18*k(R10), 0, Y0) \
	Q40ROW4(2+18*k(R10)(BX*1), 1, Y1) \
	Q40ROW4(2+18*k(R11), 2, Y2) \
	Q40ROW4(2+18*k(R11)(BX*1), 3, Y3)

// REDUCE8TO adds the eight float lanes of Y into the low lane of X.
#define REDUCE8TO(Y, X) \
	VEXTRACTF128 $1, Y, X4 \
	VADDPS       X4, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// func dotQ4_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)
TEXT ·dotQ4_0RowsAVX2(SB), NOSPLIT, $32-56
	LEAQ 15(SP), R12
	ANDQ $-16, R12 // SCALES4's 16 bytes, aligned
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), BX
	MOVQ n+16(FP), CX
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ nb+40(FP), R8
	MOVQ out+48(FP), R9
	SHLQ $2, R8 // AX steps 4 per block: d at (DX)(AX*1), q at (DI)(AX*8)
	LEAQ -4(R8), R13 // below it, two blocks are left
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x0808080808080808, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15
	VMOVDQU  q32shift<>(SB), Y12

	CMPQ CX, $4
	JLT  q40tail

q40group:
	MOVQ SI, R10
	LEAQ (SI)(BX*2), R11
	XORQ AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ AX, R13
	JGE  q40glast

q40gpair:
	Q32PREFETCH
	Q40BLOCK4(0)
	Q40BLOCK4(1)
	ADDQ $36, R10
	ADDQ $36, R11
	ADDQ $8, AX
	CMPQ AX, R13
	JLT  q40gpair

q40glast:
	CMPQ AX, R8
	JGE  q40gdone
	Q40BLOCK4(0)

q40gdone:
	REDUCE8TO(Y0, X0)
	REDUCE8TO(Y1, X1)
	REDUCE8TO(Y2, X2)
	REDUCE8TO(Y3, X3)
	VMOVSS X0, 0(R9)
	VMOVSS X1, 4(R9)
	VMOVSS X2, 8(R9)
	VMOVSS X3, 12(R9)

	LEAQ (SI)(BX*4), SI
	ADDQ $16, R9
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  q40group

q40tail:
	TESTQ CX, CX
	JZ    q40done

q40row:
	MOVQ SI, R10
	XORQ AX, AX
	VXORPS Y0, Y0, Y0

q40rblock:
	Q40ACT(0)
	Q40ROW(2(R10), (R10), Y0)
	ADDQ $18, R10
	ADDQ $4, AX
	CMPQ AX, R8
	JLT  q40rblock

	REDUCE8TO(Y0, X0)
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   BX, SI
	DECQ   CX
	JNZ    q40row

q40done:
	VZEROUPPER
	RET

// func dotF16RowsAVX2(w *byte, rowBytes, n int, x *float32, cols int, out *float32)
// cols is a positive multiple of 32. The row is prefetched 2 KiB ahead
// into L1 and 8 KiB ahead into L2: over 192 MiB of 2048- and 5632-column
// rows on one core that streamed 28 and 23 GB/s against a plain read
// loop's 33 and 25, where 512 bytes ahead in L1 alone streamed 24 and 17
// (slower than no prefetch at all).
TEXT ·dotF16RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+40(FP), R9

f16row:
	MOVQ SI, R10
	MOVQ x+24(FP), DI
	MOVQ cols+32(FP), BX
	SHRQ $5, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

f16loop:
	PREFETCHT0  2048(R10)
	PREFETCHT1  8192(R10)
	VCVTPH2PS   (R10), Y4
	VCVTPH2PS   16(R10), Y5
	VCVTPH2PS   32(R10), Y6
	VCVTPH2PS   48(R10), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, R10
	ADDQ        $128, DI
	DECQ        BX
	JNZ         f16loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	REDUCE8
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    f16row
	VZEROUPPER
	RET

// func dotBF16RowsAVX2(w *byte, rowBytes, n int, x *float32, cols int, out *float32)
// cols is a positive multiple of 32. A bfloat16 is the top half of a
// float32: zero-extend to 32 bits and shift left by 16.
TEXT ·dotBF16RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+40(FP), R9

bf16row:
	MOVQ SI, R10
	MOVQ x+24(FP), DI
	MOVQ cols+32(FP), BX
	SHRQ $5, BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bf16loop:
	PREFETCHT0  2048(R10)
	PREFETCHT1  8192(R10)
	VPMOVZXWD   (R10), Y4
	VPMOVZXWD   16(R10), Y5
	VPMOVZXWD   32(R10), Y6
	VPMOVZXWD   48(R10), Y7
	VPSLLD      $16, Y4, Y4
	VPSLLD      $16, Y5, Y5
	VPSLLD      $16, Y6, Y6
	VPSLLD      $16, Y7, Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $64, R10
	ADDQ        $128, DI
	DECQ        BX
	JNZ         bf16loop

	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	REDUCE8
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    bf16row
	VZEROUPPER
	RET
