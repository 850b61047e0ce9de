package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/host/v3"

	"meshd/agent"
	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/drivers/ina219"
	"meshd/drivers/ina226"
	"meshd/drivers/nvml"
	"meshd/drivers/serialmeter"
	"meshd/rapl"
	"meshd/shunt"
)

const meterUsage = `meter spec: one meter, or several joined by + into a span whose figure is
their sum and whose provenance is the worst of theirs (e.g. ina226:...+rapl:package-0):
  ina226:BUS:ADDR:SHUNT_UOHM:MAX_UA   e.g. ina226:1:0x40:10000:3000000 (I2C bus name as periph knows it)
  ina219:BUS:ADDR:SHUNT_UOHM:MAX_UA
  hwmon:RAIL[@SHUNT_UOHM]             a kernel rail by label or name, e.g. hwmon:VDD_IN or hwmon:hwmon2/ina226:1;
                                      @SHUNT_UOHM where the kernel publishes no shunt resistor (ina228/237/238)
  um:DEVICE                           RDTech UM24C/UM25C/UM34C, e.g. um:/dev/rfcomm0
  line:DEVICE@MAX_MW                  a microcontroller speaking the line protocol, with its full scale in mW,
                                      e.g. line:/dev/ttyACM0@30000
  rapl:ZONE                           a powercap zone, e.g. rapl:package-0 or rapl:package-0/dram (ModelBased)
  nvml:INDEX                          an NVIDIA GPU's energy counter, e.g. nvml:0 (ModelBased)`

// meterHooks let a test drive the demo's meter deterministically: wrap the
// sensor (to release samples one at a time on a simulated clock), give the
// sampler that clock, and wrap the agent's meter (to release the samples
// that span a window before it closes). Nil hooks change nothing.
type meterHooks struct {
	sensor func(drivers.Sensor) drivers.Sensor
	now    func() time.Time
	meter  func(agent.Meter) agent.Meter
	after  func(time.Duration) <-chan time.Time
	logger *slog.Logger
	clock  drivers.Clock // the drivers' clock; nil is the system's
}

func (h meterHooks) wrapMeter(m agent.Meter) agent.Meter {
	if h.meter == nil {
		return m
	}
	return h.meter(m)
}

// openSpan opens every meter a spec names (joined by +) and groups them
// into one span, waiting until each delivers.
func openSpan(ctx context.Context, spec, hwmonRoot string, policy shunt.Policy, hooks meterHooks) (*shunt.Span, func(), error) {
	var meters []*shunt.Meter
	closeAll := func() {
		for _, m := range meters {
			m.Close()
		}
	}
	var members []shunt.Member
	for _, one := range strings.Split(spec, "+") {
		m, err := openMeter(ctx, one, hwmonRoot, hooks)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		meters = append(meters, m)
		members = append(members, m)
	}
	s, err := shunt.NewSpan(members, shunt.SpanConfig{Policy: policy})
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("meter %q: %w", spec, err)
	}
	return s, closeAll, nil
}

// openMeter opens the sensor a spec names and starts its sampler.
func openMeter(ctx context.Context, spec, hwmonRoot string, hooks meterHooks) (*shunt.Meter, error) {
	s, err := openSensor(ctx, spec, hwmonRoot, hooks.clock)
	if err != nil {
		return nil, fmt.Errorf("meter %q: %w", spec, err)
	}
	if hooks.sensor != nil {
		s = hooks.sensor(s)
	}
	m, err := shunt.New(ctx, s, shunt.MeterConfig{Config: shunt.Config{Now: hooks.now}, Logger: hooks.logger, After: hooks.after})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("meter %q: %w", spec, err)
	}
	// Serve nothing until the meter can measure a window: a sensor that
	// never delivers is a fault to report, not a reason to seal Estimator
	// receipts in silence.
	rctx, cancel := context.WithTimeout(ctx, max(2*time.Second, 4*m.Info().MaxPeriod))
	defer cancel()
	if err := m.Ready(rctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("meter %q: %w", spec, err)
	}
	return m, nil
}

func openSensor(ctx context.Context, spec, hwmonRoot string, clock drivers.Clock) (drivers.Sensor, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	switch kind {
	case "ina226", "ina219":
		f := strings.Split(rest, ":")
		if len(f) != 4 {
			return nil, fmt.Errorf("want %s:BUS:ADDR:SHUNT_UOHM:MAX_UA", kind)
		}
		addr, err := strconv.ParseUint(f[1], 0, 16)
		if err != nil || addr < 0x40 || addr > 0x4f {
			return nil, fmt.Errorf("address %q: want 0x40..0x4f", f[1])
		}
		shuntUOhm, err1 := strconv.ParseInt(f[2], 10, 64)
		maxUA, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || shuntUOhm <= 0 || maxUA <= 0 {
			return nil, fmt.Errorf("shunt resistance (µΩ) and maximum current (µA) must be positive integers")
		}
		if _, err := host.Init(); err != nil {
			return nil, fmt.Errorf("init I2C host drivers: %w", err)
		}
		bus, err := i2creg.Open(f[0])
		if err != nil {
			return nil, fmt.Errorf("open I2C bus %q: %w", f[0], err)
		}
		var s drivers.Sensor
		if kind == "ina226" {
			s, err = ina226.Open(bus, uint16(addr), ina226.Config{ShuntMicroOhms: shuntUOhm, MaxCurrentUA: maxUA, Clock: clock})
		} else {
			s, err = ina219.Open(bus, uint16(addr), ina219.Config{ShuntMicroOhms: shuntUOhm, MaxCurrentUA: maxUA, Clock: clock})
		}
		if err != nil {
			bus.Close()
			return nil, err
		}
		return s, nil
	case "hwmon":
		opts := hwmon.Options{Clock: clock}
		if name, shunt, ok := strings.Cut(rest, "@"); ok {
			v, err := strconv.ParseInt(shunt, 10, 64)
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("shunt resistance %q: want a positive integer of µΩ", shunt)
			}
			rest, opts.ShuntMicroOhms = name, v
		}
		rails, err := hwmon.Discover(hwmonRoot)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, r := range rails {
			bare := fmt.Sprintf("%s/%s:%d", filepath.Base(r.Dir), r.Chip, r.Channel)
			if r.Label == rest || r.String() == rest || bare == rest {
				return hwmon.Open(r, opts)
			}
			names = append(names, r.String())
		}
		return nil, fmt.Errorf("no hwmon rail %q (found: %s)", rest, strings.Join(names, ", "))
	case "rapl":
		return rapl.Open(rest, rapl.Config{Clock: clock})
	case "nvml":
		i, err := strconv.Atoi(rest)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("GPU index %q: want a non-negative integer", rest)
		}
		return nvml.Open(i, nvml.Config{Clock: clock})
	case "um":
		return serialmeter.OpenUM(ctx, serialmeter.UMConfig{Path: rest, Clock: clock})
	case "line":
		path, mw, ok := strings.Cut(rest, "@")
		v, err := strconv.ParseInt(mw, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("line meter %q: want line:DEVICE@MAX_MW, the meter's full scale in mW", rest)
		}
		return serialmeter.OpenLine(serialmeter.LineConfig{Path: path, MaxPower: physic.Power(v) * physic.MilliWatt, Clock: clock})
	}
	return nil, fmt.Errorf("unknown meter kind %q\n%s", kind, meterUsage)
}
