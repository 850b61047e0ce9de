package ina226

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/inatest"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

// board is a 2 mΩ shunt rated 20 A.
var board = Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000}

func rig(t testing.TB, cfg Config, o inatest.Options) *inatest.Rig[*Dev] {
	t.Helper()
	return inatest.Open(t, inasim.INA226, addr, o, func(bus i2c.Bus, a uint16, c drivers.Clock) (*Dev, error) {
		cfg.Clock = c
		return Open(bus, a, cfg)
	})
}

// randomLoad installs a load that changes faster than any conversion, for
// span from now.
func randomLoad(span time.Duration, seed uint64) func(*inasim.Chip) {
	return func(c *inasim.Chip) {
		c.SetLoad(inatest.RandomLoad(drivertest.Epoch, span, 15*physic.Ampere, seed))
	}
}

func withPreset(p Preset) Config {
	c := board
	c.Preset = p
	return c
}

// TestEveryConversionOnce runs the fast preset over 10 000 conversions of
// a load that changes within every conversion and checks against the
// simulator that each conversion comes back once, whole, placed within the
// stated uncertainty, and contiguous after the first. On a 100 kHz bus the
// fast preset cannot be kept up with (five register reads outlast a
// period): there the same truths must hold, except that the skipped
// conversions make the readings after them non-contiguous; the default
// preset keeps up at 100 kHz.
func TestEveryConversionOnce(t *testing.T) {
	tests := []struct {
		name      string
		preset    Preset
		speed     physic.Frequency
		n         int
		keepsUp   bool
		maxMedian time.Duration
	}{
		{"fast 400kHz", PresetFast, 400 * physic.KiloHertz, 10_000, true, 100 * time.Microsecond},

		{"precise 100kHz", PresetPrecise, 100 * physic.KiloHertz, 2_000, true, 400 * time.Microsecond},
		{"precise 400kHz", PresetPrecise, 400 * physic.KiloHertz, 2_000, true, 100 * time.Microsecond},
		{"kernel 400kHz", PresetKernel, 400 * physic.KiloHertz, 300, true, 100 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := withPreset(tt.preset)
			period := rig(t, cfg, inatest.Options{}).Dev.Info().Period
			r := rig(t, cfg, inatest.Options{Speed: tt.speed, Setup: randomLoad(time.Duration(tt.n+10)*period*2, 7)})
			samples := r.Run(t, tt.n)
			rep := inatest.Check(t, inasim.INA226, samples, r.Chip.Conversions(), false)
			t.Logf("%s: %d delivered, %d contiguous, %d missed; uncertainty median %v, max %v",
				tt.name, rep.Delivered, rep.Contiguous, rep.Missed, rep.Median(), rep.Max())
			if tt.keepsUp {
				if rep.Missed != 0 || rep.Contiguous != tt.n-1 || samples[0].Contiguous {
					t.Fatalf("missed %d, contiguous %d of %d", rep.Missed, rep.Contiguous, tt.n)
				}
				if rep.Median() > tt.maxMedian {
					t.Fatalf("median uncertainty %v, want at most %v", rep.Median(), tt.maxMedian)
				}
			} else if rep.Missed == 0 {
				t.Fatal("a bus slower than the conversions missed none: the simulation is not timing the bus")
			}
			for i, s := range samples {
				if s.Dead != time.Duration(Averages[0])*(140*time.Microsecond+14*time.Microsecond) && tt.preset != PresetKernel {
					t.Fatalf("sample %d: Dead %v", i, s.Dead)
				}
			}
		})
	}
}

// TestClockOffNominal: within the ±10 % tolerance every reading chains; a
// chip clock 30 % slow stretches every gap beyond the longest period the
// datasheet allows, so no reading may claim to chain, yet each is still
// placed correctly.
func TestClockOffNominal(t *testing.T) {
	tests := []struct {
		preset     Preset
		speed      physic.Frequency
		factor     float64
		contiguous bool
	}{
		{PresetFast, 400 * physic.KiloHertz, 1.3, false},
		{PresetFast, 400 * physic.KiloHertz, 1.08, true},
		{PresetFast, 400 * physic.KiloHertz, 0.92, true},
		{PresetPrecise, 100 * physic.KiloHertz, 1.3, false},
		{PresetPrecise, 100 * physic.KiloHertz, 0.92, true},
		{PresetKernel, 400 * physic.KiloHertz, 1.3, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v %v ×%v", tt.preset, tt.speed, tt.factor), func(t *testing.T) {
			r := rig(t, withPreset(tt.preset), inatest.Options{Speed: tt.speed, Setup: func(c *inasim.Chip) {
				c.SetClockFactor(tt.factor)
				randomLoad(10*time.Second, 3)(c)
			}})
			const n = 1000
			rep := inatest.Check(t, inasim.INA226, r.Run(t, n), r.Chip.Conversions(), false)
			if rep.Missed != 0 {
				t.Fatalf("missed %d conversions", rep.Missed)
			}
			want := 0
			if tt.contiguous {
				want = n - 1
			}
			if rep.Contiguous != want {
				t.Fatalf("%d of %d readings contiguous, want %d", rep.Contiguous, n, want)
			}
		})
	}
}

// TestDroppedConversions: whatever keeps the driver from reading a
// conversion (a long NACK burst, a consumer that pauses, a bus slowed
// below what the period needs), the reading after it must not chain, and
// every reading must still be one whole conversion, placed within its
// uncertainty.
func TestDroppedConversions(t *testing.T) {
	period := 1240 * time.Microsecond
	tests := []struct {
		name        string
		fault, heal func(*inatest.Rig[*Dev])
	}{
		{"NACK burst", func(r *inatest.Rig[*Dev]) { r.Chip.FailNext(200) }, nil},
		{"consumer pauses", func(r *inatest.Rig[*Dev]) { r.Clock.Advance(3 * period) }, nil},
		{"bus slows", func(r *inatest.Rig[*Dev]) { r.Bus.SetSpeed(50 * physic.KiloHertz) },
			func(r *inatest.Rig[*Dev]) { r.Bus.SetSpeed(400 * physic.KiloHertz) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, withPreset(PresetFast), inatest.Options{Setup: randomLoad(10*time.Second, 5)})
			samples := r.Run(t, 20)
			tt.fault(r)
			var errs, calls int
			for len(samples) < 200 {
				if calls++; calls == 5 && tt.heal != nil {
					tt.heal(r)
				}
				s, err := r.Dev.Next(context.Background())
				if err != nil {
					if errs++; errs > 300 {
						t.Fatalf("no reading after %d errors: %v", errs, err)
					}
					continue
				}
				samples = append(samples, s)
			}
			rep := inatest.Check(t, inasim.INA226, samples, r.Chip.Conversions(), false)
			if rep.Missed == 0 {
				t.Fatal("the fault made the driver miss no conversion: the test does not test")
			}
			if samples[20].Contiguous {
				t.Fatal("the reading after the fault claims to chain")
			}
			t.Logf("%s: %d errors, %d missed, %d of %d contiguous", tt.name, errs, rep.Missed, rep.Contiguous, len(samples))
		})
	}
}

// TestTornReadsReplaced wakes the driver at every phase of the next
// conversion's completion relative to its result reads: whenever a newer
// conversion latches in between, the driver must drop what it read and
// return the newer one, whole and not chained.
func TestTornReadsReplaced(t *testing.T) {
	var torn int
	for off := time.Duration(0); off < 700*time.Microsecond; off += 5 * time.Microsecond {
		r := rig(t, withPreset(PresetFast), inatest.Options{Setup: randomLoad(time.Second, 11)})
		samples := r.Run(t, 3)
		convs := r.Chip.Conversions()
		last := convs[len(convs)-1]
		// Sleep through the next conversion and wake off before the one
		// after it completes.
		r.Clock.Set(last.End.Add(2*1240*time.Microsecond - off))
		samples = append(samples, r.Run(t, 3)...)
		convs = r.Chip.Conversions()
		rep := inatest.Check(t, inasim.INA226, samples, convs, false)
		skipped := convs[last.Seq] // Seq last.Seq+1
		if skipped.FlagSeen && skipped.Reads[inasim.RegShunt] > 0 && rep.Seqs[3] > skipped.Seq {
			torn++
		}
	}
	if torn == 0 {
		t.Fatal("no phase made a newer conversion latch during the result reads: the test does not test")
	}
	t.Logf("%d phases read a conversion that a newer one overtook", torn)
}

// TestPowerDown: another bus master powers the chip down (MODE 000). If it
// leaves the register pointer on Config, the next poll reads Config instead
// of Mask/Enable and the driver repairs the chip at once; if it moves the
// pointer back (say, by polling Mask/Enable itself), no conversion comes
// and Next returns ErrStalled, naming the power-down, within three long
// periods of the last conversion. Either way the chip is reprogrammed, one
// reset counted, and the next reading does not chain.
func TestPowerDown(t *testing.T) {
	for _, tt := range []struct {
		name    string
		restore bool // the other master leaves the pointer on Mask/Enable
		stall   bool
	}{{"pointer on config", false, false}, {"pointer on mask", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			r := rig(t, withPreset(PresetFast), inatest.Options{Setup: randomLoad(time.Second, 2)})
			samples := r.Run(t, 5)
			info := r.Dev.Info()
			last := r.Chip.Conversions()[4]
			if err := r.Bus.Tx(addr, []byte{inasim.RegConfig, 0x40, 0x20}, nil); err != nil {
				t.Fatal(err)
			}
			if tt.restore {
				if err := r.Bus.Tx(addr, []byte{inasim.RegMask}, make([]byte, 2)); err != nil {
					t.Fatal(err)
				}
			}
			if tt.stall {
				_, err := r.Dev.Next(context.Background())
				if !errors.Is(err, drivers.ErrStalled) || !strings.Contains(err.Error(), "powered down") {
					t.Fatalf("got %v, want ErrStalled naming the power-down", err)
				}
				waited := r.Clock.Now().Sub(last.End)
				if lo, hi := 3*info.Period, 3*info.MaxPeriod+info.Period/2; waited < lo || waited > hi {
					t.Fatalf("stall reported %v after the last conversion, want between %v and %v", waited, lo, hi)
				}
			}
			samples = append(samples, r.Run(t, 5)...)
			if r.Dev.Resets() != 1 || r.Chip.Reg(inasim.RegConfig) != 0x4027 {
				t.Fatalf("resets %d, config 0x%04x: the chip was not reprogrammed once", r.Dev.Resets(), r.Chip.Reg(inasim.RegConfig))
			}
			if samples[5].Contiguous || !samples[6].Contiguous {
				t.Fatal("after the repair the first reading must not chain, the next must")
			}
			inatest.Check(t, inasim.INA226, samples, r.Chip.Conversions(), false)
		})
	}
}

func TestStoppedClockStalls(t *testing.T) {
	r := rig(t, withPreset(PresetFast), inatest.Options{Setup: randomLoad(time.Second, 2)})
	samples := r.Run(t, 5)
	maxP := r.Dev.Info().MaxPeriod
	r.Chip.Stall()
	for i := range 2 {
		before := r.Clock.Now()
		_, err := r.Dev.Next(context.Background())
		if !errors.Is(err, drivers.ErrStalled) || !strings.Contains(err.Error(), "settings intact") {
			t.Fatalf("call %d: got %v, want ErrStalled with the settings intact", i, err)
		}
		if waited := r.Clock.Now().Sub(before); waited > 3*maxP+maxP/2 {
			t.Fatalf("call %d returned after %v: longer than three periods", i, waited)
		}
	}
	if r.Dev.Resets() != 0 {
		t.Fatalf("resets %d for a chip whose settings were intact", r.Dev.Resets())
	}
	r.Chip.Resume()
	samples = append(samples, r.Run(t, 5)...)
	if samples[5].Contiguous || !samples[6].Contiguous {
		t.Fatal("after a stall: the first reading must not chain, the next must")
	}
	inatest.Check(t, inasim.INA226, samples, r.Chip.Conversions(), false)
}

// TestPowerCycleRepaired: a brown-out mid-run brings back the power-on
// configuration (2.2 ms cycles) and a zero calibration; the driver must
// notice, reprogram, count one reset, return nothing converted under the
// lost settings, and not chain across.
func TestPowerCycleRepaired(t *testing.T) {
	for _, load := range []struct {
		name string
		set  func(*inasim.Chip)
	}{
		{"changing load", randomLoad(time.Second, 4)},
		{"no current", func(c *inasim.Chip) { c.SetInputs(0, 12*physic.Volt) }},
	} {
		t.Run(load.name, func(t *testing.T) {
			r := rig(t, withPreset(PresetFast), inatest.Options{Setup: load.set})
			samples := r.Run(t, 5)
			r.Clock.Advance(300 * time.Microsecond)
			r.Chip.PowerCycle()
			samples = append(samples, r.Run(t, 10)...)
			if r.Dev.Resets() != 1 {
				t.Fatalf("Resets() = %d, want 1", r.Dev.Resets())
			}
			if samples[5].Contiguous {
				t.Fatal("the reading after a reset claims to chain")
			}
			convs := r.Chip.Conversions()
			rep := inatest.Check(t, inasim.INA226, samples, convs, load.name == "no current")
			for _, seq := range rep.Seqs {
				if c := convs[seq-1]; c.End.Sub(c.Start) != 1240*time.Microsecond {
					t.Fatalf("conversion %d of %v returned: made under the power-on settings", seq, c.End.Sub(c.Start))
				}
			}
		})
	}
}

func TestNACKBurst(t *testing.T) {
	r := rig(t, example, inatest.Options{Setup: func(c *inasim.Chip) { c.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt) }})
	r.Next(t)
	r.Chip.FailNext(4)
	for i := range 4 {
		s, err := r.Dev.Next(context.Background())
		if !errors.Is(err, inasim.ErrNACK) {
			t.Fatalf("call %d during the burst: %+v, %v; want a wrapped NACK", i, s, err)
		}
	}
	s := r.Next(t)
	if s.Current != 10*physic.Ampere || s.Power != 119800*physic.MilliWatt || s.Contiguous {
		t.Fatalf("after the burst got I=%v P=%v contiguous %v", s.Current, s.Power, s.Contiguous)
	}
	if r.Dev.Resets() != 0 {
		t.Fatalf("resets %d after a burst that reset nothing", r.Dev.Resets())
	}
}

// TestShuntOnlyBracketsBus: shunt-only mode has no dead time, takes the
// bus from a triggered conversion every BusEvery (each breaking the chain
// once), and flags readings while the last bracket is beyond the declared
// regulation of the first.
func TestShuntOnlyBracketsBus(t *testing.T) {
	ms, V := time.Millisecond, physic.Volt
	cfg := Config{ShuntMicroOhms: 2000, MaxCurrentUA: 20_000_000, Preset: PresetShuntOnly, BusEvery: 10 * ms, BusTolerance: 0.05}
	load := inasim.NewTrace(drivertest.Epoch,
		inasim.Step{For: 25 * ms, Current: 3 * physic.Ampere, Bus: 12 * V},
		inasim.Step{For: 20 * ms, Current: 5 * physic.Ampere, Bus: 12300 * physic.MilliVolt},
		inasim.Step{For: 20 * ms, Current: 4 * physic.Ampere, Bus: 13 * V},
		inasim.Step{Current: 2 * physic.Ampere, Bus: 12 * V},
	)
	r := rig(t, cfg, inatest.Options{Setup: func(c *inasim.Chip) { c.SetLoad(load) }})
	if a := r.Dev.Info().Accuracy; a.GainErr != 0.002+cfg.BusTolerance {
		t.Fatalf("GainErr %v, want 0.2 %% + 5 %% declared regulation", a.GainErr)
	}
	// The power rests on the first bracket (12 V) ± 5 %, one 1.25 mV LSB
	// wider each way: the band the receipt states.
	if b := r.Dev.Info().BusAssumed; b == nil || b.Lo != 11400*physic.MilliVolt-1250*physic.MicroVolt || b.Hi != 12600*physic.MilliVolt+1250*physic.MicroVolt {
		t.Fatalf("assumed bus band %+v, want [11.39875 V, 12.60125 V]", b)
	}
	var samples []drivers.Sample
	for r.Clock.Now().Before(drivertest.Epoch.Add(90 * ms)) {
		samples = append(samples, r.Next(t))
	}
	breaks := 0
	for i, s := range samples {
		if s.Dead != 0 {
			t.Fatalf("sample %d: Dead %v in shunt-only mode", i, s.Dead)
		}
		_, truth := load.At(s.End)
		wantOver := s.Bus == 13*V
		if s.Overflow != wantOver {
			t.Fatalf("sample %d at %v: bus %v (true %v), Overflow %v", i, s.End.Sub(drivertest.Epoch), s.Bus, truth, s.Overflow)
		}
		if s.Bus != 12*V && s.Bus != 12300*physic.MilliVolt && s.Bus != 13*V {
			t.Fatalf("sample %d: bus %v is not a bracketed value", i, s.Bus)
		}
		if !s.Contiguous {
			breaks++
		}
	}
	// Open resets and programs the chip (two Config writes); each bracket
	// writes Config twice more.
	brackets := (r.Chip.Writes(inasim.RegConfig) - 2) / 2
	if breaks != brackets || brackets < 8 {
		t.Fatalf("%d readings broke the chain over 90 ms with %d bus brackets (every 10 ms): want one per bracket", breaks, brackets)
	}
	rep := inatest.Check(t, inasim.INA226, samples, r.Chip.Conversions(), true)
	t.Logf("shunt-only: %d readings, %d contiguous, uncertainty median %v", rep.Delivered, rep.Contiguous, rep.Median())
}
