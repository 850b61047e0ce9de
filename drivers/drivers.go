// Package drivers holds the power-sensor drivers, one subpackage per chip or
// protocol, and the small contract they all meet so that the sampler in
// shunt/ can drive any of them. A driver talks to one chip; it knows nothing
// of windows, receipts or provenance.
//
// A driver's job is to say what the hardware saw, no more: the interval each
// reading covers (from the chip's conversion clock and the ready flag's
// edge, with the uncertainty of that placement), whether it directly follows
// the previous reading (nothing missed, nothing read twice), and how much of
// its interval the current went unobserved. Quantities cross the boundary
// in periph's physic units.
package drivers

import (
	"context"
	"errors"
	"math"
	"time"

	"periph.io/x/conn/v3/physic"
)

// Kind says what a sensor's readings can prove about the time they cover.
type Kind uint8

const (
	// KindConversion: each reading is one hardware-averaged conversion
	// whose interval the driver places from the chip's conversion clock
	// (an INA226 or INA219 followed by its ready flag). Readings that chain
	// (Sample.Contiguous) cover time without gaps.
	KindConversion Kind = iota + 1
	// KindCounter: readings come from a hardware energy counter with a
	// datasheet accuracy (an INA228-class accumulator exposed by hwmon's
	// energy*_input); each sample is the energy between two counter reads.
	KindCounter
	// KindPoint: instantaneous or unsynchronised readings (USB meters, a
	// line protocol, hwmon power*_input): nothing proves what happened
	// between them, so they can never support a hardware claim.
	KindPoint
	// KindModel: a vendor's modelled energy (AMD RAPL, Intel RAPL, NVML):
	// counters that integrate continuously but publish no rigorous error
	// bound, so they can never support a hardware claim either.
	KindModel
)

// String is the kind's name on receipts (x_meter_kind).
func (k Kind) String() string {
	switch k {
	case KindConversion:
		return "adc"
	case KindCounter:
		return "counter"
	case KindPoint:
		return "point"
	case KindModel:
		return "model"
	}
	return "unknown"
}

// Hardware reports whether readings of this kind can ever support a
// HwShunt figure.
func (k Kind) Hardware() bool { return k == KindConversion || k == KindCounter }

// Sample is one reading. Start and End are on the sensor's clock (see
// Clock), which is the monotonic clock in production.
type Sample struct {
	// Start and End bound the interval the value averages over: one
	// conversion for KindConversion, the time between two counter reads
	// for counters, and a single instant (Start == End) for a point
	// reading.
	Start, End time.Time
	// Uncertainty bounds how far the true Start and End may lie from the
	// stated ones, either way: the poll interval around the ready flag's
	// edge plus the bus transactions that observed it, or a counter's
	// internal update period.
	Uncertainty time.Duration
	// Contiguous is the driver's statement that this reading begins where
	// the previous one it returned ended: no conversion was missed (timing
	// proves at most one period elapsed), none was read twice, and the
	// chip kept its configuration in between. It is false for the first
	// reading after opening, a read error, a reset or a stall.
	Contiguous bool
	// Dead is how much of [Start, End] the current went unobserved (the
	// bus-voltage slots of a multiplexed ADC). The sampler charges it at
	// the sensor's full scale in the bound.
	Dead time.Duration
	// Bus is the bus (load) voltage, Shunt the shunt drop.
	Bus, Shunt physic.ElectricPotential
	// Current is signed: a negative value is reverse flow.
	Current physic.ElectricCurrent
	// Power is the mean power over [Start, End], signed like Current.
	Power physic.Power
	// Overflow is set when the chip flagged a math or range overflow, or
	// the value lies beyond the configured full scale: such a reading is
	// not a valid measurement.
	Overflow bool
	// Latch, for a sensor whose Info.Averaging is set, bounds how long
	// before End the value was latched from the chip: the time the
	// attribute reads took (plus any cache the kernel driver keeps). The
	// value is the chip's latest completed average at that moment.
	Latch time.Duration
}

// Averaging describes a point sensor whose every value is the chip's
// hardware average over its latest completed conversion window (hwmon
// power*_input, curr*_input and in*_input on the INA2xx and INA3221
// families): the chip converts continuously, window after window, and a
// read returns the newest finished one. The sampler integrates such
// readings with the averaged-reading model (PROFILE.md §13) instead of
// treating each as an instant.
type Averaging struct {
	// Window is the chip's nominal averaging window: update_interval, or
	// averages × channels × (bus + shunt conversion time). Zero means the
	// sensor does not average in this sense.
	Window time.Duration
	// Tolerance is the relative tolerance of the chip's internal clock on
	// Window (0.1 for ±10 %).
	Tolerance float64
}

// Enabled reports whether the averaged-reading model applies.
func (a Averaging) Enabled() bool { return a.Window > 0 }

// Bounds are the shortest and longest window the chip's clock allows.
func (a Averaging) Bounds() (lo, hi time.Duration) {
	return time.Duration(float64(a.Window) * (1 - a.Tolerance)), time.Duration(math.Ceil(float64(a.Window) * (1 + a.Tolerance)))
}

// Accuracy is the datasheet error budget of a configured sensor, used by
// the sampler to bound the error of an energy window.
type Accuracy struct {
	// GainErr is the worst-case relative gain error of the power reading
	// (e.g. 0.002 for 0.2 %), shunt and bus gain errors combined.
	GainErr float64
	// Offset is the worst-case absolute power offset at a reading's bus
	// voltage: input offsets and the power register's quantisation.
	Offset func(bus physic.ElectricPotential) physic.Power
	// FullScale is the largest power the configured sensor can report at
	// a bus voltage; a reading beyond it is an overflow. Time the sensor
	// did not observe is charged at this power in the bound.
	FullScale func(bus physic.ElectricPotential) physic.Power
	// MaxPower is the largest power the configured sensor can register
	// at all: FullScale at the top of the bus range it measures. The
	// sampler refuses readings above it and seals it with every figure
	// (x_full_scale_uw), so that a verifier can bound a window's energy.
	// Zero means unstated.
	MaxPower physic.Power
	// Quantum is the energy one reading may lose to the counter's
	// resolution (counters only; 0 otherwise).
	Quantum physic.Energy
	// OffsetAt, when set, is Offset evaluated with the reading's current
	// as well: bus-voltage errors times the current that flowed rather
	// than full-scale current. Nil means Offset. The averaged-reading
	// model uses it; it must never be smaller than the true worst case
	// for a reading of that bus voltage and current.
	OffsetAt func(bus physic.ElectricPotential, current physic.ElectricCurrent) physic.Power
	// PairErr, when set, bounds how far the difference of two readings a
	// and b of the same chip may lie from (1 + gain) times the difference
	// of their true values: the terms of their errors that are not common
	// to both. The chip's gain and offsets are its own, the same for two
	// readings milliseconds apart, so in a difference they leave only
	// their products with the change (shunt offset × ΔV, bus offset × ΔI);
	// the quantisation steps vary from reading to reading and stay whole.
	// Nil means the two readings' whole errors. The averaged-reading model
	// widens the difference of consecutive readings by it (over
	// 1 − GainErr); it must never be smaller than the true worst case.
	PairErr func(a, b Sample) physic.Power
	// DeclaredPPM is the accuracy the sensor declares for a hardware
	// claim, in parts per million of the window's energy: a window whose
	// bound exceeds it is not HwShunt. Zero means 10 % (the profile's
	// ceiling for a HwShunt figure).
	DeclaredPPM uint32
}

// Info is what a sampler needs to know of a sensor before its first
// reading. A sensor keeps its configuration for its life.
type Info struct {
	Kind Kind
	// Period is the nominal time between readings; MaxPeriod the longest
	// the chip's clock tolerance allows (INA226: +10 %), which is the
	// longest gap a chain of contiguous readings may show.
	Period, MaxPeriod time.Duration
	Accuracy          Accuracy
	// Averaging is set for point sensors whose values are hardware
	// averages over the chip's conversion window (see Averaging).
	Averaging Averaging
	// BusAssumed is set when the sensor does not measure the bus voltage
	// behind each reading but takes it on the operator's word (an INA in
	// shunt-only mode between its bus brackets): the power is the measured
	// current times a voltage assumed to lie in the band. Nothing the chip
	// sees proves that the rail stayed inside it between two brackets, so
	// no window of such a sensor supports a hardware claim, and the band
	// is stated with every figure. Nil when every reading's bus voltage is
	// measured.
	BusAssumed *BusBand
}

// BusBand is the bus voltage a sensor assumed for its power readings: the
// rail was taken to lie within [Lo, Hi].
type BusBand struct {
	Lo, Hi physic.ElectricPotential
}

// Sensor is what every power sensor driver offers to the sampler.
type Sensor interface {
	// Name identifies the sensor, e.g. "ina226@i2c-1:0x40".
	Name() string
	// Info describes the sensor's kind, timing and error budget.
	Info() Info
	// Next blocks until a reading newer than the last one returned is
	// available and returns it: a reading is never returned twice. A read
	// error is returned as an error, never as a zero sample; a chip that
	// produces no conversion for three periods returns an error wrapping
	// ErrStalled.
	Next(ctx context.Context) (Sample, error)
	// Close releases the sensor.
	Close() error
}

// ErrNoDevice is wrapped when a probe finds no chip of the expected kind.
var ErrNoDevice = errors.New("no such device")

// ErrStalled is wrapped when a sensor produced no new reading within three
// of its periods: the chip is dead, powered down or its clock has stopped.
var ErrStalled = errors.New("sensor stalled: no new reading within three periods")

// ErrStale is wrapped when a sensor without a ready flag returns a value
// proven not to be new (a frozen sysfs attribute).
var ErrStale = errors.New("stale reading")
