package drivers

import (
	"math"
	"math/bits"
	"time"

	"periph.io/x/conn/v3/physic"
)

// nsPerS converts between nW·ns and nJ, and between nJ/nW and ns.
const nsPerS = uint64(time.Second)

// PowerOf is the mean power of energy e over dt, rounded to the nearest
// nanowatt, exact in integers (a counter's delta turned into a reading),
// saturating; 0 for a non-positive dt or a negative e.
func PowerOf(e physic.Energy, dt time.Duration) physic.Power {
	if dt <= 0 || e < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(e), nsPerS)
	lo, c := bits.Add64(lo, uint64(dt)/2, 0)
	hi += c
	if hi >= uint64(dt) {
		return physic.Power(math.MaxInt64)
	}
	q, _ := bits.Div64(hi, lo, uint64(dt))
	return physic.Power(min(q, math.MaxInt64))
}

// EnergyOf is p·dt, truncated to a nanojoule and saturating; 0 for a
// non-positive p or dt.
func EnergyOf(p physic.Power, dt time.Duration) physic.Energy {
	if p <= 0 || dt <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(p), uint64(dt))
	if hi >= nsPerS {
		return physic.Energy(math.MaxInt64)
	}
	q, _ := bits.Div64(hi, lo, nsPerS)
	return physic.Energy(min(q, math.MaxInt64))
}
