package shunt

import (
	"errors"
	"math"
	"sort"
)

// kind classifies a ring entry.
type kind uint8

const (
	kindValid kind = iota
	kindReadError
	kindOverflow
	kindBadTime
	kindBadAccuracy
	kindStalled
)

// blockSize is the granularity of the per-block maxima used to find the
// largest gap in a window without walking every reading.
const blockSize = 1024

// entry is one ring slot: int64s only, no pointers, so a long ring is a
// single allocation the garbage collector never scans. Energies are
// nanojoules; prefix sums wrap, and only differences are used.
type entry struct {
	start, end int64 // stated span, ns since the epoch; equal for a point reading
	u          int64 // uncertainty of both edges, ns
	at         int64 // when the sampler recorded it, ns since the epoch
	p          int64 // mean power over the span, nW
	fs         int64 // full scale at this reading's bus voltage, nW
	gap        int64 // end minus the previous valid reading's end (0 for the first)
	cumE       int64 // energy through end, bridges included
	cumB       int64 // error bound through end
	cumCov     int64 // ns inside spans through end
	ownB       int64 // bound of this span alone, without a bridge before it
	brk        int64 // chain breaks through this entry
	meta       int64 // invalid entries so far, this one included, <<8 | kind
}

func (e *entry) valid() bool { return kind(e.meta&0xff) == kindValid }
func (e *entry) bad() int64  { return e.meta >> 8 }

// ring is the reading store. It is not safe for concurrent use; Series
// guards it.
type ring struct {
	buf    []entry
	next   int64 // sequence number of the next entry
	blkMax []int64
	blkTag []int64
	gain   float64 // relative gain error G of the sensor

	// Writer state.
	haveValid bool
	last      entry // last valid entry
	lastSeq   int64
	dirty     bool // an invalid entry followed the last valid one
	bad       int64
	cumE      int64
	cumB      int64
	cumCov    int64
	brk       int64
}

func newRing(capacity int, gain float64) *ring {
	n := max((capacity+blockSize-1)/blockSize, 1)
	r := &ring{
		buf:    make([]entry, n*blockSize),
		blkMax: make([]int64, n),
		blkTag: make([]int64, n),
		gain:   gain,
	}
	for i := range r.blkTag {
		r.blkTag[i] = -1
	}
	return r
}

func (r *ring) capacity() int64 { return int64(len(r.buf)) }

func (r *ring) lo() int64 {
	if r.next > r.capacity() {
		return r.next - r.capacity()
	}
	return 0
}

func (r *ring) at(seq int64) *entry { return &r.buf[seq%r.capacity()] }

func (r *ring) push(e entry) {
	s := r.next
	r.buf[s%r.capacity()] = e
	b := s / blockSize
	slot := b % int64(len(r.blkTag))
	if r.blkTag[slot] != b {
		r.blkTag[slot], r.blkMax[slot] = b, 0
	}
	if e.gap > r.blkMax[slot] {
		r.blkMax[slot] = e.gap
	}
	r.next++
}

// nJ converts nW over ns to nanojoules.
func nJ(nw, ns float64) float64 { return nw * ns / 1e9 }

// sensorNJ bounds the sensor error of a piece whose |energy| and offset
// energy are given: |m−p| ≤ G|p|+O ≤ (G|m|+O)/(1−G).
func (r *ring) sensorNJ(absNJ, offNJ float64) float64 {
	return (r.gain*absNJ + offNJ) / (1 - r.gain)
}

// reading is what the sampler hands the ring for one valid sample.
type reading struct {
	start, end, u, at int64
	p, off, fs        int64   // nW
	dead              int64   // ns of the span the current went unobserved
	quantum           float64 // nJ one reading may lose to counter resolution
	contiguous        bool    // the driver's claim
	maxPeriod         int64
}

// spanE is the energy of a valid entry's own span.
func spanE(e *entry) int64 {
	return int64(math.Round(nJ(float64(e.p), float64(e.end-e.start))))
}

// worst is the largest error an estimate p can have against a truth that
// lies anywhere in [0, fs] (or [−fs, 0] for reverse flow).
func worst(p, fs float64) float64 {
	return max(math.Abs(p), fs-math.Abs(p))
}

// bridgePart integrates the straight line from valid reading j to valid
// reading m over [x0, x1], measured from j's end. Nothing observed the
// load in a bridge, so its bound is the worst case against full scale.
func (r *ring) bridgePart(j, m *entry, x0, x1 int64) (e, b float64) {
	g := float64(m.start - j.end)
	pj, dp := float64(j.p), float64(m.p-j.p)
	a, c := float64(x0), float64(x1)
	n := c - a
	e = nJ(pj+dp*(a+c)/(2*g), n)
	pa, pc := pj+dp*a/g, pj+dp*c/g
	fs := float64(max(j.fs, m.fs))
	b = nJ(max(worst(pa, fs), worst(pc, fs)), n)
	return e, b
}

// add appends a valid reading. It validates the driver's contiguity claim
// against the previous valid reading and the timing: a reading chains only
// if it directly follows a valid reading with no invalid entry between,
// begins where that one ended (within both uncertainties) and is no longer
// than the sensor's longest period.
func (r *ring) add(rd reading) {
	if rd.end < rd.start || (r.haveValid && rd.end <= r.last.end) {
		r.addInvalid(kindBadTime, rd.at)
		return
	}
	e := entry{start: rd.start, end: rd.end, u: rd.u, at: rd.at, p: rd.p, fs: max(rd.fs, abs(rd.p))}
	linked := false
	var bE, bB int64
	if r.haveValid {
		g := e.start - r.last.end
		tol := e.u + r.last.u
		linked = rd.contiguous && !r.dirty && g >= -tol && g <= tol &&
			e.end-r.last.end <= rd.maxPeriod+tol
		switch {
		case linked:
			e.start = r.last.end // attribute the mean to the time that elapsed
			// The shared boundary is placed only within the stamps'
			// uncertainty; moving it by u moves |Δp|·u of energy between
			// the two spans.
			bB += int64(math.Ceil(nJ(math.Abs(float64(e.p-r.last.p)), float64(max(e.u, r.last.u)))))
		case g < 0:
			// An overlap with the previous span: clip, and charge the
			// clipped stretch as unobserved, since this mean covered it.
			e.start = r.last.end
			bB += int64(math.Ceil(nJ(worst(float64(e.p), float64(e.fs)), float64(-g))))
		case g > 0:
			fe, fb := r.bridgePart(&r.last, &e, 0, g)
			bE, bB = int64(math.Round(fe)), bB+int64(math.Ceil(fb))
		}
		e.gap = e.end - r.last.end
	} else {
		e.gap = e.end - e.start
	}
	if !linked {
		r.brk++
	}
	n := float64(e.end - e.start)
	sb := r.sensorNJ(nJ(math.Abs(float64(e.p)), n), nJ(float64(rd.off), n)) +
		nJ(float64(e.fs), float64(min(rd.dead, e.end-e.start))) + rd.quantum
	e.ownB = int64(math.Ceil(sb)) + 1 // +1: rounding this span to a nanojoule
	r.cumE += bE + spanE(&e)
	r.cumB += bB + e.ownB
	r.cumCov += e.end - e.start
	e.cumE, e.cumB, e.cumCov, e.brk = r.cumE, r.cumB, r.cumCov, r.brk
	e.meta = r.bad<<8 | int64(kindValid)
	r.push(e)
	r.last, r.lastSeq, r.haveValid, r.dirty = e, r.next-1, true, false
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// addInvalid appends an entry that carries no measurement. It sits at the
// end of the last valid span: what matters is which bridge it falls in.
func (r *ring) addInvalid(k kind, at int64) {
	r.bad++
	t := int64(math.MinInt64 / 4)
	if r.haveValid {
		t = r.last.end
	}
	r.push(entry{start: t, end: t, at: at, cumE: r.cumE, cumB: r.cumB, cumCov: r.cumCov, brk: r.brk, meta: r.bad<<8 | int64(k)})
	r.dirty = true
}

// validCount counts valid entries in [a, b].
func (r *ring) validCount(a, b int64) int64 {
	if b < a {
		return 0
	}
	ea := r.at(a)
	badA := ea.bad()
	if !ea.valid() {
		badA--
	}
	return (b - a + 1) - (r.at(b).bad() - badA)
}

// firstValid is the first valid entry at or after a, or -1.
func (r *ring) firstValid(a int64) int64 {
	if a < r.lo() {
		a = r.lo()
	}
	if a >= r.next {
		return -1
	}
	n := int(r.next - a)
	i := sort.Search(n, func(i int) bool { return r.validCount(a, a+int64(i)) >= 1 })
	if i == n {
		return -1
	}
	return a + int64(i)
}

// lastValid is the last valid entry at or before b (not older than the
// ring), or -1.
func (r *ring) lastValid(b int64) int64 {
	lo := r.lo()
	if b >= r.next {
		b = r.next - 1
	}
	if b < lo {
		return -1
	}
	n := int(b - lo + 1)
	i := sort.Search(n, func(i int) bool { return r.validCount(b-int64(i), b) >= 1 })
	if i == n {
		return -1
	}
	return b - int64(i)
}

// maxGap is the largest gap recorded on the entries in [x, y].
func (r *ring) maxGap(x, y int64) int64 {
	var mx int64
	for s := x; s <= y; {
		if s%blockSize == 0 && s+blockSize-1 <= y {
			b := s / blockSize
			slot := b % int64(len(r.blkTag))
			if r.blkTag[slot] == b {
				mx = max(mx, r.blkMax[slot])
				s += blockSize
				continue
			}
		}
		mx = max(mx, r.at(s).gap)
		s++
	}
	return mx
}

// search returns the first sequence in [lo, next) for which f holds,
// assuming f is monotone, or next.
func (r *ring) search(f func(*entry) bool) int64 {
	lo := r.lo()
	return lo + int64(sort.Search(int(r.next-lo), func(i int) bool { return f(r.at(lo + int64(i))) }))
}

// result is a window over the ring, in ring units.
type result struct {
	start, end       int64   // interval integrated, ns
	eNJ, bNJ         float64 // energy and its bound
	samples, invalid int64
	maxGap           int64
	covered          int64 // ns of [start, end] inside spans
	chained          bool  // whole conversions that chain cover the window
}

var errNoValid = errors.New("no valid reading touches the window")

// chain finds the run of chained readings that surely covers [t0, t1]:
// its first reading surely began by t0 and its last surely ended by t1.
// A reading surely began by t0 when its stated start plus its uncertainty
// is not after t0, or when it chains to a reading the sampler had already
// recorded by t0 (a reading is recorded after its span ends). It reports
// false when no such run exists.
func (r *ring) chain(t0, t1 int64) (result, bool) {
	if !r.haveValid {
		return result{}, false
	}
	// mU: the last valid reading whose start is surely not after t0.
	mU := r.lastValid(r.search(func(e *entry) bool { return e.start > t0 }) - 1)
	for mU >= 0 && r.at(mU).start+r.at(mU).u > t0 {
		mU = r.lastValid(mU - 1)
	}
	// mA: the reading after the last one recorded by t0, if it chains.
	mA := int64(-1)
	if a := r.search(func(e *entry) bool { return e.at > t0 }) - 1; a >= r.lo() && r.at(a).valid() && a+1 < r.next {
		if n := r.at(a + 1); n.valid() && n.brk == r.at(a).brk {
			mA = a + 1
		}
	}
	m := max(mU, mA)
	// k: the first valid reading whose end is surely not before t1.
	k := r.firstValid(r.search(func(e *entry) bool { return e.end >= t1 }))
	for k >= 0 && r.at(k).end-r.at(k).u < t1 {
		k = r.firstValid(k + 1)
	}
	if m < 0 || k < 0 || k < m {
		return result{}, false
	}
	em, ek := r.at(m), r.at(k)
	if ek.brk != em.brk || r.validCount(m, k) != k-m+1 {
		return result{}, false
	}
	if k+1 < r.next && kind(r.at(k+1).meta&0xff) == kindBadTime {
		// The run's last reading came again (a duplicate) or was followed
		// by a reading out of time: the driver's account of that
		// conversion is in doubt.
		return result{}, false
	}
	res := result{
		start:   em.start,
		end:     ek.end,
		eNJ:     float64(ek.cumE - (em.cumE - spanE(em))),
		samples: k - m + 1,
		covered: ek.end - em.start,
		chained: true,
	}
	// m's bridge, if any, lies before its span and outside the run. The
	// run's two outer edges are placed within their uncertainty too.
	res.bNJ = float64(ek.cumB-em.cumB+em.ownB) + 4 +
		nJ(math.Abs(float64(em.p)), float64(em.u)) + nJ(math.Abs(float64(ek.p)), float64(ek.u))
	res.maxGap = em.end - em.start
	if k > m {
		res.maxGap = max(res.maxGap, r.maxGap(m+1, k))
	}
	return res, true
}

// prorata integrates [t0, t1] exactly as asked (t0 < t1): a window edge
// inside a span takes its share of the span pro rata, an edge inside a
// bridge its part of the bridge, and a window reaching past the readings
// holds the nearest value. Every stretch nothing observed is bounded
// against full scale.
func (r *ring) prorata(t0, t1 int64) (result, error) {
	lo, hi := r.lo(), r.next
	if lo == hi {
		return result{}, errors.New("no reading recorded yet")
	}
	// m: the first valid reading whose span ends after t0.
	m := r.firstValid(r.search(func(e *entry) bool { return e.end > t0 }))
	if m < 0 {
		// Every reading ended by t0: none saw any of the window.
		return result{}, errNoValid
	}
	// k: the last valid reading whose span starts before t1.
	k := r.lastValid(r.search(func(e *entry) bool { return e.start >= t1 }) - 1)
	res := result{start: t0, end: t1}
	em := r.at(m)
	if k < m {
		// The window lies wholly inside the bridge before m, or before
		// the first reading.
		j := r.lastValid(m - 1)
		if j < 0 {
			// Before the oldest reading: nothing saw the window.
			return result{}, errNoValid
		}
		ej := r.at(j)
		e, b := r.bridgePart(ej, em, t0-ej.end, t1-ej.end)
		return result{start: t0, end: t1, eNJ: e, bNJ: b + 2, samples: 2,
			invalid: (m - j + 1) - r.validCount(j, m), maxGap: em.end - ej.end}, nil
	}
	ek := r.at(k)
	// Whole entries m..k, then trim the parts outside [t0, t1].
	eSum := float64(ek.cumE - (em.cumE - spanE(em)))
	bSum := float64(ek.cumB - em.cumB + em.ownB)
	cov := ek.cumCov - em.cumCov + (em.end - em.start)
	first, lastUsed := m, k
	res.maxGap = em.end - em.start
	if k > m {
		res.maxGap = max(res.maxGap, r.maxGap(m+1, k))
	}
	// Leading edge.
	switch {
	case em.start >= t0:
		// t0 lies before m's span: in the bridge from j, or before any
		// reading.
		if j := r.lastValid(m - 1); j >= 0 {
			ej := r.at(j)
			if em.start > ej.end {
				e, b := r.bridgePart(ej, em, max(t0-ej.end, 0), em.start-ej.end)
				eSum, bSum = eSum+e, bSum+b
			}
			first = j
		} else {
			u := float64(em.start - t0)
			eSum += nJ(float64(em.p), u)
			bSum += nJ(worst(float64(em.p), float64(em.fs)), u)
			res.maxGap = max(res.maxGap, em.end-t0)
		}
	default:
		// t0 falls inside m's span: drop the part before it, and charge
		// the worst case for splitting a mean (plus the edge's
		// uncertainty) — only the span's mean is known.
		x := float64(t0 - em.start)
		eSum -= nJ(float64(em.p), x)
		cov -= t0 - em.start
		rest := float64(em.end - t0)
		bSum += nJ(worst(float64(em.p), float64(em.fs)), min(rest, x)+float64(em.u))
	}
	// Trailing edge.
	switch {
	case ek.end <= t1:
		n := r.firstValid(k + 1)
		if n >= 0 {
			en := r.at(n)
			if en.start > ek.end {
				e, b := r.bridgePart(ek, en, 0, min(t1, en.start)-ek.end)
				eSum, bSum = eSum+e, bSum+b
			}
			lastUsed = n
		} else {
			u := float64(t1 - ek.end)
			eSum += nJ(float64(ek.p), u)
			bSum += nJ(worst(float64(ek.p), float64(ek.fs)), u)
			res.maxGap = max(res.maxGap, t1-ek.end)
		}
	default:
		x := float64(ek.end - t1)
		eSum -= nJ(float64(ek.p), x)
		cov -= ek.end - t1
		kept := float64(t1 - max(ek.start, t0))
		bSum += nJ(worst(float64(ek.p), float64(ek.fs)), min(kept, x)+float64(ek.u))
	}
	res.samples = r.validCount(first, lastUsed)
	res.invalid = (lastUsed - first + 1) - res.samples
	res.eNJ = eSum
	res.bNJ = bSum + float64(lastUsed-first+1) + 4
	res.covered = max(cov, 0)
	return res, nil
}
