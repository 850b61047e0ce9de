package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpF32: the vector exponential gives exp32's bits in every lane
// (lengths around the vector width, values across the whole clamped
// range and beyond it, NaN and infinities), and exp32 is within 2 ulp
// of e^x wherever e^x is a normal float32.
func TestExpF32(t *testing.T) {
	r := rand.New(rand.NewPCG(81, 82))
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, expLo, expHi, -87.3, 88.3, -88.7, 88.8, -100, 100, -1e30, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-30, -1e-30, 0.5, -0.5, 20, -20}
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 33, 100, 1000} {
		src := make([]float32, n)
		for rep := range 50 {
			for i := range src {
				switch {
				case rep == 0:
					src[i] = special[i%len(special)]
				case i%5 == 0:
					src[i] = float32(r.Float64()*200 - 100)
				default:
					src[i] = float32(r.NormFloat64() * 8)
				}
			}
			got := make([]float32, n)
			expF32(got, src)
			for i, x := range src {
				want := exp32(x)
				if math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
					t.Fatalf("n=%d exp(%v): vector %v, portable %v", n, x, got[i], want)
				}
			}
			in := append([]float32(nil), src...)
			expF32(in, in) // in place
			for i := range in {
				if math.Float32bits(in[i]) != math.Float32bits(got[i]) && !(in[i] != in[i]) {
					t.Fatalf("in place: lane %d %v, want %v", i, in[i], got[i])
				}
			}
		}
	}
	// Accuracy of exp32 itself against float64 over the normal range.
	for i := 0; i < 200000; i++ {
		x := float32(expLo + (expHi-expLo)*r.Float64())
		got, want := float64(exp32(x)), math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1)))) - float64(float32(want))
		if math.Abs(got-want) > 2*ulp {
			t.Fatalf("exp32(%v) = %v, e^x = %v: %.1f ulp off", x, got, want, math.Abs(got-want)/ulp)
		}
	}
	for _, x := range []float32{expLo, -1e30, float32(math.Inf(-1))} {
		if got := exp32(x); got < math.Float32frombits(1<<23) || got > 1.2e-38 {
			t.Fatalf("exp32(%v) = %v, want a tiny positive normal", x, got)
		}
	}
	if got := exp32(float32(math.Inf(1))); math.IsInf(float64(got), 0) || got < 2e38 {
		t.Fatalf("exp32(+Inf) = %v, want the clamped finite maximum", got)
	}
	if got := exp32(float32(math.NaN())); got == got {
		t.Fatalf("exp32(NaN) = %v, want NaN", got)
	}
}
