package gguf

import (
	"bytes"
	"math"
	"testing"
)

// SynthStream's files parse, have Synth's directory (names, types,
// shapes, order) and metadata, and every matrix decodes to values of the
// intended spread around zero: the block layouts it writes by hand are
// the ones the decoder reads.
func TestSynthStreamMatchesSynthLayout(t *testing.T) {
	for _, s := range []Shape{
		{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 300, Ctx: 64, Mix: MixQ4_K_M},
		{Layers: 1, Dim: 64, Heads: 4, KVHeads: 2, FF: 96, Vocab: 300, Ctx: 64, Type: Q8_0, SeparateOutput: true},
	} {
		var a, b bytes.Buffer
		if err := Synth(&a, s, 1); err != nil {
			t.Fatal(err)
		}
		if err := SynthStream(&b, s, 1); err != nil {
			t.Fatal(err)
		}
		fa, err := Parse(a.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		fb, err := Parse(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if a.Len() != b.Len() || len(fa.KV) != len(fb.KV) || len(fa.Tensors) != len(fb.Tensors) {
			t.Fatalf("%+v: %d bytes, %d keys, %d tensors; Synth %d, %d, %d", s, b.Len(), len(fb.KV), len(fb.Tensors), a.Len(), len(fa.KV), len(fa.Tensors))
		}
		for i, ti := range fb.Tensors {
			ta := fa.Tensors[i]
			if ti.Name != ta.Name || ti.Type != ta.Type || ti.Offset != ta.Offset || len(ti.Dims) != len(ta.Dims) {
				t.Fatalf("tensor %d: %+v, Synth %+v", i, ti, ta)
			}
			if len(ti.Dims) != 2 {
				continue
			}
			n := int(ti.Dims[0] * ti.Dims[1])
			x, err := Decode(ti.Type, fb.TensorData(ti), n)
			if err != nil {
				t.Fatal(err)
			}
			var sum, sq float64
			for _, v := range x {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			mean, sd := sum/float64(n), math.Sqrt(sq/float64(n)-(sum/float64(n))*(sum/float64(n)))
			want := 1 / math.Sqrt(float64(ti.Dims[0]))
			if ti.Name == "token_embd.weight" {
				want = 1
			}
			if math.Abs(sd/want-1) > 0.1 || math.Abs(mean) > 0.1*want {
				t.Errorf("%s (%s): mean %.4g, sd %.4g, want 0 and %.4g", ti.Name, ti.Type, mean, sd, want)
			}
		}
	}
}
