package kernels

import (
	"math"

	"meshd/engine/runner/gguf"
)

// The BF16 products of the AVX-512 BF16 level (gemmBF16) round the
// activation to bfloat16, as ggml does for BF16 weights (its vec_dot_type
// is BF16), and multiply pairs of bfloat16 with VDPBF16PS. The functions
// here are that arithmetic written out, the reference the kernels
// (gemmbf16_amd64.s) are tested against bit for bit; the other levels
// keep float32 activations (DotBF16, dotBF16RowsAVX2).

// cvtF32BF16Generic rounds src to bfloat16 into dst as gguf.F32ToBF16
// (ggml's fp32→bf16: to nearest even, NaNs kept quiet).
func cvtF32BF16Generic(dst []uint16, src []float32) {
	for i, f := range src {
		dst[i] = gguf.F32ToBF16(f)
	}
}

// bf16DAZ is h as VDPBF16PS reads it: a denormal is a zero of its sign.
func bf16DAZ(h uint16) float64 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return float64(math.Float32frombits(uint32(h) << 16))
}

// dpAdd is one step of a VDPBF16PS lane: acc plus the exact product of w
// and x (a product of two 8-bit significands fits a float64 whatever its
// exponent, and a float64 sum of it and a float32 rounds to float32 as
// one correctly rounded addition would), a denormal result flushed to a
// zero of its sign.
func dpAdd(acc float32, w, x uint16) float32 {
	s := float32(float64(acc) + bf16DAZ(w)*bf16DAZ(x))
	if u := math.Float32bits(s); u&0x7f800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return s
}

// dotBF16DPGeneric is the product of a BF16 row with the bfloat16
// activation xb (len a multiple of 32) as the kernels form it: sixteen
// lanes, lane l adding columns 2l+1 then 2l of each 32-column block in
// column order (VDPBF16PS's order), folded as lanes l+8, then l+4, then
// (0+1)+(2+3).
func dotBF16DPGeneric(row []byte, xb []uint16) float32 {
	var s [16]float32
	for k := 0; k+32 <= len(xb); k += 32 {
		for l := range 16 {
			for _, j := range [2]int{k + 2*l + 1, k + 2*l} {
				s[l] = dpAdd(s[l], uint16(row[2*j])|uint16(row[2*j+1])<<8, xb[j])
			}
		}
	}
	for l := range 8 {
		s[l] += s[l+8]
	}
	for l := range 4 {
		s[l] += s[l+4]
	}
	return (s[0] + s[1]) + (s[2] + s[3])
}

// dotBF16DPRowsGeneric is dotBF16DPGeneric for rows of w, rowBytes apart,
// with x rounded to bfloat16 first.
func dotBF16DPRowsGeneric(w []byte, rowBytes int, x, out []float32) {
	xb := make([]uint16, len(x))
	cvtF32BF16Generic(xb, x)
	for i := range out {
		out[i] = dotBF16DPGeneric(w[i*rowBytes:], xb)
	}
}
