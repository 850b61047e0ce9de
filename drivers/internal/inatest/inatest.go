// Package inatest holds the test fixtures the INA driver tests share: a
// driver opened on a simulated bus and clock holding one chip, random loads,
// and the check of a run of readings against the simulator's ground truth
// (each reading one whole conversion, none twice, placed within its stated
// uncertainty, contiguous only where it truly follows the last).
package inatest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/drivers/inasim"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

// Rig is one simulated chip on its own bus and clock, with a driver open
// on it.
type Rig[D drivers.Sensor] struct {
	Clock *drivertest.Clock
	Bus   *inasim.Bus
	Chip  *inasim.Chip
	Dev   D
}

// Options shape a Rig.
type Options struct {
	// Speed is the bus speed; 0 is inasim.DefaultSpeed.
	Speed physic.Frequency
	// Setup runs on the chip before the driver opens (load, faults).
	Setup func(*inasim.Chip)
}

// Open puts a simulated chip of kind at addr on a fresh bus with an
// auto-mode clock and opens it with open, handing it the clock; the driver
// is closed when the test ends.
func Open[D drivers.Sensor](t testing.TB, kind inasim.Kind, addr uint16, o Options, open func(i2c.Bus, uint16, drivers.Clock) (D, error)) *Rig[D] {
	t.Helper()
	clock := drivertest.NewClock(drivertest.Epoch, true)
	var opts []inasim.BusOption
	if o.Speed != 0 {
		opts = append(opts, inasim.WithSpeed(o.Speed))
	}
	bus := inasim.NewBus("sim-1", clock, opts...)
	chip := bus.Add(kind, addr)
	if o.Setup != nil {
		o.Setup(chip)
	}
	d, err := open(bus, addr, clock)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return &Rig[D]{Clock: clock, Bus: bus, Chip: chip, Dev: d}
}

// Next reads one sample, failing the test on an error.
func (r *Rig[D]) Next(t testing.TB) drivers.Sample {
	t.Helper()
	s, err := r.Dev.Next(context.Background())
	if err != nil {
		t.Fatalf("Next at %v: %v", r.Clock.Now().Sub(drivertest.Epoch), err)
	}
	return s
}

// Run reads n samples.
func (r *Rig[D]) Run(t testing.TB, n int) []drivers.Sample {
	t.Helper()
	out := make([]drivers.Sample, 0, n)
	for range n {
		out = append(out, r.Next(t))
	}
	return out
}

// RandomLoad is a load from start over span that changes every 20–600 µs
// (so that consecutive conversions differ) between 0 and maxCurrent, with
// a bus voltage wandering between 11 and 13 V, from seed.
func RandomLoad(start time.Time, span time.Duration, maxCurrent physic.ElectricCurrent, seed uint64) *inasim.Trace {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var steps []inasim.Step
	for t := time.Duration(0); t < span; {
		d := time.Duration(20+rng.IntN(580)) * time.Microsecond
		steps = append(steps, inasim.Step{
			For:     d,
			Current: physic.ElectricCurrent(rng.Int64N(int64(maxCurrent))),
			Bus:     11*physic.Volt + physic.ElectricPotential(rng.Int64N(int64(2*physic.Volt))),
		})
		t += d
	}
	return inasim.NewTrace(start, steps...)
}

// LSBs are a chip's voltage register LSBs, to decode the simulator's
// registers.
func LSBs(kind inasim.Kind) (shunt, bus physic.ElectricPotential) {
	if kind == inasim.INA219 {
		return 10 * physic.MicroVolt, 4 * physic.MilliVolt
	}
	return 2500 * physic.NanoVolt, 1250 * physic.MicroVolt
}

// Report is what Check found.
type Report struct {
	// Delivered counts samples, Contiguous those that said so.
	Delivered, Contiguous int
	// Missed counts conversions between the first and the last delivered
	// that were never delivered.
	Missed int
	// Seqs are the conversions delivered, in order.
	Seqs []uint64
	// Uncertainties of the samples, sorted.
	Uncertainties []time.Duration
}

// Median is the median uncertainty.
func (r Report) Median() time.Duration { return r.Uncertainties[len(r.Uncertainties)/2] }

// Max is the largest uncertainty.
func (r Report) Max() time.Duration { return r.Uncertainties[len(r.Uncertainties)-1] }

// Check matches each sample to the conversion that ended within the
// sample's Uncertainty of its End and whose shunt and bus registers the
// sample carries (busFixed: the bus is bracketed, not converted), and fails
// the test unless there is one (a torn or misplaced reading has none); its
// true start also lies within the Uncertainty; no conversion is delivered
// twice or out of order; the chip showed its
// ready flag; and a Contiguous sample delivers the conversion right after
// the previous sample's.
func Check(t testing.TB, kind inasim.Kind, samples []drivers.Sample, convs []inasim.Conversion, busFixed bool) Report {
	t.Helper()
	shLSB, busLSB := LSBs(kind)
	var rep Report
	seen := map[uint64]bool{}
	var prev uint64
	for i, s := range samples {
		// Among the conversions that ended within the stated uncertainty,
		// the one whose values the sample carries.
		j := sort.Search(len(convs), func(j int) bool { return !convs[j].End.Before(s.End.Add(-s.Uncertainty)) })
		var c inasim.Conversion
		found := false
		for ; j < len(convs) && !convs[j].End.After(s.End.Add(s.Uncertainty)); j++ {
			cv := convs[j]
			if physic.ElectricPotential(int16(cv.Shunt))*shLSB == s.Shunt && (busFixed || physic.ElectricPotential(cv.Bus)*busLSB == s.Bus) {
				c, found = cv, true
				break
			}
		}
		if !found {
			t.Fatalf("sample %d (end %v ± %v, shunt %v, bus %v): no conversion within its uncertainty carries its values: torn or misplaced",
				i, s.End.Sub(convs[0].Start), s.Uncertainty, s.Shunt, s.Bus)
		}
		if d := absDur(s.Start.Sub(c.Start)); d > s.Uncertainty {
			t.Fatalf("sample %d (conversion %d): Start off by %v, beyond its uncertainty %v (contiguous %v)", i, c.Seq, d, s.Uncertainty, s.Contiguous)
		}
		if seen[c.Seq] || i > 0 && c.Seq < prev {
			t.Fatalf("sample %d: conversion %d delivered twice or out of order (after %d)", i, c.Seq, prev)
		}
		seen[c.Seq] = true
		if !c.FlagSeen {
			t.Fatalf("sample %d: conversion %d delivered though its ready flag was never seen", i, c.Seq)
		}
		if s.Contiguous {
			rep.Contiguous++
			if i == 0 || c.Seq != prev+1 {
				t.Fatalf("sample %d: contiguous, but delivers conversion %d after %d", i, c.Seq, prev)
			}
		}
		if i > 0 {
			rep.Missed += int(c.Seq - prev - 1)
		}
		prev = c.Seq
		rep.Seqs = append(rep.Seqs, c.Seq)
		rep.Uncertainties = append(rep.Uncertainties, s.Uncertainty)
	}
	rep.Delivered = len(samples)
	slices.Sort(rep.Uncertainties)
	return rep
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }
