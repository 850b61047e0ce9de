package kernels

import "math"

// The float32 exponential of the softmax and SiLU: Cephes' expf, every
// step a single float32 operation rounded on its own (the conversions
// keep the compiler from fusing a multiply and an add, which would
// change the bits with the CPU), so the AVX2 kernel (exp_amd64.s), which
// does the same operations lane by lane, gives the same results as this
// portable code. Accurate to about one ulp; the input is clamped to
// [expLo, expHi], where 2^n stays a normal float32, so exp of a very
// negative input is the smallest normal float (about 1.2e-38) rather
// than 0, which no softmax or SiLU can tell apart; a NaN stays NaN.
const (
	expLo    = -87.33654 // ln of the smallest normal float32
	expHi    = 88.37626  // below ln(2^128)
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
)

// exp32 is e^x as the AVX2 kernel computes it.
func exp32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, expLo), expHi)
	n := float32(math.Floor(float64(float32(x*expLog2e) + 0.5)))
	x = float32(x - float32(n*expC1))
	x = float32(x - float32(n*expC2))
	z := float32(x * x)
	y := float32(float32(expP0*x) + expP1)
	y = float32(float32(y*x) + expP2)
	y = float32(float32(y*x) + expP3)
	y = float32(float32(y*x) + expP4)
	y = float32(float32(y*x) + expP5)
	y = float32(float32(y*z) + x)
	y = y + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// expGeneric sets dst[i] = exp32(src[i]) from i on.
func expGeneric(dst, src []float32, from int) {
	for i := from; i < len(src); i++ {
		dst[i] = exp32(src[i])
	}
}
