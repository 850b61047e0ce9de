//go:build !purego

// The F32 rows on amd64: DotF32's 32 sums are the lanes of Y0-Y3 (values
// 0-7, 8-15, 16-23 and 24-31 of each 32), advanced by VMULPS then VADDPS,
// not a fused multiply-add, as DotF32 rounds the product first. The
// four chains of additions cover the add latency for one row at a time,
// which is all a core needs to keep up with memory. The last nx mod 32
// values go, 8 at a time, to Y0, Y1, Y2 in turn and the final nx mod 8
// of them to the next register by masked loads, whose lanes past the
// end read nothing and add +0, which leaves a sum unchanged: every sum
// starts at +0 and so is never −0. The fold is DotF32's: Y0+Y2 and
// Y1+Y3, then their sum, its halves, and two horizontal adds, which make
// (s0+s1)+(s2+s3). So the results equal DotF32's bit for bit.

#include "textflag.h"

// Lane i of the 32 bytes at f32mask<>+32−4r is all ones for i < r.
DATA f32mask<>+0(SB)/8, $0xffffffffffffffff
DATA f32mask<>+8(SB)/8, $0xffffffffffffffff
DATA f32mask<>+16(SB)/8, $0xffffffffffffffff
DATA f32mask<>+24(SB)/8, $0xffffffffffffffff
DATA f32mask<>+32(SB)/8, $0
DATA f32mask<>+40(SB)/8, $0
DATA f32mask<>+48(SB)/8, $0
DATA f32mask<>+56(SB)/8, $0
GLOBL f32mask<>(SB), RODATA|NOPTR, $64

// F32TAIL8 adds the products of the 8 values at R10 and DI to Y.
#define F32TAIL8(Y) \
	VMOVUPS (R10), Y4 \
	VMULPS  (DI), Y4, Y4 \
	VADDPS  Y4, Y, Y \
	ADDQ    $32, R10 \
	ADDQ    $32, DI

// F32PART adds to Y the products of the nx mod 8 values at R10 and DI,
// under the mask in Y15, and goes to the fold.
#define F32PART(Y) \
	VMASKMOVPS (R10), Y15, Y4 \
	VMASKMOVPS (DI), Y15, Y5 \
	VMULPS     Y5, Y4, Y4 \
	VADDPS     Y4, Y, Y \
	JMP        f32fold

// func dotF32RowsAVX2(w *byte, rowBytes, n int, x *float32, nx int, out *float32)
TEXT ·dotF32RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ rowBytes+8(FP), R8
	MOVQ n+16(FP), CX
	MOVQ x+24(FP), R11
	MOVQ nx+32(FP), DX
	MOVQ out+40(FP), R9
	MOVQ DX, AX
	ANDQ $7, AX
	SHLQ $2, AX
	LEAQ f32mask<>+32(SB), BX
	SUBQ AX, BX
	VMOVDQU (BX), Y15

f32row:
	MOVQ   SI, R10
	MOVQ   R11, DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   DX, BX
	SHRQ   $5, BX
	JZ     f32tail

f32loop:
	PREFETCHT0 1024(R10)
	VMOVUPS    (R10), Y4
	VMOVUPS    32(R10), Y5
	VMOVUPS    64(R10), Y6
	VMOVUPS    96(R10), Y7
	VMULPS     (DI), Y4, Y4
	VMULPS     32(DI), Y5, Y5
	VMULPS     64(DI), Y6, Y6
	VMULPS     96(DI), Y7, Y7
	VADDPS     Y4, Y0, Y0
	VADDPS     Y5, Y1, Y1
	VADDPS     Y6, Y2, Y2
	VADDPS     Y7, Y3, Y3
	ADDQ       $128, R10
	ADDQ       $128, DI
	DECQ       BX
	JNZ        f32loop

f32tail:
	MOVQ DX, BX
	ANDQ $31, BX
	CMPQ BX, $8
	JLT  f32part0
	F32TAIL8(Y0)
	CMPQ BX, $16
	JLT  f32part1
	F32TAIL8(Y1)
	CMPQ BX, $24
	JLT  f32part2
	F32TAIL8(Y2)
	F32PART(Y3)

f32part0:
	F32PART(Y0)

f32part1:
	F32PART(Y1)

f32part2:
	F32PART(Y2)

f32fold:
	VADDPS       Y2, Y0, Y0
	VADDPS       Y3, Y1, Y1
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X4
	VADDPS       X4, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VMOVSS       X0, (R9)
	ADDQ         $4, R9
	ADDQ         R8, SI
	DECQ         CX
	JNZ          f32row
	VZEROUPPER
	RET
