// Package probe finds power sensors: INA226 and INA219 chips at I²C
// addresses 0x40–0x4F, hwmon power rails, and serial meters on the ports it
// is given, and takes one reading from each. Buses, the hwmon root and the
// ports are passed in, so that discovery runs against simulations in tests.
//
// Discovery never resets or reconfigures a chip: an INA226 is recognised
// by its ID registers; an INA219, which has none, only when its
// configuration register still holds the power-on value 0x399F. Any other
// device that answers is listed as unidentified. Readings from I²C chips
// are the bus and shunt voltages only, since current needs the shunt value.
//
// Each sensor found is listed with the kind of reading it would give when
// metered (drivers.Kind): an I²C INA chip converts on its own clock
// ("adc"), an hwmon rail with an energy accumulator is a "counter", and
// hwmon power attributes and serial meters are "point" readings, which can
// never support a hardware claim.
package probe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/drivers/ina219"
	"meshd/drivers/ina226"
	"meshd/drivers/serialmeter"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

// Bus is an I²C bus to scan.
type Bus struct {
	Name string
	Bus  i2c.Bus
}

// Options says where to look.
type Options struct {
	// Buses are scanned at 0x40–0x4F.
	Buses []Bus
	// HwmonRoot is the hwmon class directory; empty means hwmon.DefaultRoot.
	HwmonRoot string
	// UMPorts and LinePorts are serial devices holding an RDTech UM meter
	// or a line-protocol meter.
	UMPorts, LinePorts []string
	// Timeout bounds the wait for each serial meter; 0 means 2 s.
	Timeout time.Duration
	// Clock stamps the readings; nil means drivers.System.
	Clock drivers.Clock
}

// Found is one sensor, or one place that failed to answer as expected.
type Found struct {
	// Kind is "ina226", "ina219", "i2c-unknown", the hwmon chip name,
	// "UM24C"/"UM25C"/"UM34C" or "line".
	Kind string
	// Where locates it: "i2c-1:0x40", a hwmon rail, a device path.
	Where string
	// Reading is the kind of reading the sensor gives when metered; 0
	// for a device that is not a known sensor.
	Reading drivers.Kind
	// Sample is what was read; nil when nothing could be.
	Sample *drivers.Sample
	// VoltagesOnly is set when current and power were not read (an I²C
	// chip whose shunt resistance discovery cannot know).
	VoltagesOnly bool
	// Note adds what the reading cannot show.
	Note string
	// Err is set when the sensor was found but could not be read.
	Err error
}

// String renders a Found as one line.
func (f Found) String() string {
	kind := "-"
	if f.Reading != 0 {
		kind = f.Reading.String()
	}
	s := fmt.Sprintf("%-12s %-28s %-7s", f.Kind, f.Where, kind)
	switch {
	case f.Err != nil:
		s += " error: " + f.Err.Error()
	case f.Sample != nil:
		x := f.Sample
		s += fmt.Sprintf(" bus %.3f V  shunt %.3f mV", float64(x.Bus)/float64(physic.Volt), float64(x.Shunt)/float64(physic.MilliVolt))
		if !f.VoltagesOnly {
			s += fmt.Sprintf("  current %.4f A  power %.4f W", float64(x.Current)/float64(physic.Ampere), float64(x.Power)/float64(physic.Watt))
		}
	}
	if f.Note != "" {
		s += "  (" + f.Note + ")"
	}
	return s
}

// ScanI2C probes 0x40–0x4F on each bus, stamping readings on clock (nil
// means drivers.System).
func ScanI2C(buses []Bus, clock drivers.Clock) []Found {
	clock = drivers.ClockOr(clock)
	var out []Found
	for _, b := range buses {
		for addr := uint16(0x40); addr <= 0x4F; addr++ {
			if f, ok := probeAddr(b, addr, clock); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func probeAddr(b Bus, addr uint16, clock drivers.Clock) (Found, bool) {
	where := fmt.Sprintf("%s:0x%02x", b.Name, addr)
	err := ina226.Probe(b.Bus, addr)
	if err == nil {
		return voltages("ina226", where, clock, func() (physic.ElectricPotential, physic.ElectricPotential, error) {
			return ina226.ReadVoltages(b.Bus, addr)
		}), true
	}
	if !errors.Is(err, drivers.ErrNoDevice) {
		return Found{}, false // nothing acknowledged this address
	}
	cfg, err := ina219.ReadConfig(b.Bus, addr)
	if err != nil {
		return Found{Kind: "i2c-unknown", Where: where, Err: err}, true
	}
	if cfg == ina219.PowerOnConfig {
		return voltages("ina219", where, clock, func() (physic.ElectricPotential, physic.ElectricPotential, error) {
			return ina219.ReadVoltages(b.Bus, addr)
		}), true
	}
	return Found{Kind: "i2c-unknown", Where: where,
		Note: fmt.Sprintf("answers, not an INA226; config 0x%04x is not an INA219 at power-on (a configured INA219 cannot be told apart without a reset)", cfg)}, true
}

// voltages reads an INA chip's bus and shunt voltages once, at one
// instant: discovery does not know the shunt, so it cannot meter.
func voltages(kind, where string, clock drivers.Clock, read func() (physic.ElectricPotential, physic.ElectricPotential, error)) Found {
	f := Found{Kind: kind, Where: where, Reading: drivers.KindConversion}
	bus, shunt, err := read()
	if err != nil {
		f.Err = err
		return f
	}
	at := clock.Now()
	f.Sample = &drivers.Sample{Start: at, End: at, Bus: bus, Shunt: shunt}
	f.VoltagesOnly, f.Note = true, "current and power need the shunt resistance"
	return f
}

// ScanHwmon reads each power rail under root once, stamping readings on
// clock (nil means drivers.System).
func ScanHwmon(root string, clock drivers.Clock) ([]Found, error) {
	rails, err := hwmon.Discover(root)
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, r := range rails {
		f := Found{Kind: r.Chip, Where: "hwmon:" + r.String(), Reading: drivers.KindPoint}
		if r.HasEnergy() {
			f.Reading = drivers.KindCounter
		}
		smp, err := hwmon.Read(r, clock)
		if err == nil {
			f.Sample = &smp
		}
		f.Err = err
		switch {
		case err != nil:
		case r.HasEnergy():
			f.Note = "power from the energy counter when metered"
		case !r.HasPower():
			f.Note = "power = V × I"
		}
		out = append(out, f)
	}
	return out, nil
}

// ScanSerial reads each UM and line meter once, stamping readings on clock
// (nil means drivers.System).
func ScanSerial(ctx context.Context, umPorts, linePorts []string, timeout time.Duration, clock drivers.Clock) []Found {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	var out []Found
	for _, path := range umPorts {
		f := Found{Kind: "UM", Where: path, Reading: drivers.KindPoint}
		m, err := serialmeter.OpenUM(ctx, serialmeter.UMConfig{Path: path, Timeout: timeout, Clock: clock})
		if err == nil {
			f.Kind = m.Model().String()
			var smp drivers.Sample
			if smp, err = m.Read(ctx); err == nil {
				f.Sample = &smp
			}
			m.Close()
		}
		f.Err = err
		out = append(out, f)
	}
	for _, path := range linePorts {
		f := Found{Kind: "line", Where: path, Reading: drivers.KindPoint}
		// A probe reads one line and judges nothing against the meter's
		// full scale, which it cannot know; metering needs the real one.
		l, err := serialmeter.OpenLine(serialmeter.LineConfig{Path: path, Timeout: timeout, Clock: clock, MaxPower: math.MaxInt64})
		if err == nil {
			var smp drivers.Sample
			if smp, err = l.Next(ctx); err == nil {
				f.Sample = &smp
			}
			l.Close()
		}
		f.Err = err
		out = append(out, f)
	}
	return out
}

// Scan runs every scan the options ask for. An unreadable hwmon root is
// reported as an error alongside whatever else was found.
func Scan(ctx context.Context, opts Options) ([]Found, error) {
	out := ScanI2C(opts.Buses, opts.Clock)
	hw, err := ScanHwmon(opts.HwmonRoot, opts.Clock)
	out = append(out, hw...)
	out = append(out, ScanSerial(ctx, opts.UMPorts, opts.LinePorts, opts.Timeout, opts.Clock)...)
	return out, err
}
