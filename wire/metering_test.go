package wire

import (
	"math"
	"testing"
)

func TestAccuracyLimit(t *testing.T) {
	cases := []struct {
		measured, acc, bound uint64
		fits                 bool
	}{
		{5000, 5000, 25, true},
		{5001, 5000, 26, true}, // 25.005 rounds up
		{0, MaxHwAccuracyPPM, 0, true},
		{1, 1, 1, true}, // any error at all rounds up to a whole µJ
		{math.MaxUint64, MaxHwAccuracyPPM, 1_844_674_407_370_955_162, true},
		{math.MaxUint64, FullPPM, math.MaxUint64, true},
		{math.MaxUint64, FullPPM + 1, 0, false},
		{math.MaxUint64, math.MaxUint64, 0, false},
	}
	for _, c := range cases {
		bound, fits := AccuracyLimitUJ(c.measured, c.acc)
		if bound != c.bound || fits != c.fits {
			t.Errorf("AccuracyLimitUJ(%d, %d) = %d, %v; want %d, %v", c.measured, c.acc, bound, fits, c.bound, c.fits)
		}
		if c.fits {
			if !WithinAccuracy(c.bound, c.measured, c.acc) || (c.bound < math.MaxUint64 && WithinAccuracy(c.bound+1, c.measured, c.acc)) {
				t.Errorf("WithinAccuracy does not put the limit at %d for (%d, %d)", c.bound, c.measured, c.acc)
			}
		} else if !WithinAccuracy(math.MaxUint64, c.measured, c.acc) {
			t.Errorf("WithinAccuracy(max, %d, %d) refused a bound no limit can reach", c.measured, c.acc)
		}
	}
}
