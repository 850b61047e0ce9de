//go:build !purego

#include "textflag.h"

// func dotsF32AVX2(q *float32, k *float32, n, stride, hd int, out *float32)
// out[t] = Σ_i q[i]·k[t·stride+i] for t < n; hd a positive multiple of 16.
TEXT ·dotsF32AVX2(SB), NOSPLIT, $0-48
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ stride+24(FP), BX
	MOVQ hd+32(FP), R8
	MOVQ out+40(FP), R9
	SHLQ $2, BX // stride in bytes
	SHLQ $2, R8 // hd in bytes
	TESTQ CX, CX
	JZ    dots_done

dots_row:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ   AX, AX

dots_col:
	VMOVUPS     (SI)(AX*1), Y2
	VMOVUPS     32(SI)(AX*1), Y3
	VFMADD231PS (DI)(AX*1), Y2, Y0
	VFMADD231PS 32(DI)(AX*1), Y3, Y1
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         dots_col

	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (R9)

	ADDQ BX, DI
	ADDQ $4, R9
	DECQ CX
	JNZ  dots_row

dots_done:
	VZEROUPPER
	RET

// func axpysF32AVX2(out *float32, p *float32, v *float32, n, stride, hd int)
// out[i] += Σ_t p[t]·v[t·stride+i] for i < hd; hd a positive multiple of 16.
TEXT ·axpysF32AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), SI
	MOVQ p+8(FP), DX
	MOVQ v+16(FP), DI
	MOVQ n+24(FP), CX
	MOVQ stride+32(FP), BX
	MOVQ hd+40(FP), R8
	SHLQ $2, BX
	SHLQ $2, R8
	TESTQ CX, CX
	JZ    axpys_done

axpys_row:
	VBROADCASTSS (DX), Y2
	XORQ         AX, AX

axpys_col:
	VMOVUPS     (SI)(AX*1), Y0
	VMOVUPS     32(SI)(AX*1), Y1
	VFMADD231PS (DI)(AX*1), Y2, Y0
	VFMADD231PS 32(DI)(AX*1), Y2, Y1
	VMOVUPS     Y0, (SI)(AX*1)
	VMOVUPS     Y1, 32(SI)(AX*1)
	ADDQ        $64, AX
	CMPQ        AX, R8
	JLT         axpys_col

	ADDQ $4, DX
	ADDQ BX, DI
	DECQ CX
	JNZ  axpys_row

axpys_done:
	VZEROUPPER
	RET
