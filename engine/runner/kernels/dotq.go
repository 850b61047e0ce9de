package kernels

import "meshd/engine/runner/gguf"

// Portable kernels for the quantised types beyond Q8_0, written after
// ggml's vec_dot_*_q8_0/q8_1/q8_K: integer sums per block (per 256-value
// super-block for the K-quants) against the activation quants, scaled in
// float once per block. Each row's block sums are added in block order
// with explicit float32 roundings, so the assembly kernels that follow
// the same order (the K-quants) match these bit for bit on every
// architecture.

func f16(b []byte) float32 { return gguf.F16ToF32(uint16(b[0]) | uint16(b[1])<<8) }

// rowsGeneric applies a one-row kernel to each of len(out) rows.
func rowsGeneric(dot func(row []byte, nb int, v *QVec) float32, bb int) func(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	return func(w []byte, rowBytes, nb int, v *QVec, out []float32) {
		for i := range out {
			out[i] = dot(w[i*rowBytes:i*rowBytes+nb*bb], nb, v)
		}
	}
}

// dotQ4_0Generic: v = (q − 8)·d.
func dotQ4_0Generic(row []byte, nb int, v *QVec) float32 {
	var sum float32
	q := v.Q
	s := v.S[:nb]
	for b, d := range v.D[:nb] {
		w := (*[18]byte)(row[18*b:])
		a := (*[32]int8)(q[32*b:])
		var s0, s1 int32
		for j := 0; j < 16; j += 4 {
			s0 += int32(w[2+j]&0xf)*int32(a[j]) + int32(w[2+j]>>4)*int32(a[j+16])
			s1 += int32(w[3+j]&0xf)*int32(a[j+1]) + int32(w[3+j]>>4)*int32(a[j+17])
			s0 += int32(w[4+j]&0xf)*int32(a[j+2]) + int32(w[4+j]>>4)*int32(a[j+18])
			s1 += int32(w[5+j]&0xf)*int32(a[j+3]) + int32(w[5+j]>>4)*int32(a[j+19])
		}
		sum += float32(f16(w[0:])*d) * float32(s0+s1-8*s[b])
	}
	return sum
}

// dotQ4_1Generic: v = q·d + m, so a block adds d·dₐ·Σq·a + m·dₐ·Σa.
func dotQ4_1Generic(row []byte, nb int, v *QVec) float32 {
	var sum float32
	q := v.Q
	s := v.S[:nb]
	for b, d := range v.D[:nb] {
		w := (*[20]byte)(row[20*b:])
		a := (*[32]int8)(q[32*b:])
		var s0, s1 int32
		for j := 0; j < 16; j += 2 {
			s0 += int32(w[4+j]&0xf)*int32(a[j]) + int32(w[4+j]>>4)*int32(a[j+16])
			s1 += int32(w[5+j]&0xf)*int32(a[j+1]) + int32(w[5+j]>>4)*int32(a[j+17])
		}
		sum += float32(float32(f16(w[0:])*d)*float32(s0+s1)) + float32(float32(f16(w[2:])*d)*float32(s[b]))
	}
	return sum
}

// q5Quants expands a Q5 block's nibbles and fifth bits to 32 quants in
// [0, 31].
func q5Quants(qh uint32, qs []byte, out *[32]int32) {
	qs = qs[:16]
	for j := 0; j < 16; j++ {
		out[j] = int32(qs[j]&0xf) | int32(qh>>j&1)<<4
		out[j+16] = int32(qs[j]>>4) | int32(qh>>(j+16)&1)<<4
	}
}

// dotQ5_0Generic: v = (q − 16)·d.
func dotQ5_0Generic(row []byte, nb int, v *QVec) float32 {
	var sum float32
	var qq [32]int32
	q := v.Q
	s := v.S[:nb]
	for b, d := range v.D[:nb] {
		w := (*[22]byte)(row[22*b:])
		a := (*[32]int8)(q[32*b:])
		q5Quants(uint32(w[2])|uint32(w[3])<<8|uint32(w[4])<<16|uint32(w[5])<<24, w[6:], &qq)
		var s0, s1 int32
		for j := 0; j < 32; j += 2 {
			s0 += qq[j] * int32(a[j])
			s1 += qq[j+1] * int32(a[j+1])
		}
		sum += float32(f16(w[0:])*d) * float32(s0+s1-16*s[b])
	}
	return sum
}

// dotQ5_1Generic: v = q·d + m.
func dotQ5_1Generic(row []byte, nb int, v *QVec) float32 {
	var sum float32
	var qq [32]int32
	q := v.Q
	s := v.S[:nb]
	for b, d := range v.D[:nb] {
		w := (*[24]byte)(row[24*b:])
		a := (*[32]int8)(q[32*b:])
		q5Quants(uint32(w[4])|uint32(w[5])<<8|uint32(w[6])<<16|uint32(w[7])<<24, w[8:], &qq)
		var s0, s1 int32
		for j := 0; j < 32; j += 2 {
			s0 += qq[j] * int32(a[j])
			s1 += qq[j+1] * int32(a[j+1])
		}
		sum += float32(float32(f16(w[0:])*d)*float32(s0+s1)) + float32(float32(f16(w[2:])*d)*float32(s[b]))
	}
	return sum
}

// kScales unpacks a Q4_K/Q5_K super-block's eight 6-bit scales and mins.
func kScales(p []byte) (sc, m [8]int32) {
	p = p[:12]
	for j := 0; j < 4; j++ {
		sc[j] = int32(p[j] & 63)
		m[j] = int32(p[j+4] & 63)
		sc[j+4] = int32(p[j+8]&0xf | (p[j]>>6)<<4)
		m[j+4] = int32(p[j+8]>>4 | (p[j+4]>>6)<<4)
	}
	return sc, m
}

// kCombine adds one super-block's integer sums to a row's total in the
// order every K-quant kernel uses: sum + (d·dₐ·isum − dmin·dₐ·msum).
func kCombine(sum, d, dmin, da float32, isum, msum int32) float32 {
	return sum + (float32(float32(d*da)*float32(isum)) - float32(float32(dmin*da)*float32(msum)))
}

// dotQ4KGeneric: per 32-value sub-block v = d·sc·q − dmin·m; the mins
// meet the activation through its sums per 16 (bsums).
func dotQ4KGeneric(row []byte, nb int, v *QVec) float32 {
	var sum float32
	for b, da := range v.DK[:nb] {
		blk := (*[144]byte)(row[144*b:])
		a := (*[qkK]int8)(v.QK[qkK*b:])
		bs := (*[16]int16)(v.BS[16*b:])
		sc, m := kScales(blk[4:16])
		var isum, msum int32
		for j := 0; j < 4; j++ {
			qs := (*[32]byte)(blk[16+32*j:])
			lo := (*[32]int8)(a[64*j:])
			hi := (*[32]int8)(a[64*j+32:])
			var d1, d2 int32
			for l := 0; l < 32; l++ {
				d1 += int32(qs[l]&0xf) * int32(lo[l])
				d2 += int32(qs[l]>>4) * int32(hi[l])
			}
			isum += sc[2*j]*d1 + sc[2*j+1]*d2
			msum += m[2*j]*(int32(bs[4*j])+int32(bs[4*j+1])) + m[2*j+1]*(int32(bs[4*j+2])+int32(bs[4*j+3]))
		}
		sum = kCombine(sum, f16(blk[0:]), f16(blk[2:]), da, isum, msum)
	}
	return sum
}

// dotQ5KGeneric is dotQ4KGeneric with the fifth bit from qh: bit 2j of
// qh[l] for value l of sub-block 2j, bit 2j+1 for sub-block 2j+1.
func dotQ5KGeneric(row []byte, nb int, v *QVec) float32 {
	var sum float32
	for b, da := range v.DK[:nb] {
		blk := (*[176]byte)(row[176*b:])
		a := (*[qkK]int8)(v.QK[qkK*b:])
		bs := (*[16]int16)(v.BS[16*b:])
		sc, m := kScales(blk[4:16])
		qh := (*[32]byte)(blk[16:])
		var isum, msum int32
		for j := 0; j < 4; j++ {
			qs := (*[32]byte)(blk[48+32*j:])
			lo := (*[32]int8)(a[64*j:])
			hi := (*[32]int8)(a[64*j+32:])
			var d1, d2 int32
			for l := 0; l < 32; l++ {
				h := int32(qh[l] >> (2 * j))
				d1 += (int32(qs[l]&0xf) | (h&1)<<4) * int32(lo[l])
				d2 += (int32(qs[l]>>4) | (h&2)<<3) * int32(hi[l])
			}
			isum += sc[2*j]*d1 + sc[2*j+1]*d2
			msum += m[2*j]*(int32(bs[4*j])+int32(bs[4*j+1])) + m[2*j+1]*(int32(bs[4*j+2])+int32(bs[4*j+3]))
		}
		sum = kCombine(sum, f16(blk[0:]), f16(blk[2:]), da, isum, msum)
	}
	return sum
}

// dotQ6KGeneric: v = d·sc·(q − 32) over 16-value sub-blocks; the −32
// meets the activation through its bsums.
func dotQ6KGeneric(row []byte, nb int, v *QVec) float32 {
	var sum float32
	for b, da := range v.DK[:nb] {
		blk := (*[210]byte)(row[210*b:])
		a := (*[qkK]int8)(v.QK[qkK*b:])
		bs := (*[16]int16)(v.BS[16*b:])
		var isum, msum int32
		for h := 0; h < 2; h++ {
			ql := (*[64]byte)(blk[64*h:])
			qh := (*[32]byte)(blk[128+32*h:])
			sc := (*[8]byte)(blk[192+8*h:])
			ah := (*[128]int8)(a[128*h:])
			var acc [8]int32
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf | (qh[l]&3)<<4)
				q2 := int32(ql[l+32]&0xf | (qh[l]>>2&3)<<4)
				q3 := int32(ql[l]>>4 | (qh[l]>>4&3)<<4)
				q4 := int32(ql[l+32]>>4 | (qh[l]>>6&3)<<4)
				acc[is] += q1 * int32(ah[l])
				acc[is+2] += q2 * int32(ah[l+32])
				acc[is+4] += q3 * int32(ah[l+64])
				acc[is+6] += q4 * int32(ah[l+96])
			}
			for k := 0; k < 8; k++ {
				isum += int32(int8(sc[k])) * acc[k]
			}
		}
		for s := 0; s < 16; s++ {
			msum += int32(int8(blk[192+s])) * int32(bs[s])
		}
		sum += float32(float32(f16(blk[208:])*da) * float32(isum-32*msum))
	}
	return sum
}

func dotF16RowsGeneric(w []byte, rowBytes int, x, out []float32) {
	for i := range out {
		out[i] = DotF16(w[i*rowBytes:(i+1)*rowBytes], x)
	}
}

func dotBF16RowsGeneric(w []byte, rowBytes int, x, out []float32) {
	for i := range out {
		out[i] = DotBF16(w[i*rowBytes:(i+1)*rowBytes], x)
	}
}
