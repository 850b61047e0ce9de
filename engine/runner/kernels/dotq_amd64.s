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
// activation's order), recentred, and multiplied as in the Q8_0 kernel:
// |w| times a with w's sign, pairs summed to int16 (2·8·127 at most),
// widened to int32, converted and accumulated with d·dₐ by FMA.

// func dotQ4_0RowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32)
TEXT ·dotQ4_0RowsAVX2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+48(FP), R9
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x0808080808080808, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $15, Y15, Y15

q40row:
	MOVQ SI, R10
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ nb+40(FP), BX
	VXORPS Y0, Y0, Y0

q40block:
	PREFETCHT0   360(R10)
	VMOVDQU      2(R10), X6
	VPSRLW       $4, X6, X7
	VINSERTI128  $1, X7, Y6, Y6
	VPAND        Y14, Y6, Y6
	VPSUBB       Y13, Y6, Y6
	VMOVDQU      (DI), Y4
	VPSIGNB      Y6, Y4, Y7
	VPABSB       Y6, Y6
	VPMADDUBSW   Y7, Y6, Y6
	VPMADDWD     Y15, Y6, Y6
	VCVTDQ2PS    Y6, Y6
	VCVTPH2PS    (R10), X8
	VMULSS       (DX), X8, X8
	VBROADCASTSS X8, Y8
	VFMADD231PS  Y8, Y6, Y0
	ADDQ         $18, R10
	ADDQ         $32, DI
	ADDQ         $4, DX
	DECQ         BX
	JNZ          q40block

	REDUCE8
	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    q40row
	VZEROUPPER
	RET

// func dotF16RowsAVX2(w *byte, rowBytes, n int, x *float32, cols int, out *float32)
// cols is a positive multiple of 32.
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
	PREFETCHT0  512(R10)
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
	PREFETCHT0  512(R10)
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
