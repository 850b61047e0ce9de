// Package hwmon reads power rails that a kernel driver already owns and
// publishes under /sys/class/hwmon: the ina2xx family (power1_input in µW),
// ina238-like chips, and the three channels of an INA3221 (as on NVIDIA
// Jetson boards), whose power is bus voltage × current since the driver
// exposes no power attribute.
//
// hwmon offers no conversion-ready flag and no timestamp: Next returns one
// read per update interval (the chip's update_interval attribute in ms, or
// Options.Interval where the chip has none), so two reads may see the same
// conversion or miss one, and the separate attribute reads may come from
// different conversions. The attributes are read each time, never cached.
package hwmon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"meshd/drivers"
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

	bus, shunt, curr, power string // attribute file names; empty if absent
}

// String names the rail as "hwmon2/ina3221:1(VDD_IN)".
func (r Rail) String() string {
	s := fmt.Sprintf("%s/%s:%d", filepath.Base(r.Dir), r.Chip, r.Channel)
	if r.Label != "" {
		s += "(" + r.Label + ")"
	}
	return s
}

// HasPower reports whether the chip publishes power itself rather than
// leaving it to V × I.
func (r Rail) HasPower() bool { return r.power != "" }

// chipInfo is the datasheet error budget used for Accuracy, by hwmon name.
type chipInfo struct {
	gain     float64 // shunt + bus gain error, worst case
	vosUV    float64 // shunt offset, worst case
	averaged bool    // update_interval is the averaging window of one value
}

var chips = map[string]chipInfo{
	"ina209":  {0.01, 100, false},
	"ina219":  {0.01, 100, false},
	"ina220":  {0.01, 100, false},
	"ina226":  {0.002, 10, true},
	"ina230":  {0.002, 50, true},
	"ina231":  {0.002, 50, true},
	"ina234":  {0.005, 50, false},
	"ina237":  {0.004, 50, false},
	"ina238":  {0.002, 5, false},
	"ina260":  {0.003, 0, true},
	"ina3221": {0.005, 80, false},
	"sy24655": {0.01, 100, false},
	"sq52206": {0.01, 100, false},
}

// defaultShuntMicroOhms is the kernel's assumption when the device tree
// gives no shunt resistor.
const defaultShuntMicroOhms = 10000

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
		if _, ok := chips[name]; !ok {
			continue
		}
		rails = append(rails, railsOf(dir, name)...)
	}
	sort.Slice(rails, func(i, j int) bool {
		if rails[i].Dir != rails[j].Dir {
			return rails[i].Dir < rails[j].Dir
		}
		return rails[i].Channel < rails[j].Channel
	})
	return rails, nil
}

func railsOf(dir, name string) []Rail {
	opt := func(f string) string {
		if exists(filepath.Join(dir, f)) {
			return f
		}
		return ""
	}
	if name == "ina3221" {
		var rails []Rail
		for c := 1; c <= 3; c++ {
			r := Rail{Dir: dir, Chip: name, Channel: c,
				bus:   opt(fmt.Sprintf("in%d_input", c)),
				shunt: opt(fmt.Sprintf("in%d_input", c+3)),
				curr:  opt(fmt.Sprintf("curr%d_input", c)),
				Label: readString(filepath.Join(dir, fmt.Sprintf("in%d_label", c))),
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
	if r.power == "" && (r.bus == "" || r.curr == "") {
		return nil
	}
	return []Rail{r}
}

// Options tunes a Sensor.
type Options struct {
	// Interval paces Next where the chip has no update_interval
	// attribute; 0 means 100 ms.
	Interval time.Duration
	// Name overrides the sensor name; empty means "hwmon:" + Rail.String().
	Name string
}

// Sensor reads one rail. Next must not be called from several goroutines
// at once.
type Sensor struct {
	rail     Rail
	name     string
	interval time.Duration
	averaged time.Duration
	last     time.Time
	accuracy drivers.Accuracy
	closed   bool
}

// Open prepares rail for reading and checks that it can be read now.
func Open(rail Rail, opts Options) (*Sensor, error) {
	info, ok := chips[rail.Chip]
	if !ok {
		return nil, fmt.Errorf("hwmon: chip %q is not a known power monitor", rail.Chip)
	}
	s := &Sensor{rail: rail, name: opts.Name, interval: opts.Interval}
	if s.name == "" {
		s.name = "hwmon:" + rail.String()
	}
	if s.interval <= 0 {
		s.interval = 100 * time.Millisecond
	}
	if ms, err := readInt(filepath.Join(rail.Dir, "update_interval")); err == nil {
		if ms <= 0 {
			return nil, fmt.Errorf("%s: update_interval %d ms is not positive", s.name, ms)
		}
		s.interval = time.Duration(ms) * time.Millisecond
		if info.averaged {
			s.averaged = s.interval
		}
	}
	shunt := int64(defaultShuntMicroOhms)
	for _, f := range []string{fmt.Sprintf("shunt%d_resistor", rail.Channel), "shunt_resistor"} {
		if v, err := readInt(filepath.Join(rail.Dir, f)); err == nil && v > 0 {
			shunt = v
			break
		}
	}
	s.accuracy = accuracy(info, shunt, rail.HasPower())
	if _, err := s.Read(); err != nil {
		return nil, err
	}
	return s, nil
}

// accuracy: the chip's gain errors; its shunt offset seen as power at the
// bus voltage (R from the shunt resistor attribute, else the kernel's
// 10 mΩ default); and the sysfs rounding, 0.5 mA of current times the bus
// voltage when power is V × I.
func accuracy(info chipInfo, shuntMicroOhms int64, hasPower bool) drivers.Accuracy {
	r := float64(shuntMicroOhms)
	return drivers.Accuracy{
		GainErr: info.gain,
		OffsetUW: func(busUV int64) float64 {
			if busUV < 0 {
				busUV = -busUV
			}
			off := float64(busUV) * info.vosUV / r
			if !hasPower {
				off += float64(busUV) * 0.5e-3
			}
			return off
		},
	}
}

// Read reads the rail once, now, without pacing.
func (s *Sensor) Read() (drivers.Sample, error) {
	at := time.Now()
	get := func(f string, scale int64) (int64, error) {
		if f == "" {
			return 0, nil
		}
		v, err := readInt(filepath.Join(s.rail.Dir, f))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.name, err)
		}
		return v * scale, nil
	}
	var smp drivers.Sample
	var err error
	if smp.BusUV, err = get(s.rail.bus, 1000); err != nil {
		return drivers.Sample{}, err
	}
	if smp.ShuntNV, err = get(s.rail.shunt, 1_000_000); err != nil {
		return drivers.Sample{}, err
	}
	if smp.CurrentUA, err = get(s.rail.curr, 1000); err != nil {
		return drivers.Sample{}, err
	}
	if s.rail.power != "" {
		if smp.PowerUW, err = get(s.rail.power, 1); err != nil {
			return drivers.Sample{}, err
		}
		if smp.CurrentUA < 0 {
			smp.PowerUW = -smp.PowerUW
		}
	} else {
		smp.PowerUW = smp.BusUV * smp.CurrentUA / 1_000_000 // mV × mA = µW exactly
	}
	smp.At = at
	smp.Averaged = s.averaged
	return smp, nil
}

// Name implements drivers.Sensor.
func (s *Sensor) Name() string { return s.name }

// Rail returns the rail this sensor reads.
func (s *Sensor) Rail() Rail { return s.rail }

// UpdatePeriod is update_interval, or Options.Interval without one.
func (s *Sensor) UpdatePeriod() time.Duration { return s.interval }

// Accuracy implements drivers.Sensor.
func (s *Sensor) Accuracy() drivers.Accuracy { return s.accuracy }

// Next waits until one update interval has passed since the previous read
// and reads again: hwmon has no ready flag, so this is the closest to "each
// conversion once" it allows.
func (s *Sensor) Next(ctx context.Context) (drivers.Sample, error) {
	if s.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", s.name)
	}
	if !s.last.IsZero() {
		if wait := time.Until(s.last.Add(s.interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return drivers.Sample{}, ctx.Err()
			case <-t.C:
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return drivers.Sample{}, err
	}
	smp, err := s.Read()
	if err != nil {
		return drivers.Sample{}, err
	}
	s.last = smp.At
	return smp, nil
}

// Close implements drivers.Sensor.
func (s *Sensor) Close() error {
	s.closed = true
	return nil
}

var _ drivers.Sensor = (*Sensor)(nil)
