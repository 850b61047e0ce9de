package rapl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/physic"
)

// DefaultRoot is where the kernel lists powercap zones.
const DefaultRoot = "/sys/class/powercap"

// DefaultCPUInfo is where the CPU vendor is read from when Config.Vendor is
// empty.
const DefaultCPUInfo = "/proc/cpuinfo"

// DefaultMaxPower is the power ceiling assumed for a zone that states none.
const DefaultMaxPower = 1000 * physic.Watt

// Vendor is the CPU vendor whose counters a zone exposes.
type Vendor string

const (
	VendorUnknown Vendor = "unknown"
	VendorIntel   Vendor = "intel"
	VendorAMD     Vendor = "amd"
)

// VendorOf maps a /proc/cpuinfo vendor_id to a Vendor.
func VendorOf(vendorID string) Vendor {
	switch strings.TrimSpace(vendorID) {
	case "GenuineIntel":
		return VendorIntel
	case "AuthenticAMD", "HygonGenuine":
		// Hygon's Dhyana is a licensed Zen core with AMD's RAPL.
		return VendorAMD
	}
	return VendorUnknown
}

// ReadVendor reads the first vendor_id line of a /proc/cpuinfo-format file.
func ReadVendor(cpuinfo string) (Vendor, error) {
	b, err := os.ReadFile(cpuinfo)
	if err != nil {
		return VendorUnknown, fmt.Errorf("rapl: reading CPU vendor: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "vendor_id" {
			return VendorOf(v), nil
		}
	}
	return VendorUnknown, fmt.Errorf("rapl: no vendor_id in %s", cpuinfo)
}

// Zone is one powercap zone with an energy counter.
type Zone struct {
	// ID is the zone's directory under the root, e.g. "intel-rapl:0:2".
	ID string
	// Name is the zone's name attribute: "package-0", "core", "uncore",
	// "dram" or "psys".
	Name string
	// Key names the zone uniquely on this machine: its name prefixed with
	// its ancestors' names, e.g. "package-0/dram", and with the control
	// type where that is not plain intel-rapl ("intel-rapl-mmio/package-0").
	Key string
	// Parent is the parent zone's ID, empty for a top-level zone.
	Parent string
	// Children are the IDs of the enabled sub-zones.
	Children []string
	// MaxEnergyRangeUJ is the counter's largest value before it wraps.
	MaxEnergyRangeUJ uint64
	// ConstraintMaxPower is the largest power any constraint of the zone
	// states (constraint_*_max_power_uw, constraint_*_power_limit_uw), or
	// 0 where it states none.
	ConstraintMaxPower physic.Power
	// Vendor is whose counters these are.
	Vendor Vendor
}

// zoneID splits a powercap zone directory name ("intel-rapl:0:1") into its
// control type and indices; ok is false for anything else, such as the
// control type's own directory.
func zoneID(name string) (ctype string, idx []int, ok bool) {
	parts := strings.Split(name, ":")
	if len(parts) < 2 || parts[0] == "" {
		return "", nil, false
	}
	for _, p := range parts[1:] {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "", nil, false
		}
		idx = append(idx, n)
	}
	return parts[0], idx, true
}

func readString(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readUint(fsys fs.FS, name string) (uint64, error) {
	s, err := readString(fsys, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

// disabled reports whether dir has an enabled attribute reading 0. A zone
// without one (older kernels) counts as enabled.
func disabled(fsys fs.FS, dir string) (bool, error) {
	s, err := readString(fsys, path.Join(dir, "enabled"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s == "0", nil
}

// constraintMax is the largest power any constraint of the zone states.
func constraintMax(fsys fs.FS, dir string) (physic.Power, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return 0, err
	}
	var uw uint64
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, "constraint_") ||
			!(strings.HasSuffix(n, "_max_power_uw") || strings.HasSuffix(n, "_power_limit_uw")) {
			continue
		}
		v, err := readUint(fsys, path.Join(dir, n))
		if err != nil {
			// Some constraints refuse reads (ENODATA) where the
			// platform does not implement them: they state nothing.
			continue
		}
		uw = max(uw, v)
	}
	return physic.Power(uw) * physic.MicroWatt, nil
}

// Discover lists the enabled zones with an energy counter under the root
// of cfg (its FS, else os.DirFS of its Root, else DefaultRoot), parents
// before their sub-zones. A missing root lists nothing. The vendor comes
// from cfg.Vendor, else from cfg.CPUInfo (DefaultCPUInfo); an unreadable
// cpuinfo leaves it VendorUnknown.
func Discover(cfg Config) ([]Zone, error) {
	fsys := cfg.fs()
	vendor := cfg.vendor()
	ents, err := fs.ReadDir(fsys, ".")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rapl: listing powercap zones: %w", err)
	}
	type found struct {
		Zone
		ctype string
		idx   []int
	}
	byID := map[string]*found{}
	var zones []*found
	for _, e := range ents {
		ctype, idx, ok := zoneID(e.Name())
		if !ok {
			continue
		}
		dir := e.Name()
		// Entries are symlinks in sysfs: Stat follows them.
		if _, err := fs.Stat(fsys, path.Join(dir, "energy_uj")); err != nil {
			continue // a zone without a counter (e.g. dtpm) is not ours
		}
		off, err := disabled(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", dir, err)
		}
		if ctOff, err := disabled(fsys, ctype); err != nil {
			return nil, fmt.Errorf("rapl: control type %s: %w", ctype, err)
		} else if off || ctOff {
			continue
		}
		name, err := readString(fsys, path.Join(dir, "name"))
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", dir, err)
		}
		maxRange, err := readUint(fsys, path.Join(dir, "max_energy_range_uj"))
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", dir, err)
		}
		if maxRange == 0 {
			return nil, fmt.Errorf("rapl: zone %s: max_energy_range_uj is 0", dir)
		}
		cmax, err := constraintMax(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("rapl: zone %s: %w", dir, err)
		}
		f := &found{Zone: Zone{ID: dir, Name: name, MaxEnergyRangeUJ: maxRange,
			ConstraintMaxPower: cmax, Vendor: vendor}, ctype: ctype, idx: idx}
		if len(idx) > 1 {
			f.Parent = dir[:strings.LastIndexByte(dir, ':')]
		}
		byID[dir] = f
		zones = append(zones, f)
	}
	slices.SortFunc(zones, func(a, b *found) int {
		if c := strings.Compare(a.ctype, b.ctype); c != 0 {
			return c
		}
		return slices.Compare(a.idx, b.idx)
	})
	// A sub-zone of a disabled or missing parent is dropped with it: its
	// key could not be formed, and powercap disables children with it.
	var kept []*found
	for _, z := range zones {
		if z.Parent != "" {
			p, ok := byID[z.Parent]
			if !ok {
				delete(byID, z.ID)
				continue
			}
			p.Children = append(p.Children, z.ID)
			z.Key = p.Key + "/" + z.Name
		} else {
			z.Key = z.Name
			if z.ctype != "intel-rapl" {
				z.Key = z.ctype + "/" + z.Name
			}
		}
		kept = append(kept, z)
	}
	seen := map[string]int{}
	for _, z := range kept {
		seen[z.Key]++
	}
	out := make([]Zone, 0, len(kept))
	for _, z := range kept {
		if seen[z.Key] > 1 {
			z.Key = z.ID // names collide: only the directory is unique
		}
		out = append(out, z.Zone)
	}
	return out, nil
}

// Find picks the zone a spec names: its Key ("package-0/dram"), its ID
// ("intel-rapl:0:2"), or its Name where only one zone has it ("dram").
func Find(zones []Zone, spec string) (Zone, error) {
	for _, z := range zones {
		if z.Key == spec || z.ID == spec {
			return z, nil
		}
	}
	var match []Zone
	for _, z := range zones {
		if z.Name == spec {
			match = append(match, z)
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	keys := make([]string, len(zones))
	for i, z := range zones {
		keys[i] = z.Key
	}
	if len(match) > 1 {
		return Zone{}, fmt.Errorf("rapl: zone %q is ambiguous; use one of %s", spec, strings.Join(keys, ", "))
	}
	return Zone{}, fmt.Errorf("rapl: no zone %q (zones: %s)", spec, strings.Join(keys, ", "))
}
