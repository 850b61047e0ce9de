package serialmeter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"meshd/drivers"
)

// Model is an RDTech UM meter, by the id at the start of its reply.
type Model uint16

const (
	UM24C Model = 0x0963
	UM25C Model = 0x09C9
	UM34C Model = 0x0D4C
)

func (m Model) String() string {
	switch m {
	case UM24C:
		return "UM24C"
	case UM25C:
		return "UM25C"
	case UM34C:
		return "UM34C"
	}
	return fmt.Sprintf("UM(0x%04x)", uint16(m))
}

// FrameLen is the length of a UM reply.
const FrameLen = 130

// UMReading is what one UM reply says, in micro-units.
type UMReading struct {
	Model     Model
	BusUV     int64
	CurrentUA int64
	// ReportedPowerUW is the meter's own power field (1 mW resolution).
	ReportedPowerUW int64
	TempC           int
}

// ParseUM decodes a 130-byte reply. Voltage and current scales differ by
// model: the UM25C reports mV and 0.1 mA, the UM24C and UM34C 10 mV and
// 1 mA; power is mW on all three.
func ParseUM(b []byte) (UMReading, error) {
	if len(b) != FrameLen {
		return UMReading{}, fmt.Errorf("serialmeter: UM reply of %d bytes, want %d", len(b), FrameLen)
	}
	r := UMReading{Model: Model(binary.BigEndian.Uint16(b[0:]))}
	v := int64(binary.BigEndian.Uint16(b[2:]))
	i := int64(binary.BigEndian.Uint16(b[4:]))
	switch r.Model {
	case UM25C:
		r.BusUV, r.CurrentUA = v*1000, i*100
	case UM24C, UM34C:
		r.BusUV, r.CurrentUA = v*10000, i*1000
	default:
		return UMReading{}, fmt.Errorf("serialmeter: unknown UM model id 0x%04x: %w", uint16(r.Model), drivers.ErrNoDevice)
	}
	r.ReportedPowerUW = int64(binary.BigEndian.Uint32(b[6:])) * 1000
	r.TempC = int(binary.BigEndian.Uint16(b[10:]))
	return r, nil
}

// UMConfig configures a UM meter on a serial port.
type UMConfig struct {
	// Path is the serial device, e.g. /dev/rfcomm0 or /dev/ttyUSB0.
	Path string
	// Baud is the line speed; 0 means 9600, the meters' rate.
	Baud int
	// PollInterval is the time between requests; 0 means 500 ms, the
	// meters' display refresh.
	PollInterval time.Duration
	// Timeout bounds the wait for a reply; 0 means 1 s.
	Timeout time.Duration
	// Name overrides the sensor name; empty means "um25c@<path>" etc.
	Name string
}

// UM is an open RDTech meter.
type UM struct {
	p      port
	cfg    UMConfig
	model  Model
	name   string
	last   time.Time
	closed bool
}

// OpenUM opens the port and asks the meter once, to learn its model.
func OpenUM(ctx context.Context, cfg UMConfig) (*UM, error) {
	if cfg.Baud == 0 {
		cfg.Baud = 9600
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	p, err := openPort(cfg.Path, cfg.Baud)
	if err != nil {
		return nil, err
	}
	m := &UM{p: p, cfg: cfg, name: cfg.Name}
	r, err := m.query(ctx)
	if err != nil {
		p.Close()
		return nil, err
	}
	m.model = r.Model
	if m.name == "" {
		m.name = fmt.Sprintf("%s@%s", map[Model]string{UM24C: "um24c", UM25C: "um25c", UM34C: "um34c"}[r.Model], cfg.Path)
	}
	return m, nil
}

// query sends one request and reads one valid reply, resynchronising once.
func (m *UM) query(ctx context.Context) (UMReading, error) {
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			drain(ctx, m.p, m.cfg.Timeout)
		}
		if err := m.p.Flush(); err != nil {
			return UMReading{}, fmt.Errorf("serialmeter: %s: flush: %w", m.cfg.Path, err)
		}
		if _, err := m.p.Write([]byte{0xF0}); err != nil {
			return UMReading{}, fmt.Errorf("serialmeter: %s: request: %w", m.cfg.Path, err)
		}
		buf := make([]byte, FrameLen)
		n, err := readFull(ctx, m.p, buf, time.Now().Add(m.cfg.Timeout))
		if ctx.Err() != nil {
			return UMReading{}, ctx.Err()
		}
		if errors.Is(err, errTimeout) && n == 0 {
			return UMReading{}, fmt.Errorf("serialmeter: %s: meter silent for %v after a request", m.cfg.Path, m.cfg.Timeout)
		}
		if err != nil {
			lastErr = fmt.Errorf("serialmeter: %s: reply cut short at %d of %d bytes: %w", m.cfg.Path, n, FrameLen, err)
			continue
		}
		r, err := ParseUM(buf)
		if err == nil && m.model != 0 && r.Model != m.model {
			err = fmt.Errorf("serialmeter: reply from model %v, opened as %v", r.Model, m.model)
		}
		if err != nil {
			lastErr = fmt.Errorf("serialmeter: %s: %w", m.cfg.Path, err)
			continue
		}
		return r, nil
	}
	return UMReading{}, lastErr
}

// Model returns the meter's model.
func (m *UM) Model() Model { return m.model }

// Name implements drivers.Sensor.
func (m *UM) Name() string { return m.name }

// UpdatePeriod is the poll interval.
func (m *UM) UpdatePeriod() time.Duration { return m.cfg.PollInterval }

// Accuracy uses the vendors' specifications (not datasheet-grade): UM25C
// voltage ±0.05 % + 2 digits (1 mV), current ±0.1 % + 4 digits (0.1 mA);
// UM24C and UM34C ±1 % + 2 digits (10 mV / 1 mA) on each. The current
// digits are seen as power at the bus voltage; the voltage digits at the
// meters' 5 A (UM25C) or 3 A / 4 A full scale.
func (m *UM) Accuracy() drivers.Accuracy {
	gain, curDigitUA, voltDigitsUW := 0.0015, 400.0, 2e-3*5e6
	switch m.model {
	case UM24C:
		gain, curDigitUA, voltDigitsUW = 0.02, 2000, 20e-3*3e6
	case UM34C:
		gain, curDigitUA, voltDigitsUW = 0.02, 2000, 20e-3*4e6
	}
	return drivers.Accuracy{
		GainErr: gain,
		OffsetUW: func(busUV int64) float64 {
			if busUV < 0 {
				busUV = -busUV
			}
			return float64(busUV)*curDigitUA/1e6 + voltDigitsUW
		},
	}
}

// Read queries the meter now. PowerUW is voltage × current from the same
// reply, finer than the meter's 1 mW power field.
func (m *UM) Read(ctx context.Context) (drivers.Sample, error) {
	if m.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", m.name)
	}
	r, err := m.query(ctx)
	if err != nil {
		return drivers.Sample{}, err
	}
	return drivers.Sample{
		At:        time.Now(),
		BusUV:     r.BusUV,
		CurrentUA: r.CurrentUA,
		PowerUW:   r.BusUV * r.CurrentUA / 1_000_000,
	}, nil
}

// Next waits out the poll interval since the previous reply and queries.
func (m *UM) Next(ctx context.Context) (drivers.Sample, error) {
	if !m.last.IsZero() {
		if wait := time.Until(m.last.Add(m.cfg.PollInterval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return drivers.Sample{}, ctx.Err()
			case <-t.C:
			}
		}
	}
	s, err := m.Read(ctx)
	if err != nil {
		return drivers.Sample{}, err
	}
	m.last = s.At
	return s, nil
}

// Close closes the port.
func (m *UM) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	return m.p.Close()
}

var _ drivers.Sensor = (*UM)(nil)
