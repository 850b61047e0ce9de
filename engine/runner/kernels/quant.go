// Package kernels owns the arithmetic of a llama forward pass on the CPU:
// dot products directly on quantised rows (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
// Q4_K, Q5_K, Q6_K, against activations quantised as ggml does) and float
// rows (F32, F16, BF16), matrix-vector products partitioned by rows over a
// worker pool, matrix products over a batch of prompt tokens, RMSNorm,
// RoPE, softmax and grouped-query attention.
//
// On amd64 CPUs with AVX2, FMA and F16C the row kernels of every quantised
// type, F16 and BF16, and attention's scores and sums run as Go assembly;
// on arm64 the Q8_0, Q4_0 and Q4_K rows run as NEON assembly (SDOT where
// the CPU has it). The portable Go kernels serve every other case and the
// purego build tag, and the tests hold each fast path equal to them.
package kernels

import (
	"encoding/binary"
	"math"

	"meshd/engine/runner/gguf"
)

// QVec is an activation vector quantised the ways ggml quantises
// activations to dot them against quantised weights with integer
// arithmetic.
//
// Q, D and S are the 32-value form (ggml's Q8_0/Q8_1), used with Q8_0,
// Q4_0, Q4_1, Q5_0 and Q5_1 rows. QK, DK and BS are the 256-value form
// (ggml's block_q8_K), used with the K-quants (Q4_K, Q5_K, Q6_K): one
// scale per super-block lets a whole super-block accumulate in integers.
// Quantize fills every form the QVec was allocated with.
type QVec struct {
	Q []int8
	D []float32
	// S is the sum of each block's quants: Q4_0 stores nibbles offset by
	// 8, and subtracting 8·S recentres a whole block at once.
	S []int32

	// QK holds the quants of the 256-value form, DK a scale per 256
	// values (negative when the block's largest magnitude is negative,
	// as in ggml), BS the sums of each 16 consecutive quants.
	QK []int8
	DK []float32
	BS []int16
}

// NewQVec allocates a QVec for n values (n a multiple of 32) with every
// form n allows: the 32-value form always, the 256-value form when n is
// a multiple of 256. Use NewActivation to allocate only the forms a set
// of matrices reads.
func NewQVec(n int) *QVec {
	v := &QVec{Q: make([]int8, n), D: make([]float32, n/32), S: make([]int32, n/32)}
	if n%qkK == 0 {
		v.allocK(n)
	}
	return v
}

// NewActivation allocates a QVec for n values holding exactly the forms
// the given matrices' products read: nil when none of them is quantised
// (float rows read the float activation).
func NewActivation(n int, ms ...*Matrix) *QVec {
	var v *QVec
	for _, m := range ms {
		if m == nil || !m.Quantized() {
			continue
		}
		if v == nil {
			v = &QVec{}
		}
		if isKQuant(m.Type) {
			if v.DK == nil {
				v.allocK(n)
			}
		} else if v.D == nil {
			v.Q, v.D, v.S = make([]int8, n), make([]float32, n/32), make([]int32, n/32)
		}
	}
	return v
}

// NewActivation allocates the activation for products with m alone: a
// QVec of m.Cols values in the form m's rows read, nil for float rows.
func (m *Matrix) NewActivation() *QVec { return NewActivation(m.Cols, m) }

func (v *QVec) allocK(n int) {
	v.QK, v.DK, v.BS = make([]int8, n), make([]float32, n/qkK), make([]int16, n/16)
}

// Quantize fills v from x: each allocated form, len(x) == its length.
func (v *QVec) Quantize(x []float32) {
	if len(v.D) > 0 {
		v.quantize32(x)
	}
	if len(v.DK) > 0 {
		v.quantizeK(x)
	}
}

// quantize32Generic quantises the blocks of the 32-value form from
// block from on: the scale maps the block's largest magnitude to 127,
// each value rounds half away from zero.
func (v *QVec) quantize32Generic(x []float32, from int) {
	for b := from; b < len(v.D); b++ {
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
			// Round half away from zero, as roundf does in ggml. |r| is
			// at most 127 (plus rounding), so truncating it and taking
			// the fraction are both exact, and unlike math.Round this
			// compiles to a few instructions without branches.
			r := f * id
			t := int32(r)
			fr := r - float32(t)
			if fr >= 0.5 {
				t++
			}
			if fr <= -0.5 {
				t--
			}
			q[j] = int8(t)
			s += t
		}
		v.D[b] = d
		v.S[b] = s
	}
}

// quantizeKGeneric is ggml's quantize_row_q8_K_ref, from block from
// on: the value of largest magnitude maps to −127 (so the scale carries
// its sign), the others round to nearest, ties to even, capped at 127.
func (v *QVec) quantizeKGeneric(x []float32, from int) {
	for b := from; b < len(v.DK); b++ {
		blk := (*[qkK]float32)(x[b*qkK:])
		q := (*[qkK]int8)(v.QK[b*qkK:])
		bs := (*[qkK / 16]int16)(v.BS[b*(qkK/16):])
		var amax, mx float32
		for _, f := range blk {
			if a := abs32(f); a > amax {
				amax, mx = a, f
			}
		}
		if amax == 0 {
			v.DK[b] = 0
			clear(q[:])
			clear(bs[:])
			continue
		}
		iscale := -127 / mx
		for j, f := range blk {
			q[j] = int8(min(127, nearestInt(iscale*f)))
		}
		for j := range bs {
			var s int16
			for _, qq := range q[16*j : 16*j+16] {
				s += int16(qq)
			}
			bs[j] = s
		}
		v.DK[b] = 1 / iscale
	}
}

// nearestInt rounds to nearest, ties to even, as ggml's nearest_int.
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

const qkK = gguf.QK_K

func isKQuant(t gguf.TensorType) bool {
	return t == gguf.Q4_K || t == gguf.Q5_K || t == gguf.Q6_K
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// The row kernels walk their slices by reslicing rather than indexing
// from a block number: with a fixed base pointer per block the compiler
// folds every constant offset into the load, which roughly doubles
// throughput over computed indices.

// DotQ8_0 is the dot product of one Q8_0 row with v, over the blocks both
// hold. The activation quants must lie in [-127, 127], as Quantize
// leaves them.
func DotQ8_0(row []byte, v *QVec) float32 {
	var out [1]float32
	nb := min(len(v.D), len(v.Q)/32, len(row)/34)
	dotQ8_0Rows(row, 34*nb, nb, v, out[:])
	return out[0]
}

// dotQ8_0RowsGeneric is dotQ8_0Rows in portable Go: four rows at a time
// share the activation loads, and the one-row kernel takes the rest.
// Both add a row's blocks in the same order, so a row's result does not
// depend on its position.
func dotQ8_0RowsGeneric(w []byte, rowBytes, nb int, v *QVec, out []float32) {
	i := 0
	var o [4]float32
	for ; i+4 <= len(out); i += 4 {
		d := w[i*rowBytes:]
		dotQ8_0x4Generic(d[:nb*34], d[rowBytes:rowBytes+nb*34], d[2*rowBytes:2*rowBytes+nb*34], d[3*rowBytes:3*rowBytes+nb*34], v, &o)
		copy(out[i:i+4], o[:])
	}
	for ; i < len(out); i++ {
		out[i] = dotQ8_0Generic(w[i*rowBytes:i*rowBytes+nb*34], v)
	}
}

// dotQ8_0Generic is the dot product of one Q8_0 row (up to len(v.D)
// blocks) with v.
func dotQ8_0Generic(row []byte, v *QVec) float32 {
	var sum float32
	q := v.Q
	for _, d := range v.D {
		if len(row) < 34 || len(q) < 32 {
			break
		}
		w := (*[34]byte)(row)
		a := (*[32]int8)(q)
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
		sum += dw * d * float32(s0+s1+s2+s3)
		row = row[34:]
		q = q[32:]
	}
	return sum
}

// dotQ8_0x4Generic computes four rows' dot products with v at once,
// loading each activation quant once for all four: the loop is bound by
// instruction count, and this removes three of every eight loads.
func dotQ8_0x4Generic(r0, r1, r2, r3 []byte, v *QVec, out *[4]float32) {
	var o0, o1, o2, o3 float32
	q := v.Q
	for _, d := range v.D {
		if len(r0) < 34 || len(r1) < 34 || len(r2) < 34 || len(r3) < 34 || len(q) < 32 {
			break
		}
		w0, w1, w2, w3 := (*[34]byte)(r0), (*[34]byte)(r1), (*[34]byte)(r2), (*[34]byte)(r3)
		a := (*[32]int8)(q)
		var s0, s1, s2, s3, aj int32
		aj = int32(a[0])
		s0 += int32(int8(w0[2])) * aj
		s1 += int32(int8(w1[2])) * aj
		s2 += int32(int8(w2[2])) * aj
		s3 += int32(int8(w3[2])) * aj
		aj = int32(a[1])
		s0 += int32(int8(w0[3])) * aj
		s1 += int32(int8(w1[3])) * aj
		s2 += int32(int8(w2[3])) * aj
		s3 += int32(int8(w3[3])) * aj
		aj = int32(a[2])
		s0 += int32(int8(w0[4])) * aj
		s1 += int32(int8(w1[4])) * aj
		s2 += int32(int8(w2[4])) * aj
		s3 += int32(int8(w3[4])) * aj
		aj = int32(a[3])
		s0 += int32(int8(w0[5])) * aj
		s1 += int32(int8(w1[5])) * aj
		s2 += int32(int8(w2[5])) * aj
		s3 += int32(int8(w3[5])) * aj
		aj = int32(a[4])
		s0 += int32(int8(w0[6])) * aj
		s1 += int32(int8(w1[6])) * aj
		s2 += int32(int8(w2[6])) * aj
		s3 += int32(int8(w3[6])) * aj
		aj = int32(a[5])
		s0 += int32(int8(w0[7])) * aj
		s1 += int32(int8(w1[7])) * aj
		s2 += int32(int8(w2[7])) * aj
		s3 += int32(int8(w3[7])) * aj
		aj = int32(a[6])
		s0 += int32(int8(w0[8])) * aj
		s1 += int32(int8(w1[8])) * aj
		s2 += int32(int8(w2[8])) * aj
		s3 += int32(int8(w3[8])) * aj
		aj = int32(a[7])
		s0 += int32(int8(w0[9])) * aj
		s1 += int32(int8(w1[9])) * aj
		s2 += int32(int8(w2[9])) * aj
		s3 += int32(int8(w3[9])) * aj
		aj = int32(a[8])
		s0 += int32(int8(w0[10])) * aj
		s1 += int32(int8(w1[10])) * aj
		s2 += int32(int8(w2[10])) * aj
		s3 += int32(int8(w3[10])) * aj
		aj = int32(a[9])
		s0 += int32(int8(w0[11])) * aj
		s1 += int32(int8(w1[11])) * aj
		s2 += int32(int8(w2[11])) * aj
		s3 += int32(int8(w3[11])) * aj
		aj = int32(a[10])
		s0 += int32(int8(w0[12])) * aj
		s1 += int32(int8(w1[12])) * aj
		s2 += int32(int8(w2[12])) * aj
		s3 += int32(int8(w3[12])) * aj
		aj = int32(a[11])
		s0 += int32(int8(w0[13])) * aj
		s1 += int32(int8(w1[13])) * aj
		s2 += int32(int8(w2[13])) * aj
		s3 += int32(int8(w3[13])) * aj
		aj = int32(a[12])
		s0 += int32(int8(w0[14])) * aj
		s1 += int32(int8(w1[14])) * aj
		s2 += int32(int8(w2[14])) * aj
		s3 += int32(int8(w3[14])) * aj
		aj = int32(a[13])
		s0 += int32(int8(w0[15])) * aj
		s1 += int32(int8(w1[15])) * aj
		s2 += int32(int8(w2[15])) * aj
		s3 += int32(int8(w3[15])) * aj
		aj = int32(a[14])
		s0 += int32(int8(w0[16])) * aj
		s1 += int32(int8(w1[16])) * aj
		s2 += int32(int8(w2[16])) * aj
		s3 += int32(int8(w3[16])) * aj
		aj = int32(a[15])
		s0 += int32(int8(w0[17])) * aj
		s1 += int32(int8(w1[17])) * aj
		s2 += int32(int8(w2[17])) * aj
		s3 += int32(int8(w3[17])) * aj
		aj = int32(a[16])
		s0 += int32(int8(w0[18])) * aj
		s1 += int32(int8(w1[18])) * aj
		s2 += int32(int8(w2[18])) * aj
		s3 += int32(int8(w3[18])) * aj
		aj = int32(a[17])
		s0 += int32(int8(w0[19])) * aj
		s1 += int32(int8(w1[19])) * aj
		s2 += int32(int8(w2[19])) * aj
		s3 += int32(int8(w3[19])) * aj
		aj = int32(a[18])
		s0 += int32(int8(w0[20])) * aj
		s1 += int32(int8(w1[20])) * aj
		s2 += int32(int8(w2[20])) * aj
		s3 += int32(int8(w3[20])) * aj
		aj = int32(a[19])
		s0 += int32(int8(w0[21])) * aj
		s1 += int32(int8(w1[21])) * aj
		s2 += int32(int8(w2[21])) * aj
		s3 += int32(int8(w3[21])) * aj
		aj = int32(a[20])
		s0 += int32(int8(w0[22])) * aj
		s1 += int32(int8(w1[22])) * aj
		s2 += int32(int8(w2[22])) * aj
		s3 += int32(int8(w3[22])) * aj
		aj = int32(a[21])
		s0 += int32(int8(w0[23])) * aj
		s1 += int32(int8(w1[23])) * aj
		s2 += int32(int8(w2[23])) * aj
		s3 += int32(int8(w3[23])) * aj
		aj = int32(a[22])
		s0 += int32(int8(w0[24])) * aj
		s1 += int32(int8(w1[24])) * aj
		s2 += int32(int8(w2[24])) * aj
		s3 += int32(int8(w3[24])) * aj
		aj = int32(a[23])
		s0 += int32(int8(w0[25])) * aj
		s1 += int32(int8(w1[25])) * aj
		s2 += int32(int8(w2[25])) * aj
		s3 += int32(int8(w3[25])) * aj
		aj = int32(a[24])
		s0 += int32(int8(w0[26])) * aj
		s1 += int32(int8(w1[26])) * aj
		s2 += int32(int8(w2[26])) * aj
		s3 += int32(int8(w3[26])) * aj
		aj = int32(a[25])
		s0 += int32(int8(w0[27])) * aj
		s1 += int32(int8(w1[27])) * aj
		s2 += int32(int8(w2[27])) * aj
		s3 += int32(int8(w3[27])) * aj
		aj = int32(a[26])
		s0 += int32(int8(w0[28])) * aj
		s1 += int32(int8(w1[28])) * aj
		s2 += int32(int8(w2[28])) * aj
		s3 += int32(int8(w3[28])) * aj
		aj = int32(a[27])
		s0 += int32(int8(w0[29])) * aj
		s1 += int32(int8(w1[29])) * aj
		s2 += int32(int8(w2[29])) * aj
		s3 += int32(int8(w3[29])) * aj
		aj = int32(a[28])
		s0 += int32(int8(w0[30])) * aj
		s1 += int32(int8(w1[30])) * aj
		s2 += int32(int8(w2[30])) * aj
		s3 += int32(int8(w3[30])) * aj
		aj = int32(a[29])
		s0 += int32(int8(w0[31])) * aj
		s1 += int32(int8(w1[31])) * aj
		s2 += int32(int8(w2[31])) * aj
		s3 += int32(int8(w3[31])) * aj
		aj = int32(a[30])
		s0 += int32(int8(w0[32])) * aj
		s1 += int32(int8(w1[32])) * aj
		s2 += int32(int8(w2[32])) * aj
		s3 += int32(int8(w3[32])) * aj
		aj = int32(a[31])
		s0 += int32(int8(w0[33])) * aj
		s1 += int32(int8(w1[33])) * aj
		s2 += int32(int8(w2[33])) * aj
		s3 += int32(int8(w3[33])) * aj
		o0 += gguf.F16ToF32(uint16(w0[0])|uint16(w0[1])<<8) * d * float32(s0)
		o1 += gguf.F16ToF32(uint16(w1[0])|uint16(w1[1])<<8) * d * float32(s1)
		o2 += gguf.F16ToF32(uint16(w2[0])|uint16(w2[1])<<8) * d * float32(s2)
		o3 += gguf.F16ToF32(uint16(w3[0])|uint16(w3[1])<<8) * d * float32(s3)
		r0, r1, r2, r3 = r0[34:], r1[34:], r2[34:], r3[34:]
		q = q[32:]
	}
	out[0], out[1], out[2], out[3] = o0, o1, o2, o3
}

// DotQ4_0 is the dot product of one Q4_0 row with v, over the blocks
// both hold.
func DotQ4_0(row []byte, v *QVec) float32 {
	var out [1]float32
	nb := min(len(v.D), len(v.Q)/32, len(row)/18)
	if nb == 0 {
		return 0
	}
	dotQ4_0Rows(row, 18*nb, nb, v, out[:])
	return out[0]
}

// DotF32 is the dot product of an F32-encoded row with x.
//
// It keeps 32 running sums, value j going to sum j mod 32, each product
// rounded to float32 before it is added (the conversion keeps the
// compiler from fusing the two), and folds them in halves: 32 to 16, 8,
// 4, then (s0+s1)+(s2+s3). The vector kernels (dotf32_amd64.s,
// dotf32_arm64.s) keep the same sums in their lanes and fold them the
// same way, so every path gives the same bits; a fused multiply-add
// would make that depend on whether a CPU or compiler fuses. The lanes
// also shorten each chain of roundings to a 32nd of the row.
func DotF32(row []byte, x []float32) float32 {
	row = row[:len(x)*4]
	var s [32]float32
	i := 0
	for ; i+32 <= len(x); i += 32 {
		w := (*[128]byte)(row[i*4:])
		xx := (*[32]float32)(x[i:])
		for k := range s {
			s[k] += float32(math.Float32frombits(binary.LittleEndian.Uint32(w[4*k:])) * xx[k])
		}
	}
	for k := 0; i < len(x); i, k = i+1, k+1 {
		s[k] += float32(math.Float32frombits(binary.LittleEndian.Uint32(row[i*4:])) * x[i])
	}
	for k := 0; k < 16; k++ {
		s[k] += s[k+16]
	}
	for k := 0; k < 8; k++ {
		s[k] += s[k+8]
	}
	for k := 0; k < 4; k++ {
		s[k] += s[k+4]
	}
	return (s[0] + s[1]) + (s[2] + s[3])
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
