package bench

import (
	"math/rand/v2"
	"testing"
)

func TestMedianCIRanks(t *testing.T) {
	// Ranks and coverages from the binomial table: n = 6 → l = 1
	// (1 − 2/64 = 96.875 %), n = 9 → l = 2 (1 − 2·10/512 = 96.09 %),
	// n = 16 → l = 4 (1 − 2·697/65536 = 97.87 %), n = 17 → l = 5 (1 − 2·3214/131072 = 95.10 %), n = 5 → the range at
	// 93.75 %.
	for _, c := range []struct {
		n, rank int
		ppm     int64
	}{
		{1, 1, 0}, {2, 1, 500_000}, {5, 1, 937_500}, {6, 1, 968_750}, {8, 1, 992_187}, {9, 2, 960_937},
		{16, 4, 978_729}, {17, 5, 950_958},
	} {
		xs := make([]int64, c.n)
		for i := range xs {
			xs[i] = int64(1000 * (c.n - i)) // unsorted on purpose
		}
		ci := medianCI(xs)
		if ci.Rank != c.rank || ci.ConfidencePPM != c.ppm {
			t.Errorf("n=%d: rank %d conf %d, want %d %d", c.n, ci.Rank, ci.ConfidencePPM, c.rank, c.ppm)
		}
		if ci.Lo != Milli(1000*c.rank) || ci.Hi != Milli(1000*(c.n-c.rank+1)) {
			t.Errorf("n=%d: [%v, %v] are not the %d-th order statistics", c.n, ci.Lo, ci.Hi, c.rank)
		}
	}
	if medianCI(nil) != nil {
		t.Fatal("no values, no interval")
	}
}

// The interval covers the true median at least as often as it says, on
// a skewed distribution where a normal interval would not.
func TestMedianCICoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const trials = 4000
	// Exponential with rate 1: median ln 2 ≈ 0.693147 → 693 thousandths
	// (values in millis, the true median between 693 and 694).
	for _, n := range []int{6, 12, 30} {
		hit := 0
		var conf int64
		for range trials {
			xs := make([]int64, n)
			for i := range xs {
				xs[i] = int64(rng.ExpFloat64() * 1000)
			}
			ci := medianCI(xs)
			conf = ci.ConfidencePPM
			if ci.Lo <= 693 && ci.Hi >= 694 {
				hit++
			}
		}
		// The stated confidence minus a 4-sigma allowance for the trials.
		if got := int64(hit) * 1_000_000 / trials; got < conf-15_000 {
			t.Errorf("n=%d: covered %d ppm of trials, the interval states %d", n, got, conf)
		}
	}
}
