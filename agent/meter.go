package agent

import (
	"context"

	"meshd/wire"
)

// Meter opens energy windows around engine work. The implementation is a
// span of meters in shunt/ (I2C and serial meters, hwmon rails, RAPL,
// NVML); the agent only sees this interface.
type Meter interface {
	// Name identifies the meter in receipts, e.g. "ina226@i2c-1:0x40".
	Name() string
	// Open starts a window now. A meter that meters one serve at a time
	// may block here until the previous window closes.
	Open(ctx context.Context) (Window, error)
}

// Window is one open metering window.
type Window interface {
	// Close ends the window now and returns its reading with its
	// evidence. It returns wire.ErrNoMeasurement (wrapped) when nothing
	// valid was sampled.
	Close(ctx context.Context) (wire.Reading, error)
}

// HealthChecker is a Meter that can tell, before a serve, whether it is
// measuring at all (a stalled or dead sensor says no).
type HealthChecker interface {
	Health() error
}
