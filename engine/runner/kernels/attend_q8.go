package kernels

import (
	"encoding/binary"

	"meshd/engine/runner/gguf"
)

// KVView is one layer's cache of keys or of values, as Attend reads it:
// float32 rows Stride values apart, or, with Q8 set, rows of Q8_0 blocks
// (34 bytes each: an f16 scale and 32 int8 codes) Stride bytes apart.
type KVView struct {
	F32    []float32
	Q8     []byte
	Stride int
}

// StoreQ8_0 quantises x (whole 32-value blocks) into dst as Q8_0 blocks,
// as ggml's quantize_row_q8_0 does (scale = largest magnitude / 127,
// stored as f16; codes rounded half away from zero), through q, a QVec
// of len(x) values used as scratch.
func StoreQ8_0(dst []byte, x []float32, q *QVec) {
	q.quantize32(x)
	for b := range len(x) / 32 {
		blk := dst[b*34 : b*34+34]
		binary.LittleEndian.PutUint16(blk, gguf.F32ToF16(q.D[b]))
		for i, c := range q.Q[b*32 : b*32+32] {
			blk[2+i] = byte(c)
		}
	}
}

// AttendKV is Attend over caches of either storage: one query head's
// attention over n positions, the head's keys and values at value off
// within each row. Keys and values in Q8_0 are dequantised as they are
// read: the query stays in float32 (ggml quantises it to 8 bits too for
// its integer dot; this loses less, and for rows of a few blocks the
// float kernel is the faster one). off and len(q) must be multiples of
// 32 for a Q8_0 side.
func AttendKV(out, q []float32, k, v KVView, n, off int, scale float32, scores []float32) {
	if k.Q8 == nil && v.Q8 == nil {
		Attend(out, q, k.F32, v.F32, n, k.Stride, off, scale, scores)
		return
	}
	hd := len(q)
	scores = scores[:n]
	out = out[:hd]
	if n == 0 {
		clear(out)
		return
	}
	if k.Q8 != nil {
		dotsQ8(q, k.Q8[off/32*34:], k.Stride, scores)
	} else {
		dots(q, k.F32[off:], k.Stride, scores)
	}
	for t := range scores {
		scores[t] *= scale
	}
	Softmax(scores)
	clear(out)
	if v.Q8 != nil {
		axpysQ8(out, scores, v.Q8[off/32*34:], v.Stride)
	} else {
		axpys(out, scores, v.F32[off:], v.Stride)
	}
}

// dotsQ8Generic is dotsQ8 in portable Go.
func dotsQ8Generic(q []float32, k []byte, stride int, out []float32) {
	nb := len(q) / 32
	for t := range out {
		row := k[t*stride : t*stride+nb*34]
		var sum float32
		for b := range nb {
			blk := row[b*34 : b*34+34]
			qs := (*[32]byte)(blk[2:])
			x := (*[32]float32)(q[b*32:])
			var s float32
			for i := range x {
				s += x[i] * float32(int8(qs[i]))
			}
			sum += s * gguf.F16ToF32(binary.LittleEndian.Uint16(blk))
		}
		out[t] = sum
	}
}

// axpysQ8Generic is axpysQ8 in portable Go.
func axpysQ8Generic(out, p []float32, v []byte, stride int) {
	nb := len(out) / 32
	for t, pt := range p {
		row := v[t*stride : t*stride+nb*34]
		for b := range nb {
			blk := row[b*34 : b*34+34]
			s := pt * gguf.F16ToF32(binary.LittleEndian.Uint16(blk))
			o := (*[32]float32)(out[b*32:])
			qs := (*[32]byte)(blk[2:])
			for i := range o {
				o[i] += s * float32(int8(qs[i]))
			}
		}
	}
}

// NewQ8Scratch is a QVec of n values (a multiple of 32) with only the
// 32-value form: the scratch StoreQ8_0 and AttendKV quantise into.
func NewQ8Scratch(n int) *QVec {
	return &QVec{Q: make([]int8, n), D: make([]float32, n/32), S: make([]int32, n/32)}
}
