package rapl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/bits"
	"os"
	"path"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// Defaults for Config's zero values.
const (
	DefaultPoll         = 100 * time.Millisecond
	DefaultUpdatePeriod = time.Millisecond
	DefaultStaleAfter   = 100 * time.Millisecond
	// DefaultEnergyUnit is the common hardware energy unit, 2^-16 J,
	// rounded up to whole nanojoules.
	DefaultEnergyUnit = 15259 * physic.NanoJoule
	// SafetyFactor divides the time the counter takes to wrap at
	// MaxPower to give the longest poll period allowed.
	SafetyFactor = 4
)

// PermissionRule is the tmpfiles.d rule shipped to let group meshd read the
// counters; permission errors name it.
const PermissionRule = "systemd/meshd-powercap.conf"

// Config tunes discovery and the sensors. The zero value reads the real
// tree on the system clock.
type Config struct {
	// FS is the powercap tree; nil means os.DirFS(Root).
	FS fs.FS
	// Root is the powercap class directory; empty means DefaultRoot.
	Root string
	// CPUInfo is read for the vendor when Vendor is empty; empty means
	// DefaultCPUInfo.
	CPUInfo string
	// Vendor overrides the vendor read from CPUInfo.
	Vendor Vendor
	// Clock stamps and paces reads; nil means drivers.System.
	Clock drivers.Clock
	// Poll is the wanted time between reads; 0 means DefaultPoll. The
	// sensor polls faster where the counter could otherwise wrap unseen.
	Poll time.Duration
	// MaxPower is the zone's power ceiling; 0 means the zone's largest
	// constraint, else DefaultMaxPower.
	MaxPower physic.Power
	// UpdatePeriod is how often the hardware updates the counter; 0 means
	// DefaultUpdatePeriod.
	UpdatePeriod time.Duration
	// StaleAfter is how long an unchanged counter is believed; 0 means
	// DefaultStaleAfter and a negative value disables the check.
	StaleAfter time.Duration
	// EnergyUnit is the hardware's counter unit; 0 means
	// DefaultEnergyUnit.
	EnergyUnit physic.Energy
	// GainErr overrides the vendor's stated relative error.
	GainErr float64
}

func (c Config) fs() fs.FS {
	if c.FS != nil {
		return c.FS
	}
	root := c.Root
	if root == "" {
		root = DefaultRoot
	}
	return os.DirFS(root)
}

func (c Config) vendor() Vendor {
	if c.Vendor != "" {
		return c.Vendor
	}
	p := c.CPUInfo
	if p == "" {
		p = DefaultCPUInfo
	}
	v, err := ReadVendor(p)
	if err != nil {
		return VendorUnknown
	}
	return v
}

// gainErr is the stated, non-rigorous relative error of a vendor's
// counters (see the package documentation).
func gainErr(v Vendor) float64 {
	if v == VendorIntel {
		return 0.05
	}
	return 0.10
}

// Sensor reads one zone's counter. Next must not be called from several
// goroutines at once.
type Sensor struct {
	zone    Zone
	fsys    fs.FS
	file    string
	pacer   *drivers.Pacer
	info    drivers.Info
	safe    time.Duration // longest gap whose delta is unambiguous
	update  time.Duration
	stale   time.Duration
	modulus uint64 // max_energy_range_uj + 1

	primed     bool
	prev       uint64
	prevAt     time.Time
	changedAt  time.Time
	contiguous bool // the next sample may claim to follow the last
	wraps      uint64
	closed     bool
}

// Open discovers the zones under cfg's root and opens the one spec names
// (see Find): the constructor behind "-meter rapl:<zone>".
func Open(spec string, cfg Config) (*Sensor, error) {
	zones, err := Discover(cfg)
	if err != nil {
		return nil, err
	}
	if len(zones) == 0 {
		return nil, fmt.Errorf("rapl: no enabled powercap zone with an energy counter: %w", drivers.ErrNoDevice)
	}
	z, err := Find(zones, spec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, drivers.ErrNoDevice)
	}
	return New(z, cfg)
}

// New opens a sensor on a discovered zone and checks that its counter can
// be read now, so that a permission problem shows at start-up.
func New(z Zone, cfg Config) (*Sensor, error) {
	if z.MaxEnergyRangeUJ == 0 || z.MaxEnergyRangeUJ == math.MaxUint64 {
		return nil, fmt.Errorf("rapl: zone %s: max_energy_range_uj %d unusable", z.ID, z.MaxEnergyRangeUJ)
	}
	maxP := cfg.MaxPower
	if maxP <= 0 {
		maxP = z.ConstraintMaxPower
	}
	if maxP <= 0 {
		maxP = DefaultMaxPower
	}
	// The counter comes back to the same value after max+1 µJ; at
	// maxP that takes (max+1) µJ / maxP, and polling SafetyFactor
	// times as often leaves room for power beyond the stated ceiling.
	rangeE := physic.Energy(z.MaxEnergyRangeUJ+1) * physic.MicroJoule
	safe := durationOf(rangeE, maxP*SafetyFactor)
	if safe <= 0 {
		return nil, fmt.Errorf("rapl: zone %s: counter range %d µJ too short to poll at %s", z.ID, z.MaxEnergyRangeUJ, maxP)
	}
	poll := cfg.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	poll = min(poll, safe)
	update := cfg.UpdatePeriod
	if update <= 0 {
		update = DefaultUpdatePeriod
	}
	stale := cfg.StaleAfter
	if stale == 0 {
		stale = DefaultStaleAfter
	}
	unit := cfg.EnergyUnit
	if unit <= 0 {
		unit = DefaultEnergyUnit
	}
	gain := cfg.GainErr
	if gain <= 0 {
		gain = gainErr(z.Vendor)
	}
	s := &Sensor{
		zone:    z,
		fsys:    cfg.fs(),
		file:    path.Join(z.ID, "energy_uj"),
		pacer:   drivers.NewPacer(cfg.Clock, poll),
		safe:    safe,
		update:  update,
		stale:   stale,
		modulus: z.MaxEnergyRangeUJ + 1,
		info: drivers.Info{
			Kind:      drivers.KindModel,
			Period:    poll,
			MaxPeriod: safe,
			Accuracy: drivers.Accuracy{
				GainErr:   gain,
				Offset:    func(physic.ElectricPotential) physic.Power { return 0 },
				FullScale: func(physic.ElectricPotential) physic.Power { return maxP },
				MaxPower:  maxP,
				Quantum:   max(unit, physic.MicroJoule),
			},
		},
	}
	if _, err := s.read(); err != nil {
		return nil, err
	}
	return s, nil
}

// Name implements drivers.Sensor: "rapl:" and the zone's key.
func (s *Sensor) Name() string { return "rapl:" + s.zone.Key }

// Info implements drivers.Sensor.
func (s *Sensor) Info() drivers.Info { return s.info }

// Zone is the zone the sensor reads.
func (s *Sensor) Zone() Zone { return s.zone }

// Wraps is how many counter wraps the sensor has accounted for.
func (s *Sensor) Wraps() uint64 { return s.wraps }

// Close implements drivers.Sensor.
func (s *Sensor) Close() error {
	s.closed = true
	return nil
}

var errClosed = errors.New("sensor closed")

func (s *Sensor) read() (uint64, error) {
	v, err := readUint(s.fsys, s.file)
	if errors.Is(err, fs.ErrPermission) {
		return 0, fmt.Errorf("rapl: %s: %s is readable only by root since Linux 5.10 (CVE-2020-8694); "+
			"install %s in /etc/tmpfiles.d and run systemd-tmpfiles --create meshd-powercap.conf "+
			"(or the udev rule systemd/99-meshd-powercap.rules), then run meshd in group meshd: %w",
			s.zone.Key, s.file, PermissionRule, err)
	}
	if err != nil {
		return 0, fmt.Errorf("rapl: %s: reading counter: %w", s.zone.Key, err)
	}
	if v > s.zone.MaxEnergyRangeUJ {
		return 0, fmt.Errorf("rapl: %s: counter %d µJ beyond max_energy_range_uj %d", s.zone.Key, v, s.zone.MaxEnergyRangeUJ)
	}
	return v, nil
}

// rebase makes the read at t the start of the next sample, which cannot
// claim to follow the last one returned.
func (s *Sensor) rebase(v uint64, t time.Time) {
	s.prev, s.prevAt, s.primed, s.contiguous = v, t, true, false
}

// Next implements drivers.Sensor. The first read after opening only primes
// the counter; each later one returns the energy since the previous read
// as mean power over that interval.
func (s *Sensor) Next(ctx context.Context) (drivers.Sample, error) {
	for {
		if s.closed {
			return drivers.Sample{}, fmt.Errorf("rapl: %s: %w", s.zone.Key, errClosed)
		}
		// The counter's value at t is within one update period of
		// the read; Uncertainty says so.
		t, err := s.pacer.Wait(ctx)
		if err != nil {
			return drivers.Sample{}, err
		}
		cur, err := s.read()
		if err != nil {
			s.contiguous = false
			return drivers.Sample{}, err
		}
		if !s.primed {
			s.rebase(cur, t)
			s.changedAt = t
			continue
		}
		gap := t.Sub(s.prevAt)
		if gap > s.safe {
			s.rebase(cur, t)
			s.changedAt = t
			return drivers.Sample{}, fmt.Errorf("rapl: %s: %s between reads exceeds the %s in which the counter cannot wrap unseen: energy ambiguous",
				s.zone.Key, gap, s.safe)
		}
		if cur == s.prev && s.stale >= 0 && t.Sub(s.changedAt) > s.stale {
			since := t.Sub(s.changedAt)
			s.rebase(cur, t)
			return drivers.Sample{}, fmt.Errorf("rapl: %s: counter unchanged at %d µJ for %s: %w", s.zone.Key, cur, since, drivers.ErrStale)
		}
		var d uint64
		wrapped := cur < s.prev
		if wrapped {
			d = s.modulus - s.prev + cur
		} else {
			d = cur - s.prev
		}
		e := physic.Energy(d) * physic.MicroJoule
		smp := drivers.Sample{
			Start:       s.prevAt,
			End:         t,
			Uncertainty: s.update,
			Contiguous:  s.contiguous,
			Power:       drivers.PowerOf(e, gap),
		}
		// Only energy that cannot fit the widest interval the edges
		// allow, even at full scale, is beyond the sensor's range.
		smp.Overflow = e > drivers.EnergyOf(s.info.Accuracy.FullScale(0), gap+2*s.update)
		if wrapped {
			s.wraps++
		}
		if cur != s.prev {
			s.changedAt = t
		}
		s.prev, s.prevAt, s.contiguous = cur, t, true
		return smp, nil
	}
}

// durationOf is how long e lasts at p, saturating.
func durationOf(e physic.Energy, p physic.Power) time.Duration {
	if p <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(e), uint64(time.Second))
	if hi >= uint64(p) {
		return time.Duration(math.MaxInt64)
	}
	q, _ := bits.Div64(hi, lo, uint64(p))
	if q > math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(q)
}
