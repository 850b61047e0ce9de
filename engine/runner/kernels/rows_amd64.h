// Shared by the AVX-512 row kernels that take four rows per pass
// (dotk512_amd64.s, dotq5_512_amd64.s): SI the group's first row, BX
// rowBytes, CX rows left.

// ROWS4 sets R10-R13 to the next group's rows: four consecutive rows,
// or, with fewer than four left, four times the next row (the lanes then
// compute the same value, so a row's value does not depend on its
// position).
#define ROWS4 \
	MOVQ SI, R10 \
	MOVQ SI, R11 \
	MOVQ SI, R12 \
	MOVQ SI, R13 \
	CMPQ CX, $4 \
	JLT  4(PC) \
	LEAQ (SI)(BX*1), R11 \
	LEAQ (SI)(BX*2), R12 \
	LEAQ (R11)(BX*2), R13
