package serialmeter

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

const (
	maxLine     = 128
	timestampNS = 1_000_000_000_000_000 // first fields at least this are Unix ns
)

// LineReading is one parsed line.
type LineReading struct {
	// UnixNS is the meter's timestamp in the "<unix_ns>,<µW>" form, else 0.
	UnixNS  int64
	Bus     physic.ElectricPotential // 0 in the timestamp form
	Current physic.ElectricCurrent   // 0 in the timestamp form
	Power   physic.Power
}

// ParseLine parses one line of the line protocol (without its newline).
func ParseLine(line []byte) (LineReading, error) {
	line = bytes.TrimSpace(line)
	a, b, ok := bytes.Cut(line, []byte{','})
	if !ok {
		return LineReading{}, fmt.Errorf("serialmeter: line %q has no comma", line)
	}
	x, err := strconv.ParseInt(string(a), 10, 64)
	if err != nil {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: first field: %w", line, err)
	}
	y, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: second field: %w", line, err)
	}
	if x >= timestampNS {
		const maxMicroWatts = 1 << 53 // keeps µW × 1000 inside int64
		if y > maxMicroWatts || y < -maxMicroWatts {
			return LineReading{}, fmt.Errorf("serialmeter: line %q: power out of range", line)
		}
		return LineReading{UnixNS: x, Power: physic.Power(y) * physic.MicroWatt}, nil
	}
	if x < 0 {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: negative millivolts", line)
	}
	const maxMilli = 1 << 40 // keeps mV × mA × 1000 inside int64
	if x > maxMilli || y > maxMilli || y < -maxMilli {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: value out of range", line)
	}
	return LineReading{
		Bus:     physic.ElectricPotential(x) * physic.MilliVolt,
		Current: physic.ElectricCurrent(y) * physic.MilliAmpere,
		Power:   physic.Power(x*y) * physic.MicroWatt,
	}, nil
}

// LineConfig configures a line-protocol meter.
type LineConfig struct {
	// Path is the serial device, e.g. /dev/ttyACM0.
	Path string
	// Baud is the line speed; 0 means 115200.
	Baud int
	// Timeout is how long a meter may stay without a valid line before
	// Next fails; 0 means 2 s. Garbage counts as silence.
	Timeout time.Duration
	// UpdatePeriod is how often the meter sends a line; 0 means 100 ms.
	UpdatePeriod time.Duration
	// MaxPower is the meter's full scale: the most power it can measure.
	// It is required, because the sampler charges the time between
	// readings at it and no default could be right for every meter; a
	// reading beyond it is flagged Overflow.
	MaxPower physic.Power
	// GainErr and Offset are the meter's own error budget. A zero GainErr
	// means unknown and is taken as 5 %, so that an undocumented meter
	// never looks precise.
	GainErr float64
	Offset  physic.Power
	// Clock stamps readings; nil means drivers.System.
	Clock drivers.Clock
	// Name overrides the sensor name; empty means "line@<path>".
	Name string
}

// Line is an open line-protocol meter.
type Line struct {
	p     port
	cfg   LineConfig
	clock drivers.Clock
	name  string
	info  drivers.Info
	buf   []byte
	skip  bool // discarding an over-long line up to its newline
	// The bytes in buf arrived between since and at: since is when the
	// read before the latest one returned, at when the latest returned.
	since, at time.Time
	lastTS    int64
	garbled   atomic.Uint64
	dups      atomic.Uint64
	closed    bool
}

// OpenLine opens the port. It does not wait for a first line.
func OpenLine(cfg LineConfig) (*Line, error) {
	if cfg.Baud == 0 {
		cfg.Baud = 115200
	}
	if cfg.Baud < 0 {
		return nil, fmt.Errorf("serialmeter: %s: negative baud rate %d", cfg.Path, cfg.Baud)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.UpdatePeriod <= 0 {
		cfg.UpdatePeriod = 100 * time.Millisecond
	}
	if cfg.MaxPower <= 0 {
		return nil, fmt.Errorf("serialmeter: %s: LineConfig.MaxPower (the meter's full scale) is required", cfg.Path)
	}
	if cfg.GainErr == 0 {
		cfg.GainErr = 0.05
	}
	if cfg.GainErr < 0 || cfg.Offset < 0 {
		return nil, fmt.Errorf("serialmeter: negative error budget (gain %v, offset %v)", cfg.GainErr, cfg.Offset)
	}
	p, err := openPort(cfg.Path, cfg.Baud)
	if err != nil {
		return nil, err
	}
	l := &Line{p: p, cfg: cfg, clock: drivers.ClockOr(cfg.Clock), name: cfg.Name}
	if l.name == "" {
		l.name = "line@" + cfg.Path
	}
	off, full := cfg.Offset, cfg.MaxPower
	l.info = drivers.Info{
		Kind:      drivers.KindPoint,
		Period:    cfg.UpdatePeriod,
		MaxPeriod: cfg.UpdatePeriod,
		Accuracy: drivers.Accuracy{
			GainErr:   cfg.GainErr,
			Offset:    func(physic.ElectricPotential) physic.Power { return off },
			FullScale: func(physic.ElectricPotential) physic.Power { return full },
			MaxPower:  full,
		},
	}
	l.since = l.clock.Now()
	l.at = l.since
	return l, nil
}

// Name implements drivers.Sensor.
func (l *Line) Name() string { return l.name }

// Info implements drivers.Sensor: a point sampler at the configured line
// rate.
func (l *Line) Info() drivers.Info { return l.info }

// Garbled counts the lines skipped because they did not parse.
func (l *Line) Garbled() uint64 { return l.garbled.Load() }

// Duplicates counts timestamped lines dropped for not advancing in time.
func (l *Line) Duplicates() uint64 { return l.dups.Load() }

// Next returns the next valid line, in the order the meter sent them.
//
// A line is stamped when its newline reached the port: no later than the
// read that returned it, less the wire time of the bytes that followed it
// in that read. Uncertainty covers the read's window (since the previous
// read returned: the line may have waited in the port's buffer) and the
// line's own wire time (the meter measured before it sent).
func (l *Line) Next(ctx context.Context) (drivers.Sample, error) {
	if l.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", l.name)
	}
	b := newBudget(l.clock, l.cfg.Timeout, l.cfg.Baud)
	var chunk [256]byte
	for {
		for {
			i := bytes.IndexByte(l.buf, '\n')
			if i < 0 {
				break
			}
			line := l.buf[:i]
			l.buf = l.buf[i+1:]
			if l.skip {
				l.skip = false
				continue
			}
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			r, err := ParseLine(line)
			if err != nil {
				l.garbled.Add(1)
				continue
			}
			if r.UnixNS != 0 {
				if r.UnixNS <= l.lastTS {
					l.dups.Add(1)
					continue
				}
				l.lastTS = r.UnixNS
			}
			end := l.at.Add(-wireTime(len(l.buf), l.cfg.Baud))
			return drivers.Sample{
				Start: end, End: end,
				Uncertainty: max(end.Sub(l.since), 0) + wireTime(len(line)+1, l.cfg.Baud),
				Bus:         r.Bus, Current: r.Current, Power: r.Power,
				Overflow: r.Power > l.cfg.MaxPower || r.Power < -l.cfg.MaxPower,
			}, nil
		}
		if len(l.buf) > maxLine {
			l.garbled.Add(1)
			l.buf = l.buf[:0]
			l.skip = true
		}
		if err := ctx.Err(); err != nil {
			return drivers.Sample{}, err
		}
		if b.expired() {
			return drivers.Sample{}, fmt.Errorf("serialmeter: %s: no valid line for %v: %w", l.cfg.Path, l.cfg.Timeout, drivers.ErrStalled)
		}
		n, err := b.read(l.p, chunk[:])
		if err != nil {
			return drivers.Sample{}, fmt.Errorf("serialmeter: %s: %w", l.cfg.Path, err)
		}
		l.since, l.at = l.at, l.clock.Now()
		l.buf = append(l.buf, chunk[:n]...)
	}
}

// Close closes the port.
func (l *Line) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	return l.p.Close()
}

var _ drivers.Sensor = (*Line)(nil)
