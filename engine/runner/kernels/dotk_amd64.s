//go:build !purego

#include "textflag.h"

// K-quant rows against the 256-value activation form. Per super-block
// the integer sums (exact) are reduced to scalars and combined in float
// in the order of the portable kernels (kCombine), so both paths give
// the same bits: sum + (float(d·dₐ)·float(isum) − float(dmin·dₐ)·float(msum)).
//
// Nibbles times activation quants go through VPMADDUBSW (unsigned
// weights, signed activations); the pair sums stay far below 2^15
// (2·63·127 at most, for Q6_K), then VPMADDWD applies the sub-block
// scales as int16 and widens to int32.

// Constants: Y14 = bytes 0x0F, Y13 = bytes 0x03 (Q6_K) or 0x10 (Q5_K).

// hsum reduces the eight int32 lanes of Y to a scalar in reg, using X1.
#define HSUM(Y, X, reg) \
	VEXTRACTI128 $1, Y, X1 \
	VPADDD       X1, X, X \
	VPSHUFD      $0x4E, X, X1 \
	VPADDD       X1, X, X \
	VPSHUFD      $0xB1, X, X1 \
	VPADDD       X1, X, X \
	VMOVD        X, reg

// kScalesMins unpacks the 12 packed 6-bit scales and mins at (R10+4)
// (ggml's utmp/kmask trick) into X9: eight scales then eight mins as
// bytes: utmp0 holds scales 0-3, utmp1 scales 4-7, utmp2 mins 0-3 and
// utmp3 mins 4-7. Clobbers AX, R11-R14.
#define K_SCALES_MINS \
	MOVL 4(R10), R11 \
	MOVL 8(R10), R12 \
	MOVL 12(R10), R13 \
	MOVL R13, R14 \
	SHRL $4, R14 \
	ANDL $0x0f0f0f0f, R14 \
	MOVL R12, AX \
	SHRL $6, AX \
	ANDL $0x03030303, AX \
	SHLL $4, AX \
	ORL  AX, R14 \
	MOVL R12, AX \
	ANDL $0x3f3f3f3f, AX \
	ANDL $0x0f0f0f0f, R13 \
	MOVL R11, R12 \
	SHRL $6, R12 \
	ANDL $0x03030303, R12 \
	SHLL $4, R12 \
	ORL  R13, R12 \
	ANDL $0x3f3f3f3f, R11 \
	VMOVD   R11, X9 \
	VPINSRD $1, R12, X9, X9 \
	VPINSRD $2, AX, X9, X9 \
	VPINSRD $3, R14, X9, X9

// kCombine: X0 += (d·dₐ·isum − dmin·dₐ·msum); d, dmin fp16 at (R10),
// dₐ at (DX), isum in R11, msum in R12. Clobbers X4-X8.
#define K_COMBINE \
	VCVTPH2PS  (R10), X4 \
	VMOVSS     (DX), X5 \
	VMULSS     X5, X4, X6 \
	VCVTSI2SSL R11, X7, X7 \
	VMULSS     X7, X6, X6 \
	VMOVSHDUP  X4, X8 \
	VMULSS     X5, X8, X8 \
	VCVTSI2SSL R12, X7, X7 \
	VMULSS     X7, X8, X8 \
	VSUBSS     X8, X6, X6 \
	VADDSS     X6, X0, X0

// func dotQ4KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ4KRowsAVX2(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14

q4krow:
	MOVQ SI, R10
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ bs+40(FP), R8
	MOVQ nb+48(FP), BX
	VXORPS X0, X0, X0

q4kblock:
	PREFETCHT0 576(R10)
	PREFETCHT0 640(R10)
	K_SCALES_MINS
	VPMOVZXBW X9, Y9
	VMOVDQU   Y9, 0(SP) // scales as int16 at 0-14, mins at 16-30

	// msum: mins · pair sums of the sixteen bsums
	VMOVDQU      (R8), Y10
	VEXTRACTI128 $1, Y10, X11
	VPHADDW      X11, X10, X10
	VEXTRACTI128 $1, Y9, X12
	VPMADDWD     X10, X12, X12
	VPSHUFD      $0x4E, X12, X1
	VPADDD       X1, X12, X12
	VPSHUFD      $0xB1, X12, X1
	VPADDD       X1, X12, X12
	VMOVD        X12, R12

	VPXOR Y2, Y2, Y2 // isum lanes

#define Q4K_PAIR(off, aoff, s0, s1) \
	VMOVDQU      off(R10), Y3 \
	VPAND        Y14, Y3, Y4 \
	VPSRLW       $4, Y3, Y5 \
	VPAND        Y14, Y5, Y5 \
	VPMADDUBSW   aoff(DI), Y4, Y4 \
	VPMADDUBSW   aoff+32(DI), Y5, Y5 \
	VPBROADCASTW s0(SP), Y6 \
	VPBROADCASTW s1(SP), Y7 \
	VPMADDWD     Y6, Y4, Y4 \
	VPMADDWD     Y7, Y5, Y5 \
	VPADDD       Y4, Y2, Y2 \
	VPADDD       Y5, Y2, Y2

	Q4K_PAIR(16, 0, 0, 2)
	Q4K_PAIR(48, 64, 4, 6)
	Q4K_PAIR(80, 128, 8, 10)
	Q4K_PAIR(112, 192, 12, 14)
	HSUM(Y2, X2, R11)
	K_COMBINE

	ADDQ $144, R10
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ BX
	JNZ  q4kblock

	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    q4krow
	VZEROUPPER
	RET

// func dotQ5KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ5KRowsAVX2(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x1010101010101010, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13

q5krow:
	MOVQ SI, R10
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ bs+40(FP), R8
	MOVQ nb+48(FP), BX
	VXORPS X0, X0, X0

q5kblock:
	PREFETCHT0 704(R10)
	PREFETCHT0 768(R10)
	K_SCALES_MINS
	VPMOVZXBW X9, Y9
	VMOVDQU   Y9, 0(SP)

	VMOVDQU      (R8), Y10
	VEXTRACTI128 $1, Y10, X11
	VPHADDW      X11, X10, X10
	VEXTRACTI128 $1, Y9, X12
	VPMADDWD     X10, X12, X12
	VPSHUFD      $0x4E, X12, X1
	VPADDD       X1, X12, X12
	VPSHUFD      $0xB1, X12, X1
	VPADDD       X1, X12, X12
	VMOVD        X12, R12

	VMOVDQU 16(R10), Y15
	VPXOR   Y2, Y2, Y2

// Q5K_PAIR: sub-blocks 2j (low nibbles) and 2j+1 (high nibbles); Y6
// and Y7 hold qh shifted so that bits 2j and 2j+1 sit at bit 4 of each
// byte (a 16-bit shift of at most four places keeps bit 4 of each byte
// from its own byte), masked here with 0x10.
#define Q5K_PAIR(off, aoff, s0, s1) \
	VMOVDQU      off(R10), Y3 \
	VPAND        Y14, Y3, Y4 \
	VPSRLW       $4, Y3, Y5 \
	VPAND        Y14, Y5, Y5 \
	VPAND        Y13, Y6, Y6 \
	VPOR         Y6, Y4, Y4 \
	VPAND        Y13, Y7, Y7 \
	VPOR         Y7, Y5, Y5 \
	VPMADDUBSW   aoff(DI), Y4, Y4 \
	VPMADDUBSW   aoff+32(DI), Y5, Y5 \
	VPBROADCASTW s0(SP), Y6 \
	VPBROADCASTW s1(SP), Y7 \
	VPMADDWD     Y6, Y4, Y4 \
	VPMADDWD     Y7, Y5, Y5 \
	VPADDD       Y4, Y2, Y2 \
	VPADDD       Y5, Y2, Y2

	VPSLLW $4, Y15, Y6
	VPSLLW $3, Y15, Y7
	Q5K_PAIR(48, 0, 0, 2)
	VPSLLW $2, Y15, Y6
	VPSLLW $1, Y15, Y7
	Q5K_PAIR(80, 64, 4, 6)
	VMOVDQU Y15, Y6
	VPSRLW  $1, Y15, Y7
	Q5K_PAIR(112, 128, 8, 10)
	VPSRLW $2, Y15, Y6
	VPSRLW $3, Y15, Y7
	Q5K_PAIR(144, 192, 12, 14)
	HSUM(Y2, X2, R11)
	K_COMBINE

	ADDQ $176, R10
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ BX
	JNZ  q5kblock

	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    q5krow
	VZEROUPPER
	RET

// func dotQ6KRowsAVX2(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32)
TEXT ·dotQ6KRowsAVX2(SB), NOSPLIT, $32-64
	MOVQ w+0(FP), SI
	MOVQ n+16(FP), CX
	MOVQ out+56(FP), R9
	MOVQ $0x0f0f0f0f0f0f0f0f, AX
	MOVQ AX, X14
	VPBROADCASTQ X14, Y14
	MOVQ $0x0303030303030303, AX
	MOVQ AX, X13
	VPBROADCASTQ X13, Y13

q6krow:
	MOVQ SI, R10
	MOVQ q+24(FP), DI
	MOVQ d+32(FP), DX
	MOVQ bs+40(FP), R8
	MOVQ nb+48(FP), BX
	VXORPS X0, X0, X0

q6kblock:
	PREFETCHT0 840(R10)
	PREFETCHT0 904(R10)
	PREFETCHT0 968(R10)
	PREFETCHT0 1032(R10)
	VPMOVSXBW 192(R10), Y9 // sixteen scales as int16
	VMOVDQU   Y9, 0(SP)

	// msum: scales · bsums
	VPMADDWD (R8), Y9, Y10
	HSUM(Y10, X10, R12)

	VPXOR Y2, Y2, Y2

// Q6K_QUARTER builds 32 six-bit quants from a ql vector (low or high
// nibbles) and qh (bits at qshift), dots them with 32 activation quants
// and applies the two sub-block scales at s0 and s1.
#define Q6K_QUARTER(lo, aoff, s0, s1) \
	VPSLLW       $4, Y6, Y6 \
	VPOR         Y6, lo, Y4 \
	VPMADDUBSW   aoff(DI), Y4, Y4 \
	VPBROADCASTW s0(SP), X6 \
	VPBROADCASTW s1(SP), X7 \
	VINSERTI128  $1, X7, Y6, Y6 \
	VPMADDWD     Y6, Y4, Y4 \
	VPADDD       Y4, Y2, Y2

#define Q6K_HALF(qloff, qhoff, aoff, sc) \
	VMOVDQU  qloff(R10), Y3 \
	VMOVDQU  qloff+32(R10), Y5 \
	VMOVDQU  qhoff(R10), Y15 \
	VPAND    Y14, Y3, Y8 \
	VPAND    Y13, Y15, Y6 \
	Q6K_QUARTER(Y8, aoff, sc, sc+2) \
	VPAND    Y14, Y5, Y8 \
	VPSRLW   $2, Y15, Y6 \
	VPAND    Y13, Y6, Y6 \
	Q6K_QUARTER(Y8, aoff+32, sc+4, sc+6) \
	VPSRLW   $4, Y3, Y8 \
	VPAND    Y14, Y8, Y8 \
	VPSRLW   $4, Y15, Y6 \
	VPAND    Y13, Y6, Y6 \
	Q6K_QUARTER(Y8, aoff+64, sc+8, sc+10) \
	VPSRLW   $4, Y5, Y8 \
	VPAND    Y14, Y8, Y8 \
	VPSRLW   $6, Y15, Y6 \
	VPAND    Y13, Y6, Y6 \
	Q6K_QUARTER(Y8, aoff+96, sc+12, sc+14)

	Q6K_HALF(0, 128, 0, 0)
	Q6K_HALF(64, 160, 128, 16)
	HSUM(Y2, X2, R11)

	// X0 += float(d·dₐ)·float(isum − 32·msum)
	SHLL       $5, R12
	SUBL       R12, R11
	MOVWLZX    208(R10), AX
	VMOVD      AX, X4
	VCVTPH2PS  X4, X4
	VMULSS     (DX), X4, X6
	VCVTSI2SSL R11, X7, X7
	VMULSS     X7, X6, X6
	VADDSS     X6, X0, X0

	ADDQ $210, R10
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, R8
	DECQ BX
	JNZ  q6kblock

	VMOVSS X0, (R9)
	ADDQ   $4, R9
	ADDQ   rowBytes+8(FP), SI
	DECQ   CX
	JNZ    q6krow
	VZEROUPPER
	RET
