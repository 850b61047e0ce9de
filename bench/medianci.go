package bench

import (
	"math/big"
	"slices"
)

// MedianCIConfidencePPM is the confidence the report's interval for a
// median aims at: 95 %, in parts per million.
const MedianCIConfidencePPM = 950_000

// MedianCI is a distribution-free confidence interval for the median of
// the population a cell's repetitions were drawn from: [x₍ₗ₎, x₍ₙ₊₁₋ₗ₎]
// of the sorted values, with l the largest rank whose coverage
// 1 − 2·P(Bin(n, ½) ≤ l − 1) is at least MedianCIConfidencePPM. It assumes
// only that the repetitions are independent draws of one continuous
// distribution (no normality). With fewer than six repetitions no pair of
// order statistics reaches 95 %: the interval is then the whole range and
// ConfidencePPM says what it does reach (n = 5: 937 500), so a reader is
// never told more than the data give.
type MedianCI struct {
	Lo Milli `json:"lo"`
	Hi Milli `json:"hi"`
	// Rank is l: Lo is the l-th smallest value, Hi the l-th largest.
	Rank int `json:"rank"`
	// ConfidencePPM is the exact coverage of [Lo, Hi], rounded down.
	ConfidencePPM int64 `json:"confidence_ppm"`
}

// medianCI computes MedianCI over xs (thousandths, as Summarise holds
// the per-serve figures); nil for no values. Exact: binomial sums in big
// integers, the coverage floored to ppm.
func medianCI(xs []int64) *MedianCI {
	n := len(xs)
	if n == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	total := new(big.Int).Lsh(big.NewInt(1), uint(n)) // 2ⁿ
	// coverage(l) = (2ⁿ − 2·Σ_{i<l} C(n, i)) / 2ⁿ, floored to ppm: the
	// division by 2ⁿ is a shift (the numerator is positive: the sum runs
	// below the middle, under 2ⁿ⁻¹). The scratch integers are reused:
	// ten thousand repetitions make ten-thousand-bit sums.
	ppm := big.NewInt(1_000_000)
	num, k := new(big.Int), new(big.Int)
	coverage := func(cum *big.Int) int64 {
		num.Lsh(cum, 1)
		num.Sub(total, num)
		num.Mul(num, ppm)
		return num.Rsh(num, uint(n)).Int64()
	}
	// cum = Σ_{i<l} C(n, i), starting at l = 1 with C(n, 0). The loop
	// stops at the first l whose coverage is under the target, which
	// (a floor being under an integer exactly when its argument is) is
	// 2·10⁶·cum > (10⁶ − target)·2ⁿ: a multiplication and a comparison
	// per rank, the coverage itself taken once, for the rank chosen.
	cum, c := big.NewInt(1), big.NewInt(1)
	limit := new(big.Int).Lsh(big.NewInt(1_000_000-MedianCIConfidencePPM), uint(n))
	twoPPM := big.NewInt(2_000_000)
	best := 1
	for l := 2; 2*l <= n+1; l++ {
		c.Mul(c, k.SetInt64(int64(n-l+2))) // C(n, l−1) from C(n, l−2)
		c.Quo(c, k.SetInt64(int64(l-1)))
		cum.Add(cum, c)
		if num.Mul(cum, twoPPM).Cmp(limit) > 0 {
			cum.Sub(cum, c) // back to best's sum
			break
		}
		best = l
	}
	bestCov := coverage(cum)
	return &MedianCI{Lo: Milli(s[best-1]), Hi: Milli(s[n-best]), Rank: best, ConfidencePPM: bestCov}
}
