package probe

import (
	"context"
	"fmt"
	"strings"

	"meshd/drivers/hwmon"
	"meshd/drivers/nvml"
	"meshd/rapl"
)

// Looked is one kind of sensor a survey looked for: where it looked, how
// many it found and, when it found none, why — so "nothing found" on a
// machine says what was tried rather than leaving the user to guess.
type Looked struct {
	Kind  string // "I2C INA219/INA226", "hwmon rails", "RAPL", "NVML", "serial meters"
	Where string // the buses, directory or library looked at
	Found int
	Why   string // why nothing was found (empty when Found > 0)
}

func (l Looked) String() string {
	if l.Found > 0 {
		return fmt.Sprintf("%-17s %d found (%s)", l.Kind+":", l.Found, l.Where)
	}
	return fmt.Sprintf("%-17s none: %s", l.Kind+":", l.Why)
}

// SurveyOptions extends Options with the kinds Scan does not read.
type SurveyOptions struct {
	Options
	// I2CNote is why no bus is in Options.Buses (none on the machine,
	// host drivers not initialised, -no-i2c), from the caller that opened
	// the buses.
	I2CNote string
	// RAPLRoot is the powercap class directory; empty means rapl.DefaultRoot.
	RAPLRoot string
	// NVML is the NVIDIA library configuration (its Library, for a test).
	NVML nvml.Config
}

// Survey scans as Scan does and also lists RAPL zones and NVIDIA GPUs
// (which it counts but does not read: they are metered, not probed), and
// says for each kind what it looked at and why it found nothing.
func Survey(ctx context.Context, opts SurveyOptions) ([]Found, []Looked) {
	var looked []Looked

	i2cFound := ScanI2C(opts.Buses, opts.Clock)
	var names []string
	for _, b := range opts.Buses {
		names = append(names, b.Name)
	}
	buses := strings.Join(names, ", ")
	l := Looked{Kind: "I2C INA219/INA226", Where: "bus " + buses + " at 0x40–0x4F", Found: len(i2cFound)}
	switch {
	case len(names) == 0 && opts.I2CNote != "":
		l.Why = opts.I2CNote
	case len(names) == 0:
		l.Why = "no I2C bus scanned"
	default:
		l.Why = "no device answered at 0x40–0x4F on bus " + buses
		if opts.I2CNote != "" {
			l.Why += "; " + opts.I2CNote
		}
	}
	looked = append(looked, l)

	root := opts.HwmonRoot
	if root == "" {
		root = hwmon.DefaultRoot
	}
	hw, err := ScanHwmon(opts.HwmonRoot, opts.Clock)
	l = Looked{Kind: "hwmon rails", Where: root, Found: len(hw)}
	if err != nil {
		l.Why = err.Error()
	} else {
		l.Why = "no hwmon device under " + root + " has a power, current or voltage input (no INA2xx or PMIC driver loaded?)"
	}
	looked = append(looked, l)

	rroot := opts.RAPLRoot
	if rroot == "" {
		rroot = rapl.DefaultRoot
	}
	zones, err := rapl.Discover(rapl.Config{Root: rroot})
	l = Looked{Kind: "RAPL", Where: rroot, Found: len(zones)}
	if len(zones) > 0 {
		var zn []string
		for _, z := range zones {
			zn = append(zn, z.Name)
		}
		l.Where += ": " + strings.Join(zn, ", ")
	}
	if err != nil {
		l.Why = err.Error()
	} else {
		l.Why = "no powercap zone with an energy counter under " + rroot + " (not an Intel or AMD CPU, or the intel_rapl module is not loaded)"
	}
	looked = append(looked, l)

	gpus, err := nvml.ProbeSystem(opts.NVML)
	lib := opts.NVML.Library
	if lib == "" {
		lib = nvml.DefaultLibrary
	}
	l = Looked{Kind: "NVML", Where: lib, Found: len(gpus)}
	if err != nil {
		l.Why = err.Error()
	} else {
		l.Why = "the NVIDIA library lists no GPU"
	}
	looked = append(looked, l)

	serial := ScanSerial(ctx, opts.UMPorts, opts.LinePorts, opts.Timeout, opts.Clock)
	ports := append(append([]string{}, opts.UMPorts...), opts.LinePorts...)
	l = Looked{Kind: "serial meters", Where: strings.Join(ports, ", "), Found: len(serial)}
	l.Why = "none named: a UM or line-protocol meter cannot be told from other serial devices safely; name it with -um DEVICE or -line DEVICE"
	looked = append(looked, l)

	out := append(i2cFound, hw...)
	return append(out, serial...), looked
}
