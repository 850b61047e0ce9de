package serialmeter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
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

// UMReading is what one UM reply says.
type UMReading struct {
	Model   Model
	Bus     physic.ElectricPotential
	Current physic.ElectricCurrent
	// ReportedPower is the meter's own power field (1 mW resolution).
	ReportedPower physic.Power
	TempC         int
}

// Power is Bus × Current, finer than the meter's 1 mW power field; both
// come from the same reply.
func (r UMReading) Power() physic.Power {
	return physic.Power(int64(r.Bus/physic.MicroVolt) * int64(r.Current/physic.MicroAmpere) / 1000)
}

// ParseUM decodes a 130-byte reply. Voltage and current scales differ by
// model: the UM25C reports mV and 0.1 mA, the UM24C and UM34C 10 mV and
// 1 mA; power is mW on all three.
func ParseUM(b []byte) (UMReading, error) {
	if len(b) != FrameLen {
		return UMReading{}, fmt.Errorf("serialmeter: UM reply of %d bytes, want %d", len(b), FrameLen)
	}
	r := UMReading{Model: Model(binary.BigEndian.Uint16(b[0:]))}
	v := physic.ElectricPotential(binary.BigEndian.Uint16(b[2:]))
	i := physic.ElectricCurrent(binary.BigEndian.Uint16(b[4:]))
	switch r.Model {
	case UM25C:
		r.Bus, r.Current = v*physic.MilliVolt, i*100*physic.MicroAmpere
	case UM24C, UM34C:
		r.Bus, r.Current = v*10*physic.MilliVolt, i*physic.MilliAmpere
	default:
		return UMReading{}, fmt.Errorf("serialmeter: unknown UM model id 0x%04x: %w", uint16(r.Model), drivers.ErrNoDevice)
	}
	r.ReportedPower = physic.Power(binary.BigEndian.Uint32(b[6:])) * physic.MilliWatt
	r.TempC = int(binary.BigEndian.Uint16(b[10:]))
	return r, nil
}

// Rating is a meter's measuring range from its vendor specification.
type Rating struct {
	MaxVoltage physic.ElectricPotential
	MaxCurrent physic.ElectricCurrent
}

// Power is the largest power the meter measures.
func (r Rating) Power() physic.Power {
	return physic.Power(int64(r.MaxVoltage/physic.MilliVolt) * int64(r.MaxCurrent/physic.MilliAmpere) * int64(physic.MicroWatt))
}

// Rating is the model's range: UM25C 4–24 V, 0–5 A; UM24C 4.5–24 V,
// 0–3 A; UM34C 4–24 V, 0–4 A.
func (m Model) Rating() Rating {
	switch m {
	case UM25C:
		return Rating{24 * physic.Volt, 5 * physic.Ampere}
	case UM24C:
		return Rating{24 * physic.Volt, 3 * physic.Ampere}
	case UM34C:
		return Rating{24 * physic.Volt, 4 * physic.Ampere}
	}
	return Rating{}
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
	// Clock stamps readings and paces requests, and with port time
	// measures Timeout; nil means drivers.System.
	Clock drivers.Clock
	// Name overrides the sensor name; empty means "um25c@<path>" etc.
	Name string
}

// UM is an open RDTech meter.
type UM struct {
	p      port
	cfg    UMConfig
	clock  drivers.Clock
	pacer  *drivers.Pacer
	model  Model
	name   string
	info   drivers.Info
	closed bool
}

// OpenUM opens the port and asks the meter once, to learn its model.
func OpenUM(ctx context.Context, cfg UMConfig) (*UM, error) {
	if cfg.Baud == 0 {
		cfg.Baud = 9600
	}
	if cfg.Baud < 0 {
		return nil, fmt.Errorf("serialmeter: %s: negative baud rate %d", cfg.Path, cfg.Baud)
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
	clock := drivers.ClockOr(cfg.Clock)
	m := &UM{p: p, cfg: cfg, clock: clock, name: cfg.Name, pacer: drivers.NewPacer(clock, cfg.PollInterval)}
	r, _, err := m.query(ctx)
	if err != nil {
		p.Close()
		return nil, err
	}
	m.model = r.Model
	if m.name == "" {
		m.name = fmt.Sprintf("%s@%s", map[Model]string{UM24C: "um24c", UM25C: "um25c", UM34C: "um34c"}[r.Model], cfg.Path)
	}
	m.info = drivers.Info{
		Kind:      drivers.KindPoint,
		Period:    cfg.PollInterval,
		MaxPeriod: cfg.PollInterval,
		Accuracy:  umAccuracy(m.model),
	}
	return m, nil
}

// query sends one request and reads one valid reply, resynchronising once.
// took is the time from the request to the reply's last byte.
func (m *UM) query(ctx context.Context) (r UMReading, took time.Duration, err error) {
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			drain(ctx, newBudget(m.clock, m.cfg.Timeout, m.cfg.Baud), m.p)
		}
		if err := m.p.Flush(); err != nil {
			return UMReading{}, 0, fmt.Errorf("serialmeter: %s: flush: %w", m.cfg.Path, err)
		}
		start := m.clock.Now()
		if _, err := m.p.Write([]byte{0xF0}); err != nil {
			return UMReading{}, 0, fmt.Errorf("serialmeter: %s: request: %w", m.cfg.Path, err)
		}
		buf := make([]byte, FrameLen)
		n, err := readFull(ctx, newBudget(m.clock, m.cfg.Timeout, m.cfg.Baud), m.p, buf)
		if ctx.Err() != nil {
			return UMReading{}, 0, ctx.Err()
		}
		if errors.Is(err, errTimeout) && n == 0 {
			return UMReading{}, 0, fmt.Errorf("serialmeter: %s: meter silent for %v after a request: %w", m.cfg.Path, m.cfg.Timeout, drivers.ErrStalled)
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
		return r, m.clock.Now().Sub(start), nil
	}
	return UMReading{}, 0, lastErr
}

// Model returns the meter's model.
func (m *UM) Model() Model { return m.model }

// Name implements drivers.Sensor.
func (m *UM) Name() string { return m.name }

// Info implements drivers.Sensor: a point sampler polled every
// PollInterval.
func (m *UM) Info() drivers.Info { return m.info }

// umAccuracy uses the vendors' specifications (not datasheet-grade): UM25C
// voltage ±0.05 % + 2 digits (1 mV), current ±0.1 % + 4 digits (0.1 mA);
// UM24C and UM34C ±1 % + 2 digits (10 mV / 1 mA) on each. The current
// digits are seen as power at the bus voltage, the voltage digits at the
// meter's rated current. Full scale is the rating: the meter measures
// nothing beyond it.
func umAccuracy(model Model) drivers.Accuracy {
	gain := 0.0015
	curDigits, voltDigits := 400*physic.MicroAmpere, 2*physic.MilliVolt
	switch model {
	case UM24C, UM34C:
		gain, curDigits, voltDigits = 0.02, 2*physic.MilliAmpere, 20*physic.MilliVolt
	}
	rating := model.Rating()
	voltTerm := physic.Power(int64(voltDigits/physic.MicroVolt) * int64(rating.MaxCurrent/physic.MicroAmpere) / 1000)
	full := rating.Power()
	return drivers.Accuracy{
		GainErr: gain,
		Offset: func(bus physic.ElectricPotential) physic.Power {
			if bus < 0 {
				bus = -bus
			}
			return physic.Power(int64(bus/physic.MicroVolt)*int64(curDigits/physic.MicroAmpere)/1000) + voltTerm
		},
		FullScale: func(physic.ElectricPotential) physic.Power { return full },
		MaxPower:  full,
	}
}

// Read queries the meter now, unpaced. Power is voltage × current from the
// same reply, finer than the meter's 1 mW power field. The reading is
// stamped when the reply has arrived; the meter took it somewhere within
// the transaction, which Uncertainty covers (at least the time the
// request and the reply take on the wire).
func (m *UM) Read(ctx context.Context) (drivers.Sample, error) {
	if m.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", m.name)
	}
	r, took, err := m.query(ctx)
	if err != nil {
		return drivers.Sample{}, err
	}
	at := m.clock.Now()
	smp := drivers.Sample{
		Start: at, End: at,
		Uncertainty: max(took, wireTime(1+FrameLen, m.cfg.Baud)),
		Bus:         r.Bus,
		Current:     r.Current,
		Power:       r.Power(),
	}
	rating := m.model.Rating()
	smp.Overflow = smp.Bus > rating.MaxVoltage || smp.Current > rating.MaxCurrent || smp.Current < -rating.MaxCurrent
	return smp, nil
}

// Next waits out the poll interval since the previous request and queries.
func (m *UM) Next(ctx context.Context) (drivers.Sample, error) {
	if m.closed {
		return drivers.Sample{}, fmt.Errorf("%s: closed", m.name)
	}
	if _, err := m.pacer.Wait(ctx); err != nil {
		return drivers.Sample{}, err
	}
	return m.Read(ctx)
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
