package bench

import (
	"math/big"
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

// TestMedianCIExact: the rank and coverage are the exact binomial
// figures for every n up to 300, against the definition summed afresh
// for each rank with big.Int.Binomial, and for a few large n against the
// same sum taken term by term with a full division by 2ⁿ.
func TestMedianCIExact(t *testing.T) {
	// coverage is 1 − 2·P(Bin(n, ½) ≤ l − 1) in ppm, floored, from cum =
	// Σ_{i<l} C(n, i).
	coverage := func(n int, cum *big.Int) int64 {
		total := new(big.Int).Lsh(big.NewInt(1), uint(n))
		num := new(big.Int).Sub(total, new(big.Int).Mul(cum, big.NewInt(2)))
		num.Mul(num, big.NewInt(1_000_000))
		return num.Quo(num, total).Int64()
	}
	byDefinition := func(n int) (int, int64) {
		cov := func(l int) int64 {
			cum := new(big.Int)
			for i := 0; i < l; i++ {
				cum.Add(cum, new(big.Int).Binomial(int64(n), int64(i)))
			}
			return coverage(n, cum)
		}
		best := 1
		for l := 2; 2*l <= n+1 && cov(l) >= MedianCIConfidencePPM; l++ {
			best = l
		}
		return best, cov(best)
	}
	termByTerm := func(n int) (int, int64) {
		cum, c := big.NewInt(1), big.NewInt(1)
		best, bestCov := 1, coverage(n, cum)
		for l := 2; 2*l <= n+1; l++ {
			c.Mul(c, big.NewInt(int64(n-l+2)))
			c.Quo(c, big.NewInt(int64(l-1)))
			cum.Add(cum, c)
			cov := coverage(n, cum)
			if cov < MedianCIConfidencePPM {
				break
			}
			best, bestCov = l, cov
		}
		return best, bestCov
	}
	check := func(n int, want func(int) (int, int64)) {
		xs := make([]int64, n)
		for i := range xs {
			xs[i] = int64(i)
		}
		ci := medianCI(xs)
		if rank, ppm := want(n); ci.Rank != rank || ci.ConfidencePPM != ppm {
			t.Errorf("n=%d: rank %d, %d ppm; want rank %d, %d ppm", n, ci.Rank, ci.ConfidencePPM, rank, ppm)
		}
	}
	for n := 1; n <= 300; n++ {
		check(n, byDefinition)
	}
	for _, n := range []int{1000, 4097, 9999} {
		check(n, termByTerm)
	}
}
