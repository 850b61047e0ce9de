//go:build !purego

#include "textflag.h"

// ADD256 adds the 256 bytes at SI into the sums Y0-Y3 and moves past them.
#define ADD256 \
	VPADDQ (SI), Y0, Y0 \
	VPADDQ 32(SI), Y1, Y1 \
	VPADDQ 64(SI), Y2, Y2 \
	VPADDQ 96(SI), Y3, Y3 \
	VPADDQ 128(SI), Y0, Y0 \
	VPADDQ 160(SI), Y1, Y1 \
	VPADDQ 192(SI), Y2, Y2 \
	VPADDQ 224(SI), Y3, Y3 \
	ADDQ   $256, SI

// func streamSumAVX2(p *byte, n, near, far int) uint64
// 256 bytes per pass into four sums of four words, prefetching near
// bytes ahead into L1 and far bytes ahead into L2, or nothing where near
// is 0 (the hardware prefetchers alone).
TEXT ·streamSumAVX2(SB), NOSPLIT, $0-40
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), CX
	MOVQ  near+16(FP), R8
	MOVQ  far+24(FP), R9
	SHRQ  $8, CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	TESTQ R8, R8
	JZ    plain

loop:
	PREFETCHT0 (SI)(R8*1)
	PREFETCHT0 64(SI)(R8*1)
	PREFETCHT0 128(SI)(R8*1)
	PREFETCHT0 192(SI)(R8*1)
	PREFETCHT1 (SI)(R9*1)
	PREFETCHT1 64(SI)(R9*1)
	PREFETCHT1 128(SI)(R9*1)
	PREFETCHT1 192(SI)(R9*1)
	ADD256
	DECQ       CX
	JNZ        loop
	JMP        fold

plain:
	ADD256
	DECQ   CX
	JNZ    plain

fold:
	VPADDQ       Y1, Y0, Y0
	VPADDQ       Y3, Y2, Y2
	VPADDQ       Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	VMOVQ        X0, AX
	MOVQ         AX, ret+32(FP)
	VZEROUPPER
	RET
