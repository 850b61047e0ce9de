package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestQuantizeRange: quantising an activation in block-aligned pieces,
// in any order, gives what Quantize gives, bit for bit, for each set of
// forms; a piece that is not aligned is refused.
func TestQuantizeRange(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	for _, tc := range []struct {
		name string
		v, w func() *QVec
	}{
		{"both", func() *QVec { return NewQVec(1024) }, func() *QVec { return NewQVec(1024) }},
		{"32-only", func() *QVec { return NewQVec(96) }, func() *QVec { return NewQVec(96) }},
		{"256-only", func() *QVec { v := &QVec{}; v.allocK(512); return v }, func() *QVec { v := &QVec{}; v.allocK(512); return v }},
	} {
		want, got := tc.v(), tc.w()
		x := randVec(r, max(len(want.Q), len(want.QK)), 1)
		x[3] = 0 // a zero and an all-zero block take their own paths
		for i := range min(len(x), 32) {
			x[len(x)-1-i] = 0
		}
		want.Quantize(x)
		bl := got.BlockLen()
		for i := len(x)/bl - 1; i >= 0; i -= 2 { // odd blocks first, backwards
			got.QuantizeRange(x, i*bl, (i+1)*bl)
		}
		for i := len(x)/bl - 2; i >= 0; i -= 2 {
			got.QuantizeRange(x, i*bl, (i+1)*bl)
		}
		same := func(a, b []float32) bool {
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					return false
				}
			}
			return len(a) == len(b)
		}
		if string(i8b(want.Q)) != string(i8b(got.Q)) || !same(want.D, got.D) || !equalInts(want.S, got.S) ||
			string(i8b(want.QK)) != string(i8b(got.QK)) || !same(want.DK, got.DK) || !equalInts(want.BS, got.BS) {
			t.Errorf("%s: QuantizeRange in pieces differs from Quantize", tc.name)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: unaligned range accepted", tc.name)
				}
			}()
			got.QuantizeRange(x, bl/2, bl)
		}()
	}
}

func i8b(q []int8) []byte {
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	return b
}

func equalInts[T int16 | int32](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
