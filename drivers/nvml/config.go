package nvml

import (
	"fmt"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// Defaults for Config's zero values.
const (
	// DefaultLibrary is the NVML soname the dynamic loader is asked for.
	DefaultLibrary      = "libnvidia-ml.so.1"
	DefaultPoll         = 100 * time.Millisecond
	MinPoll             = 50 * time.Millisecond
	DefaultUpdatePeriod = 100 * time.Millisecond
	DefaultPowerWindow  = time.Second
	DefaultStaleAfter   = time.Second
	DefaultFullScale    = 1000 * physic.Watt
	DefaultOffset       = 5 * physic.Watt
	DefaultGainErr      = 0.05
	// CounterQuantum is the energy counter's resolution.
	CounterQuantum = physic.MilliJoule
)

// Config tunes a GPU sensor. The zero value polls every 100 ms on the
// system clock.
type Config struct {
	// Library is the NVML library Open and ProbeSystem load: a soname or
	// a path; empty means DefaultLibrary.
	Library string
	// Clock stamps and paces reads; nil means drivers.System.
	Clock drivers.Clock
	// Poll is the time between reads; 0 means DefaultPoll. It may not be
	// shorter than MinPoll.
	Poll time.Duration
	// UpdatePeriod is how often the GPU updates its energy counter, the
	// uncertainty of a counter reading's edges; 0 means
	// DefaultUpdatePeriod.
	UpdatePeriod time.Duration
	// PowerWindow is what a power reading averages over, its
	// uncertainty; 0 means DefaultPowerWindow.
	PowerWindow time.Duration
	// MaxGap is the longest time between reads that keeps a chain of
	// readings contiguous; 0 means ten polls.
	MaxGap time.Duration
	// StaleAfter is how long an unchanged energy counter is believed; 0
	// means DefaultStaleAfter and a negative value disables the check.
	StaleAfter time.Duration
	// FullScale is the power ceiling where the GPU states no power
	// limit; 0 means DefaultFullScale.
	FullScale physic.Power
	// Offset and GainErr override the stated error budget (DefaultOffset,
	// DefaultGainErr).
	Offset  physic.Power
	GainErr float64
}

func (c Config) library() string {
	if c.Library == "" {
		return DefaultLibrary
	}
	return c.Library
}

func (c Config) poll() (time.Duration, error) {
	p := c.Poll
	if p == 0 {
		p = DefaultPoll
	}
	if p < MinPoll {
		return 0, fmt.Errorf("nvml: poll %s is faster than NVML's %s floor", p, MinPoll)
	}
	return p, nil
}

// or returns v unless it is zero (or negative), then def.
func or[T ~int64 | ~float64](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// GPUInfo is what Probe reads of one GPU.
type GPUInfo struct {
	Index int
	Name  string
	UUID  string
	// CounterSupported reports whether the GPU has the energy counter;
	// EnergyMJ is its value (mJ since the driver loaded).
	CounterSupported bool
	EnergyMJ         uint64
	// PowerSupported reports whether the GPU reports its power; PowerMW
	// is the value now.
	PowerSupported bool
	PowerMW        uint32
	// PowerLimitMW is the enforced power limit, 0 where unknown.
	PowerLimitMW uint32
}
