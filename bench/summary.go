package bench

// The summary: every figure a report states, computed from the enclosed
// receipts by the one function, Summarise, that both Run and Verify call,
// so a figure that Verify recomputes differently is a figure someone
// changed.

import (
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"

	"meshd/steward"
)

type sample struct {
	gross, grossLo, grossHi int64
	net, netLo, netHi       int64
	errPerTok               int64
	bounded, hasNet         bool
}

var (
	bigThousand = big.NewInt(1000)
	bigBillion  = big.NewInt(1_000_000_000)
)

// divFloor and divCeil divide rounding toward −∞ and +∞.
func divFloor(a, b *big.Int) int64 {
	q, m := new(big.Int), new(big.Int)
	q.DivMod(a, b, m) // Euclidean: m ≥ 0, so q is the floor for b > 0
	return q.Int64()
}

func divCeil(a, b *big.Int) int64 {
	return -divFloor(new(big.Int).Neg(a), b)
}

func u(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// perToken computes one receipt's figures: charged µJ, its bound and the
// idle energy over its gross window, each per accepted token, in
// thousandths. Exact integer arithmetic: floor for the figure and the
// low ends, ceiling for the high ends, so every bound is rounded outward.
func perToken(r *steward.Receipt, idleUW, idleErrUW *uint64) (sample, bool) {
	e, err := r.Energy()
	if err != nil || r.TokensAccepted == 0 {
		return sample{}, false
	}
	acc := u(uint64(r.TokensAccepted))
	// In units of µJ·10⁹ (so the idle term, µW × ns, is an integer).
	charged := new(big.Int).Mul(u(e.UJ()), bigBillion)
	den := new(big.Int).Mul(acc, bigBillion)
	scaled := func(x *big.Int) *big.Int { return new(big.Int).Mul(x, bigThousand) }
	var s sample
	s.gross = divFloor(scaled(charged), den)
	errE := new(big.Int)
	if r.ErrorUJ != nil {
		s.bounded = true
		errE.Mul(u(*r.ErrorUJ), bigBillion)
		lo := new(big.Int).Sub(charged, errE)
		if lo.Sign() < 0 {
			lo.SetInt64(0) // energy is never negative
		}
		s.grossLo = divFloor(scaled(lo), den)
		s.grossHi = divCeil(scaled(new(big.Int).Add(charged, errE)), den)
		s.errPerTok = divCeil(scaled(errE), den)
	}
	if idleUW != nil && r.WindowNs != nil {
		s.hasNet = true
		idle := new(big.Int).Mul(u(*idleUW), u(*r.WindowNs))
		net := new(big.Int).Sub(charged, idle)
		s.net = divFloor(scaled(net), den)
		if s.bounded && idleErrUW != nil {
			netErr := new(big.Int).Add(errE, new(big.Int).Mul(u(*idleErrUW), u(*r.WindowNs)))
			s.netLo = divFloor(scaled(new(big.Int).Sub(net, netErr)), den)
			s.netHi = divCeil(scaled(new(big.Int).Add(net, netErr)), den)
		}
	}
	return s, true
}

// quantile is the k/4 quantile of sorted xs by linear interpolation
// between order statistics (R's type 7), rounded down, or up when up is
// set (the high end of a bound).
func quantile(xs []int64, k int, up bool) int64 {
	n := len(xs)
	pos := k * (n - 1)
	lo, rem := pos/4, pos%4
	if rem == 0 {
		return xs[lo]
	}
	d := big.NewInt(xs[lo+1] - xs[lo])
	d.Mul(d, big.NewInt(int64(rem)))
	if up {
		return xs[lo] + divCeil(d, big.NewInt(4))
	}
	return xs[lo] + divFloor(d, big.NewInt(4))
}

func statsOf(xs []int64) *Stats {
	if len(xs) == 0 {
		return nil
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	s := &Stats{Median: Milli(quantile(xs, 2, false)), Q1: Milli(quantile(xs, 1, false)), Q3: Milli(quantile(xs, 3, false)),
		Min: Milli(xs[0]), Max: Milli(xs[len(xs)-1])}
	s.IQR = s.Q3 - s.Q1
	return s
}

// medianBound bounds the median of the true values: the median is
// non-decreasing in every element, so if each true value lies in [lo_i,
// hi_i] the true median lies in [median(lo), median(hi)].
func medianBound(lo, hi []int64) *Interval {
	if len(lo) == 0 {
		return nil
	}
	lo, hi = slices.Clone(lo), slices.Clone(hi)
	slices.Sort(lo)
	slices.Sort(hi)
	return &Interval{Low: Milli(quantile(lo, 2, false)), High: Milli(quantile(hi, 2, true))}
}

// idleBaseline is the idle power subtracted for net figures, and its
// bound, from the run's sealed idle records only (never a JSON answer):
// the mean of their powers (each record's charged energy × 10⁹ /
// x_window_ns, floor), and the largest of their bounds as power
// (x_error_uj × 10⁹ / x_window_ns, ceiling) plus the mean's rounding. An
// idle section without a record in bySeq counts for nothing.
func idleBaseline(idle IdleSection, bySeq map[uint64]*steward.Opened) (*uint64, *uint64) {
	var powers, bounds []uint64
	for _, m := range []*IdleMeasurement{idle.Before, idle.After} {
		if m == nil || m.Sequence == nil || bySeq[*m.Sequence] == nil {
			continue
		}
		r := bySeq[*m.Sequence].Receipt
		e, err := r.Energy()
		if err != nil || r.EnergyProvenance == "Estimator" || r.WindowNs == nil || *r.WindowNs == 0 || r.ErrorUJ == nil {
			continue
		}
		powers = append(powers, uint64(divFloor(new(big.Int).Mul(u(e.UJ()), bigBillion), u(*r.WindowNs))))
		bounds = append(bounds, uint64(divCeil(new(big.Int).Mul(u(*r.ErrorUJ), bigBillion), u(*r.WindowNs))))
	}
	if len(powers) == 0 {
		return nil, nil
	}
	var sum uint64
	for _, p := range powers {
		sum += p
	}
	mean := sum / uint64(len(powers))
	bound := slices.Max(bounds)
	if sum%uint64(len(powers)) != 0 {
		bound++
	}
	return &mean, &bound
}

// Summarise computes the summary from the receipts the serves point at
// and the run's idle records (both looked up in bySeq). It is the only
// place a summary figure is made. It fails when a serve's receipt is not
// in the segment.
func Summarise(w *Workload, serves []Serve, bySeq map[uint64]*steward.Opened, idle IdleSection) (Summary, error) {
	var out Summary
	out.IdleUW, out.IdleErrorUW = idleBaseline(idle, bySeq)
	for _, c := range w.Cells() {
		sc := CellSummary{PromptWords: c.Prompt, MaxTokens: c.Output}
		var rs []*steward.Receipt
		for i := range serves {
			s := &serves[i]
			if s.Warmup || s.PromptWords != c.Prompt || s.MaxTokens != c.Output {
				continue
			}
			o := bySeq[s.Sequence]
			if o == nil {
				return Summary{}, fmt.Errorf("serve %d: its receipt (sequence %d) is not in the chain segment", s.Index, s.Sequence)
			}
			// A serve the router sent to another backend is in the run
			// (the run-close counts it) but measures something else: it
			// stops the run and counts in no figure.
			if o.Receipt.Recipe != w.Model.Resolved || idle.Backend != "" && o.Receipt.Backend != idle.Backend {
				continue
			}
			rs = append(rs, o.Receipt)
		}
		fillCell(&sc, rs, out.IdleUW, out.IdleErrorUW)
		out.Cells = append(out.Cells, sc)
	}
	return out, nil
}

// fillCell computes a cell's figures from its receipts, with the idle
// baseline for the net figures when there is one. Bench cells (a
// prompt×output of the matrix) and fleet cells (a steward's backend and
// recipe) are both made here, so they follow the same rules.
func fillCell(sc *CellSummary, rs []*steward.Receipt, idleUW, idleErrUW *uint64) {
	sc.Provenance, sc.Backends = map[string]int{}, map[string]int{}
	var gross, grossLo, grossHi, net, netLo, netHi, errs, tps, tin, tout []int64
	allBounded, allNetBounded := true, true
	for _, r := range rs {
		sc.Serves++
		sc.Provenance[r.EnergyProvenance]++
		sc.Backends[r.Backend]++
		tin = append(tin, 1000*int64(r.TokensIn))
		tout = append(tout, 1000*int64(r.TokensOut))
		if r.ServeNs != nil && *r.ServeNs > 0 {
			tps = append(tps, divFloor(new(big.Int).Mul(u(uint64(r.TokensOut)), big.NewInt(1_000_000_000_000)), u(*r.ServeNs)))
		}
		p, ok := perToken(r, idleUW, idleErrUW)
		if !ok {
			continue
		}
		sc.Counted++
		gross = append(gross, p.gross)
		if p.bounded {
			grossLo, grossHi, errs = append(grossLo, p.grossLo), append(grossHi, p.grossHi), append(errs, p.errPerTok)
		} else {
			allBounded = false
		}
		if p.hasNet {
			net = append(net, p.net)
			if p.bounded && idleErrUW != nil {
				netLo, netHi = append(netLo, p.netLo), append(netHi, p.netHi)
			} else {
				allNetBounded = false
			}
		}
	}
	if len(tin) > 0 {
		sc.TokensIn, sc.TokensOut = statsOf(tin).Median, statsOf(tout).Median
	}
	sc.Gross, sc.Net, sc.ErrorPerToken, sc.TokensPerS = statsOf(gross), statsOf(net), statsOf(errs), statsOf(tps)
	// A bound on the median needs a bound on every serve in it.
	if allBounded {
		sc.GrossMedianBound = medianBound(grossLo, grossHi)
	} else {
		sc.ErrorPerToken = nil
	}
	if allBounded && allNetBounded && len(net) == len(gross) {
		sc.NetMedianBound = medianBound(netLo, netHi)
	}
	fillSpread(sc, rs, gross, net)
}

// fillSpread adds what the run's spread and the daemon's timings say of
// a cell: the confidence intervals of the medians, the statistical
// uncertainty of point meters, the time to first token and the meter
// kinds (PROFILE §20).
func fillSpread(sc *CellSummary, rs []*steward.Receipt, gross, net []int64) {
	sc.GrossMedianCI, sc.NetMedianCI = medianCI(gross), medianCI(net)
	var stats, ttft []int64
	allStat, allTTFT := true, len(rs) > 0
	for _, r := range rs {
		if r.MeterKind != nil {
			if sc.MeterKinds == nil {
				sc.MeterKinds = map[string]int{}
			}
			sc.MeterKinds[*r.MeterKind]++
		}
		if ns, ok := firstTokenNs(r); ok {
			ttft = append(ttft, int64(ns/1000)) // ms in thousandths: µs, floor
		} else {
			allTTFT = false
		}
		if _, counted := perToken(r, nil, nil); !counted {
			continue
		}
		st, ok := statUJ(r)
		if !ok {
			allStat = false
			continue
		}
		stats = append(stats, divCeil(new(big.Int).Mul(u(st), bigThousand), u(uint64(r.TokensAccepted))))
	}
	if allStat && len(stats) > 0 {
		slices.Sort(stats)
		m := Milli(quantile(stats, 2, true))
		sc.StatPerToken = &m
	}
	if allTTFT {
		sc.TTFTMs = statsOf(ttft)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// BoundText is a bound as tables print it.
func BoundText(b *Interval) string {
	if b == nil {
		return "unbounded"
	}
	return "[" + b.Low.String() + ", " + b.High.String() + "]"
}

// ProvenanceText is a cell's provenance: the one name when all agree,
// else the mix with counts.
func ProvenanceText(m map[string]int) string {
	keys := sortedKeys(m)
	if len(keys) == 1 {
		return keys[0]
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return "mixed(" + strings.Join(parts, ", ") + ")"
}
