package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"meshd/agent"
	"meshd/agent/config"
	"meshd/drivers"
)

const meterUsage = `meter spec: one meter, or several joined by + into a span whose figure is
their sum and whose provenance is the worst of theirs. + declares the meters disjoint
(separate rails, e.g. ina226:1:0x40:...+ina226:1:0x41:...): never join a meter to one
that contains it (RAPL or a GPU inside a board input's INA226): a config file's
inside = "..." shows such a meter as a breakdown instead:
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

// metersFromSpec turns a -meter spec into [[meter]] tables, named m0, m1,
// … in spec order.
func metersFromSpec(spec, hwmonRoot string) ([]config.Meter, error) {
	var out []config.Meter
	for i, one := range strings.Split(spec, "+") {
		m, err := meterFromSpec(one, hwmonRoot)
		if err != nil {
			return nil, fmt.Errorf("meter %q: %w", one, err)
		}
		m.Name = fmt.Sprintf("m%d", i)
		out = append(out, m)
	}
	// Joining meters with + is the operator's statement that they measure
	// separate energy: the span sums them.
	for i := range out {
		for j := range out {
			if i != j {
				out[i].Disjoint = append(out[i].Disjoint, out[j].Name)
			}
		}
	}
	return out, nil
}

func meterFromSpec(spec, hwmonRoot string) (config.Meter, error) {
	kind, rest, _ := strings.Cut(spec, ":")
	m := config.Meter{Driver: kind}
	switch kind {
	case "ina226", "ina219":
		f := strings.Split(rest, ":")
		if len(f) != 4 {
			return m, fmt.Errorf("want %s:BUS:ADDR:SHUNT_UOHM:MAX_UA", kind)
		}
		addr, err := strconv.ParseUint(f[1], 0, 16)
		if err != nil || addr < 0x40 || addr > 0x4f {
			return m, fmt.Errorf("address %q: want 0x40..0x4f", f[1])
		}
		shuntUOhm, err1 := strconv.ParseInt(f[2], 10, 64)
		maxUA, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || shuntUOhm <= 0 || maxUA <= 0 {
			return m, fmt.Errorf("shunt resistance (µΩ) and maximum current (µA) must be positive integers")
		}
		m.Bus, m.Address, m.ShuntUOhm, m.MaxCurrentA, m.Preset = f[0], int(addr), shuntUOhm, float64(maxUA)/1e6, "precise"
	case "hwmon":
		m.Rail, m.HwmonRoot = rest, hwmonRoot
		if m.HwmonRoot == "" {
			m.HwmonRoot = "/sys/class/hwmon"
		}
		if name, shunt, ok := strings.Cut(rest, "@"); ok {
			v, err := strconv.ParseInt(shunt, 10, 64)
			if err != nil || v <= 0 {
				return m, fmt.Errorf("shunt resistance %q: want a positive integer of µΩ", shunt)
			}
			m.Rail, m.ShuntUOhm = name, v
		}
	case "rapl":
		m.Zone, m.PowercapRoot = rest, "/sys/class/powercap"
	case "nvml":
		i, err := strconv.Atoi(rest)
		if err != nil || i < 0 {
			return m, fmt.Errorf("GPU index %q: want a non-negative integer", rest)
		}
		m.GPU = i
	case "um":
		m.Device = rest
	case "line":
		path, mw, ok := strings.Cut(rest, "@")
		v, err := strconv.ParseInt(mw, 10, 64)
		if !ok || err != nil || v <= 0 {
			return m, fmt.Errorf("line meter %q: want line:DEVICE@MAX_MW, the meter's full scale in mW", rest)
		}
		m.Device, m.MaxMW = path, v
	default:
		return m, fmt.Errorf("unknown meter kind %q\n%s", kind, meterUsage)
	}
	return m, nil
}
