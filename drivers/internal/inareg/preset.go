package inareg

import "fmt"

// Preset is a shipped conversion setting, shared by name between the
// chips; each chip package maps it to its own register fields. The zero
// Preset is the default.
type Preset uint8

// The shipped settings; the chip packages document each one's timing.
const (
	// PresetPrecise: a long shunt conversion and a short bus conversion,
	// so that the unobserved bus slot is a small part of each period.
	PresetPrecise Preset = iota
	// PresetFast: about 1 kHz, shunt and bus.
	PresetFast
	// PresetKernel: the Linux hwmon driver's setting, for comparison.
	PresetKernel
	// PresetShuntOnly: the shunt alone, the bus bracketed by triggered
	// conversions; no dead time.
	PresetShuntOnly
)

// Presets lists every shipped setting, the default first.
func Presets() []Preset { return []Preset{PresetPrecise, PresetFast, PresetKernel, PresetShuntOnly} }

func (p Preset) String() string {
	switch p {
	case PresetPrecise:
		return "precise"
	case PresetFast:
		return "fast"
	case PresetKernel:
		return "kernel"
	case PresetShuntOnly:
		return "shunt-only"
	}
	return fmt.Sprintf("Preset(%d)", uint8(p))
}
