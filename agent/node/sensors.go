package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/host/v3"

	"meshd/agent/config"
	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/drivers/ina219"
	"meshd/drivers/ina226"
	"meshd/drivers/nvml"
	"meshd/drivers/serialmeter"
	"meshd/rapl"
)

// OpenSensor opens the sensor a [[meter]] table describes with the real
// drivers. clock is the drivers' clock; nil is the system's.
func OpenSensor(ctx context.Context, m config.Meter, clock drivers.Clock) (drivers.Sensor, error) {
	switch m.Driver {
	case "ina226", "ina219":
		preset, err := inaPreset(m.Preset)
		if err != nil {
			return nil, err
		}
		if _, err := host.Init(); err != nil {
			return nil, fmt.Errorf("init I2C host drivers: %w", err)
		}
		bus, err := i2creg.Open(m.Bus)
		if err != nil {
			var names []string
			for _, r := range i2creg.All() {
				names = append(names, r.Name)
			}
			return nil, i2cOpenError(m.Bus, "/dev", names, err)
		}
		var s drivers.Sensor
		if m.Driver == "ina226" {
			s, err = ina226.Open(bus, uint16(m.Address), ina226.Config{ShuntMicroOhms: m.ShuntUOhm, MaxCurrentUA: m.MaxCurrentUA(),
				Preset: preset, BusTolerance: m.BusTolerance, Clock: clock})
		} else {
			s, err = ina219.Open(bus, uint16(m.Address), ina219.Config{ShuntMicroOhms: m.ShuntUOhm, MaxCurrentUA: m.MaxCurrentUA(),
				Preset: preset, BusTolerance: m.BusTolerance, Clock: clock})
		}
		if err != nil {
			bus.Close()
			return nil, err
		}
		return s, nil
	case "hwmon":
		rails, err := hwmon.Discover(m.HwmonRoot)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, r := range rails {
			if r.Matches(m.Rail) {
				return hwmon.Open(r, hwmon.Options{Clock: clock, ShuntMicroOhms: m.ShuntUOhm})
			}
			names = append(names, r.String())
		}
		return nil, fmt.Errorf("no hwmon rail %q (found: %s)", m.Rail, strings.Join(names, ", "))
	case "rapl":
		return rapl.Open(m.Zone, rapl.Config{Clock: clock, Root: m.PowercapRoot})
	case "nvml":
		return nvml.Open(m.GPU, nvml.Config{Clock: clock})
	case "um":
		return serialmeter.OpenUM(ctx, serialmeter.UMConfig{Path: m.Device, Clock: clock})
	case "line":
		return serialmeter.OpenLine(serialmeter.LineConfig{Path: m.Device, MaxPower: physic.Power(m.MaxMW) * physic.MilliWatt, Clock: clock})
	}
	return nil, fmt.Errorf("unknown meter driver %q", m.Driver)
}

// i2cOpenError says why an I2C bus could not be opened in the user's
// terms. periph answers a bus the kernel does not expose with "no bus
// found; did you forget to call Init()?", which sends the reader into
// meshd's code instead of to the board's I2C setting; the device node the
// bus would be tells the real story.
func i2cOpenError(bus, devDir string, registered []string, err error) error {
	n := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(bus, devDir+"/"), "i2c-"), "I2C")
	if _, aerr := strconv.Atoi(n); aerr != nil {
		return fmt.Errorf("open I2C bus %q: %w", bus, err)
	}
	dev := filepath.Join(devDir, "i2c-"+n)
	if _, serr := os.Stat(dev); serr == nil {
		return fmt.Errorf("open I2C bus %s (%s): %w", n, dev, err)
	}
	have := "none"
	if len(registered) > 0 {
		have = strings.Join(registered, ", ")
	}
	return fmt.Errorf("I2C bus %s not found: %s does not exist; enable I2C (Raspberry Pi: dtparam=i2c_arm=on in config.txt or raspi-config; "+
		"elsewhere the board's device tree overlay) and load i2c-dev (modprobe i2c-dev); buses present: %s: %w", n, dev, have, drivers.ErrNoDevice)
}

func inaPreset(name string) (ina226.Preset, error) {
	switch name {
	case "", "precise":
		return ina226.PresetPrecise, nil
	case "fast":
		return ina226.PresetFast, nil
	case "kernel":
		return ina226.PresetKernel, nil
	case "shunt-only":
		return ina226.PresetShuntOnly, nil
	}
	return 0, fmt.Errorf("unknown preset %q (want precise, fast, kernel or shunt-only)", name)
}
