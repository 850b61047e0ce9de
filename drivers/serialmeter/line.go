package serialmeter

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"meshd/drivers"
)

const (
	maxLine     = 128
	timestampNS = 1_000_000_000_000_000 // first fields at least this are Unix ns
)

// LineReading is one parsed line.
type LineReading struct {
	// UnixNS is the meter's timestamp in the "<unix_ns>,<µW>" form, else 0.
	UnixNS    int64
	BusUV     int64 // 0 in the timestamp form
	CurrentUA int64 // 0 in the timestamp form
	PowerUW   int64
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
		return LineReading{UnixNS: x, PowerUW: y}, nil
	}
	if x < 0 {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: negative millivolts", line)
	}
	const maxMilli = 1 << 40 // keeps mV × mA × 1000 inside int64
	if x > maxMilli || y > maxMilli || y < -maxMilli {
		return LineReading{}, fmt.Errorf("serialmeter: line %q: value out of range", line)
	}
	return LineReading{BusUV: x * 1000, CurrentUA: y * 1000, PowerUW: x * y}, nil
}

// LineConfig configures a line-protocol meter.
type LineConfig struct {
	// Path is the serial device, e.g. /dev/ttyACM0.
	Path string
	// Baud is the line speed; 0 means 115200.
	Baud int
	// Timeout is how long a meter may stay without a valid line before
	// Next fails; 0 means 2 s.
	Timeout time.Duration
	// UpdatePeriod is how often the meter sends a line; 0 means 100 ms.
	UpdatePeriod time.Duration
	// Averaged is the span each reading averages over, if the firmware
	// averages; 0 for instantaneous readings.
	Averaged time.Duration
	// GainErr and OffsetUW are the meter's own error budget. A zero
	// GainErr means unknown and is taken as 5 %, so that an undocumented
	// meter never looks precise.
	GainErr  float64
	OffsetUW float64
	// Name overrides the sensor name; empty means "line@<path>".
	Name string
}

// Line is an open line-protocol meter.
type Line struct {
	p       port
	cfg     LineConfig
	name    string
	buf     []byte
	skip    bool // discarding an over-long line up to its newline
	lastTS  int64
	garbled atomic.Uint64
	dups    atomic.Uint64
	closed  bool
}

// OpenLine opens the port. It does not wait for a first line.
func OpenLine(cfg LineConfig) (*Line, error) {
	if cfg.Baud == 0 {
		cfg.Baud = 115200
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.UpdatePeriod <= 0 {
		cfg.UpdatePeriod = 100 * time.Millisecond
	}
	if cfg.GainErr == 0 {
		cfg.GainErr = 0.05
	}
	if cfg.GainErr < 0 || cfg.OffsetUW < 0 {
		return nil, fmt.Errorf("serialmeter: negative error budget (gain %v, offset %v µW)", cfg.GainErr, cfg.OffsetUW)
	}
	p, err := openPort(cfg.Path, cfg.Baud)
	if err != nil {
		return nil, err
	}
	l := &Line{p: p, cfg: cfg, name: cfg.Name}
	if l.name == "" {
		l.name = "line@" + cfg.Path
	}
	return l, nil
}

// Name implements drivers.Sensor.
func (l *Line) Name() string { return l.name }

// UpdatePeriod is the configured line rate.
func (l *Line) UpdatePeriod() time.Duration { return l.cfg.UpdatePeriod }

// Accuracy is the configured budget.
func (l *Line) Accuracy() drivers.Accuracy {
	off := l.cfg.OffsetUW
	return drivers.Accuracy{GainErr: l.cfg.GainErr, OffsetUW: func(int64) float64 { return off }}
}

// Garbled counts the lines skipped because they did not parse.
func (l *Line) Garbled() uint64 { return l.garbled.Load() }

// Duplicates counts timestamped lines dropped for not advancing in time.
func (l *Line) Duplicates() uint64 { return l.dups.Load() }

// Next returns the next valid line, in the order the meter sent them.
func (l *Line) Next(ctx context.Context) (drivers.Sample, error) {
	if l.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", l.name)
	}
	deadline := time.Now().Add(l.cfg.Timeout)
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
			return drivers.Sample{
				At: time.Now(), Averaged: l.cfg.Averaged,
				BusUV: r.BusUV, CurrentUA: r.CurrentUA, PowerUW: r.PowerUW,
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
		if time.Now().After(deadline) {
			return drivers.Sample{}, fmt.Errorf("serialmeter: %s: no valid line for %v", l.cfg.Path, l.cfg.Timeout)
		}
		n, err := readSome(l.p, chunk[:])
		if err != nil {
			return drivers.Sample{}, fmt.Errorf("serialmeter: %s: %w", l.cfg.Path, err)
		}
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
