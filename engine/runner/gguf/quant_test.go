package gguf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"
)

// goldenInput is a fixed signal over eight 256-value super-blocks: plain
// noise, a small signal offset away from zero (exercises the K-quant
// minimums), noise with outliers, small values and one all-zero block.
// An integer generator keeps it bit-identical to the C program the
// golden hashes below came from.
func goldenInput(n int) []float32 {
	x := make([]float32, n)
	s := uint32(12345)
	for i := range x {
		s = s*1664525 + 1013904223
		v := float32(int32(s>>9)-(1<<22)) / float32(1<<22)
		blk := i / 256
		switch blk % 4 {
		case 0:
			x[i] = v
		case 1:
			x[i] = float32(v*0.01) + 0.003
		case 2:
			if i%17 == 0 {
				x[i] = v * 8
			} else {
				x[i] = v * 0.5
			}
		case 3:
			if blk%8 == 3 {
				x[i] = 0
			} else {
				x[i] = v * 1e-3
			}
		}
	}
	return x
}

// TestEncodeMatchesGGMLReference compares the encoded bytes with those
// of ggml's quantize_row_*_ref (copied from ggml-quants.c into a small C
// program built with gcc -O2 -mf16c -ffp-contract=off, fp16 through
// F16C as ggml's x86 build does) on goldenInput(2048). Any change to a
// rounding rule, a candidate scale or the bit packing changes the hash.
func TestEncodeMatchesGGMLReference(t *testing.T) {
	x := goldenInput(2048)
	for _, tc := range []struct {
		typ    TensorType
		sha256 string
	}{
		{Q4_0, "efc035585953aa4c56d31647e830e8ada7d33221667871b08650132ca59d41d2"},
		{Q4_1, "8dfec9ecbdeb694ecc69c0131eaa121af5d6b61a987c8bc8fee9407f9dca0301"},
		{Q5_0, "bcb201817fd038082e22c72471f3b180f8669037c1444a724ac0ee66f85cd3f4"},
		{Q5_1, "c5f8d21dfa4c2ad693d726ef43e60c12514a5722dd1e3b88703124d75a807fec"},
		{Q8_0, "3ed96e3fd089a696a77864e5b115724d5f8b6f38cc4e693eacd55b3385bbbe07"},
		{Q4_K, "36acabb4f74e77007f3eb6b2dcd4ede9aaa0e143898392821ed7393d309b05c0"},
		{Q5_K, "95d06c3686c3c95d627cbea923c8dbc7f4811d700317bbf1c68f39932c9e5ad7"},
		{Q6_K, "3b27562c54d945ce675e1531e249068957337f6a863924012b93e4db25af2843"},
	} {
		enc, err := Encode(tc.typ, x)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(enc)
		if got := hex.EncodeToString(sum[:]); got != tc.sha256 {
			t.Errorf("%s: sha256 of %d encoded bytes %s, ggml reference %s", tc.typ, len(enc), got, tc.sha256)
		}
	}
}

// TestRoundTripError measures each type's round-trip error two ways.
// ggml's test-quantize-fns metric (√Σd² / n on 0.1 + 2·cos(i), 4096
// values) must stay below its MAX_QUANTIZATION_TOTAL_ERROR of 0.002 for
// every type of four bits or more. The RMSE relative to the signal's RMS
// on Gaussian weights must stay below a per-type bound a little above
// what these quantisers measure (Q8_0 0.52%, Q6_K 1.75%, Q5_K 3.54%,
// Q5_1 3.70%, Q5_0 4.17%, Q4_K 7.03%, Q4_1 7.69%, Q4_0 8.26%): a
// quantiser that lost a bit or a scale would exceed it, and each bound
// sits below the measured error of the next coarser type.
func TestRoundTripError(t *testing.T) {
	const n = 4096
	cosData := make([]float32, n)
	for i := range cosData {
		cosData[i] = 0.1 + 2*float32(math.Cos(float64(i)))
	}
	r := rand.New(rand.NewPCG(7, 8))
	gauss := make([]float32, n)
	for i := range gauss {
		gauss[i] = float32(r.NormFloat64() * 0.02)
	}
	for _, tc := range []struct {
		typ    TensorType
		relMax float64
	}{
		{Q8_0, 0.006}, {Q6_K, 0.019}, {Q5_K, 0.0365}, {Q5_1, 0.0385}, {Q5_0, 0.043},
		{Q4_K, 0.074}, {Q4_1, 0.080}, {Q4_0, 0.086}, {F16, 0.0003}, {BF16, 0.002},
	} {
		ggmlErr := roundTrip(t, tc.typ, cosData, func(sumSq, _ float64) float64 { return math.Sqrt(sumSq) / n })
		if ggmlErr > 0.002 {
			t.Errorf("%s: test-quantize-fns error %.5f above 0.002", tc.typ, ggmlErr)
		}
		rel := roundTrip(t, tc.typ, gauss, func(sumSq, sig float64) float64 { return math.Sqrt(sumSq / sig) })
		if rel > tc.relMax {
			t.Errorf("%s: relative RMSE %.4f above %.4f", tc.typ, rel, tc.relMax)
		}
		t.Logf("%-5s test-quantize-fns error %.6f, relative RMSE %.4f", tc.typ, ggmlErr, rel)
	}
}

func roundTrip(t *testing.T, typ TensorType, x []float32, metric func(sumSq, sig float64) float64) float64 {
	t.Helper()
	enc, err := Encode(typ, x)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(enc)) != typ.RowBytes(uint64(len(x))) {
		t.Fatalf("%s: %d bytes for %d values", typ, len(enc), len(x))
	}
	y, err := Decode(typ, enc, len(x))
	if err != nil {
		t.Fatal(err)
	}
	var sumSq, sig float64
	for i := range x {
		d := float64(y[i]) - float64(x[i])
		sumSq += d * d
		sig += float64(x[i]) * float64(x[i])
	}
	return metric(sumSq, sig)
}

// TestDecodeKnownKBlocks builds super-blocks by hand from the layouts in
// ggml-common.h and checks every decoded value against the formula.
func TestDecodeKnownKBlocks(t *testing.T) {
	le := binary.LittleEndian
	half := F32ToF16
	// Q4_K: d = 0.5, dmin = 0.25, sub-block j has scale j+1 (j < 4) or
	// 40+j (6 bits, j ≥ 4) and min 2j (j < 4) or 50+j; quant of value i
	// is i mod 16.
	var ls, lm [8]uint8
	for j := 0; j < 8; j++ {
		if j < 4 {
			ls[j], lm[j] = uint8(j+1), uint8(2*j)
		} else {
			ls[j], lm[j] = uint8(40+j), uint8(50+j)
		}
	}
	q4k := make([]byte, 144)
	le.PutUint16(q4k, half(0.5))
	le.PutUint16(q4k[2:], half(0.25))
	packScalesK4(q4k[4:16], &ls, &lm)
	for j := 0; j < 8; j++ {
		if sc, m := ScaleMinK4(j, q4k[4:16]); sc != ls[j] || m != lm[j] {
			t.Fatalf("scale/min %d unpacked as %d/%d, packed %d/%d", j, sc, m, ls[j], lm[j])
		}
	}
	for i := 0; i < 256; i++ {
		sub, l := i/32, i%32
		byteAt := 16 + (sub/2)*32 + l
		q := byte(i % 16)
		if sub%2 == 0 {
			q4k[byteAt] |= q
		} else {
			q4k[byteAt] |= q << 4
		}
	}
	x, err := Decode(Q4_K, q4k, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range x {
		sub := i / 32
		want := 0.5*float32(ls[sub])*float32(i%16) - 0.25*float32(lm[sub])
		if v != want {
			t.Fatalf("q4_k[%d] = %v, want %v", i, v, want)
		}
	}
	// Q5_K: the same scales, quant i mod 32 with the fifth bit in qh.
	q5k := make([]byte, 176)
	copy(q5k, q4k[:16])
	for i := 0; i < 256; i++ {
		sub, l := i/32, i%32
		q := byte(i % 32)
		if q >= 16 {
			q5k[16+l] |= 1 << sub
		}
		if sub%2 == 0 {
			q5k[48+(sub/2)*32+l] |= q & 15
		} else {
			q5k[48+(sub/2)*32+l] |= (q & 15) << 4
		}
	}
	x, _ = Decode(Q5_K, q5k, 256)
	for i, v := range x {
		sub := i / 32
		want := 0.5*float32(ls[sub])*float32(i%32) - 0.25*float32(lm[sub])
		if v != want {
			t.Fatalf("q5_k[%d] = %v, want %v", i, v, want)
		}
	}
	// Q6_K: d = 0.125, scale of 16-value sub-block s is s−8, quant of
	// value i is i mod 64 (stored: low four bits in ql, top two in qh).
	q6k := make([]byte, 210)
	le.PutUint16(q6k[208:], half(0.125))
	for s := 0; s < 16; s++ {
		q6k[192+s] = byte(int8(s - 8))
	}
	for i := 0; i < 256; i++ {
		half, within := i/128, i%128
		quarter, l := within/32, within%32
		q := byte(i % 64)
		ql := q6k[half*64:]
		qh := q6k[128+half*32:]
		switch quarter {
		case 0:
			ql[l] |= q & 15
		case 1:
			ql[l+32] |= q & 15
		case 2:
			ql[l] |= (q & 15) << 4
		case 3:
			ql[l+32] |= (q & 15) << 4
		}
		qh[l] |= (q >> 4) << (2 * quarter)
	}
	x, _ = Decode(Q6_K, q6k, 256)
	for i, v := range x {
		want := 0.125 * float32(i/16-8) * float32(i%64-32)
		if v != want {
			t.Fatalf("q6_k[%d] = %v, want %v", i, v, want)
		}
	}
	// Q4_1, Q5_0, Q5_1 on one block each.
	q41 := []byte{0, 0, 0, 0}
	le.PutUint16(q41, half(2))
	le.PutUint16(q41[2:], half(-3))
	for j := 0; j < 16; j++ {
		q41 = append(q41, byte(j)|byte(15-j)<<4)
	}
	x, _ = Decode(Q4_1, q41, 32)
	for j := 0; j < 16; j++ {
		if x[j] != float32(j)*2-3 || x[j+16] != float32(15-j)*2-3 {
			t.Fatalf("q4_1 pair %d = %v, %v", j, x[j], x[j+16])
		}
	}
	q50 := make([]byte, 22)
	q51 := make([]byte, 24)
	le.PutUint16(q50, half(0.5))
	le.PutUint16(q51, half(0.5))
	le.PutUint16(q51[2:], half(1))
	var qh uint32
	for j := 0; j < 32; j++ {
		q := byte(31 - j) // 5-bit quant of value j
		qh |= uint32(q>>4) << j
		if j < 16 {
			q50[6+j] |= q & 15
			q51[8+j] |= q & 15
		} else {
			q50[6+j-16] |= (q & 15) << 4
			q51[8+j-16] |= (q & 15) << 4
		}
	}
	le.PutUint32(q50[2:], qh)
	le.PutUint32(q51[4:], qh)
	x50, _ := Decode(Q5_0, q50, 32)
	x51, _ := Decode(Q5_1, q51, 32)
	for j := 0; j < 32; j++ {
		if x50[j] != float32(31-j-16)*0.5 || x51[j] != float32(31-j)*0.5+1 {
			t.Fatalf("q5_0/q5_1[%d] = %v, %v", j, x50[j], x51[j])
		}
	}
}

// TestNearestIntTiesToEven pins the rounding of ggml's nearest_int.
func TestNearestIntTiesToEven(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want int
	}{{0.5, 0}, {1.5, 2}, {2.5, 2}, {-0.5, 0}, {-1.5, -2}, {0.49999997, 0}, {63.5, 64}, {-31.7, -32}, {127.2, 127}} {
		if got := nearestInt(tc.in); got != tc.want {
			t.Errorf("nearestInt(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestMixtureTypes checks the per-tensor choices of the Q4_K_M and
// Q5_K_M presets against llama.cpp's rules, on a 16-layer shape whose
// use_more_bits layers are 0, 1, 4, 7, 10, 13, 14, 15, and the
// fallbacks for rows that are not whole super-blocks.
func TestMixtureTypes(t *testing.T) {
	s := Shape{Layers: 16, Dim: 512, Heads: 8, KVHeads: 2, FF: 1024, Vocab: 300, Ctx: 64, Mix: MixQ4_K_M}
	more := map[int]bool{0: true, 1: true, 4: true, 7: true, 10: true, 13: true, 14: true, 15: true}
	for l := 0; l < 16; l++ {
		want := Q4_K
		if more[l] {
			want = Q6_K
		}
		if got := s.TypeOf("attn_v", l, 512); got != want {
			t.Errorf("q4_k_m attn_v layer %d: %s, want %s", l, got, want)
		}
		if got := s.TypeOf("ffn_down", l, 1024); got != want {
			t.Errorf("q4_k_m ffn_down layer %d: %s, want %s", l, got, want)
		}
		for _, k := range []string{"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"} {
			if got := s.TypeOf(k, l, 512); got != Q4_K {
				t.Errorf("q4_k_m %s layer %d: %s", k, l, got)
			}
		}
	}
	for _, tc := range []struct {
		mix      Mixture
		separate bool
		kind     string
		cols     int
		want     TensorType
	}{
		{MixQ4_K_M, false, "token_embd", 512, Q6_K}, // tied: the output projection
		{MixQ4_K_M, true, "token_embd", 512, Q4_K},
		{MixQ4_K_M, true, "output", 512, Q6_K},
		{MixQ4_K_M, true, "output", 576, Q8_0},
		{MixQ4_K_M, true, "attn_q", 576, Q5_0},
		{MixQ5_K_M, true, "attn_q", 512, Q5_K},
		{MixQ5_K_M, true, "attn_q", 576, Q5_1},
		{MixQ5_K_M, true, "ffn_down", 1536, Q6_K}, // layer 0
		{MixQ5_K_M, true, "ffn_down", 1568, Q8_0},
		{MixNone, true, "attn_v", 512, Q8_0},
	} {
		s := Shape{Layers: 16, Mix: tc.mix, Type: Q8_0, SeparateOutput: tc.separate}
		if got := s.TypeOf(tc.kind, 0, tc.cols); got != tc.want {
			t.Errorf("%s separate=%v %s cols %d: %s, want %s", tc.mix, tc.separate, tc.kind, tc.cols, got, tc.want)
		}
	}
}

// TestSynthEveryType writes a small model of every type and mixture,
// parses it, and decodes every tensor: each must carry the type TypeOf
// assigns and decode to finite values of the intended spread.
func TestSynthEveryType(t *testing.T) {
	for _, name := range []string{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"} {
		typ, mix, err := ParseQuant(name)
		if err != nil {
			t.Fatal(err)
		}
		s := Shape{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 300, Ctx: 64, Type: typ, Mix: mix}
		f, err := Parse(synthBytes(t, s))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		types := map[TensorType]bool{}
		for _, ti := range f.Tensors {
			types[ti.Type] = true
			x, err := Decode(ti.Type, f.TensorData(ti), int(ti.Elements()))
			if err != nil {
				t.Fatalf("%s %s: %v", name, ti.Name, err)
			}
			var ss float64
			for _, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%s %s: non-finite value", name, ti.Name)
				}
				ss += float64(v) * float64(v)
			}
			if len(ti.Dims) == 2 {
				if want := s.TypeOf(kindOf(ti.Name), layerOf(ti.Name), int(ti.Dims[0])); ti.Type != want {
					t.Errorf("%s %s: %s, want %s", name, ti.Name, ti.Type, want)
				}
				// weights are N(0, 1/fan_in) but token_embd's N(0, 1)
				std := math.Sqrt(ss / float64(len(x)) * float64(ti.Dims[0]))
				if ti.Name == "token_embd.weight" {
					std = math.Sqrt(ss / float64(len(x)))
				}
				if std < 0.9 || std > 1.1 {
					t.Errorf("%s %s: spread %.3f of the intended", name, ti.Name, std)
				}
			}
		}
		if mix != MixNone && (!types[Q6_K] || !types[typ]) {
			t.Errorf("%s: types %v, want both %s and q6_k", name, types, typ)
		}
		if ft, _ := f.Uint("general.file_type"); ft != uint64(s.fileType()) {
			t.Errorf("%s: file type %d", name, ft)
		}
	}
}

func kindOf(name string) string {
	k := name[:len(name)-len(".weight")]
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '.' {
			return k[i+1:]
		}
	}
	return k
}

func layerOf(name string) int {
	var l int
	for i := len("blk."); len(name) > 4 && name[:4] == "blk." && i < len(name) && name[i] != '.'; i++ {
		l = l*10 + int(name[i]-'0')
	}
	return l
}
