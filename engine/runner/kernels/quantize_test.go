package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// TestQuantizeMatchesGeneric: the dispatched quantisers (AVX2 where the
// CPU has it) give the portable ones' bits for every block: random
// values with outliers, all-zero and negative-zero blocks, values that
// land exactly on the rounding ties, repeated maxima of both signs, and
// blocks holding an infinity or NaN (which the portable code takes over
// from), at lengths of one block up.
func TestQuantizeMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	type gen func(x []float32)
	gens := map[string]gen{
		"random": func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64())
				if r.IntN(9) == 0 {
					x[i] *= 40
				}
			}
		},
		"zeros": func(x []float32) {
			for i := range x {
				x[i] = 0
				if i%3 == 0 {
					x[i] = float32(math.Copysign(0, -1))
				}
			}
		},
		"ties": func(x []float32) {
			// Maximum 127 gives d = 1 and id = 1: k/2 are exact ties.
			for i := range x {
				x[i] = float32(r.IntN(253)-126) / 2
			}
			for b := 0; b < len(x); b += 32 {
				x[b+r.IntN(32)] = 127
			}
		},
		"signed maxima": func(x []float32) {
			for i := range x {
				x[i] = float32(r.IntN(7) - 3)
			}
		},
		"tiny": func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64()) * 1e-38
			}
		},
		"nonfinite": func(x []float32) {
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			bad := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
			x[r.IntN(len(x))] = bad[r.IntN(len(bad))]
		},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range gens {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		for _, n := range []int{256, 512, 2048, 5632} {
			x := make([]float32, n)
			for range 20 {
				gens[name](x)
				got, want := NewQVec(n), NewQVec(n)
				got.Quantize(x)
				want.quantize32Generic(x, 0)
				want.quantizeKGeneric(x, 0)
				if err := sameQVec(got, want); err != "" {
					t.Fatalf("%s, %d values: %s", name, n, err)
				}
			}
		}
	}
}

// sameQVec compares every field bit for bit ("" if equal).
func sameQVec(a, b *QVec) string {
	f32 := func(x, y []float32) int {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return i
			}
		}
		return -1
	}
	if i := f32(a.D, b.D); i >= 0 {
		return "32-value scale " + strconv.Itoa(i) + " differs"
	}
	if i := f32(a.DK, b.DK); i >= 0 {
		return "256-value scale " + strconv.Itoa(i) + " differs"
	}
	if i := slices.Compare(a.Q, b.Q); i != 0 {
		return "32-value quants differ"
	}
	if slices.Compare(a.S, b.S) != 0 {
		return "32-value block sums differ"
	}
	if slices.Compare(a.QK, b.QK) != 0 {
		return "256-value quants differ"
	}
	if slices.Compare(a.BS, b.BS) != 0 {
		return "256-value sums of 16 differ"
	}
	return ""
}

// BenchmarkQuantize times the activation quantisers (both forms of a
// 2048-value vector, as a prompt quantises each token's input) against
// the portable code on the same goroutine, interleaved, five
// repetitions: the speedup is the median ratio.
func BenchmarkQuantize(b *testing.B) {
	r := rand.New(rand.NewPCG(73, 74))
	x := randVec(r, 2048, 1)
	v := NewQVec(len(x))
	var ratios []float64
	for b.Loop() {
		for range 5 {
			generic := timeIt(func() {
				v.quantize32Generic(x, 0)
				v.quantizeKGeneric(x, 0)
			})
			fast := timeIt(func() { v.Quantize(x) })
			ratios = append(ratios, generic/fast)
		}
	}
	b.ReportMetric(median(ratios), "speedup")
}
