package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"meshd/drivers"
	"meshd/drivers/hwmon"
	"meshd/drivers/nvml"
	"meshd/drivers/probe"
	"meshd/rapl"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/host/v3"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// cmdProbe lists the power sensors it finds, one reading from each and the
// kind of reading each gives when metered: "adc" and "counter" sensors can
// support a hardware claim, "point" ones (hwmon power attributes, serial
// meters) never can. It never reconfigures a chip. Finding nothing is not
// an error; a serial meter named by a flag that cannot be read is.
func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("hwmon", hwmon.DefaultRoot, "hwmon class directory")
	raplRoot := fs.String("rapl", rapl.DefaultRoot, "powercap class directory (RAPL zones)")
	noI2C := fs.Bool("no-i2c", false, "skip the I2C scan")
	nvmlLib := fs.String("nvml", nvml.DefaultLibrary, "NVML library to load for NVIDIA GPUs (soname or path; empty skips listing them)")
	timeout := fs.Duration("timeout", 2*time.Second, "wait for each serial meter")
	var buses, ums, lines listFlag
	fs.Var(&buses, "i2c", "I2C bus to scan (name or number; repeatable; default every bus)")
	fs.Var(&ums, "um", "serial device of an RDTech UM24C/UM25C/UM34C (repeatable)")
	fs.Var(&lines, "line", "serial device of a line-protocol meter (repeatable)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: probe takes no arguments, got %q", errUsage, fs.Args())
	}

	opts := probe.SurveyOptions{Options: probe.Options{HwmonRoot: *root, UMPorts: ums, LinePorts: lines, Timeout: *timeout},
		RAPLRoot: *raplRoot, NVML: nvml.Config{Library: *nvmlLib}}
	if *noI2C {
		opts.I2CNote = "skipped (-no-i2c)"
	} else {
		open, note := openBuses(buses)
		defer func() {
			for _, b := range open {
				b.Close()
			}
		}()
		for _, b := range open {
			opts.Buses = append(opts.Buses, probe.Bus{Name: b.name, Bus: b})
		}
		opts.I2CNote = note
	}
	found, looked := probe.Survey(ctx, opts)
	// What was looked for, kind by kind, and why a kind found nothing.
	fmt.Fprintln(stdout, "looked for:")
	for _, l := range looked {
		fmt.Fprintln(stdout, " ", l)
	}
	if *nvmlLib != "" {
		gpus, err := nvml.ProbeSystem(nvml.Config{Library: *nvmlLib})
		for _, g := range gpus {
			found = append(found, gpuFound(g))
		}
		if err != nil {
			fmt.Fprintln(stdout, err) // it begins "nvml:"
		}
	}
	if len(found) == 0 {
		counted := 0 // RAPL zones and GPUs are counted above, not read here
		for _, l := range looked {
			counted += l.Found
		}
		if counted == 0 {
			fmt.Fprintln(stdout, "no power sensors found")
		} else {
			fmt.Fprintln(stdout, "no chip, rail or serial meter to read; meter the zones or GPUs above with rapl:ZONE or nvml:INDEX")
		}
		return nil
	}
	failed := 0
	asked := map[string]bool{}
	for _, p := range append(append([]string{}, ums...), lines...) {
		asked[p] = true
	}
	for _, f := range found {
		fmt.Fprintln(stdout, f)
		if f.Err != nil && asked[f.Where] {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("probe: %d of the serial meters named by flags could not be read", failed)
	}
	return nil
}

type namedBus struct {
	i2c.BusCloser
	name string
}

// openBuses opens the named buses, or every registered one, and says in
// plain words why none could be scanned.
func openBuses(names []string) ([]namedBus, string) {
	if _, err := host.Init(); err != nil {
		return nil, fmt.Sprintf("cannot initialise host drivers: %v", err)
	}
	if len(names) == 0 {
		for _, r := range i2creg.All() {
			names = append(names, r.Name)
		}
		if len(names) == 0 {
			return nil, "no I2C bus on this machine (no /dev/i2c-*: is the i2c-dev module loaded?); skipped"
		}
	}
	var open []namedBus
	var problems []string
	for _, n := range names {
		b, err := i2creg.Open(n)
		if err != nil {
			problems = append(problems, fmt.Sprintf("bus %s: %v", n, err))
			continue
		}
		open = append(open, namedBus{b, n})
	}
	return open, strings.Join(problems, "; ")
}

// gpuFound lists a GPU NVML reported: "model" where it has the energy
// counter, "point" where only its power reading.
func gpuFound(g nvml.GPUInfo) probe.Found {
	f := probe.Found{Kind: "nvml", Where: fmt.Sprintf("nvml:%d", g.Index), Reading: drivers.KindPoint}
	if g.CounterSupported {
		f.Reading = drivers.KindModel
	}
	f.Note = g.Name
	if g.PowerSupported {
		f.Note += fmt.Sprintf(", %.3f W now", float64(g.PowerMW)/1000)
	}
	if g.PowerLimitMW > 0 {
		f.Note += fmt.Sprintf(", limit %.0f W", float64(g.PowerLimitMW)/1000)
	}
	return f
}
