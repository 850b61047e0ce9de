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
package probe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/drivers/ina219"
	"meshd/drivers/ina226"
	"meshd/drivers/serialmeter"

	"periph.io/x/conn/v3/i2c"
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
}

// Found is one sensor, or one place that failed to answer as expected.
type Found struct {
	// Kind is "ina226", "ina219", "i2c-unknown", the hwmon chip name,
	// "UM24C"/"UM25C"/"UM34C" or "line".
	Kind string
	// Where locates it: "i2c-1:0x40", a hwmon rail, a device path.
	Where string
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
	s := fmt.Sprintf("%-12s %-28s", f.Kind, f.Where)
	switch {
	case f.Err != nil:
		s += " error: " + f.Err.Error()
	case f.Sample != nil:
		x := f.Sample
		s += fmt.Sprintf(" bus %.3f V  shunt %.3f mV", float64(x.BusUV)/1e6, float64(x.ShuntNV)/1e6)
		if !f.VoltagesOnly {
			s += fmt.Sprintf("  current %.4f A  power %.4f W", float64(x.CurrentUA)/1e6, float64(x.PowerUW)/1e6)
		}
	}
	if f.Note != "" {
		s += "  (" + f.Note + ")"
	}
	return s
}

// ScanI2C probes 0x40–0x4F on each bus.
func ScanI2C(buses []Bus) []Found {
	var out []Found
	for _, b := range buses {
		for addr := uint16(0x40); addr <= 0x4F; addr++ {
			if f, ok := probeAddr(b, addr); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

func probeAddr(b Bus, addr uint16) (Found, bool) {
	where := fmt.Sprintf("%s:0x%02x", b.Name, addr)
	err := ina226.Probe(b.Bus, addr)
	if err == nil {
		return voltages("ina226", where, func() (int64, int64, error) { return ina226.ReadVoltages(b.Bus, addr) }), true
	}
	if !errors.Is(err, drivers.ErrNoDevice) {
		return Found{}, false // nothing acknowledged this address
	}
	cfg, err := ina219.ReadConfig(b.Bus, addr)
	if err != nil {
		return Found{Kind: "i2c-unknown", Where: where, Err: err}, true
	}
	if cfg == ina219.PowerOnConfig {
		return voltages("ina219", where, func() (int64, int64, error) { return ina219.ReadVoltages(b.Bus, addr) }), true
	}
	return Found{Kind: "i2c-unknown", Where: where,
		Note: fmt.Sprintf("answers, not an INA226; config 0x%04x is not an INA219 at power-on (a configured INA219 cannot be told apart without a reset)", cfg)}, true
}

func voltages(kind, where string, read func() (int64, int64, error)) Found {
	busUV, shuntNV, err := read()
	if err != nil {
		return Found{Kind: kind, Where: where, Err: err}
	}
	return Found{Kind: kind, Where: where, Sample: &drivers.Sample{At: time.Now(), BusUV: busUV, ShuntNV: shuntNV},
		VoltagesOnly: true, Note: "current and power need the shunt resistance"}
}

// ScanHwmon reads each power rail under root once.
func ScanHwmon(root string) ([]Found, error) {
	rails, err := hwmon.Discover(root)
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, r := range rails {
		f := Found{Kind: r.Chip, Where: "hwmon:" + r.String()}
		s, err := hwmon.Open(r, hwmon.Options{})
		if err == nil {
			var smp drivers.Sample
			if smp, err = s.Read(); err == nil {
				f.Sample = &smp
			}
			s.Close()
		}
		f.Err = err
		if err == nil && !r.HasPower() {
			f.Note = "power = V × I"
		}
		out = append(out, f)
	}
	return out, nil
}

// ScanSerial reads each UM and line meter once.
func ScanSerial(ctx context.Context, umPorts, linePorts []string, timeout time.Duration) []Found {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	var out []Found
	for _, path := range umPorts {
		f := Found{Kind: "UM", Where: path}
		m, err := serialmeter.OpenUM(ctx, serialmeter.UMConfig{Path: path, Timeout: timeout})
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
		f := Found{Kind: "line", Where: path}
		l, err := serialmeter.OpenLine(serialmeter.LineConfig{Path: path, Timeout: timeout})
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
	out := ScanI2C(opts.Buses)
	hw, err := ScanHwmon(opts.HwmonRoot)
	out = append(out, hw...)
	out = append(out, ScanSerial(ctx, opts.UMPorts, opts.LinePorts, opts.Timeout)...)
	return out, err
}
