// Package board reads the state of the machine a benchmark runs on that
// moves its figures: the CPU frequency governors and frequencies, and the
// thermal zones' temperatures, from sysfs. The daemon seals what it reads
// into a run's open and close records (PROFILE §22), so a report's board
// state is the steward's statement, not the harness's.
package board

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// CPU is one logical CPU's frequency scaling state. Frequencies are kHz,
// as cpufreq states them; zero means the file was absent or unreadable.
type CPU struct {
	CPU      int    `json:"cpu" cbor:"cpu"`
	Governor string `json:"governor,omitempty" cbor:"governor,omitempty"`
	CurKHz   uint64 `json:"cur_khz,omitempty" cbor:"cur_khz,omitempty"`
	MinKHz   uint64 `json:"min_khz,omitempty" cbor:"min_khz,omitempty"`
	MaxKHz   uint64 `json:"max_khz,omitempty" cbor:"max_khz,omitempty"`
}

// Zone is one thermal zone. MilliC is the temperature in thousandths of a
// degree Celsius, as the kernel states it; Error says why there is none
// (some zones answer EIO while their sensor sleeps).
type Zone struct {
	Zone   string `json:"zone" cbor:"zone"`
	Type   string `json:"type,omitempty" cbor:"type,omitempty"`
	MilliC *int64 `json:"milli_c,omitempty" cbor:"milli_c,omitempty"`
	Error  string `json:"error,omitempty" cbor:"error,omitempty"`
}

// State is what ReadState found. Both lists are empty, not nil, on a
// machine without cpufreq or thermal zones (a VM, a container), so the
// absence is stated rather than implied.
type State struct {
	CPUs    []CPU  `json:"cpus" cbor:"cpus"`
	Thermal []Zone `json:"thermal" cbor:"thermal"`
}

// ReadState reads cpufreq and thermal state under root ("/" on a real
// machine; a fake tree in tests). A missing subsystem is not an error; a
// root that is not a directory is.
func ReadState(root string) (State, error) {
	if fi, err := os.Stat(root); err != nil {
		return State{}, fmt.Errorf("board state: %w", err)
	} else if !fi.IsDir() {
		return State{}, fmt.Errorf("board state: %s is not a directory", root)
	}
	st := State{CPUs: []CPU{}, Thermal: []Zone{}}
	cpus, err := numbered(filepath.Join(root, "sys/devices/system/cpu"), "cpu")
	if err != nil {
		return State{}, err
	}
	for _, n := range cpus {
		dir := filepath.Join(root, "sys/devices/system/cpu", "cpu"+strconv.Itoa(n), "cpufreq")
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		c := CPU{CPU: n, Governor: readText(filepath.Join(dir, "scaling_governor"))}
		c.CurKHz = readUint(filepath.Join(dir, "scaling_cur_freq"))
		c.MinKHz = readUint(filepath.Join(dir, "scaling_min_freq"))
		c.MaxKHz = readUint(filepath.Join(dir, "scaling_max_freq"))
		st.CPUs = append(st.CPUs, c)
	}
	zones, err := numbered(filepath.Join(root, "sys/class/thermal"), "thermal_zone")
	if err != nil {
		return State{}, err
	}
	for _, n := range zones {
		dir := filepath.Join(root, "sys/class/thermal", "thermal_zone"+strconv.Itoa(n))
		z := Zone{Zone: "thermal_zone" + strconv.Itoa(n), Type: readText(filepath.Join(dir, "type"))}
		raw, err := os.ReadFile(filepath.Join(dir, "temp"))
		switch {
		case err != nil:
			z.Error = errText(err)
		default:
			v, perr := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if perr != nil {
				z.Error = fmt.Sprintf("temp %q is not an integer", strings.TrimSpace(string(raw)))
			} else {
				z.MilliC = &v
			}
		}
		st.Thermal = append(st.Thermal, z)
	}
	return st, nil
}

// Governors counts the CPUs under each governor, for a one-line summary.
func (s State) Governors() map[string]int {
	out := map[string]int{}
	for _, c := range s.CPUs {
		if c.Governor != "" {
			out[c.Governor]++
		}
	}
	return out
}

// MaxMilliC is the hottest zone's temperature, and false when no zone
// answered.
func (s State) MaxMilliC() (int64, bool) {
	var best int64
	ok := false
	for _, z := range s.Thermal {
		if z.MilliC != nil && (!ok || *z.MilliC > best) {
			best, ok = *z.MilliC, true
		}
	}
	return best, ok
}

// numbered lists the N of the entries prefixN in dir, sorted; a missing
// dir is an empty list.
func numbered(dir, prefix string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("board state: %w", err)
	}
	var out []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 || strconv.Itoa(n) != rest {
			continue
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func readText(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readUint(path string) uint64 {
	v, err := strconv.ParseUint(readText(path), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// errText keeps the kernel's reason without the path, which names the
// test's tree or the machine's layout rather than the problem.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}
