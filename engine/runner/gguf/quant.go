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
				q0 := min(15, int(blk[j]*id+8.5))
				q1 := min(15, int(blk[j+16]*id+8.5))
				o[2+j] = byte(q0) | byte(q1)<<4
			}
		}
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
	default:
		return nil, fmt.Errorf("gguf: decoding %s is not supported", t)
	}
	return x, nil
}
