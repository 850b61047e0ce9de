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
)

// blockSize is the granularity of the per-block maxima used to find the
// largest gap in a window without walking every reading.
const blockSize = 1024

// entry is one ring slot: eight int64s, no pointers, so 600k readings are a
// single 38 MB allocation the garbage collector never scans.
type entry struct {
	start, end int64 // effective span, ns since the meter's epoch
	p          int64 // power, µW
	off        int64 // sensor offset bound at this reading, µW
	gap        int64 // ns from the previous valid reading's middle (0 if none)
	cumE       int64 // pJ integrated up to end (wraps; only differences matter)
	cumB       int64 // pJ of error bound up to end (wraps likewise)
	meta       int64 // invalid entries so far, this one included, <<8 | kind
}

func (e *entry) valid() bool   { return kind(e.meta&0xff) == kindValid }
func (e *entry) bad() int64    { return e.meta >> 8 }
func (e *entry) middle() int64 { return e.start + (e.end-e.start)/2 }

// ring is the reading store. It is not safe for concurrent use; Meter
// guards it.
type ring struct {
	buf    []entry
	next   int64 // sequence number of the next entry
	blkMax []int64
	blkTag []int64
	gain   float64 // relative gain error G of the sensor

	// Writer state.
	haveValid     bool
	last          entry // last valid entry
	lastMiddle    int64 // its reported middle, At − Averaged/2
	badSinceValid bool
	bad           int64
	cumE, cumB    int64
}

func newRing(capacity int, gain float64) *ring {
	n := (capacity + blockSize - 1) / blockSize
	if n < 1 {
		n = 1
	}
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

// pJ converts µW over ns to picojoules (µW·ns is a femtojoule).
func pJ(uw, ns float64) float64 { return uw * ns / 1e3 }

// sensorPJ bounds the sensor error of a piece whose |energy| and offset
// energy are given: |m−p| ≤ (G|m|+O)/(1−G).
func (r *ring) sensorPJ(absPJ, offPJ float64) float64 {
	return (r.gain*absPJ + offPJ) / (1 - r.gain)
}

func (r *ring) spanE(e *entry) int64 {
	return int64(math.Round(pJ(float64(e.p), float64(e.end-e.start))))
}

func (r *ring) spanB(e *entry) int64 {
	n := float64(e.end - e.start)
	return int64(math.Ceil(r.sensorPJ(pJ(math.Abs(float64(e.p)), n), pJ(float64(e.off), n))))
}

// bridgePart integrates the straight line from valid reading j to valid
// reading m over [x0, x1], measured from j's end, and bounds its error.
// Over the whole bridge a monotone load is within |Δp|·g/2 of the chord;
// over a part of it, within |Δp| times the part.
func (r *ring) bridgePart(j, m *entry, x0, x1 int64) (e, b float64) {
	g := float64(m.start - j.end)
	pj, dp := float64(j.p), float64(m.p-j.p)
	oj, do := float64(j.off), float64(m.off-j.off)
	a, c := float64(x0), float64(x1)
	n := c - a
	e = pJ(pj+dp*(a+c)/(2*g), n)
	pa, pc := pj+dp*a/g, pj+dp*c/g
	oa, oc := oj+do*a/g, oj+do*c/g
	interp := math.Abs(dp) * n
	if x0 == 0 && float64(x1) == g {
		interp /= 2
	}
	b = r.sensorPJ(pJ((math.Abs(pa)+math.Abs(pc))/2, n), pJ((oa+oc)/2, n)) + pJ(interp, 1)
	return e, b
}

// addValid appends a reading that ended at end (ns) after averaging over
// avg ns, with power p µW and sensor offset bound off µW.
func (r *ring) addValid(end, avg, p int64, off float64) {
	if avg < 0 {
		avg = 0
	}
	if r.haveValid && end <= r.last.end {
		r.addInvalid(kindBadTime)
		return
	}
	e := entry{start: end - avg, end: end, p: p, off: int64(math.Ceil(off))}
	middle := end - avg/2
	var bE, bB int64
	if r.haveValid {
		g := e.start - r.last.end
		switch {
		case g < 0, g > 0 && g <= avg/4 && !r.badSinceValid:
			e.start = r.last.end
		case g > 0:
			fe, fb := r.bridgePart(&r.last, &e, 0, g)
			bE, bB = int64(math.Round(fe)), int64(math.Ceil(fb))
		}
		e.gap = middle - r.lastMiddle
	}
	r.cumE += bE + r.spanE(&e)
	r.cumB += bB + r.spanB(&e)
	e.cumE, e.cumB = r.cumE, r.cumB
	e.meta = r.bad<<8 | int64(kindValid)
	r.push(e)
	r.last, r.lastMiddle, r.haveValid, r.badSinceValid = e, middle, true, false
}

// addInvalid appends an entry that carries no measurement. It sits at the
// end of the last valid span: what matters is which bridge it falls in.
func (r *ring) addInvalid(k kind) {
	r.bad++
	t := int64(math.MinInt64 / 4)
	if r.haveValid {
		t = r.last.end
	}
	r.push(entry{start: t, end: t, cumE: r.cumE, cumB: r.cumB, meta: r.bad<<8 | int64(k)})
	r.badSinceValid = true
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

// result is a window over the ring, in ring units.
type result struct {
	start, end       int64   // interval integrated, ns
	ePJ, bPJ         float64 // energy and its bound
	samples, invalid int64
	maxGap           int64
	startOK, endOK   bool // edges bracketed by valid readings
}

var errNoValid = errors.New("no valid reading touches the window")

// query integrates [t0, t1] (ns, t0 < t1).
func (r *ring) query(t0, t1 int64) (result, error) {
	lo, hi := r.lo(), r.next
	if lo == hi {
		return result{}, errors.New("no reading recorded yet")
	}
	// m: the first valid reading whose span ends after t0.
	a := lo + int64(sort.Search(int(hi-lo), func(i int) bool { return r.at(lo+int64(i)).end > t0 }))
	m := int64(-1)
	if a < hi {
		m = r.firstValid(a)
	}
	if m < 0 {
		return result{}, errNoValid
	}
	em := r.at(m)
	j := int64(-1)
	if em.start > t0 && m > lo {
		j = r.lastValid(m - 1)
	}
	var res result
	if em.start >= t1 {
		// The window touches no span: it lies inside one bridge.
		if j < 0 {
			return result{}, errNoValid
		}
		ej := r.at(j)
		if r.validCount(j, m) != m-j+1 {
			return result{}, errNoValid
		}
		e, b := r.bridgePart(ej, em, t0-ej.end, t1-ej.end)
		return result{start: t0, end: t1, ePJ: e, bPJ: b + 2, samples: 2,
			maxGap: em.gap, startOK: true, endOK: true}, nil
	}
	// k: the last valid reading whose span starts before t1; k ≥ m.
	b := lo + int64(sort.Search(int(hi-lo), func(i int) bool { return r.at(lo+int64(i)).start >= t1 })) - 1
	k := r.lastValid(b)
	ek := r.at(k)
	n := int64(-1)
	if ek.end < t1 {
		if k+1 < hi {
			n = r.firstValid(k + 1)
		}
	}

	eSum := float64(ek.cumE - (em.cumE - r.spanE(em)))
	bSum := float64(ek.cumB - (em.cumB - r.spanB(em)))
	first, lastUsed := m, k
	res.start, res.end = em.start, ek.end
	res.startOK, res.endOK = true, true

	switch {
	case em.start <= t0:
	case j >= 0:
		ej := r.at(j)
		e, bb := r.bridgePart(ej, em, t0-ej.end, em.start-ej.end)
		eSum, bSum, first, res.start = eSum+e, bSum+bb, j, t0
	default:
		u := float64(em.start - t0)
		p := float64(em.p)
		eSum += pJ(p, u)
		bSum += r.sensorPJ(pJ(math.Abs(p), u), pJ(float64(em.off), u)) + pJ(math.Abs(p), u)
		res.start, res.startOK = t0, false
		res.maxGap = em.middle() - t0
	}
	switch {
	case ek.end >= t1:
	case n >= 0:
		en := r.at(n)
		e, bb := r.bridgePart(ek, en, 0, t1-ek.end)
		eSum, bSum, lastUsed, res.end = eSum+e, bSum+bb, n, t1
	default:
		u := float64(t1 - ek.end)
		p := float64(ek.p)
		eSum += pJ(p, u)
		bSum += r.sensorPJ(pJ(math.Abs(p), u), pJ(float64(ek.off), u)) + pJ(math.Abs(p), u)
		res.end, res.endOK = t1, false
		res.maxGap = max(res.maxGap, t1-ek.middle())
	}
	res.samples = r.validCount(first, lastUsed)
	res.invalid = (lastUsed - first + 1) - res.samples
	if lastUsed > first {
		res.maxGap = max(res.maxGap, r.maxGap(first+1, lastUsed))
	}
	res.ePJ = eSum
	// Each prefix-sum step and each edge rounds to a picojoule.
	res.bPJ = bSum + float64(lastUsed-first+1) + 4
	return res, nil
}
