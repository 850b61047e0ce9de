package bench

import (
	"testing"

	"meshd/steward"
)

// fillSpread's members: the median's interval over the per-serve
// figures, the statistical uncertainty only when every counted serve
// states one, the time to first token only when every serve does.
func TestFillSpread(t *testing.T) {
	rcpt := func(uj uint64, acc uint32, stat *uint64, ftNs *uint64) *steward.Receipt {
		kind := "point"
		r := &steward.Receipt{EnergyProvenance: "Estimator", EstimatedUJ: uj, TokensOut: acc, TokensAccepted: acc,
			MeterKind: &kind, FirstTokenNs: ftNs, StatUJ: stat}
		return r
	}
	p := func(v uint64) *uint64 { return &v }
	// 10..13 µJ of statistical uncertainty over 3 tokens: ⌈10000/3⌉ =
	// 3334, 3667, 4000, 4334 thousandths; the median (type 7) 3667 +
	// ⌈333 · 2/4⌉ = 3834.
	all := []*steward.Receipt{
		rcpt(300, 3, p(10), p(1_500_000)), rcpt(330, 3, p(11), p(2_000_000)),
		rcpt(360, 3, p(12), p(2_500_000)), rcpt(390, 3, p(13), p(3_000_999)),
	}
	var sc CellSummary
	fillCell(&sc, all, nil, nil)
	if sc.StatPerToken == nil || *sc.StatPerToken != 3834 {
		t.Fatalf("stat_uj_per_token %v, want 3.834", sc.StatPerToken)
	}
	// 1.5, 2, 2.5, 3.000 ms (µs resolution, floor): median 2.25.
	if sc.TTFTMs == nil || sc.TTFTMs.Median != 2250 || sc.TTFTMs.Max != 3000 || sc.TTFTMs.Min != 1500 {
		t.Fatalf("ttft_ms %+v", sc.TTFTMs)
	}
	// 100, 110, 120, 130 µJ/token: four repetitions give the range at
	// 1 − 2/16 = 87.5 %.
	if ci := sc.GrossMedianCI; ci == nil || ci.Lo != 100_000 || ci.Hi != 130_000 || ci.ConfidencePPM != 875_000 {
		t.Fatalf("gross_median_ci %+v", ci)
	}
	if sc.NetMedianCI != nil || sc.MeterKinds["point"] != 4 {
		t.Fatalf("net CI %+v without a baseline; meter kinds %v", sc.NetMedianCI, sc.MeterKinds)
	}

	// One serve without x_stat_uj, one without a first token: neither
	// member, rather than a figure of some of the serves.
	some := append(all[:3:3], rcpt(390, 3, nil, nil))
	sc = CellSummary{}
	fillCell(&sc, some, nil, nil)
	if sc.StatPerToken != nil || sc.TTFTMs != nil {
		t.Fatalf("partial: stat %v, ttft %+v", sc.StatPerToken, sc.TTFTMs)
	}
	// A serve without accepted tokens is not counted, so its missing
	// x_stat_uj does not withdraw the others'.
	sc = CellSummary{}
	fillCell(&sc, append(all[:3:3], rcpt(5, 0, nil, nil)), nil, nil)
	if sc.StatPerToken == nil || sc.Counted != 3 {
		t.Fatalf("an uncounted serve: stat %v, counted %d", sc.StatPerToken, sc.Counted)
	}
}
