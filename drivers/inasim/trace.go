package inasim

import (
	"math"
	"sort"
	"time"

	"periph.io/x/conn/v3/physic"
)

// Step is one piece of a piecewise-constant load: a shunt current and a bus
// voltage held for a while.
type Step struct {
	// For is how long the step lasts; the last step of a trace lasts for
	// ever, whatever it says.
	For     time.Duration
	Current physic.ElectricCurrent
	Bus     physic.ElectricPotential
}

// Trace is a piecewise-constant load on a chip's inputs. Its integrals are
// closed forms over the steps (prefix sums and a binary search), so the
// mean current, mean bus voltage and energy over any interval are exact up
// to float64 rounding and cost O(log n): tests use them as ground truth.
// Before its start a trace holds its first step's values, after its last
// step's start the last step's values.
//
// A Trace is immutable and safe for concurrent use.
type Trace struct {
	start time.Time
	begin []int64   // ns from start at which step i begins; begin[0] = 0
	cur   []float64 // nA
	bus   []float64 // nV
	// Integrals from start to begin[i]: of the current (nA·ns), of the
	// bus voltage (nV·ns) and of their product (nA·nV·ns = 1e-27 J).
	q, v, e []float64
}

// NewTrace builds the trace that starts at start and runs through steps in
// order. With no steps the load is zero.
func NewTrace(start time.Time, steps ...Step) *Trace {
	if len(steps) == 0 {
		steps = []Step{{}}
	}
	n := len(steps)
	t := &Trace{
		start: start,
		begin: make([]int64, n), cur: make([]float64, n), bus: make([]float64, n),
		q: make([]float64, n), v: make([]float64, n), e: make([]float64, n),
	}
	for i, s := range steps {
		t.cur[i], t.bus[i] = float64(s.Current), float64(s.Bus)
		if i == 0 {
			continue
		}
		d := steps[i-1].For
		if d < 0 {
			d = 0
		}
		dt := float64(d)
		t.begin[i] = t.begin[i-1] + int64(d)
		t.q[i] = t.q[i-1] + t.cur[i-1]*dt
		t.v[i] = t.v[i-1] + t.bus[i-1]*dt
		t.e[i] = t.e[i-1] + t.cur[i-1]*t.bus[i-1]*dt
	}
	return t
}

// Constant is the load that draws current at bus for ever.
func Constant(current physic.ElectricCurrent, bus physic.ElectricPotential) *Trace {
	return NewTrace(time.Time{}, Step{Current: current, Bus: bus})
}

// constantF is Constant with a current finer than a nanoampere, so that a
// shunt voltage set directly (SetInputs) survives the division by the
// shunt resistance.
func constantF(currentNA, busNV float64) *Trace {
	t := NewTrace(time.Time{})
	t.cur[0], t.bus[0] = currentNA, busNV
	return t
}

// End is when the last step begins (after it the load stays constant).
func (t *Trace) End() time.Time { return t.start.Add(time.Duration(t.begin[len(t.begin)-1])) }

// step returns the index of the step in force at offset off (ns).
func (t *Trace) step(off int64) int {
	i := sort.Search(len(t.begin), func(i int) bool { return t.begin[i] > off }) - 1
	return max(i, 0)
}

func (t *Trace) off(at time.Time) int64 { return int64(at.Sub(t.start)) }

// integrals returns the three integrals from start to offset off; before
// start they are negative, the first step extended backwards.
func (t *Trace) integrals(off int64) (q, v, e float64) {
	i := t.step(off)
	dt := float64(off - t.begin[i])
	return t.q[i] + t.cur[i]*dt, t.v[i] + t.bus[i]*dt, t.e[i] + t.cur[i]*t.bus[i]*dt
}

// At returns the load at an instant.
func (t *Trace) At(at time.Time) (physic.ElectricCurrent, physic.ElectricPotential) {
	i := t.step(t.off(at))
	return physic.ElectricCurrent(math.Round(t.cur[i])), physic.ElectricPotential(math.Round(t.bus[i]))
}

// means returns the mean current (nA) and bus voltage (nV) over [a, b]; an
// empty or reversed interval gives the values at a. Within one step the
// step's values come back exactly.
func (t *Trace) means(a, b time.Time) (cur, bus float64) {
	oa, ob := t.off(a), t.off(b)
	ia := t.step(oa)
	if ob <= oa || t.step(ob) == ia {
		return t.cur[ia], t.bus[ia]
	}
	qa, va, _ := t.integrals(oa)
	qb, vb, _ := t.integrals(ob)
	d := float64(ob - oa)
	return (qb - qa) / d, (vb - va) / d
}

// MeanCurrent is the mean shunt current over [a, b], rounded to 1 nA.
func (t *Trace) MeanCurrent(a, b time.Time) physic.ElectricCurrent {
	c, _ := t.means(a, b)
	return physic.ElectricCurrent(math.Round(c))
}

// MeanBus is the mean bus voltage over [a, b], rounded to 1 nV.
func (t *Trace) MeanBus(a, b time.Time) physic.ElectricPotential {
	_, v := t.means(a, b)
	return physic.ElectricPotential(math.Round(v))
}

// EnergyJoules is the true energy ∫V·I dt over [a, b] in joules (negative
// for reverse flow, and for b before a).
func (t *Trace) EnergyJoules(a, b time.Time) float64 {
	_, _, ea := t.integrals(t.off(a))
	_, _, eb := t.integrals(t.off(b))
	return (eb - ea) * 1e-27
}

// Energy is EnergyJoules rounded to 1 nJ.
func (t *Trace) Energy(a, b time.Time) physic.Energy {
	return physic.Energy(math.Round(t.EnergyJoules(a, b) * 1e9))
}

// MeanPower is the true mean power over [a, b], rounded to 1 nW; an empty
// interval gives the power at a.
func (t *Trace) MeanPower(a, b time.Time) physic.Power {
	if !b.After(a) {
		i := t.step(t.off(a))
		return physic.Power(math.Round(t.cur[i] * t.bus[i] * 1e-9))
	}
	return physic.Power(math.Round(t.EnergyJoules(a, b) * 1e9 / b.Sub(a).Seconds()))
}
