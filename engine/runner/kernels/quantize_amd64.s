//go:build !purego

#include "textflag.h"

// The activation quantisers with AVX2, bit for bit the portable ones in
// quant.go for finite input: the same float32 operations in the same
// order (the block maximum does not depend on order), the same
// roundings (truncate, then step by the fraction's comparison with ±0.5
// for the 32-value form; round to nearest even, as the add of 1.5·2^23
// in nearestInt does, for the 256-value form). A block holding an
// infinity or NaN stops the kernel, which returns the blocks done: the
// portable code quantises the rest, so such input gives its results too.
// So does a block of subnormals whose inverse scale overflows.

DATA qzconst<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA qzconst<>+4(SB)/4, $0x3f000000  // 0.5
DATA qzconst<>+8(SB)/4, $0xbf000000  // -0.5
DATA qzconst<>+12(SB)/4, $0x42fe0000 // 127
DATA qzconst<>+16(SB)/4, $0x3f800000 // 1
DATA qzconst<>+20(SB)/4, $0x7f7fffff // largest finite float32
DATA qzconst<>+24(SB)/4, $0xc2fe0000 // -127
DATA qzconst<>+28(SB)/4, $127
GLOBL qzconst<>(SB), RODATA|NOPTR, $32

// VPERMD order that undoes the lane interleave of VPACKSSDW/VPACKSSWB.
DATA qzperm<>+0(SB)/4, $0
DATA qzperm<>+4(SB)/4, $4
DATA qzperm<>+8(SB)/4, $1
DATA qzperm<>+12(SB)/4, $5
DATA qzperm<>+16(SB)/4, $2
DATA qzperm<>+20(SB)/4, $6
DATA qzperm<>+24(SB)/4, $3
DATA qzperm<>+28(SB)/4, $7
GLOBL qzperm<>(SB), RODATA|NOPTR, $32

// QZFINITE ANDs into Y9 the lanes of Y that are finite (|x| ≤ max).
#define QZFINITE(Y) \
	VANDPS  Y15, Y, Y8 \
	VCMPPS  $2, Y14, Y8, Y8 \
	VANDPS  Y8, Y9, Y9

// QZMAX folds |Y| into the running maximum Y10.
#define QZMAX(Y) \
	VANDPS Y15, Y, Y8 \
	VMAXPS Y8, Y10, Y10

// HMAX leaves the maximum of Y10's lanes in X10 lane 0.
#define HMAX \
	VEXTRACTF128 $1, Y10, X8 \
	VMAXPS       X8, X10, X10 \
	VPERMILPS    $0x4e, X10, X8 \
	VMAXPS       X8, X10, X10 \
	VPERMILPS    $0xb1, X10, X8 \
	VMAXPS       X8, X10, X10

// Q32ROUND: Y = int32 of x·id (id in Y11) rounded half away from zero.
#define Q32ROUND(Y) \
	VMULPS    Y11, Y, Y \
	VROUNDPS  $3, Y, Y8 \
	VSUBPS    Y8, Y, Y \
	VCVTTPS2DQ Y8, Y8 \
	VCMPPS    $0x1d, Y13, Y, Y7 \
	VPSUBD    Y7, Y8, Y8 \
	VCMPPS    $0x12, Y12, Y, Y7 \
	VPADDD    Y7, Y8, Y

// func quantize32AVX2(x *float32, q *int8, d *float32, s *int32, nb int) int
TEXT ·quantize32AVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ s+24(FP), R8
	MOVQ nb+32(FP), CX
	XORQ AX, AX
	VBROADCASTSS qzconst<>+0(SB), Y15
	VBROADCASTSS qzconst<>+20(SB), Y14
	VBROADCASTSS qzconst<>+4(SB), Y13
	VBROADCASTSS qzconst<>+8(SB), Y12
	VMOVDQU      qzperm<>+0(SB), Y6
	TESTQ CX, CX
	JZ    q32done

q32block:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VPCMPEQD Y9, Y9, Y9
	QZFINITE(Y0)
	QZFINITE(Y1)
	QZFINITE(Y2)
	QZFINITE(Y3)
	VMOVMSKPS Y9, BX
	CMPQ      BX, $0xff
	JNE       q32done

	VXORPS Y10, Y10, Y10
	QZMAX(Y0)
	QZMAX(Y1)
	QZMAX(Y2)
	QZMAX(Y3)
	HMAX
	VDIVSS qzconst<>+12(SB), X10, X10 // d = amax/127
	VMOVSS X10, (DX)
	VXORPS X11, X11, X11
	VUCOMISS X11, X10
	JEQ    q32zero
	VMOVSS qzconst<>+16(SB), X11
	VDIVSS X10, X11, X11 // id = 1/d
	VUCOMISS X14, X11
	JA       q32done // subnormal block: 1/d overflows

q32zero:
	VBROADCASTSS X11, Y11
	Q32ROUND(Y0)
	Q32ROUND(Y1)
	Q32ROUND(Y2)
	Q32ROUND(Y3)
	VPADDD Y1, Y0, Y4
	VPADDD Y3, Y2, Y5
	VPADDD Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD  X5, X4, X4
	VPSHUFD $0x4e, X4, X5
	VPADDD  X5, X4, X4
	VPSHUFD $0xb1, X4, X5
	VPADDD  X5, X4, X4
	VMOVD   X4, (R8)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y6, Y0
	VMOVDQU   Y0, (DI)

	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, DX
	ADDQ $4, R8
	INCQ AX
	CMPQ AX, CX
	JLT  q32block

q32done:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// HSUMD leaves the sum of Y's eight int32 lanes in X lane 0 (T scratch).
#define HSUMD(Y, X, T) \
	VEXTRACTI128 $1, Y, T \
	VPADDD       T, X, X \
	VPSHUFD      $0x4e, X, T \
	VPADDD       T, X, X \
	VPSHUFD      $0xb1, X, T \
	VPADDD       T, X, X

// QKROUND: Y = min(127, int32 of x·iscale (Y11) rounded to nearest even).
#define QKROUND(Y) \
	VMULPS    Y11, Y, Y \
	VCVTPS2DQ Y, Y \
	VPMINSD   Y12, Y, Y

// func quantizeKAVX2(x *float32, q *int8, d *float32, bs *int16, nb int) int
TEXT ·quantizeKAVX2(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ bs+24(FP), R8
	MOVQ nb+32(FP), CX
	XORQ AX, AX
	VBROADCASTSS qzconst<>+0(SB), Y15
	VBROADCASTSS qzconst<>+20(SB), Y14
	VPBROADCASTD qzconst<>+28(SB), Y12
	VMOVDQU      qzperm<>+0(SB), Y6
	TESTQ CX, CX
	JZ    qkdone

qkblock:
	// Finite check and |x| maximum over the 256 values.
	VPCMPEQD Y9, Y9, Y9
	VXORPS   Y10, Y10, Y10
	MOVQ     SI, R10
	MOVQ     $8, R11

qkscan:
	VMOVUPS (R10), Y0
	VMOVUPS 32(R10), Y1
	VMOVUPS 64(R10), Y2
	VMOVUPS 96(R10), Y3
	QZFINITE(Y0)
	QZFINITE(Y1)
	QZFINITE(Y2)
	QZFINITE(Y3)
	QZMAX(Y0)
	QZMAX(Y1)
	QZMAX(Y2)
	QZMAX(Y3)
	ADDQ $128, R10
	DECQ R11
	JNZ  qkscan
	VMOVMSKPS Y9, BX
	CMPQ      BX, $0xff
	JNE       qkdone
	HMAX
	VXORPS   X8, X8, X8
	VUCOMISS X8, X10
	JEQ      qkzero

	// mx: the first value whose magnitude is the maximum.
	VBROADCASTSS X10, Y10
	MOVQ         SI, R10

qkfind:
	VANDPS    (R10), Y15, Y8
	VCMPPS    $0, Y10, Y8, Y8
	VMOVMSKPS Y8, BX
	TESTQ     BX, BX
	JNZ       qkfound
	ADDQ      $32, R10
	JMP       qkfind

qkfound:
	BSFQ   BX, BX
	VMOVSS (R10)(BX*4), X8           // mx
	VMOVSS qzconst<>+24(SB), X11
	VDIVSS X8, X11, X11              // iscale = -127/mx
	VANDPS   X15, X11, X8
	VUCOMISS X14, X8
	JA       qkdone // subnormal block: iscale overflows
	VMOVSS qzconst<>+16(SB), X8
	VDIVSS X11, X8, X8               // d = 1/iscale
	VMOVSS X8, (DX)
	VBROADCASTSS X11, Y11

	MOVQ SI, R10
	MOVQ $8, R11

qkquant:
	VMOVUPS (R10), Y0
	VMOVUPS 32(R10), Y1
	VMOVUPS 64(R10), Y2
	VMOVUPS 96(R10), Y3
	QKROUND(Y0)
	QKROUND(Y1)
	QKROUND(Y2)
	QKROUND(Y3)
	VPADDD Y1, Y0, Y4
	HSUMD(Y4, X4, X5)
	VPEXTRW $0, X4, BX
	MOVW    BX, (R8)
	VPADDD Y3, Y2, Y4
	HSUMD(Y4, X4, X5)
	VPEXTRW $0, X4, BX
	MOVW    BX, 2(R8)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD    Y0, Y6, Y0
	VMOVDQU   Y0, (DI)
	ADDQ $128, R10
	ADDQ $32, DI
	ADDQ $4, R8
	DECQ R11
	JNZ  qkquant
	JMP  qknext

qkzero:
	// An all-zero block: d = 0, quants and sums zero.
	MOVL    $0, (DX)
	VPXOR   Y0, Y0, Y0
	VMOVDQU Y0, (DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, (R8)
	ADDQ    $256, DI
	ADDQ    $32, R8

qknext:
	ADDQ $1024, SI
	ADDQ $4, DX
	INCQ AX
	CMPQ AX, CX
	JLT  qkblock

qkdone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
