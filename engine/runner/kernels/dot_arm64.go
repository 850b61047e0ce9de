//go:build !purego

package kernels

import "golang.org/x/sys/cpu"

// hasAVX2: the AVX2 kernels exist only for amd64.
const hasAVX2 = false

// hasSDOT selects the SDOT (ARMv8.2 dot product) form of the NEON
// kernels; without it they multiply with SMULL/SMLAL and widen with
// SADDLP/SADALP, which every ARMv8 CPU has. Both give the same exact
// integer sums. The tests switch it off to check the fallback.
var hasSDOT = cpu.ARM64.HasASIMDDP

// The NEON kernels (dot_arm64.s) run on every arm64 CPU: Advanced SIMD
// is part of ARMv8-A. Their results equal the portable kernels' as
// compiled for arm64: the integer block sums are exact either way, and
// the float steps follow the portable kernels' order and fusion.
//
// Estimated on paper, not measured. Decode multiplies thousands of rows
// by one activation, so each weight byte is read once from DRAM and the
// question is whether a core keeps up with the memory. Instructions
// counted from dot_arm64.s (SDOT form), for a Cortex-A76 (Pi 5, 2.4
// GHz, 4 cores) or A78AE (Orin AGX, 2.2 GHz, up to 12 cores): 4-wide
// decode, two 128-bit SIMD pipes (SDOT, AND, ADDP, FMLA: 2 per cycle),
// two loads per cycle; cycles ≈ SIMD ops / 2, as they dominate.
//
//	kernel  bytes   instrs / SIMD ops   ≈cycles  bytes/   GB/s/core    cores to reach DRAM bandwidth
//	        /block  per row and block            cycle    (A76/A78AE)  Pi 5 ~17 GB/s   Orin ~102 GB/s
//	Q8_0    34      ≈8 / ≈5             ≈2.5     ≈13      ≈33 / ≈30    1               ≈4
//	Q4_0    18      ≈12 / ≈9            ≈4.5     ≈4       ≈10 / ≈9     2               ≈11-12
//	Q4_K    144     ≈100 / ≈70          ≈37      ≈3.9     ≈9.4 / ≈8.6  2               ≈12 (all)
//
// Q8_0 per row and block: the scale lane load, the 32-byte weight load,
// a zeroing, 2 SDOT, and a quarter of the group's activation loads (2),
// reduction and scaling (3 ADDP, SCVTF, FCVTL, FMUL, FMLA) and loop (2).
// Q4_0 loads 16 bytes and adds the nibble unpacking (USHR, AND, 2 SUB).
// Q4_K per 256 values: 10 loads, ~21 scalar instructions and 4 INS for
// the 6-bit scales, 16 AND/USHR, 16 SDOT, 8 zeroings, ~17 for the sums
// per sub-block times scales and mins, 8 for the rounded combine. The
// SMULL fallback (no dot product: Cortex-A53/A72, Pi 3/4) spends 6
// instructions per 32 products instead of 2, roughly halving the 4-bit
// rates. So on a Pi 5 every kernel reaches the memory's rate with two
// cores (Q8_0 with one); on an Orin the 4-bit kernels are compute bound
// and need every core, and the next gains there are in the arithmetic
// (e.g. four rows at a time for Q4_K, sharing the scale work).

// dotQ8_0RowsNEON writes to out[0:n] the dot products of n Q8_0 rows
// starting at w, rowBytes apart, with the activation quants q and scales
// d, over nb blocks. The caller guarantees every pointer covers what is
// read (nb ≥ 1, n ≥ 1).
//
//go:noescape
func dotQ8_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)

// dotQ4_0RowsNEON is dotQ8_0RowsNEON for Q4_0 rows.
//
//go:noescape
func dotQ4_0RowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, nb int, out *float32, sdot bool)

// dotQ4KRowsNEON is dotQ8_0RowsNEON for Q4_K rows against the 256-value
// form of the activation (quants q, scales d, sums per 16 bs).
//
//go:noescape
func dotQ4KRowsNEON(w *byte, rowBytes, n int, q *int8, d *float32, bs *int16, nb int, out *float32, sdot bool)

// dotQ8_0Rows sets out[i] to the dot product of v with the first nb
// blocks of row i of w, rows rowBytes apart.
func dotQ8_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		dotQ8_0RowsGeneric(w, rowBytes, nb, v, out)
		return
	}
	// The assembly reads without bounds checks: these panic, as the
	// generic kernel's indexing would, on a length the caller got wrong.
	_ = w[(len(out)-1)*rowBytes+nb*34-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	dotQ8_0RowsNEON(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0], hasSDOT)
}

func dotQ4_0Rows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4_0Generic, 18)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*18-1]
	_ = v.Q[nb*32-1]
	_ = v.D[nb-1]
	dotQ4_0RowsNEON(&w[0], rowBytes, len(out), &v.Q[0], &v.D[0], nb, &out[0], hasSDOT)
}

func dotQ4KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	if nb == 0 || len(out) == 0 {
		rowsGeneric(dotQ4KGeneric, 144)(w, rowBytes, nb, v, out)
		return
	}
	_ = w[(len(out)-1)*rowBytes+nb*144-1]
	_ = v.QK[nb*qkK-1]
	_ = v.DK[nb-1]
	_ = v.BS[nb*16-1]
	dotQ4KRowsNEON(&w[0], rowBytes, len(out), &v.QK[0], &v.DK[0], &v.BS[0], nb, &out[0], hasSDOT)
}

func dotQ5KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ5KGeneric, 176)(w, rowBytes, nb, v, out)
}

func dotQ6KRows(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	rowsGeneric(dotQ6KGeneric, 210)(w, rowBytes, nb, v, out)
}

func dotF16Rows(w []byte, rowBytes int, x, out []float32) { dotF16RowsGeneric(w, rowBytes, x, out) }

func dotBF16Rows(w []byte, rowBytes int, x, out []float32) { dotBF16RowsGeneric(w, rowBytes, x, out) }

func dots(q, k []float32, stride int, out []float32) { dotsGeneric(q, k, stride, out) }

func axpys(out, p, v []float32, stride int) { axpysGeneric(out, p, v, stride) }
