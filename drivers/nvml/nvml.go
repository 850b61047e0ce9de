package nvml

import (
	"context"
	"errors"
	"fmt"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// Sensor reads one GPU. Next must not be called from several goroutines
// at once.
type Sensor struct {
	lib     Library
	dev     Device
	index   int
	gpu     string
	counter bool
	pacer   *drivers.Pacer
	info    drivers.Info
	update  time.Duration
	window  time.Duration
	stale   time.Duration

	primed     bool
	prev       uint64
	prevAt     time.Time
	changedAt  time.Time
	lastRead   time.Time
	contiguous bool
	closed     bool
}

// Open loads NVML (cfg.Library) and opens GPU index: the constructor
// behind "-meter nvml:<index>". Without the library it returns an error
// wrapping drivers.ErrNoDevice that names it.
func Open(index int, cfg Config) (drivers.Sensor, error) {
	if _, err := cfg.poll(); err != nil {
		return nil, err
	}
	lib, err := load(cfg.library())
	if err != nil {
		return nil, err
	}
	s, err := New(lib, index, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ProbeSystem is Probe on the library cfg.Library names.
func ProbeSystem(cfg Config) ([]GPUInfo, error) {
	lib, err := load(cfg.library())
	if err != nil {
		return nil, err
	}
	return probe(lib, cfg.library())
}

// initErr explains why NVML would not start.
func initErr(ret Return, lib string) error {
	switch ret {
	case ErrorLibraryNotFound:
		return fmt.Errorf("nvml: %s not found: the NVIDIA driver is not installed: %w: %w", lib, drivers.ErrNoDevice, ret)
	case ErrorDriverNotLoaded:
		return fmt.Errorf("nvml: the NVIDIA kernel driver is not loaded: %w: %w", drivers.ErrNoDevice, ret)
	}
	return fmt.Errorf("nvml: initialising %s: %w", lib, ret)
}

// New opens GPU index through lib, which it initialises (and Close shuts
// down). It reads the energy counter where the GPU has one and falls back
// to power readings where it does not.
func New(lib Library, index int, cfg Config) (s *Sensor, err error) {
	poll, err := cfg.poll()
	if err != nil {
		return nil, err
	}
	if ret := lib.Init(); ret != Success {
		return nil, initErr(ret, cfg.library())
	}
	defer func() {
		if err != nil {
			lib.Shutdown()
		}
	}()
	n, ret := lib.DeviceGetCount()
	if ret != Success {
		return nil, fmt.Errorf("nvml: counting GPUs: %w", ret)
	}
	if index < 0 || index >= n {
		return nil, fmt.Errorf("nvml: no GPU %d (%d present): %w", index, n, drivers.ErrNoDevice)
	}
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if ret != Success {
		return nil, fmt.Errorf("nvml: GPU %d: %w", index, ret)
	}
	gpu, _ := lib.DeviceGetName(dev) // for messages only

	_, ret = lib.DeviceGetTotalEnergyConsumption(dev)
	counter := ret == Success
	if !counter && !unsupported(ret) {
		return nil, fmt.Errorf("nvml: GPU %d: reading energy counter: %w", index, ret)
	}
	if !counter {
		if _, ret := lib.DeviceGetPowerUsage(dev); unsupported(ret) {
			return nil, fmt.Errorf("nvml: GPU %d (%s) reports neither energy nor power: %w: %w", index, gpu, drivers.ErrNoDevice, ret)
		} else if ret != Success {
			return nil, fmt.Errorf("nvml: GPU %d: reading power: %w", index, ret)
		}
	}

	fullScale := or(cfg.FullScale, DefaultFullScale)
	if mw, ret := lib.DeviceGetEnforcedPowerLimit(dev); ret == Success && mw > 0 {
		fullScale = physic.Power(mw) * physic.MilliWatt
	} else if mw, ret := lib.DeviceGetPowerManagementLimit(dev); ret == Success && mw > 0 {
		fullScale = physic.Power(mw) * physic.MilliWatt
	}
	offset := or(cfg.Offset, DefaultOffset)
	info := drivers.Info{
		Kind:      drivers.KindPoint,
		Period:    poll,
		MaxPeriod: or(cfg.MaxGap, 10*poll),
		Accuracy: drivers.Accuracy{
			GainErr:   or(cfg.GainErr, DefaultGainErr),
			Offset:    func(physic.ElectricPotential) physic.Power { return offset },
			FullScale: func(physic.ElectricPotential) physic.Power { return fullScale },
			MaxPower:  fullScale,
		},
	}
	if counter {
		info.Kind = drivers.KindModel
		info.Accuracy.Quantum = CounterQuantum
	}
	stale := cfg.StaleAfter
	if stale == 0 {
		stale = DefaultStaleAfter
	}
	return &Sensor{
		lib:     lib,
		dev:     dev,
		index:   index,
		gpu:     gpu,
		counter: counter,
		pacer:   drivers.NewPacer(cfg.Clock, poll),
		info:    info,
		update:  or(cfg.UpdatePeriod, DefaultUpdatePeriod),
		window:  or(cfg.PowerWindow, DefaultPowerWindow),
		stale:   stale,
	}, nil
}

// Name implements drivers.Sensor: "nvml:" and the GPU index.
func (s *Sensor) Name() string { return fmt.Sprintf("nvml:%d", s.index) }

// Info implements drivers.Sensor.
func (s *Sensor) Info() drivers.Info { return s.info }

// GPU is the GPU's product name as NVML reports it.
func (s *Sensor) GPU() string { return s.gpu }

// Counter reports whether the sensor reads the energy counter (else
// power readings).
func (s *Sensor) Counter() bool { return s.counter }

// Close implements drivers.Sensor, releasing this sensor's hold on NVML.
func (s *Sensor) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := s.lib.Shutdown(); ret != Success {
		return fmt.Errorf("nvml: GPU %d: shutdown: %w", s.index, ret)
	}
	return nil
}

var errClosed = errors.New("sensor closed")

// Next implements drivers.Sensor. With the energy counter the first read
// only primes it; each later one returns the energy since the previous
// read as mean power over that interval.
func (s *Sensor) Next(ctx context.Context) (drivers.Sample, error) {
	for {
		if s.closed {
			return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: %w", s.index, errClosed)
		}
		t, err := s.pacer.Wait(ctx)
		if err != nil {
			return drivers.Sample{}, err
		}
		if !s.counter {
			return s.point(t)
		}
		cur, ret := s.lib.DeviceGetTotalEnergyConsumption(s.dev)
		if ret != Success {
			s.contiguous = false
			if unsupported(ret) {
				return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: energy counter no longer supported: %w", s.index, ret)
			}
			return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: reading energy counter: %w", s.index, ret)
		}
		if !s.primed {
			s.rebase(cur, t)
			s.changedAt = t
			continue
		}
		if cur < s.prev {
			prev := s.prev
			s.rebase(cur, t)
			s.changedAt = t
			return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: energy counter went back from %d to %d mJ (driver reloaded or GPU reset)",
				s.index, prev, cur)
		}
		if cur == s.prev && s.stale >= 0 && t.Sub(s.changedAt) > s.stale {
			since := t.Sub(s.changedAt)
			s.rebase(cur, t)
			return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: energy counter unchanged at %d mJ for %s: %w", s.index, cur, since, drivers.ErrStale)
		}
		gap := t.Sub(s.prevAt)
		e := physic.Energy(cur-s.prev) * physic.MilliJoule
		smp := drivers.Sample{
			Start:       s.prevAt,
			End:         t,
			Uncertainty: s.update,
			Contiguous:  s.contiguous && gap <= s.info.MaxPeriod,
			Power:       drivers.PowerOf(e, gap),
		}
		// Counter updates land anywhere within the edges'
		// uncertainty, so only energy beyond full scale over the
		// widest interval they allow is out of range.
		smp.Overflow = e > drivers.EnergyOf(s.info.Accuracy.FullScale(0), gap+2*s.update)
		if cur != s.prev {
			s.changedAt = t
		}
		s.prev, s.prevAt, s.contiguous = cur, t, true
		return smp, nil
	}
}

func (s *Sensor) rebase(v uint64, t time.Time) {
	s.prev, s.prevAt, s.primed, s.contiguous = v, t, true, false
}

// point returns a power reading taken at t.
func (s *Sensor) point(t time.Time) (drivers.Sample, error) {
	mw, ret := s.lib.DeviceGetPowerUsage(s.dev)
	if ret != Success {
		s.contiguous = false
		return drivers.Sample{}, fmt.Errorf("nvml: GPU %d: reading power: %w", s.index, ret)
	}
	p := physic.Power(mw) * physic.MilliWatt
	smp := drivers.Sample{
		Start:       t,
		End:         t,
		Uncertainty: s.window,
		Contiguous:  s.contiguous && t.Sub(s.lastRead) <= s.info.MaxPeriod,
		Power:       p,
		Overflow:    p > s.info.Accuracy.FullScale(0),
	}
	s.lastRead, s.contiguous = t, true
	return smp, nil
}

// Probe reads, for every GPU lib sees, its name, whether it has the
// energy counter and the counter and power now: a quick check of a real
// GPU before metering it.
func Probe(lib Library) ([]GPUInfo, error) { return probe(lib, DefaultLibrary) }

func probe(lib Library, name string) ([]GPUInfo, error) {
	if ret := lib.Init(); ret != Success {
		return nil, initErr(ret, name)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != Success {
		return nil, fmt.Errorf("nvml: counting GPUs: %w", ret)
	}
	gpus := make([]GPUInfo, 0, n)
	for i := range n {
		g := GPUInfo{Index: i}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != Success {
			return gpus, fmt.Errorf("nvml: GPU %d: %w", i, ret)
		}
		if g.Name, ret = lib.DeviceGetName(dev); ret != Success {
			return gpus, fmt.Errorf("nvml: GPU %d: name: %w", i, ret)
		}
		if g.UUID, ret = lib.DeviceGetUUID(dev); ret != Success {
			return gpus, fmt.Errorf("nvml: GPU %d: UUID: %w", i, ret)
		}
		g.EnergyMJ, ret = lib.DeviceGetTotalEnergyConsumption(dev)
		if g.CounterSupported = ret == Success; !g.CounterSupported && !unsupported(ret) {
			return gpus, fmt.Errorf("nvml: GPU %d: energy counter: %w", i, ret)
		}
		g.PowerMW, ret = lib.DeviceGetPowerUsage(dev)
		if g.PowerSupported = ret == Success; !g.PowerSupported && !unsupported(ret) {
			return gpus, fmt.Errorf("nvml: GPU %d: power: %w", i, ret)
		}
		if mw, ret := lib.DeviceGetEnforcedPowerLimit(dev); ret == Success {
			g.PowerLimitMW = mw
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
