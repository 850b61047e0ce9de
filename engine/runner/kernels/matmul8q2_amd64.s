//go:build !purego

#include "textflag.h"

// Q4_0, two rows × four tokens with AVX2 alone, with the arithmetic of
// dotQ4_0RowsAVX2 (dotq_amd64.s) lane for lane: per row, token and block
// the eight int32 lanes Σ q·a − 8·Σa (exact), converted and accumulated
// by FMA with d·dₐ into eight float lanes, reduced as REDUCE8TO. What
// the tokens alone decide comes from the token pack instead of being
// recomputed for every pair of rows: the lanes' −8·Σa (q32OffsAVX2), one
// VPADDD instead of two multiplies per token and block; and the four
// tokens' dₐ of a block side by side, so that one VMULPS makes a row's
// four products d·dₐ (the same roundings as the row kernel's VMULSS)
// and the FMA takes each as a broadcast load. That leaves four
// multiply-pipe operations per row, token and block where mulQ4_0x2x4AVX2
// has six.
//
// Registers: Y0-Y3 row 0 for tokens 0-3, Y4-Y7 row 1; Y8, Y9 the rows'
// spread nibbles; X10, X11 their d·dₐ; Y12 bytes 0x0F; Y13 int16 ones;
// Y14, Y15 temporaries. GP: DI, R8, R12, R13 the tokens' quants; DX, BX,
// R14, CX their offsets; R9 the four tokens' dₐ (16 bytes a block); R10,
// R11 the rows; AX 4 per block; SI the end. Stack: the two rows' four
// products at 0 and 16.

// mmQ40Args (matmul_amd64.go): q [4]*int8 at 0, o [4]*int32 at 32, out
// [4]*float32 at 64, ds *float32 at 96.

#define Q40P_NIB(R, X, Y) \
	VMOVDQU     2(R), X \
	VPSRLW      $4, X, X14 \
	VINSERTI128 $1, X14, Y, Y \
	VPAND       Y12, Y, Y

// Q40P_SCALE sets off(SP) to the row's d (fp16 at R) times the four
// tokens' dₐ.
#define Q40P_SCALE(R, X, off) \
	VCVTPH2PS    (R), X \
	VBROADCASTSS X, X \
	VMULPS       (R9)(AX*4), X, X \
	VMOVUPS      X, off(SP)

#define Q40P_TOKEN(q, o, i, accA, accB) \
	VPMADDUBSW   (q)(AX*8), Y8, Y14 \
	VPMADDWD     Y13, Y14, Y14 \
	VPADDD       (o)(AX*8), Y14, Y14 \
	VCVTDQ2PS    Y14, Y14 \
	VBROADCASTSS 4*i(SP), Y15 \
	VFMADD231PS  Y15, Y14, accA \
	VPMADDUBSW   (q)(AX*8), Y9, Y14 \
	VPMADDWD     Y13, Y14, Y14 \
	VPADDD       (o)(AX*8), Y14, Y14 \
	VCVTDQ2PS    Y14, Y14 \
	VBROADCASTSS 16+4*i(SP), Y15 \
	VFMADD231PS  Y15, Y14, accB

// Q40P_REDUCE is REDUCE8TO.
#define Q40P_REDUCE(Y, X) \
	VEXTRACTF128 $1, Y, X15 \
	VADDPS       X15, X, X \
	VHADDPS      X, X, X \
	VHADDPS      X, X, X

// Q40P_STORE writes rows 0 and 1 of token t and advances its output.
#define Q40P_STORE(t, XA, XB) \
	MOVQ   64+8*t(R9), R10 \
	VMOVSS XA, (R10) \
	VMOVSS XB, 4(R10) \
	ADDQ   $8, 64+8*t(R9)

// func mulQ4_0x2x4OffAVX2(w *byte, rowBytes, nb, pairs int, a *mmQ40Args)
TEXT ·mulQ4_0x2x4OffAVX2(SB), NOSPLIT, $32-40
	MOVQ         a+32(FP), R9
	MOVQ         0(R9), DI
	MOVQ         8(R9), R8
	MOVQ         16(R9), R12
	MOVQ         24(R9), R13
	MOVQ         32(R9), DX
	MOVQ         40(R9), BX
	MOVQ         48(R9), R14
	MOVQ         56(R9), CX
	MOVQ         nb+16(FP), SI
	SHLQ         $2, SI
	MOVQ         $0x0f0f0f0f0f0f0f0f, AX
	MOVQ         AX, X12
	VPBROADCASTQ X12, Y12
	VPCMPEQW     Y13, Y13, Y13
	VPSRLW       $15, Y13, Y13

q40ppair:
	MOVQ   a+32(FP), R9
	MOVQ   96(R9), R9
	MOVQ   w+0(FP), R10
	MOVQ   R10, R11
	ADDQ   rowBytes+8(FP), R11
	XORQ   AX, AX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

q40pblock:
	Q40P_NIB(R10, X8, Y8)
	Q40P_NIB(R11, X9, Y9)
	Q40P_SCALE(R10, X10, 0)
	Q40P_SCALE(R11, X11, 16)
	Q40P_TOKEN(DI, DX, 0, Y0, Y4)
	Q40P_TOKEN(R8, BX, 1, Y1, Y5)
	Q40P_TOKEN(R12, R14, 2, Y2, Y6)
	Q40P_TOKEN(R13, CX, 3, Y3, Y7)
	ADDQ $18, R10
	ADDQ $18, R11
	ADDQ $4, AX
	CMPQ AX, SI
	JLT  q40pblock

	Q40P_REDUCE(Y0, X0)
	Q40P_REDUCE(Y1, X1)
	Q40P_REDUCE(Y2, X2)
	Q40P_REDUCE(Y3, X3)
	Q40P_REDUCE(Y4, X4)
	Q40P_REDUCE(Y5, X5)
	Q40P_REDUCE(Y6, X6)
	Q40P_REDUCE(Y7, X7)
	MOVQ a+32(FP), R9
	Q40P_STORE(0, X0, X4)
	Q40P_STORE(1, X1, X5)
	Q40P_STORE(2, X2, X6)
	Q40P_STORE(3, X3, X7)

	MOVQ rowBytes+8(FP), R10
	SHLQ $1, R10
	ADDQ R10, w+0(FP)
	DECQ pairs+24(FP)
	JNZ  q40ppair
	VZEROUPPER
	RET
