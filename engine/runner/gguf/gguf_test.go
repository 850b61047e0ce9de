package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var tiny = Shape{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, FF: 64, Vocab: 300, Ctx: 64, Type: Q8_0}

func synthBytes(t testing.TB, s Shape) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Synth(&buf, s, 1); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriterReaderRoundTrip(t *testing.T) {
	var w Writer
	w.Alignment = 64
	kvs := []KV{
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"bool", true},
		{"str", "héllo"}, {"u64", uint64(1 << 40)}, {"i64", int64(-1 << 40)}, {"f64", 2.25},
		{"strs", Array{TypeString, []string{"a", "", "ccc"}}}, {"f32s", Array{TypeFloat32, []float32{1, -2}}},
		{"i32s", Array{TypeInt32, []int32{3, -4}}}, {"bools", Array{TypeBool, []bool{true, false}}},
	}
	for _, kv := range kvs {
		w.AddKV(kv.Key, kv.Value)
	}
	a := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	b, _ := Encode(Q8_0, make([]float32, 64))
	w.AddTensor("a", F32, []uint64{3}, func() ([]byte, error) { return a, nil })
	w.AddTensor("b", Q8_0, []uint64{32, 2}, func() ([]byte, error) { return b, nil })
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("alignment %d, data offset %d", f.Alignment, f.DataOffset)
	}
	if !reflect.DeepEqual(f.KV[1:], kvs) || f.KV[0].Key != "general.alignment" {
		t.Errorf("metadata round trip:\n got %v\nwant %v", f.KV, kvs)
	}
	ta, _ := f.Tensor("a")
	tb, _ := f.Tensor("b")
	if ta.Offset != 0 || tb.Offset != 64 || !bytes.Equal(f.TensorData(ta), a) || !bytes.Equal(f.TensorData(tb), b) {
		t.Errorf("tensors %+v %+v", ta, tb)
	}
}

func TestSynthParsesAndOpens(t *testing.T) {
	data := synthBytes(t, tiny)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := len(f.Tensors); n != 1+9+1 {
		t.Errorf("%d tensors", n)
	}
	toks, _ := f.ArrayOf("tokenizer.ggml.tokens")
	seen := map[string]bool{}
	for _, s := range toks.Values.([]string) {
		if seen[s] {
			t.Fatalf("duplicate token %q", s)
		}
		seen[s] = true
	}
	if len(seen) != 300 || !seen["<0xFF>"] || !seen["</s>"] {
		t.Errorf("vocab of %d", len(seen))
	}
	// Same seed, same bytes; another seed, other weights.
	var b1, b2 bytes.Buffer
	Synth(&b1, tiny, 1)
	Synth(&b2, tiny, 2)
	if !bytes.Equal(b1.Bytes(), data) || bytes.Equal(b2.Bytes()[f.DataOffset:], data[f.DataOffset:]) {
		t.Error("synthesis is not a function of the seed")
	}
}

// header builds a file by hand so each field can be corrupted.
type header struct {
	buf bytes.Buffer
}

func (h *header) u32(v uint32) *header { binary.Write(&h.buf, binary.LittleEndian, v); return h }
func (h *header) u64(v uint64) *header { binary.Write(&h.buf, binary.LittleEndian, v); return h }
func (h *header) str(s string) *header { h.u64(uint64(len(s))); h.buf.WriteString(s); return h }

func start(nt, nkv uint64) *header {
	h := &header{}
	h.buf.WriteString("GGUF")
	return h.u32(3).u64(nt).u64(nkv)
}

func tensor(h *header, name string, dims []uint64, typ uint32, off uint64) *header {
	h.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		h.u64(d)
	}
	return h.u32(typ).u64(off)
}

func padded(h *header, data int) []byte {
	b := h.buf.Bytes()
	b = append(b, make([]byte, int(pad(uint64(len(b)), 32))-len(b)+data)...)
	return b
}

func TestParseRejects(t *testing.T) {
	good := synthBytes(t, tiny)
	cases := map[string][]byte{
		"empty":             {},
		"bad magic":         append([]byte("GGUX"), good[4:]...),
		"version 2":         append(append([]byte("GGUF"), 2, 0, 0, 0), good[8:]...),
		"truncated header":  good[:100],
		"truncated data":    good[:len(good)-1],
		"huge kv count":     start(0, 1<<60).buf.Bytes(),
		"huge tensor count": start(1<<60, 0).buf.Bytes(),
		"string too long":   start(0, 1).u64(1 << 40).buf.Bytes(),
		"array too long":    start(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(1 << 59).buf.Bytes(),
		"nested array":      start(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1).buf.Bytes(),
		"bad value type":    start(0, 1).str("k").u32(99).buf.Bytes(),
		"bad bool":          start(0, 1).str("k").u32(uint32(TypeBool)).buf.Bytes(),
		"duplicate key":     start(0, 2).str("k").u32(uint32(TypeUint8)).str("k").u32(uint32(TypeUint8)).buf.Bytes(),
		"alignment 3":       padded(start(0, 1).str("general.alignment").u32(uint32(TypeUint32)).u32(3), 0),
		"alignment type":    padded(start(0, 1).str("general.alignment").u32(uint32(TypeUint64)).u64(32), 0),
		"five dims":         padded(tensor(start(1, 0), "t", []uint64{1, 1, 1, 1, 1}, 0, 0), 4),
		"overflowing dims":  padded(tensor(start(1, 0), "t", []uint64{1 << 32, 1 << 32, 1 << 32}, 0, 0), 4),
		"exceeds file":      padded(tensor(start(1, 0), "t", []uint64{1 << 20}, 0, 0), 4),
		"unknown type":      padded(tensor(start(1, 0), "t", []uint64{4}, 77, 0), 16),
		"partial block":     padded(tensor(start(1, 0), "t", []uint64{33}, uint32(Q8_0), 0), 68),
		"misaligned offset": padded(tensor(start(1, 0), "t", []uint64{4}, 0, 8), 64),
		"overlap":           padded(tensor(tensor(start(2, 0), "a", []uint64{16}, 0, 0), "b", []uint64{16}, 0, 32), 128),
		"duplicate tensor":  padded(tensor(tensor(start(2, 0), "a", []uint64{8}, 0, 0), "a", []uint64{8}, 0, 32), 64),
		"long name":         padded(tensor(start(1, 0), strings.Repeat("n", 64), []uint64{8}, 0, 0), 32),
	}
	for name, data := range cases {
		f, err := Parse(data)
		if err == nil {
			t.Errorf("%s: parsed (%d tensors)", name, len(f.Tensors))
			continue
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: error %v does not wrap ErrFormat", name, err)
		}
	}
	// The hand-built layout itself is valid when not corrupted.
	ok := padded(tensor(tensor(start(2, 0), "a", []uint64{16}, 0, 0), "b", []uint64{16}, 0, 64), 128)
	if _, err := Parse(ok); err != nil {
		t.Fatalf("valid hand-built file refused: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(synthBytes(f, Shape{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, FF: 32, Vocab: 260, Ctx: 8, Type: Q4_0}))
	f.Add(padded(tensor(start(1, 1).str("general.alignment").u32(uint32(TypeUint32)).u32(64), "t", []uint64{32, 2}, uint32(Q8_0), 0), 68))
	f.Add(start(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).str("a").str("b").buf.Bytes())
	f.Add([]byte("GGUF"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors {
			if end := file.DataOffset + ti.Offset + ti.Bytes(); end > uint64(len(data)) {
				t.Fatalf("accepted tensor %q ending at %d past %d", ti.Name, end, len(data))
			}
			_ = file.TensorData(ti)
		}
	})
}

func TestHalfConversions(t *testing.T) {
	for _, c := range []struct {
		h uint16
		f float32
	}{{0x3c00, 1}, {0xc000, -2}, {0x3800, 0.5}, {0x7bff, 65504}, {0x0001, 5.960464477539063e-08}, {0x0000, 0}, {0x7c00, float32(math.Inf(1))}} {
		if got := F16ToF32(c.h); got != c.f {
			t.Errorf("F16ToF32(%#x) = %v, want %v", c.h, got, c.f)
		}
		if got := F32ToF16(c.f); got != c.h {
			t.Errorf("F32ToF16(%v) = %#x, want %#x", c.f, got, c.h)
		}
	}
	// Every finite half converts to float32 and back unchanged.
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if f != f || math.IsInf(float64(f), 0) {
			continue
		}
		if back := F32ToF16(f); back != uint16(h) && !(f == 0 && back&0x7fff == 0) {
			t.Fatalf("%#x → %v → %#x", h, f, back)
		}
	}
	if F32ToF16(1+1.0/2048) != 0x3c00 || F32ToF16(1+3.0/2048) != 0x3c02 {
		t.Error("F32ToF16 does not round half to even")
	}
	if BF16ToF32(0x3fc0) != 1.5 || F32ToBF16(1.5) != 0x3fc0 || F32ToBF16(math.Float32frombits(0x3f808000)) != 0x3f80 {
		t.Error("bf16 conversion")
	}
}

func TestDecodeKnownBlocks(t *testing.T) {
	// Q8_0: d = 0.5, q = -3..28
	q8 := []byte{0x00, 0x38}
	for j := 0; j < 32; j++ {
		q8 = append(q8, byte(int8(j-3)))
	}
	x, err := Decode(Q8_0, q8, 32)
	if err != nil {
		t.Fatal(err)
	}
	for j, v := range x {
		if v != float32(j-3)*0.5 {
			t.Fatalf("q8_0[%d] = %v", j, v)
		}
	}
	// Q4_0: d = 2; low nibbles feed elements 0..15, high nibbles 16..31.
	q4 := []byte{0x00, 0x40}
	for j := 0; j < 16; j++ {
		q4 = append(q4, byte(j)|byte(15-j)<<4)
	}
	x, _ = Decode(Q4_0, q4, 32)
	for j := 0; j < 16; j++ {
		if x[j] != float32(j-8)*2 || x[j+16] != float32(15-j-8)*2 {
			t.Fatalf("q4_0 pair %d = %v, %v", j, x[j], x[j+16])
		}
	}
	if _, err := Decode(Q8_0, q8[:33], 32); err == nil {
		t.Error("short block decoded")
	}
}

func TestEncodeDecodeError(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 1024)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, c := range []struct {
		t   TensorType
		tol float64 // relative to the block's max |x|
	}{{F32, 0}, {F16, 1e-3}, {BF16, 8e-3}, {Q8_0, 1.0 / 127}, {Q4_0, 1.0 / 8}} {
		enc, err := Encode(c.t, x)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(enc)) != c.t.RowBytes(uint64(len(x))) {
			t.Fatalf("%s: %d bytes", c.t, len(enc))
		}
		y, _ := Decode(c.t, enc, len(x))
		for b := 0; b < len(x); b += 32 {
			var amax float64
			for _, v := range x[b : b+32] {
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			for i := b; i < b+32; i++ {
				if d := math.Abs(float64(y[i] - x[i])); d > c.tol*amax*1.01 {
					t.Fatalf("%s: x[%d]=%v decoded %v", c.t, i, x[i], y[i])
				}
			}
		}
	}
}

func TestShapeValidate(t *testing.T) {
	bad := []Shape{
		{Layers: 0, Dim: 32, Heads: 2, KVHeads: 1, FF: 32, Vocab: 300, Ctx: 8, Type: F32},
		{Layers: 1, Dim: 30, Heads: 4, KVHeads: 1, FF: 32, Vocab: 300, Ctx: 8, Type: F32},
		{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, FF: 32, Vocab: 100, Ctx: 8, Type: F32},
		{Layers: 1, Dim: 48, Heads: 2, KVHeads: 1, FF: 32, Vocab: 300, Ctx: 8, Type: Q8_0},
		{Layers: 1, Dim: 32, Heads: 2, KVHeads: 1, FF: 32, Vocab: 300, Ctx: 8, Type: Q4_K},
	}
	for _, s := range bad {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if p := SmolLM135M.Params(); p < 134e6 || p > 136e6 {
		t.Errorf("SmolLM-135M shape has %d params", p)
	}
}
