package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// StoreQ8_0 writes the blocks gguf's reference encoder writes.
func TestStoreQ8_0MatchesEncoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 256)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 3)
	}
	x[5], x[40] = 0, -7.5
	clear(x[64:96]) // an all-zero block
	want, err := gguf.Encode(gguf.Q8_0, x)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	StoreQ8_0(got, x, NewQ8Scratch(len(x)))
	if !bytes.Equal(got, want) {
		t.Errorf("StoreQ8_0 differs from gguf.Encode(Q8_0)")
	}
}

// AttendKV over Q8_0 keys and/or values gives the float32 cache's output
// within what 8-bit codes allow: each value is off by at most half a
// step (largest magnitude / 254) and the query is quantised likewise, so
// one value step: 0.015 for unit-variance values.
func TestAttendKVQ8CloseToF32(t *testing.T) {
	const hd, heads, n = 128, 4, 300
	stride := heads * hd
	rb := stride / 32 * 34
	rng := rand.New(rand.NewPCG(3, 4))
	k, v := make([]float32, n*stride), make([]float32, n*stride)
	for i := range k {
		k[i], v[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	kq, vq := make([]byte, n*rb), make([]byte, n*rb)
	scratch := NewQ8Scratch(stride)
	for t := range n {
		StoreQ8_0(kq[t*rb:], k[t*stride:(t+1)*stride], scratch)
		StoreQ8_0(vq[t*rb:], v[t*stride:(t+1)*stride], scratch)
	}
	q := make([]float32, hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	scale := float32(1 / math.Sqrt(hd))
	f32 := KVView{F32: k, Stride: stride}
	for _, c := range []struct {
		name string
		k, v KVView
	}{
		{"q8 K", KVView{Q8: kq, Stride: rb}, KVView{F32: v, Stride: stride}},
		{"q8 V", f32, KVView{Q8: vq, Stride: rb}},
		{"q8 K and V", KVView{Q8: kq, Stride: rb}, KVView{Q8: vq, Stride: rb}},
	} {
		for _, nn := range []int{1, 7, n} {
			off := 2 * hd
			want, got := make([]float32, hd), make([]float32, hd)
			Attend(want, q, k, v, nn, stride, off, scale, make([]float32, n))
			AttendKV(got, q, c.k, c.v, nn, off, scale, make([]float32, n))
			var worst float64
			for i := range want {
				worst = max(worst, math.Abs(float64(got[i]-want[i])))
			}
			t.Logf("%s, %d positions: largest difference %.5f", c.name, nn, worst)
			if worst > 0.015 {
				t.Errorf("%s, %d positions: off by %.4f, want ≤ 0.015", c.name, nn, worst)
			}
		}
	}
	// Both sides float32: exactly Attend.
	want, got := make([]float32, hd), make([]float32, hd)
	Attend(want, q, k, v, n, stride, hd, scale, make([]float32, n))
	AttendKV(got, q, f32, KVView{F32: v, Stride: stride}, n, hd, scale, make([]float32, n))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("float32 AttendKV differs from Attend at %d", i)
		}
	}
}

// The assembly kernels compute what the portable ones do, up to the
// order of float additions, for rows of one to eight blocks.
func TestQ8KernelsMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nb := range []int{1, 2, 4, 8} {
		const n = 37
		stride := nb*34 + 34 // rows further apart than their blocks
		rows := make([]byte, n*stride)
		x := make([]float32, nb*32)
		scratch := NewQ8Scratch(nb * 32)
		for r := range n {
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			StoreQ8_0(rows[r*stride:], x, scratch)
		}
		q := make([]float32, nb*32)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		got, want := make([]float32, n), make([]float32, n)
		dotsQ8(q, rows, stride, got)
		dotsQ8Generic(q, rows, stride, want)
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%d blocks: dotsQ8[%d] = %g, generic %g", nb, i, got[i], want[i])
			}
		}
		p := make([]float32, n)
		for i := range p {
			p[i] = float32(rng.Float64())
		}
		ga, wa := make([]float32, nb*32), make([]float32, nb*32)
		axpysQ8(ga, p, rows, stride)
		axpysQ8Generic(wa, p, rows, stride)
		for i := range ga {
			if d := math.Abs(float64(ga[i] - wa[i])); d > 1e-4*(1+math.Abs(float64(wa[i]))) {
				t.Fatalf("%d blocks: axpysQ8[%d] = %g, generic %g", nb, i, ga[i], wa[i])
			}
		}
	}
}
