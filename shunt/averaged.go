package shunt

import (
	"math"
	"sort"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// The averaged-reading model (PROFILE.md §13, "Point meters that
// average"). A sensor with drivers.Info.Averaging reads a chip that
// converts continuously, window after window of length τ (the nominal
// window within the chip's clock tolerance), and each value it returns is
// the mean power over the newest window completed when the value was
// latched, at some moment λ in [End − Latch, End].
//
// Let L(t) be the mean of the newest window completed by t: a step
// function that jumps at each completion. A window's mean is the load's
// mean over that window, so the energy over [t0, t1] is ∫ L over
// [t0 + τ, t1 + τ], up to the two windows cut by t0 and t1. The readings
// sample L at their latch moments; the jump between readings j−1 and j
// lies in J_j = (r_{j−1} − u_{j−1}, r_j]. The estimate holds each value
// from the midpoint of its J to the next midpoint and integrates that over
// [t0 + τn, t1 + τn]. The bound is the sum of
//
//   - each jump's displacement: |Δx| times the farthest the true jump can
//     lie from the switch point, where |Δx| is the readings' difference
//     widened by both sensor errors, when J is shorter than the shortest
//     window (at most one completion); otherwise a window may have passed
//     unread, and the whole of J is charged at full scale;
//   - the sensor error of each value over the time it is held;
//   - at each edge, the energy of the window cut by the edge (at most its
//     whole energy, the load being non-negative) and the error of placing
//     the edge at τn rather than the true τ: the edge's peak power times
//     (τmax + max(τmax − τn, τn − τmin)).
//
// It holds for any non-negative load under the model's assumptions, which
// the sysfs battery (hwmon_battery_test.go) checks against exact ground
// truth.

// avgReading is one valid averaged reading.
type avgReading struct {
	r, u  int64   // stamp (the read's end) and latch uncertainty, ns since the epoch
	p     float64 // value, nW
	e     float64 // bound on |value − the window's true mean|, nW
	pd    float64 // bound on the difference of this reading's error and the previous stored one's, nW
	bus   physic.ElectricPotential
	cur   physic.ElectricCurrent
	fs    float64 // full scale at the reading's bus voltage, nW
	after bool    // an invalid entry came between this reading and the previous one
}

// avgStore keeps the averaged readings beside the ring. It is not safe
// for concurrent use; Series guards it.
type avgStore struct {
	buf             []avgReading
	next            int64
	tauN, tauLo     int64 // nominal and shortest window, ns
	tauHi           int64 // longest window, ns
	gain            float64
	broken, haveAny bool
	last            int64 // newest stamp
}

func newAvgStore(capacity int, tauN, tauLo, tauHi int64) *avgStore {
	return &avgStore{buf: make([]avgReading, max(capacity, 1)), tauN: tauN, tauLo: tauLo, tauHi: tauHi}
}

func (s *avgStore) lo() int64 { return max(s.next-int64(len(s.buf)), 0) }

func (s *avgStore) at(i int64) *avgReading { return &s.buf[i%int64(len(s.buf))] }

func (s *avgStore) add(rd avgReading) {
	if s.haveAny && rd.r <= s.last {
		// A stamp that runs backwards or repeats: the driver's account is
		// in doubt, so the next interval is charged as unobserved.
		s.broken = true
		return
	}
	rd.after = s.broken
	s.buf[s.next%int64(len(s.buf))] = rd
	s.next++
	s.last, s.haveAny, s.broken = rd.r, true, false
}

func (s *avgStore) invalid() { s.broken = true }

// avgResult is a window under the model.
type avgResult struct {
	eNJ, bNJ, statNJ float64
	samples          int64
	maxGap           int64
	unobserved       int64 // ns of intervals charged at full scale
}

// jump describes the step between readings j−1 and j: where it may lie,
// where the estimate switches, and what its displacement may cost per ns.
func (s *avgStore) jump(j int64) (lo, hi, sw float64, multi int64) {
	p, c := s.at(j-1), s.at(j)
	lo, hi = float64(p.r-p.u), float64(c.r)
	sw = (lo + hi) / 2
	n := hi - lo
	multi = 1
	if c.after || n >= float64(s.tauLo) {
		multi = int64(n/float64(s.tauLo)) + 1
		if c.after {
			multi = max(multi, 2)
		}
	}
	return lo, hi, sw, multi
}

// window integrates [a, b] (ns, a < b) under the model. ok is false when
// the readings do not bracket the stretch the model needs.
func (s *avgStore) window(a, b int64) (avgResult, bool) {
	lo, hi := s.lo(), s.next
	if hi-lo < 2 {
		return avgResult{}, false
	}
	search := func(f func(*avgReading) bool) int64 {
		return lo + int64(sort.Search(int(hi-lo), func(i int) bool { return f(s.at(lo + int64(i))) }))
	}
	// f: the last reading surely latched by a + τmin; l: the first surely
	// latched at or after b + τmax.
	f := search(func(x *avgReading) bool { return x.r > a+s.tauLo }) - 1
	l := search(func(x *avgReading) bool { return x.r-x.u >= b+s.tauHi })
	if f < lo || l >= hi || l <= f {
		return avgResult{}, false
	}
	A, B := float64(a+s.tauN), float64(b+s.tauN)
	var res avgResult
	var sum, sumSq float64
	// peak is the largest power L can take over [t1, t2]: the readings
	// whose latches bracket it, widened by their error, or full scale
	// where a window there may have passed unread.
	peak := func(t1, t2 float64) float64 {
		i := search(func(x *avgReading) bool { return float64(x.r) > t1 }) - 1
		k := search(func(x *avgReading) bool { return float64(x.r-x.u) >= t2 })
		i, k = max(i, f), min(k, l)
		var pk, fs float64
		for j := i; j <= k; j++ {
			x := s.at(j)
			pk, fs = max(pk, math.Abs(x.p)+x.e), max(fs, x.fs)
			if j > i {
				if _, _, _, m := s.jump(j); m > 1 {
					return fs
				}
			}
		}
		return pk
	}
	prevSw := math.Inf(-1)
	for j := f; j <= l; j++ {
		x := s.at(j)
		// The hold of reading j runs from its switch point to the next.
		start := math.Inf(-1)
		if j > f {
			jl, jh, sw, multi := s.jump(j)
			sw = max(sw, prevSw) // keep the switch points in order
			start = sw
			if jh > A && jl < B {
				far := max(sw-jl, jh-sw)
				p := s.at(j - 1)
				if multi > 1 {
					// A window may have passed unread: L and the estimate
					// both lie in [0, full scale] over J, whatever happened.
					res.bNJ += nJ(max(x.fs, p.fs), jh-jl)
					res.unobserved += int64(jh - jl)
				} else {
					res.bNJ += nJ((math.Abs(x.p-p.p)+x.pd)/(1-s.gain), far)
				}
			}
			res.maxGap = max(res.maxGap, x.r-s.at(j-1).r)
			prevSw = sw
		}
		end := math.Inf(1)
		if j < l {
			_, _, sw, _ := s.jump(j + 1)
			end = max(sw, prevSw)
		}
		held := min(end, B) - max(start, A)
		if held <= 0 {
			continue
		}
		res.eNJ += nJ(x.p, held)
		res.bNJ += nJ(x.e, held)
		res.samples++
		sum += x.p
		sumSq += x.p * x.p
	}
	tLo, tHi, tN := float64(s.tauLo), float64(s.tauHi), float64(s.tauN)
	edge := tHi + max(tHi-tN, tN-tLo)
	res.bNJ += nJ(peak(float64(a)+tLo, float64(a)+tHi), edge) + nJ(peak(float64(b)+tLo, float64(b)+tHi), edge)
	res.bNJ += float64(res.samples) + 4 // rounding to the nanojoule
	if n := float64(res.samples); n >= 2 {
		mean := sum / n
		v := max((sumSq-n*mean*mean)/(n-1), 0)
		res.statNJ = nJ(StatZ*math.Sqrt(v/n), float64(b-a))
	}
	return res, true
}

// StatZ is the normal quantile of the statistical uncertainty's 95 %
// two-sided interval (x_stat_uj, PROFILE.md §6).
const StatZ = 1.959964

// recordAvg stores a valid sample for the averaged-reading model. off and
// fs are the offset and full scale the ring used; OffsetAt, where the
// driver has one, replaces the offset with the reading's current taken
// into account.
func (s *Series) recordAvg(smp drivers.Sample, off, fs float64) {
	acc := s.info.Accuracy
	if acc.OffsetAt != nil {
		if o := math.Abs(float64(acc.OffsetAt(smp.Bus, smp.Current))); !math.IsNaN(o) && !math.IsInf(o, 0) {
			off = o
		}
	}
	p := float64(smp.Power)
	e := (acc.GainErr*math.Abs(p) + off) / (1 - acc.GainErr)
	rd := avgReading{r: s.ns(smp.End), u: max(smp.Latch.Nanoseconds(), 0), p: p, e: e,
		bus: smp.Bus, cur: smp.Current, fs: max(fs, math.Abs(p))}
	if st := s.avg; st.next > 0 {
		// The pair with the previous stored reading: what of their two
		// errors does not cancel in their difference (the chip's gain
		// and offsets are common to both; Accuracy.PairErr), else both
		// whole errors.
		prev := st.at(st.next - 1)
		rd.pd = prev.e + e
		if acc.PairErr != nil {
			a := drivers.Sample{Bus: prev.bus, Current: prev.cur, Power: physic.Power(prev.p)}
			if q := math.Abs(float64(acc.PairErr(a, smp))); q < rd.pd {
				rd.pd = q
			}
		}
	}
	s.avg.add(rd)
}

// avgReport turns a model window into a report: ModelBased always (a
// point meter never supports a hardware claim), with the statistical
// uncertainty beside the bound.
func (s *Series) avgReport(ar avgResult, a, b int64, prorata bool) (Report, error) {
	res := result{start: a, end: b, eNJ: ar.eNJ, bNJ: ar.bNJ, samples: ar.samples, maxGap: ar.maxGap,
		covered: max(b-a-ar.unobserved, 0)}
	rep, err := s.report(res, b-a, prorata)
	if err != nil {
		return rep, err
	}
	if ar.samples >= 2 {
		st := uint64(math.Ceil(ar.statNJ / 1e3))
		rep.StatUJ = ar.statNJ / 1e3
		rep.Reading.Metering.StatUJ = &st
	}
	rep.Model = ModelAveraged
	return rep, nil
}

// ModelAveraged names the averaged-reading model in Report.Model.
const ModelAveraged = "averaged"
