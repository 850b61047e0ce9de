// The eight-token K-quant kernels' shared steps (matmul8_amd64.s,
// matmul8k_amd64.s). GP registers: DI, R8, R11, R12, R13, R14, BX, DX the
// tokens' quants; R10 the super-block; SI the packed token data; R9 the
// args (mmK8Args). Z0-Z7 (or Y0-Y7) the isum lanes of tokens 0-7; Y15
// the eight float sums.

// K8LOADQ loads the eight tokens' quant pointers from the args in R9.
#define K8LOADQ \
	MOVQ 0(R9), DI \
	MOVQ 8(R9), R8 \
	MOVQ 16(R9), R11 \
	MOVQ 24(R9), R12 \
	MOVQ 32(R9), R13 \
	MOVQ 40(R9), R14 \
	MOVQ 48(R9), BX \
	MOVQ 56(R9), DX

// K8FOLD adds the high halves of Z0-Z7 to their low halves Y0-Y7.
#define K8FOLD1(Z, Y) \
	VEXTRACTI64X4 $1, Z, Y12 \
	VPADDD        Y12, Y, Y

#define K8FOLD \
	K8FOLD1(Z0, Y0) \
	K8FOLD1(Z1, Y1) \
	K8FOLD1(Z2, Y2) \
	K8FOLD1(Z3, Y3) \
	K8FOLD1(Z4, Y4) \
	K8FOLD1(Z5, Y5) \
	K8FOLD1(Z6, Y6) \
	K8FOLD1(Z7, Y7)

// K8REDUCE sums the eight lanes of Y0-Y7 into lane t of Y0 for token t.
#define K8REDUCE \
	VPHADDD    Y1, Y0, Y0 \
	VPHADDD    Y3, Y2, Y2 \
	VPHADDD    Y5, Y4, Y4 \
	VPHADDD    Y7, Y6, Y6 \
	VPHADDD    Y2, Y0, Y0 \
	VPHADDD    Y6, Y4, Y4 \
	VPERM2I128 $0x20, Y4, Y0, Y1 \
	VPERM2I128 $0x31, Y4, Y0, Y2 \
	VPADDD     Y2, Y1, Y0

// K8STORE writes lane i of X to token t's output and advances it.
#define K8STORE(t, X, i) \
	MOVQ       64+8*t(R9), SI \
	VEXTRACTPS $i, X, (SI) \
	ADDQ       $4, 64+8*t(R9)

// K8STOREALL stores the eight sums of Y15 and moves to the next row,
// looping to label while rows are left.
#define K8STOREALL \
	VEXTRACTF128 $1, Y15, X13 \
	K8STORE(0, X15, 0) \
	K8STORE(1, X15, 1) \
	K8STORE(2, X15, 2) \
	K8STORE(3, X15, 3) \
	K8STORE(4, X13, 0) \
	K8STORE(5, X13, 1) \
	K8STORE(6, X13, 2) \
	K8STORE(7, X13, 3) \
	MOVQ rowBytes+8(FP), R10 \
	ADDQ R10, w+0(FP) \
	DECQ n+24(FP)

// K8COMBINE: the msum of tokens 0-7 (the row's mins on the stack at 16
// against the token pack's bsum pair sums at SI) into the lanes of Y1,
// then Y15 += float(d·dₐ)·float(isum) − float(dmin·dₐ)·float(msum) per
// token (isum in Y0, d and dmin fp16 at R10, dₐ at 128(SI)), each
// product and the difference rounded as the row kernels round them.
#define K8COMBINE \
	VBROADCASTI128 16(SP), Y3 \
	VPMADDWD       0(SI), Y3, Y4 \
	VPMADDWD       32(SI), Y3, Y5 \
	VPMADDWD       64(SI), Y3, Y6 \
	VPMADDWD       96(SI), Y3, Y7 \
	VPHADDD        Y5, Y4, Y4 \
	VPHADDD        Y7, Y6, Y6 \
	VPHADDD        Y6, Y4, Y1 \
	VCVTPH2PS      (R10), X4 \
	VBROADCASTSS   X4, Y5 \
	VMOVSHDUP      X4, X6 \
	VBROADCASTSS   X6, Y6 \
	VMULPS         128(SI), Y5, Y5 \
	VCVTDQ2PS      Y0, Y8 \
	VMULPS         Y8, Y5, Y5 \
	VMULPS         128(SI), Y6, Y6 \
	VCVTDQ2PS      Y1, Y8 \
	VMULPS         Y8, Y6, Y6 \
	VSUBPS         Y6, Y5, Y5 \
	VADDPS         Y5, Y15, Y15

