package agent

import (
	"context"

	"meshd/wire"
)

// Meter opens energy windows around engine work. Implementations live in
// shunt/ (I2C and serial meters, hwmon rails) and rapl/; the agent only
// sees this interface.
type Meter interface {
	// Name identifies the meter in receipts, e.g. "ina226@i2c-1:0x40".
	Name() string
	// Open starts a window now.
	Open(ctx context.Context) (Window, error)
}

// Window is one open metering window.
type Window interface {
	// Close ends the window now and returns its reading. It returns
	// wire.ErrNoMeasurement (wrapped) when nothing valid was sampled.
	Close(ctx context.Context) (wire.Reading, error)
}
