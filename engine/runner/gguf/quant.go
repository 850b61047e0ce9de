package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encode converts float32 values to the encoded form of type t, using the
// reference rounding of ggml's quantize_row_*_ref. len(x) must be a
// multiple of the type's block size.
func Encode(t TensorType, x []float32) ([]byte, error) {
	bs := t.BlockSize()
	if bs == 0 || uint64(len(x))%bs != 0 {
		return nil, fmt.Errorf("gguf: cannot encode %d values as %s", len(x), t)
	}
	out := make([]byte, t.RowBytes(uint64(len(x))))
	le := binary.LittleEndian
	switch t {
	case F32:
		for i, v := range x {
			le.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range x {
			le.PutUint16(out[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range x {
			le.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(x)/32; b++ {
			blk := x[b*32 : b*32+32]
			var amax float32
			for _, v := range blk {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			d := amax / 127
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			o := out[b*34:]
			le.PutUint16(o, F32ToF16(d))
			for j, v := range blk {
				o[2+j] = byte(int8(math.Round(float64(v * id))))
			}
		}
	case Q4_0:
		for b := 0; b < len(x)/32; b++ {
			blk := x[b*32 : b*32+32]
			var amax, mx float32
			for _, v := range blk {
				if a := float32(math.Abs(float64(v))); a > amax {
					amax, mx = a, v
				}
			}
			d := mx / -8
			id := float32(0)
			if d != 0 {
				id = 1 / d
			}
			o := out[b*18:]
			le.PutUint16(o, F32ToF16(d))
			for j := 0; j < 16; j++ {
				q0 := min(15, int(float32(blk[j]*id)+8.5))
				q1 := min(15, int(float32(blk[j+16]*id)+8.5))
				o[2+j] = byte(q0) | byte(q1)<<4
			}
		}
	case Q4_1, Q5_1:
		encodeQx1(t, x, out)
	case Q5_0:
		encodeQ5_0(x, out)
	case Q4_K:
		encodeQ4K(x, out)
	case Q5_K:
		encodeQ5K(x, out)
	case Q6_K:
		encodeQ6K(x, out)
	default:
		return nil, fmt.Errorf("gguf: encoding %s is not supported", t)
	}
	return out, nil
}

// Decode converts n encoded values of type t to float32.
func Decode(t TensorType, data []byte, n int) ([]float32, error) {
	bs := t.BlockSize()
	if bs == 0 || uint64(n)%bs != 0 {
		return nil, fmt.Errorf("gguf: cannot decode %d values as %s", n, t)
	}
	if need := t.RowBytes(uint64(n)); uint64(len(data)) < need {
		return nil, fmt.Errorf("gguf: decoding %d %s values needs %d bytes, have %d", n, t, need, len(data))
	}
	x := make([]float32, n)
	le := binary.LittleEndian
	switch t {
	case F32:
		for i := range x {
			x[i] = math.Float32frombits(le.Uint32(data[4*i:]))
		}
	case F16:
		for i := range x {
			x[i] = F16ToF32(le.Uint16(data[2*i:]))
		}
	case BF16:
		for i := range x {
			x[i] = BF16ToF32(le.Uint16(data[2*i:]))
		}
	case Q8_0:
		for b := 0; b < n/32; b++ {
			blk := data[b*34:]
			d := F16ToF32(le.Uint16(blk))
			for j := 0; j < 32; j++ {
				x[b*32+j] = float32(int8(blk[2+j])) * d
			}
		}
	case Q4_0:
		for b := 0; b < n/32; b++ {
			blk := data[b*18:]
			d := F16ToF32(le.Uint16(blk))
			for j := 0; j < 16; j++ {
				x[b*32+j] = float32(int(blk[2+j]&0xf)-8) * d
				x[b*32+j+16] = float32(int(blk[2+j]>>4)-8) * d
			}
		}
	case Q4_1:
		for b := 0; b < n/32; b++ {
			blk := data[b*20:]
			d, m := F16ToF32(le.Uint16(blk)), F16ToF32(le.Uint16(blk[2:]))
			for j := 0; j < 16; j++ {
				x[b*32+j] = float32(float32(blk[4+j]&0xf)*d) + m
				x[b*32+j+16] = float32(float32(blk[4+j]>>4)*d) + m
			}
		}
	case Q5_0, Q5_1:
		// Q5_0: d, qh, qs (22 bytes), v = (q − 16)·d; Q5_1: d, m, qh, qs
		// (24 bytes), v = q·d + m. Bit j of qh is value j's fifth bit.
		bb, off := 22, 2
		if t == Q5_1 {
			bb, off = 24, 4
		}
		for b := 0; b < n/32; b++ {
			blk := data[b*bb:]
			d := F16ToF32(le.Uint16(blk))
			qh := le.Uint32(blk[off:])
			qs := blk[off+4 : off+20]
			for j := 0; j < 16; j++ {
				q0 := int32(qs[j]&0xf) | int32((qh>>j)<<4)&0x10
				q1 := int32(qs[j]>>4) | int32(qh>>(j+12))&0x10
				if t == Q5_0 {
					x[b*32+j] = float32(q0-16) * d
					x[b*32+j+16] = float32(q1-16) * d
				} else {
					m := F16ToF32(le.Uint16(blk[2:]))
					x[b*32+j] = float32(float32(q0)*d) + m
					x[b*32+j+16] = float32(float32(q1)*d) + m
				}
			}
		}
	case Q4_K:
		decodeQ4K(data, x)
	case Q5_K:
		decodeQ5K(data, x)
	case Q6_K:
		decodeQ6K(data, x)
	default:
		return nil, fmt.Errorf("gguf: decoding %s is not supported", t)
	}
	return x, nil
}

// encodeQx1 is quantize_row_q4_1_ref and quantize_row_q5_1_ref: a scale
// and the block minimum, values rounded up from the minimum. Q4_1
// blocks are d, m, 16 bytes of nibbles; Q5_1 blocks put the fifth bits
// (qh, bit j for value j) between m and the nibbles.
func encodeQx1(t TensorType, x []float32, out []byte) {
	le := binary.LittleEndian
	levels, bb := float32(15), 20
	if t == Q5_1 {
		levels, bb = 31, 24
	}
	for b := 0; b < len(x)/32; b++ {
		blk := x[b*32 : b*32+32]
		lo, hi := float32(math.MaxFloat32), float32(-math.MaxFloat32)
		for _, v := range blk {
			lo = min(lo, v)
			hi = max(hi, v)
		}
		d := (hi - lo) / levels
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		o := out[b*bb : (b+1)*bb]
		le.PutUint16(o, F32ToF16(d))
		le.PutUint16(o[2:], F32ToF16(lo))
		var qh uint32
		for j := 0; j < 16; j++ {
			x0 := float32((blk[j] - lo) * id)
			x1 := float32((blk[j+16] - lo) * id)
			if t == Q4_1 {
				// (int8_t)(x + 0.5f) capped at 15, as ggml does.
				o[4+j] = byte(min(15, int8(x0+0.5))) | byte(min(15, int8(x1+0.5)))<<4
				continue
			}
			q0, q1 := uint8(x0+0.5), uint8(x1+0.5)
			o[8+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10) >> 4 << j
			qh |= uint32(q1&0x10) >> 4 << (j + 16)
		}
		if t == Q5_1 {
			le.PutUint32(o[4:], qh)
		}
	}
}

// encodeQ5_0 is quantize_row_q5_0_ref: like Q4_0 with 32 levels, the
// fifth bits in qh.
func encodeQ5_0(x []float32, out []byte) {
	le := binary.LittleEndian
	for b := 0; b < len(x)/32; b++ {
		blk := x[b*32 : b*32+32]
		var amax, mx float32
		for _, v := range blk {
			if a := abs32(v); amax < a {
				amax, mx = a, v
			}
		}
		d := mx / -16
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		o := out[b*22 : (b+1)*22]
		le.PutUint16(o, F32ToF16(d))
		var qh uint32
		for j := 0; j < 16; j++ {
			q0 := uint8(min(31, int8(float32(blk[j]*id)+16.5)))
			q1 := uint8(min(31, int8(float32(blk[j+16]*id)+16.5)))
			o[6+j] = q0&0xf | (q1&0xf)<<4
			qh |= uint32(q0&0x10) >> 4 << j
			qh |= uint32(q1&0x10) >> 4 << (j + 16)
		}
		le.PutUint32(o[2:], qh)
	}
}
