//go:build !cgo

package nvml

import (
	"fmt"

	"meshd/drivers"
)

// errNoCgo is why a build without cgo cannot meter a GPU: the NVML
// bindings call the library through cgo.
func errNoCgo(cfg Config) error {
	return fmt.Errorf("nvml: meshd was built without cgo and cannot load %s; rebuild with CGO_ENABLED=1: %w",
		cfg.library(), drivers.ErrNoDevice)
}

// Open would open GPU index; this build cannot load NVML, so it returns
// an error wrapping drivers.ErrNoDevice.
func Open(index int, cfg Config) (drivers.Sensor, error) { return nil, errNoCgo(cfg) }

// ProbeSystem would list the GPUs; this build cannot load NVML, so it
// returns an error wrapping drivers.ErrNoDevice.
func ProbeSystem(cfg Config) ([]GPUInfo, error) { return nil, errNoCgo(cfg) }
