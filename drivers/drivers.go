// Package drivers holds the power-sensor drivers, one subpackage per chip or
// protocol, and the small contract they all meet so that the sampler in
// shunt/ can drive any of them. A driver talks to one chip; it knows nothing
// of windows, receipts or provenance.
package drivers

import (
	"context"
	"errors"
	"time"
)

// Sample is one conversion read from a power sensor. Quantities are signed
// integers in micro-units so that no driver has to round to a float and a
// negative current (reverse flow) survives.
type Sample struct {
	// At is when the driver saw the conversion complete, on the monotonic
	// clock (time.Now()). The sampler shifts it back by Averaged/2.
	At time.Time
	// Averaged is the span of time this value averages over (for an INA226:
	// AVG × (VBUSCT + VSHCT)); zero for an instantaneous reading.
	Averaged time.Duration
	// BusUV is the bus (load) voltage in µV; ShuntNV the shunt drop in nV.
	BusUV   int64
	ShuntNV int64
	// CurrentUA is the current in µA, PowerUW the power in µW.
	CurrentUA int64
	PowerUW   int64
	// Overflow is set when the chip flagged a math or range overflow for
	// this conversion; such a sample is not a valid measurement.
	Overflow bool
}

// Accuracy is the datasheet error budget of a configured sensor, used by
// the sampler to bound the error of an energy window.
type Accuracy struct {
	// GainErr is the worst-case relative gain error of the power reading
	// (e.g. 0.001 for 0.1 %), shunt and bus gain errors combined.
	GainErr float64
	// OffsetUW is the worst-case absolute power offset at the sample's bus
	// voltage, in µW, as a function so that it can depend on the voltage.
	OffsetUW func(busUV int64) float64
}

// Sensor is what every power sensor driver offers to the sampler.
type Sensor interface {
	// Name identifies the sensor, e.g. "ina226@i2c-1:0x40".
	Name() string
	// UpdatePeriod is how often the sensor produces a new conversion.
	UpdatePeriod() time.Duration
	// Accuracy is the error budget for the current configuration.
	Accuracy() Accuracy
	// Next blocks until a conversion newer than the last one returned is
	// available and returns it: a sample is never returned twice and, as
	// far as the chip allows, never skipped. A read error is returned as an
	// error, never as a zero sample.
	Next(ctx context.Context) (Sample, error)
	// Close releases the sensor.
	Close() error
}

// ErrNoDevice is wrapped when a probe finds no chip of the expected kind.
var ErrNoDevice = errors.New("no such device")
