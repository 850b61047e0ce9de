//go:build !purego

#include "textflag.h"

// func dotsQ8AVX2(q *float32, k *byte, n, stride, nb int, out *float32)
// out[t] = Σ_b d(t,b)·Σ_i q[32b+i]·c(t,b,i) for t < n, over nb Q8_0
// blocks (f16 scale d, 32 int8 codes c) per row, rows stride bytes apart.
TEXT ·dotsQ8AVX2(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DX
	MOVQ n+16(FP), CX
	MOVQ stride+24(FP), R8
	MOVQ nb+32(FP), R9
	MOVQ out+40(FP), DI

dq8row:
	TESTQ CX, CX
	JZ    dq8done
	VXORPS Y0, Y0, Y0
	MOVQ  DX, R10
	MOVQ  SI, R11
	MOVQ  R9, R12

dq8blk:
	VPMOVSXBD   2(R10), Y2
	VPMOVSXBD   10(R10), Y3
	VPMOVSXBD   18(R10), Y4
	VPMOVSXBD   26(R10), Y5
	VCVTDQ2PS   Y2, Y2
	VCVTDQ2PS   Y3, Y3
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VMULPS      (R11), Y2, Y2
	VMULPS      32(R11), Y3, Y3
	VFMADD231PS 64(R11), Y4, Y2
	VFMADD231PS 96(R11), Y5, Y3
	VADDPS      Y3, Y2, Y2
	// The scale, broadcast as f16 and widened: VEX-encoded only (a
	// legacy SSE move here would cost a state transition per block).
	VPBROADCASTW (R10), X1
	VCVTPH2PS   X1, Y1
	VFMADD231PS Y2, Y1, Y0
	ADDQ        $34, R10
	ADDQ        $128, R11
	DECQ        R12
	JNZ         dq8blk

	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (DI)
	ADDQ         $4, DI
	ADDQ         R8, DX
	DECQ         CX
	JMP          dq8row

dq8done:
	VZEROUPPER
	RET

// func axpysQ8AVX2(out *float32, p *float32, v *byte, n, stride, nb int)
// out[32b+i] += p[t]·d(t,b)·c(t,b,i) for t < n, over nb Q8_0 blocks per
// row, rows stride bytes apart.
TEXT ·axpysQ8AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ v+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ stride+32(FP), R8
	MOVQ nb+40(FP), R9

aq8row:
	TESTQ CX, CX
	JZ    aq8done
	VBROADCASTSS (SI), Y0
	MOVQ  DX, R10
	MOVQ  DI, R11
	MOVQ  R9, R12

aq8blk:
	VPBROADCASTW (R10), X1
	VCVTPH2PS   X1, Y1
	VMULPS      Y0, Y1, Y1
	VPMOVSXBD   2(R10), Y2
	VPMOVSXBD   10(R10), Y3
	VPMOVSXBD   18(R10), Y4
	VPMOVSXBD   26(R10), Y5
	VCVTDQ2PS   Y2, Y2
	VCVTDQ2PS   Y3, Y3
	VCVTDQ2PS   Y4, Y4
	VCVTDQ2PS   Y5, Y5
	VMOVUPS     (R11), Y6
	VMOVUPS     32(R11), Y7
	VMOVUPS     64(R11), Y8
	VMOVUPS     96(R11), Y9
	VFMADD231PS Y2, Y1, Y6
	VFMADD231PS Y3, Y1, Y7
	VFMADD231PS Y4, Y1, Y8
	VFMADD231PS Y5, Y1, Y9
	VMOVUPS     Y6, (R11)
	VMOVUPS     Y7, 32(R11)
	VMOVUPS     Y8, 64(R11)
	VMOVUPS     Y9, 96(R11)
	ADDQ        $34, R10
	ADDQ        $128, R11
	DECQ        R12
	JNZ         aq8blk

	ADDQ R8, DX
	ADDQ $4, SI
	DECQ CX
	JMP  aq8row

aq8done:
	VZEROUPPER
	RET
