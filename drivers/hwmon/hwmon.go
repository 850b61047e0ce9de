// Package hwmon reads power rails that a kernel driver already owns and
// publishes under /sys/class/hwmon: the ina2xx family (power1_input in µW),
// the ina238 family, and the three channels of an INA3221 (as on NVIDIA
// Jetson boards, where labels such as VDD_IN name the rails), whose power is
// bus voltage × current since the kernel exposes no power attribute.
//
// What a rail's readings can prove decides its kind:
//
//   - Power, current and voltage attributes are point readings
//     (drivers.KindPoint): hwmon has no ready flag and no timestamp, so a
//     read may see the same conversion twice or miss one, and its separate
//     attribute reads may come from different conversions. That holds even
//     where the value is an average over update_interval. Each sample is
//     one instant (Start == End); it never chains to the previous one.
//   - Where the kernel publishes a hardware energy accumulator
//     (energy1_input, µJ; the INA228 under ina238.c), the rail is a counter
//     (drivers.KindCounter): each sample is the energy between two reads
//     as mean power over them, with wraps of the 40-bit accumulator counted
//     once and a reset reported as an error.
//
// Freshness: a frozen attribute must not pass as a constant load. When
// every attribute read (shunt, bus, current, power and energy where
// present, and on the INA3221 the bus and shunt inputs of its other
// enabled channels, which it converts in the same cycle) has stayed
// identical for longer than max(3 × update_interval, Options.StaleAfter),
// Next returns an error wrapping drivers.ErrStale. A quiet rail on a
// converting INA3221 stays fresh while any sibling channel moves; a
// single-channel chip cannot tell a frozen chip from a constant load whose
// readings quantise to identical values, and such a load loses coverage
// (the sampler sees an error) but never gains a false reading.
//
// Accuracy is stated as the kernel scales the chip: the kernel fixes the
// calibration (2048 on the INA226, so the current register equals the
// shunt register and Current_LSB = 2.5 µV / R), and the sysfs step, not the
// chip's, bounds what a reading can resolve.
package hwmon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultRoot is where the kernel lists hwmon devices.
const DefaultRoot = "/sys/class/hwmon"

// Rail is one measured supply: a chip's channel.
type Rail struct {
	// Dir holds the attribute files, e.g. /sys/class/hwmon/hwmon2.
	Dir string
	// Chip is the hwmon name attribute, e.g. "ina226" or "ina3221".
	Chip string
	// Channel is 1-based; ina2xx-like chips have only channel 1.
	Channel int
	// Label is the channel label (in<N>_label) where the kernel has one.
	Label string

	// attribute file names; empty where absent
	bus, shunt, curr, power, energy string
}

// String names the rail as "hwmon2/ina3221:1(VDD_IN)".
func (r Rail) String() string {
	s := fmt.Sprintf("%s/%s:%d", filepath.Base(r.Dir), r.Chip, r.Channel)
	if r.Label != "" {
		s += "(" + r.Label + ")"
	}
	return s
}

// Matches says whether spec names r: its label, its String form, or that
// form without the label ("hwmon2/ina3221:1"), so a config can name a rail
// whatever the kernel labels it.
func (r Rail) Matches(spec string) bool {
	return spec != "" && (r.Label == spec || r.String() == spec || fmt.Sprintf("%s/%s:%d", filepath.Base(r.Dir), r.Chip, r.Channel) == spec)
}

// HasPower reports whether the chip publishes power itself rather than
// leaving it to V × I.
func (r Rail) HasPower() bool { return r.power != "" }

// HasEnergy reports whether the rail has a hardware energy counter that
// the driver reads as a counter.
func (r Rail) HasEnergy() bool { return r.energy != "" }

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func readString(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Discover lists the power rails under root (DefaultRoot when empty). A
// missing root is not an error: it lists nothing.
func Discover(root string) ([]Rail, error) {
	if root == "" {
		root = DefaultRoot
	}
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hwmon: %w", err)
	}
	var rails []Rail
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		name := readString(filepath.Join(dir, "name"))
		if name == "" {
			// Older kernels keep the attributes on the parent device.
			dir = filepath.Join(dir, "device")
			name = readString(filepath.Join(dir, "name"))
		}
		c, ok := chips[name]
		if !ok {
			continue
		}
		rails = append(rails, railsOf(dir, name, c)...)
	}
	sort.Slice(rails, func(i, j int) bool {
		if rails[i].Dir != rails[j].Dir {
			return rails[i].Dir < rails[j].Dir
		}
		return rails[i].Channel < rails[j].Channel
	})
	return rails, nil
}

func railsOf(dir, name string, c chip) []Rail {
	opt := func(f string) string {
		if exists(filepath.Join(dir, f)) {
			return f
		}
		return ""
	}
	if name == "ina3221" {
		// in1..3 are the bus voltages, in4..6 the shunt drops of the
		// same channels; a channel the device tree disabled reads
		// in<N>_enable 0 and its inputs fail with ENODATA.
		var rails []Rail
		for n := 1; n <= 3; n++ {
			if readString(filepath.Join(dir, fmt.Sprintf("in%d_enable", n))) == "0" {
				continue
			}
			r := Rail{Dir: dir, Chip: name, Channel: n,
				bus:   opt(fmt.Sprintf("in%d_input", n)),
				shunt: opt(fmt.Sprintf("in%d_input", n+3)),
				curr:  opt(fmt.Sprintf("curr%d_input", n)),
				Label: readString(filepath.Join(dir, fmt.Sprintf("in%d_label", n))),
			}
			if r.bus != "" && r.curr != "" {
				rails = append(rails, r)
			}
		}
		return rails
	}
	r := Rail{Dir: dir, Chip: name, Channel: 1,
		bus: opt("in1_input"), shunt: opt("in0_input"), curr: opt("curr1_input"), power: opt("power1_input"),
		Label: readString(filepath.Join(dir, "in1_label")),
	}
	if c.energy {
		r.energy = opt("energy1_input")
	}
	if r.power == "" && r.energy == "" && (r.bus == "" || r.curr == "") {
		return nil
	}
	return []Rail{r}
}
