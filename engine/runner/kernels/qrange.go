package kernels

import "fmt"

// BlockLen is the alignment QuantizeRange needs: the longest block of
// the forms v holds (256 with the 256-value form, else 32).
func (v *QVec) BlockLen() int {
	if len(v.DK) > 0 {
		return qkK
	}
	return 32
}

// QuantizeRange quantises x[lo:hi] into the matching blocks of v, as
// Quantize(x) would (every block is quantised on its own, so the result
// is the same bit for bit): lo and hi must be multiples of BlockLen.
// Disjoint ranges may run concurrently, which lets a pool
// loop quantise the part of an activation it has just computed.
func (v *QVec) QuantizeRange(x []float32, lo, hi int) {
	if bl := v.BlockLen(); lo%bl != 0 || hi%bl != 0 {
		panic(fmt.Sprintf("kernels: QuantizeRange [%d, %d) is not aligned to blocks of %d", lo, hi, bl))
	}
	var w QVec
	if len(v.D) > 0 {
		w.Q, w.D, w.S = v.Q[lo:hi], v.D[lo/32:hi/32], v.S[lo/32:hi/32]
	}
	if len(v.DK) > 0 {
		w.QK, w.DK, w.BS = v.QK[lo:hi], v.DK[lo/qkK:hi/qkK], v.BS[lo/16:hi/16]
	}
	w.Quantize(x[lo:hi])
}
