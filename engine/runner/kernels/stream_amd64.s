//go:build !purego

#include "textflag.h"

// func streamSumAVX2(p *byte, n int) uint64
// 256 bytes per pass into four sums of four words, prefetching 2 KiB
// ahead into L1 and 8 KiB ahead into L2 (the distances the F16 row
// kernel found best for one stream on a machine with long memory
// latency).
TEXT ·streamSumAVX2(SB), NOSPLIT, $0-24
	MOVQ  p+0(FP), SI
	MOVQ  n+8(FP), CX
	SHRQ  $8, CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3

loop:
	PREFETCHT0 2048(SI)
	PREFETCHT0 2112(SI)
	PREFETCHT0 2176(SI)
	PREFETCHT0 2240(SI)
	PREFETCHT1 8192(SI)
	PREFETCHT1 8256(SI)
	PREFETCHT1 8320(SI)
	PREFETCHT1 8384(SI)
	VPADDQ     (SI), Y0, Y0
	VPADDQ     32(SI), Y1, Y1
	VPADDQ     64(SI), Y2, Y2
	VPADDQ     96(SI), Y3, Y3
	VPADDQ     128(SI), Y0, Y0
	VPADDQ     160(SI), Y1, Y1
	VPADDQ     192(SI), Y2, Y2
	VPADDQ     224(SI), Y3, Y3
	ADDQ       $256, SI
	DECQ       CX
	JNZ        loop

	VPADDQ       Y1, Y0, Y0
	VPADDQ       Y3, Y2, Y2
	VPADDQ       Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDQ       X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPADDQ       X1, X0, X0
	VMOVQ        X0, AX
	MOVQ         AX, ret+16(FP)
	VZEROUPPER
	RET
