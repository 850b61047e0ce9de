// Shared by the AVX2 row kernels that take eight blocks at a time
// (dotq_amd64.s, dotq5_amd64.s).

// D8 stores at OFF(SP) the eight products d·dₐ of the row at BASE, its
// blocks S bytes apart from the one at AX/4 (d fp16 first), dₐ from
// (DX)(AX*1): VPINSRW, VCVTPH2PS and one VMULPS make the roundings of a
// VMULSS per block. Each row gathers through X on its own chain, started
// by the zeroing idiom, so that the rows' chains overlap (through one
// register they serialised, and the gathering took half the kernel's
// time).
#define D8(BASE, S, OFF, X, Y) \
	VPXOR     X, X, X \
	VPINSRW   $0, 0*S BASE, X, X \
	VPINSRW   $1, 1*S BASE, X, X \
	VPINSRW   $2, 2*S BASE, X, X \
	VPINSRW   $3, 3*S BASE, X, X \
	VPINSRW   $4, 4*S BASE, X, X \
	VPINSRW   $5, 5*S BASE, X, X \
	VPINSRW   $6, 6*S BASE, X, X \
	VPINSRW   $7, 7*S BASE, X, X \
	VCVTPH2PS X, Y \
	VMULPS    (DX)(AX*1), Y, Y \
	VMOVUPS   Y, OFF(SP)
