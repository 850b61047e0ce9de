// Package kernels owns the arithmetic of a llama forward pass on the CPU:
// dot products directly on quantised rows (Q8_0, Q4_0) and float rows (F32,
// F16, BF16), matrix-vector products partitioned by rows over a worker
// pool, RMSNorm, RoPE, softmax and grouped-query attention.
package kernels

import (
	"encoding/binary"
	"math"

	"meshd/engine/gguf"
)

// QVec is an activation vector quantised to blocks of 32 int8 values with
// one float32 scale each, the form ggml uses (Q8_0/Q8_1) to dot against
// quantised weights with integer arithmetic.
type QVec struct {
	Q []int8
	D []float32
	// S is the sum of each block's quants: Q4_0 stores nibbles offset by
	// 8, and subtracting 8·S recentres a whole block at once.
	S []int32
}

// NewQVec allocates a QVec for n values (n a multiple of 32).
func NewQVec(n int) *QVec {
	return &QVec{Q: make([]int8, n), D: make([]float32, n/32), S: make([]int32, n/32)}
}

// Quantize fills v from x, len(x) == len(v.Q).
func (v *QVec) Quantize(x []float32) {
	for b := range v.D {
		blk := (*[32]float32)(x[b*32:])
		var amax float32
		for _, f := range blk {
			amax = max(amax, abs32(f))
		}
		d := amax / 127
		id := float32(0)
		if d != 0 {
			id = 1 / d
		}
		q := (*[32]int8)(v.Q[b*32:])
		var s int32
		for j, f := range blk {
			// round half away from zero, as roundf does in ggml
			r := int8(math.Round(float64(f * id)))
			q[j] = r
			s += int32(r)
		}
		v.D[b] = d
		v.S[b] = s
	}
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// DotQ8_0 is the dot product of one Q8_0 row (len(v.D) blocks) with v.
func DotQ8_0(row []byte, v *QVec) float32 {
	var sum float32
	d := v.D
	row = row[:len(d)*34]
	q := v.Q[:len(d)*32]
	for b := range d {
		w := (*[34]byte)(row[b*34:])
		a := (*[32]int8)(q[b*32:])
		var s0, s1, s2, s3 int32
		s0 += int32(int8(w[2])) * int32(a[0])
		s1 += int32(int8(w[3])) * int32(a[1])
		s2 += int32(int8(w[4])) * int32(a[2])
		s3 += int32(int8(w[5])) * int32(a[3])
		s0 += int32(int8(w[6])) * int32(a[4])
		s1 += int32(int8(w[7])) * int32(a[5])
		s2 += int32(int8(w[8])) * int32(a[6])
		s3 += int32(int8(w[9])) * int32(a[7])
		s0 += int32(int8(w[10])) * int32(a[8])
		s1 += int32(int8(w[11])) * int32(a[9])
		s2 += int32(int8(w[12])) * int32(a[10])
		s3 += int32(int8(w[13])) * int32(a[11])
		s0 += int32(int8(w[14])) * int32(a[12])
		s1 += int32(int8(w[15])) * int32(a[13])
		s2 += int32(int8(w[16])) * int32(a[14])
		s3 += int32(int8(w[17])) * int32(a[15])
		s0 += int32(int8(w[18])) * int32(a[16])
		s1 += int32(int8(w[19])) * int32(a[17])
		s2 += int32(int8(w[20])) * int32(a[18])
		s3 += int32(int8(w[21])) * int32(a[19])
		s0 += int32(int8(w[22])) * int32(a[20])
		s1 += int32(int8(w[23])) * int32(a[21])
		s2 += int32(int8(w[24])) * int32(a[22])
		s3 += int32(int8(w[25])) * int32(a[23])
		s0 += int32(int8(w[26])) * int32(a[24])
		s1 += int32(int8(w[27])) * int32(a[25])
		s2 += int32(int8(w[28])) * int32(a[26])
		s3 += int32(int8(w[29])) * int32(a[27])
		s0 += int32(int8(w[30])) * int32(a[28])
		s1 += int32(int8(w[31])) * int32(a[29])
		s2 += int32(int8(w[32])) * int32(a[30])
		s3 += int32(int8(w[33])) * int32(a[31])
		dw := gguf.F16ToF32(uint16(w[0]) | uint16(w[1])<<8)
		sum += dw * d[b] * float32(s0+s1+s2+s3)
	}
	return sum
}

// DotQ4_0 is the dot product of one Q4_0 row with v.
func DotQ4_0(row []byte, v *QVec) float32 {
	var sum float32
	d := v.D
	row = row[:len(d)*18]
	q := v.Q[:len(d)*32]
	s := v.S[:len(d)]
	for b := range d {
		w := (*[18]byte)(row[b*18:])
		a := (*[32]int8)(q[b*32:])
		var s0, s1 int32
		for j := 0; j < 16; j += 4 {
			s0 += int32(w[2+j]&0xf)*int32(a[j]) + int32(w[2+j]>>4)*int32(a[j+16])
			s1 += int32(w[3+j]&0xf)*int32(a[j+1]) + int32(w[3+j]>>4)*int32(a[j+17])
			s0 += int32(w[4+j]&0xf)*int32(a[j+2]) + int32(w[4+j]>>4)*int32(a[j+18])
			s1 += int32(w[5+j]&0xf)*int32(a[j+3]) + int32(w[5+j]>>4)*int32(a[j+19])
		}
		dw := gguf.F16ToF32(uint16(w[0]) | uint16(w[1])<<8)
		sum += dw * d[b] * float32(s0+s1-8*s[b])
	}
	return sum
}

// DotF32 is the dot product of an F32-encoded row with x.
func DotF32(row []byte, x []float32) float32 {
	row = row[:len(x)*4]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		w := (*[16]byte)(row[i*4:])
		xx := (*[4]float32)(x[i:])
		s0 += math.Float32frombits(binary.LittleEndian.Uint32(w[0:])) * xx[0]
		s1 += math.Float32frombits(binary.LittleEndian.Uint32(w[4:])) * xx[1]
		s2 += math.Float32frombits(binary.LittleEndian.Uint32(w[8:])) * xx[2]
		s3 += math.Float32frombits(binary.LittleEndian.Uint32(w[12:])) * xx[3]
	}
	for ; i < len(x); i++ {
		s0 += math.Float32frombits(binary.LittleEndian.Uint32(row[i*4:])) * x[i]
	}
	return s0 + s1 + s2 + s3
}

// DotF16 is the dot product of an F16-encoded row with x.
func DotF16(row []byte, x []float32) float32 {
	row = row[:len(x)*2]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		w := (*[4]byte)(row[i*2:])
		s0 += gguf.F16ToF32(uint16(w[0])|uint16(w[1])<<8) * x[i]
		s1 += gguf.F16ToF32(uint16(w[2])|uint16(w[3])<<8) * x[i+1]
	}
	for ; i < len(x); i++ {
		s0 += gguf.F16ToF32(binary.LittleEndian.Uint16(row[i*2:])) * x[i]
	}
	return s0 + s1
}

// DotBF16 is the dot product of a BF16-encoded row with x.
func DotBF16(row []byte, x []float32) float32 {
	row = row[:len(x)*2]
	var s0, s1 float32
	i := 0
	for ; i+2 <= len(x); i += 2 {
		w := (*[4]byte)(row[i*2:])
		s0 += math.Float32frombits(uint32(w[0])<<16|uint32(w[1])<<24) * x[i]
		s1 += math.Float32frombits(uint32(w[2])<<16|uint32(w[3])<<24) * x[i+1]
	}
	for ; i < len(x); i++ {
		s0 += gguf.BF16ToF32(binary.LittleEndian.Uint16(row[i*2:])) * x[i]
	}
	return s0 + s1
}
