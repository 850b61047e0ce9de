package gguf

import (
	"encoding/binary"
	"math"
)

// This file ports ggml's reference quantisers (quantize_row_*_ref in
// ggml-quants.c) and dequantisers for the types beyond Q8_0 and Q4_0, so
// that a file written here holds the bytes ggml's own reference code
// would write for the same floats.
//
// Every product that C accumulates or combines is written with an
// explicit float32 conversion: Go may fuse x*y+z into one FMA on arm64
// (and ggml's reference is specified without contraction), and a fused
// product rounds differently, which here would change a chosen quant and
// so the file's bytes from one machine to the next.

// QK_K is the super-block length of the K-quants.
const QK_K = 256

// nearestInt rounds to the nearest integer, ties to even, exactly as
// ggml's nearest_int: adding 1.5·2²³ leaves the rounded integer in the
// low mantissa bits.
func nearestInt(f float32) int {
	v := f + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group counts as zero.
const groupMaxEps = 1e-15

// makeQKX2Quants is ggml's make_qkx2_quants: an asymmetric quantisation
// of x to [0, nmax] with a scale and a (non-positive) minimum chosen by
// weighted least squares over nstep+1 candidate scales. It returns the
// scale and the negated minimum.
func makeQKX2Quants(nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, useMAD bool) (float32, float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < lo {
			lo = x[i]
		}
		if x[i] > hi {
			hi = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0, -lo
	}
	fmax := float32(nmax)
	iscale := fmax / (hi - lo)
	scale := 1 / iscale
	var bestError float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * (x[i] - lo)))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(scale*float32(L[i])) + lo - x[i]
		if useMAD {
			diff = abs32(diff)
		} else {
			diff = float32(diff * diff)
		}
		bestError += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -lo
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fmax) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * (x[i] - lo)))
			l = max(0, min(nmax, l))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := 0; i < n; i++ {
				diff := float32(thisScale*float32(Laux[i])) + thisMin - x[i]
				if useMAD {
					diff = abs32(diff)
				} else {
					diff = float32(diff * diff)
				}
				curError += float32(weights[i] * diff)
			}
			if curError < bestError {
				copy(L[:n], Laux[:n])
				bestError = curError
				scale = thisScale
				lo = thisMin
			}
		}
	}
	return scale, -lo
}

// makeQXQuants is ggml's make_qx_quants with rmse_type 1 and no
// importance weights (the form quantize_row_q6_K_ref uses): a symmetric
// quantisation of x to [-nmax, nmax-1] stored offset by nmax, the scale
// refined by weighted (x²) least squares over 19 candidates.
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	n := len(x)
	var mx, amax float32
	for i := 0; i < n; i++ {
		if ax := abs32(x[i]); ax > amax {
			amax, mx = ax, x[i]
		}
	}
	if amax < groupMaxEps {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0
	}
	fmax := float32(nmax)
	iscale := -fmax / mx
	var sumLX, sumL2 float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * x[i]))
		l = max(-nmax, min(nmax-1, l))
		L[i] = int8(l + nmax)
		w := float32(x[i] * x[i])
		fl := float32(l)
		sumLX += float32(float32(w*x[i]) * fl)
		sumL2 += float32(float32(w*fl) * fl)
	}
	scale := float32(0)
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := float32(scale * sumLX)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + float32(float32(0.1)*float32(is))) / mx
		sumLX, sumL2 = 0, 0
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * x[i]))
			l = max(-nmax, min(nmax-1, l))
			w := float32(x[i] * x[i])
			fl := float32(l)
			sumLX += float32(float32(w*x[i]) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			for i := 0; i < n; i++ {
				l := nearestInt(float32(iscale * x[i]))
				L[i] = int8(nmax + max(-nmax, min(nmax-1, l)))
			}
			scale = sumLX / sumL2
			best = float32(scale * sumLX)
		}
	}
	return scale
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// ScaleMinK4 unpacks sub-block j's 6-bit scale and minimum from the 12
// packed bytes of a Q4_K or Q5_K super-block (ggml's get_scale_min_k4):
// bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low six bits;
// scales and mins 4-7 keep their low four bits in bytes 8-11 and their
// top two bits in the spare high bits of bytes 0-3 and 4-7.
func ScaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// packScalesK4 stores eight 6-bit scales and mins the way
// quantize_row_q4_K_ref does.
func packScalesK4(dst []byte, ls, lm *[8]uint8) {
	for j := range 12 {
		dst[j] = 0
	}
	for j := 0; j < 8; j++ {
		if j < 4 {
			dst[j] = ls[j]
			dst[j+4] = lm[j]
		} else {
			dst[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
			dst[j-4] |= (ls[j] >> 4) << 6
			dst[j] |= (lm[j] >> 4) << 6
		}
	}
}

// quantizeSubblocksK is the part quantize_row_q4_K_ref and
// quantize_row_q5_K_ref share: per 32-value sub-block a scale and min by
// makeQKX2Quants, both quantised to six bits against the super-block's
// largest, then the values requantised against the stored scales. It
// writes d, dmin and the packed scales to blk and the quants to L.
func quantizeSubblocksK(x []float32, blk []byte, L *[QK_K]uint8, nmax int, rmin, rdelta float32, nstep int) {
	var scales, mins [8]float32
	var weights [32]float32
	var laux [32]uint8
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(nmax, xs, weights[:], L[32*j:32*j+32], laux[:], rmin, rdelta, nstep, false)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls, lm [8]uint8
	for j := 0; j < 8; j++ {
		ls[j] = min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm[j] = min(63, uint8(nearestInt(float32(invMin*mins[j]))))
	}
	le := binary.LittleEndian
	le.PutUint16(blk[0:], F32ToF16(maxScale/63))
	le.PutUint16(blk[2:], F32ToF16(maxMin/63))
	packScalesK4(blk[4:16], &ls, &lm)
	d, dmin := F16ToF32(le.Uint16(blk[0:])), F16ToF32(le.Uint16(blk[2:]))
	for j := 0; j < 8; j++ {
		sc, m := ScaleMinK4(j, blk[4:16])
		dj := float32(d * float32(sc))
		if dj == 0 {
			continue
		}
		dm := float32(dmin * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / dj)
			L[32*j+ii] = uint8(max(0, min(nmax, l)))
		}
	}
}

// encodeQ4K is quantize_row_q4_K_ref: 144-byte super-blocks of d, dmin
// (fp16), 12 bytes of packed 6-bit scales and mins, and 128 bytes of
// nibbles, each 32 bytes holding sub-block 2i in the low nibbles and
// 2i+1 in the high ones.
func encodeQ4K(x []float32, out []byte) {
	var L [QK_K]uint8
	for b := 0; b < len(x)/QK_K; b++ {
		xb := x[b*QK_K : (b+1)*QK_K]
		blk := out[b*144 : (b+1)*144]
		quantizeSubblocksK(xb, blk, &L, 15, -1, 0.1, 20)
		q := blk[16:]
		for j := 0; j < QK_K; j += 64 {
			for l := 0; l < 32; l++ {
				q[l] = L[j+l] | L[j+l+32]<<4
			}
			q = q[32:]
		}
	}
}

// encodeQ5K is quantize_row_q5_K_ref: 176-byte super-blocks laid out as
// Q4_K's with 32 bytes of fifth bits (qh) before the nibbles; bit 2i of
// qh[l] is the fifth bit of value l of sub-block 2i, bit 2i+1 that of
// sub-block 2i+1.
func encodeQ5K(x []float32, out []byte) {
	var L [QK_K]uint8
	for b := 0; b < len(x)/QK_K; b++ {
		xb := x[b*QK_K : (b+1)*QK_K]
		blk := out[b*176 : (b+1)*176]
		quantizeSubblocksK(xb, blk, &L, 31, -0.5, 0.1, 15)
		qh := blk[16:48]
		ql := blk[48:176]
		for i := range qh {
			qh[i] = 0
		}
		m1, m2 := uint8(1), uint8(2)
		for n := 0; n < QK_K; n += 64 {
			for j := 0; j < 32; j++ {
				l1 := L[n+j]
				if l1 > 15 {
					l1 -= 16
					qh[j] |= m1
				}
				l2 := L[n+j+32]
				if l2 > 15 {
					l2 -= 16
					qh[j] |= m2
				}
				ql[j] = l1 | l2<<4
			}
			m1 <<= 2
			m2 <<= 2
			ql = ql[32:]
		}
	}
}

// encodeQ6K is quantize_row_q6_K_ref: 210-byte super-blocks of ql[128]
// (low nibbles), qh[64] (top two bits), 16 int8 sub-block scales and an
// fp16 d; values are (q − 32)·d·scale over 16-value sub-blocks.
func encodeQ6K(x []float32, out []byte) {
	var L [QK_K]int8
	var scales [16]float32
	le := binary.LittleEndian
	for b := 0; b < len(x)/QK_K; b++ {
		xb := x[b*QK_K : (b+1)*QK_K]
		blk := out[b*210 : (b+1)*210]
		var maxScale, maxAbsScale float32
		for ib := 0; ib < 16; ib++ {
			s := makeQXQuants(32, xb[16*ib:16*ib+16], L[16*ib:16*ib+16])
			scales[ib] = s
			if as := abs32(s); as > maxAbsScale {
				maxAbsScale, maxScale = as, s
			}
		}
		if maxAbsScale < groupMaxEps {
			for i := range blk {
				blk[i] = 0
			}
			continue
		}
		iscale := -128 / maxScale
		le.PutUint16(blk[208:], F32ToF16(1/iscale))
		sc := blk[192:208]
		for ib := 0; ib < 16; ib++ {
			sc[ib] = byte(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
		}
		d := F16ToF32(le.Uint16(blk[208:]))
		for j := 0; j < 16; j++ {
			dj := float32(d * float32(int8(sc[j])))
			if dj == 0 {
				continue
			}
			for ii := 0; ii < 16; ii++ {
				l := nearestInt(xb[16*j+ii] / dj)
				L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
			}
		}
		ql, qh := blk[0:128], blk[128:192]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				q1 := uint8(L[j+l]) & 0xf
				q2 := uint8(L[j+l+32]) & 0xf
				q3 := uint8(L[j+l+64]) & 0xf
				q4 := uint8(L[j+l+96]) & 0xf
				ql[l] = q1 | q3<<4
				ql[l+32] = q2 | q4<<4
				qh[l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
			}
			ql = ql[64:]
			qh = qh[32:]
		}
	}
}

// decodeQ4K is dequantize_row_q4_K.
func decodeQ4K(data []byte, y []float32) {
	le := binary.LittleEndian
	for b := 0; b < len(y)/QK_K; b++ {
		blk := data[b*144:]
		d, dmin := F16ToF32(le.Uint16(blk)), F16ToF32(le.Uint16(blk[2:]))
		sc := blk[4:16]
		q := blk[16:144]
		out := y[b*QK_K:]
		for j, is := 0, 0; j < QK_K; j, is = j+64, is+2 {
			s1, m1 := ScaleMinK4(is, sc)
			s2, m2 := ScaleMinK4(is+1, sc)
			d1, dm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
			d2, dm2 := float32(d*float32(s2)), float32(dmin*float32(m2))
			for l := 0; l < 32; l++ {
				out[j+l] = float32(d1*float32(q[l]&0xf)) - dm1
				out[j+32+l] = float32(d2*float32(q[l]>>4)) - dm2
			}
			q = q[32:]
		}
	}
}

// decodeQ5K is dequantize_row_q5_K.
func decodeQ5K(data []byte, y []float32) {
	le := binary.LittleEndian
	for b := 0; b < len(y)/QK_K; b++ {
		blk := data[b*176:]
		d, dmin := F16ToF32(le.Uint16(blk)), F16ToF32(le.Uint16(blk[2:]))
		sc := blk[4:16]
		qh := blk[16:48]
		ql := blk[48:176]
		out := y[b*QK_K:]
		u1, u2 := uint8(1), uint8(2)
		for j, is := 0, 0; j < QK_K; j, is = j+64, is+2 {
			s1, m1 := ScaleMinK4(is, sc)
			s2, m2 := ScaleMinK4(is+1, sc)
			d1, dm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
			d2, dm2 := float32(d*float32(s2)), float32(dmin*float32(m2))
			for l := 0; l < 32; l++ {
				q1, q2 := ql[l]&0xf, ql[l]>>4
				if qh[l]&u1 != 0 {
					q1 += 16
				}
				if qh[l]&u2 != 0 {
					q2 += 16
				}
				out[j+l] = float32(d1*float32(q1)) - dm1
				out[j+32+l] = float32(d2*float32(q2)) - dm2
			}
			ql = ql[32:]
			u1 <<= 2
			u2 <<= 2
		}
	}
}

// decodeQ6K is dequantize_row_q6_K.
func decodeQ6K(data []byte, y []float32) {
	le := binary.LittleEndian
	for b := 0; b < len(y)/QK_K; b++ {
		blk := data[b*210:]
		d := F16ToF32(le.Uint16(blk[208:]))
		ql, qh, sc := blk[0:128], blk[128:192], blk[192:208]
		out := y[b*QK_K:]
		for n := 0; n < QK_K; n += 128 {
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := float32(int(ql[l]&0xf|(qh[l]&3)<<4) - 32)
				q2 := float32(int(ql[l+32]&0xf|((qh[l]>>2)&3)<<4) - 32)
				q3 := float32(int(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32)
				q4 := float32(int(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32)
				out[n+l] = float32(d*float32(int8(sc[is]))) * q1
				out[n+l+32] = float32(d*float32(int8(sc[is+2]))) * q2
				out[n+l+64] = float32(d*float32(int8(sc[is+4]))) * q3
				out[n+l+96] = float32(d*float32(int8(sc[is+6]))) * q4
			}
			ql = ql[64:]
			qh = qh[32:]
			sc = sc[8:]
		}
	}
}
