//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"time"

	"meshd/drivers"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"periph.io/x/conn/v3/physic"
)

// Sensor reads one GPU. Next must not be called from several goroutines
// at once.
type Sensor struct {
	lib     nvml.Interface
	dev     nvml.Device
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
	s, err := New(nvml.New(nvml.WithLibraryPath(cfg.library())), index, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ProbeSystem is Probe on the library cfg.Library names.
func ProbeSystem(cfg Config) ([]GPUInfo, error) {
	return probe(nvml.New(nvml.WithLibraryPath(cfg.library())), cfg.library())
}

// initErr explains why NVML would not start.
func initErr(ret nvml.Return, lib string) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("nvml: cannot load %s (is the NVIDIA driver installed?): %w: %w", lib, drivers.ErrNoDevice, ret)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("nvml: the NVIDIA kernel driver is not loaded: %w: %w", drivers.ErrNoDevice, ret)
	}
	return fmt.Errorf("nvml: initialising %s: %w", lib, ret)
}

// unsupported reports whether ret means the GPU or driver lacks the call.
func unsupported(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// New opens GPU index through lib, which it initialises (and Close shuts
// down). It reads the energy counter where the GPU has one and falls back
// to power readings where it does not.
func New(lib nvml.Interface, index int, cfg Config) (s *Sensor, err error) {
	poll, err := cfg.poll()
	if err != nil {
		return nil, err
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initErr(ret, cfg.library())
	}
	defer func() {
		if err != nil {
			lib.Shutdown()
		}
	}()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: counting GPUs: %w", ret)
	}
	if index < 0 || index >= n {
		return nil, fmt.Errorf("nvml: no GPU %d (%d present): %w", index, n, drivers.ErrNoDevice)
	}
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: GPU %d: %w", index, ret)
	}
	gpu, _ := dev.GetName() // for messages only

	_, ret = dev.GetTotalEnergyConsumption()
	counter := ret == nvml.SUCCESS
	if !counter && !unsupported(ret) {
		return nil, fmt.Errorf("nvml: GPU %d: reading energy counter: %w", index, ret)
	}
	if !counter {
		if _, ret := dev.GetPowerUsage(); unsupported(ret) {
			return nil, fmt.Errorf("nvml: GPU %d (%s) reports neither energy nor power: %w: %w", index, gpu, drivers.ErrNoDevice, ret)
		} else if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("nvml: GPU %d: reading power: %w", index, ret)
		}
	}

	fullScale := or(cfg.FullScale, DefaultFullScale)
	if mw, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS && mw > 0 {
		fullScale = physic.Power(mw) * physic.MilliWatt
	} else if mw, ret := dev.GetPowerManagementLimit(); ret == nvml.SUCCESS && mw > 0 {
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
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
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
		cur, ret := s.dev.GetTotalEnergyConsumption()
		if ret != nvml.SUCCESS {
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
	mw, ret := s.dev.GetPowerUsage()
	if ret != nvml.SUCCESS {
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
func Probe(lib nvml.Interface) ([]GPUInfo, error) { return probe(lib, DefaultLibrary) }

func probe(lib nvml.Interface, name string) ([]GPUInfo, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, initErr(ret, name)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: counting GPUs: %w", ret)
	}
	gpus := make([]GPUInfo, 0, n)
	for i := range n {
		g := GPUInfo{Index: i}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return gpus, fmt.Errorf("nvml: GPU %d: %w", i, ret)
		}
		if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
			return gpus, fmt.Errorf("nvml: GPU %d: name: %w", i, ret)
		}
		if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
			return gpus, fmt.Errorf("nvml: GPU %d: UUID: %w", i, ret)
		}
		g.EnergyMJ, ret = dev.GetTotalEnergyConsumption()
		if g.CounterSupported = ret == nvml.SUCCESS; !g.CounterSupported && !unsupported(ret) {
			return gpus, fmt.Errorf("nvml: GPU %d: energy counter: %w", i, ret)
		}
		g.PowerMW, ret = dev.GetPowerUsage()
		if g.PowerSupported = ret == nvml.SUCCESS; !g.PowerSupported && !unsupported(ret) {
			return gpus, fmt.Errorf("nvml: GPU %d: power: %w", i, ret)
		}
		if mw, ret := dev.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
			g.PowerLimitMW = mw
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
