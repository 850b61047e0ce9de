package wire

import "errors"

// ErrNoMeasurement is returned by a meter window that holds no valid
// sample at all. It must never be turned into a zero reading.
var ErrNoMeasurement = errors.New("no measurement: the window holds no valid sample")

// Reading is what a meter reports when a window around an engine closes.
type Reading struct {
	// EnergyUJ is the integrated energy over the window in µJ.
	EnergyUJ uint64
	// Provenance is HwShunt only when the window was fully covered by valid
	// samples; ModelBased when gaps were bridged by interpolation.
	Provenance Provenance
	// Metering names the meter and describes the window's coverage.
	Metering Metering
}
