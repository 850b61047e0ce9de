package serialmeter

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/drivers/internal/metersim"
	"meshd/drivers/internal/ptypair"

	"periph.io/x/conn/v3/physic"
)

func pty(t *testing.T) (*os.File, string) {
	t.Helper()
	p, err := ptypair.Open()
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Master, p.Slave
}

func TestParseUM(t *testing.T) {
	mV, uA, mW := physic.MilliVolt, physic.MicroAmpere, physic.MilliWatt
	tests := []struct {
		name    string
		frame   []byte
		model   Model
		bus     physic.ElectricPotential
		curr    physic.ElectricCurrent
		power   physic.Power // the meter's own 1 mW field
		wantErr bool
	}{
		{"UM25C mV and 0.1 mA", metersim.UMFrame(0x09C9, 5123, 12345, 6324, 30), UM25C, 5123 * mV, 1_234_500 * uA, 6324 * mW, false},
		{"UM24C 10 mV and mA", metersim.UMFrame(0x0963, 512, 1234, 6318, 30), UM24C, 5120 * mV, 1_234_000 * uA, 6318 * mW, false},
		{"UM34C 10 mV and mA", metersim.UMFrame(0x0D4C, 2003, 3001, 60110, 40), UM34C, 20030 * mV, 3_001_000 * uA, 60110 * mW, false},
		{"unknown model", metersim.UMFrame(0x1234, 1, 1, 1, 1), 0, 0, 0, 0, true},
		{"short", metersim.UMFrame(0x09C9, 1, 1, 1, 1)[:129], 0, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseUM(tt.frame)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if r.Model != tt.model || r.Bus != tt.bus || r.Current != tt.curr || r.ReportedPower != tt.power {
				t.Fatalf("got %+v", r)
			}
		})
	}
	if _, err := ParseUM(metersim.UMFrame(0x1234, 1, 1, 1, 1)); !errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("unknown model error %v does not wrap ErrNoDevice", err)
	}
}

// TestUMRatings: the full scale the sampler charges unobserved time at is
// the model's rating, and the budget is the vendor's.
func TestUMRatings(t *testing.T) {
	tests := []struct {
		model     Model
		fullScale physic.Power
		gain      float64
		offset5V  physic.Power // current digits at 5 V plus voltage digits at the rated current
	}{
		{UM25C, 120 * physic.Watt, 0.0015, 2*physic.MilliWatt + 10*physic.MilliWatt},
		{UM24C, 72 * physic.Watt, 0.02, 10*physic.MilliWatt + 60*physic.MilliWatt},
		{UM34C, 96 * physic.Watt, 0.02, 10*physic.MilliWatt + 80*physic.MilliWatt},
	}
	for _, tt := range tests {
		t.Run(tt.model.String(), func(t *testing.T) {
			if p := tt.model.Rating().Power(); p != tt.fullScale {
				t.Fatalf("rating %v, want %v", p, tt.fullScale)
			}
			a := umAccuracy(tt.model)
			if a.FullScale(5*physic.Volt) != tt.fullScale || a.FullScale(0) != tt.fullScale {
				t.Fatalf("full scale %v, want %v at any voltage", a.FullScale(5*physic.Volt), tt.fullScale)
			}
			if a.GainErr != tt.gain || a.Offset(5*physic.Volt) != tt.offset5V || a.Offset(-5*physic.Volt) != tt.offset5V {
				t.Fatalf("gain %v offset %v, want %v %v", a.GainErr, a.Offset(5*physic.Volt), tt.gain, tt.offset5V)
			}
		})
	}
}

func TestParseLine(t *testing.T) {
	mV, mA, uW := physic.MilliVolt, physic.MilliAmpere, physic.MicroWatt
	tests := []struct {
		line    string
		want    LineReading
		wantErr bool
	}{
		{"1735689600123456789,4520000", LineReading{UnixNS: 1735689600123456789, Power: 4_520_000 * uW}, false},
		{"1735689600123456789,-12", LineReading{UnixNS: 1735689600123456789, Power: -12 * uW}, false},
		{"5012,903\r", LineReading{Bus: 5012 * mV, Current: 903 * mA, Power: 5012 * 903 * uW}, false},
		{"12000,-250", LineReading{Bus: 12000 * mV, Current: -250 * mA, Power: -3 * physic.Watt}, false},
		{"5012;903", LineReading{}, true},
		{"abc,12", LineReading{}, true},
		{"12,", LineReading{}, true},
		{"-5,3", LineReading{}, true},
		{"1,2,3", LineReading{}, true},
		{"1735689600123456789,99999999999999999", LineReading{}, true},
	}
	for _, tt := range tests {
		got, err := ParseLine([]byte(tt.line))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v, error %v", tt.line, got, err, tt.want, tt.wantErr)
		}
	}
}

// umWire is the least time a UM transaction takes: the request byte and
// the 130-byte reply at 9600 baud, ten bit times a byte.
const umWire = 131 * 10 * time.Second / 9600

// TestUM25COverPTY drives the driver against a simulated meter on a
// pseudo-terminal, on a simulated clock: each Next is paced by exactly
// PollInterval of virtual time, so the stamps are exact.
func TestUM25COverPTY(t *testing.T) {
	master, slave := pty(t)
	sim := &metersim.UM{Reply: func(n int) []byte {
		switch n {
		case 3:
			return []byte("garbage that is not a frame") // lost sync: driver must recover
		default:
			return metersim.UMFrame(0x09C9, uint16(5000+n), uint16(10000*n), 0, 25)
		}
	}}
	go sim.Serve(master)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := drivertest.NewClock(drivertest.Epoch, true)
	const poll = 200 * time.Millisecond
	m, err := OpenUM(ctx, UMConfig{Path: slave, PollInterval: poll, Timeout: 400 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Model() != UM25C || m.Name() != "um25c@"+slave {
		t.Fatalf("model %v name %s", m.Model(), m.Name())
	}
	info := m.Info()
	if info.Kind != drivers.KindPoint || info.Period != poll || info.Accuracy.FullScale(5*physic.Volt) != 120*physic.Watt {
		t.Fatalf("info %+v", info)
	}
	// Request 1 was the identification at open; reply 3 is lost and
	// re-requested within the same Next.
	for k, n := range []int{2, 4, 5} {
		s, err := m.Next(ctx)
		if err != nil {
			t.Fatalf("reply %d: %v", n, err)
		}
		at := drivertest.Epoch.Add(time.Duration(k) * poll)
		want := drivers.Sample{
			Start: at, End: at, Uncertainty: umWire,
			Bus:     physic.ElectricPotential(5000+n) * physic.MilliVolt,
			Current: physic.ElectricCurrent(n) * physic.Ampere,
			Power:   physic.Power(5000+n) * physic.Power(n) * physic.MilliWatt,
		}
		if s != want {
			t.Fatalf("reply %d:\ngot  %+v\nwant %+v", n, s, want)
		}
	}
	if sim.Requests() != 5 {
		t.Fatalf("%d requests, want 5", sim.Requests())
	}
}

// TestUMOverRating: a reading beyond the meter's rating is not a
// measurement.
func TestUMOverRating(t *testing.T) {
	master, slave := pty(t)
	// UM24C, rated 3 A: reply 1 (at open) reads 3 A, reply 2 reads 3.2 A.
	go (&metersim.UM{Reply: func(n int) []byte {
		return metersim.UMFrame(0x0963, 500, uint16(3000+200*(n-1)), 0, 25)
	}}).Serve(master)
	ctx := context.Background()
	m, err := OpenUM(ctx, UMConfig{Path: slave, PollInterval: time.Millisecond, Timeout: time.Second,
		Clock: drivertest.NewClock(drivertest.Epoch, true)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.Next(ctx)
	if err != nil || !s.Overflow || s.Current != 3200*physic.MilliAmpere {
		t.Fatalf("3.2 A on a 3 A meter: %+v, %v", s, err)
	}
}

// TestUMSilentMeter runs on the system clock: the meter's silence is real
// time on a real pseudo-terminal.
func TestUMSilentMeter(t *testing.T) {
	master, slave := pty(t)
	answer := true
	sim := &metersim.UM{Reply: func(int) []byte {
		if answer {
			answer = false
			return metersim.UMFrame(0x0963, 500, 100, 500, 25)
		}
		return nil
	}}
	go sim.Serve(master)
	ctx := context.Background()
	m, err := OpenUM(ctx, UMConfig{Path: slave, PollInterval: time.Millisecond, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := m.Next(ctx)
	if err == nil {
		t.Fatalf("silent meter gave %+v", s)
	}
	if !strings.Contains(err.Error(), "silent") || !errors.Is(err, drivers.ErrStalled) {
		t.Fatalf("error %q does not say the meter is silent (wrapping ErrStalled)", err)
	}
}

func TestUMNoMeter(t *testing.T) {
	_, slave := pty(t)
	if _, err := OpenUM(context.Background(), UMConfig{Path: slave, Timeout: 200 * time.Millisecond}); err == nil {
		t.Fatal("opened a meter that never answers")
	}
	if _, err := OpenUM(context.Background(), UMConfig{Path: "/nonexistent/tty"}); err == nil {
		t.Fatal("opened a missing device")
	}
}

// lineWire is the time n bytes take at 115200 baud.
func lineWire(n int) time.Duration { return time.Duration(n) * 10 * time.Second / 115200 }

// TestLineOverPTY streams good, garbled, duplicate and over-long lines and
// checks what comes out, in order, as point readings.
func TestLineOverPTY(t *testing.T) {
	master, slave := pty(t)
	l, err := OpenLine(LineConfig{Path: slave, Timeout: 300 * time.Millisecond, MaxPower: 50 * physic.Watt})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if info := l.Info(); info.Kind != drivers.KindPoint || info.Accuracy.FullScale(0) != 50*physic.Watt || info.Accuracy.GainErr != 0.05 {
		t.Fatalf("info %+v", info)
	}
	stream := "\x00\xff\xfegarbage\n" + // noise before sync
		"5012,903\r\n" +
		"1735689600000000000,4520000\n" +
		"1735689600000000000,4520000\n" + // repeated timestamp: dropped
		strings.Repeat("x", 300) + "\n" + // over-long line
		"5,no\n" +
		"1735689600100000000,-7\n" +
		"12000,-250\n" +
		"60000,1000\n" // 60 W on a 50 W meter
	if _, err := master.Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mV, mA, uW := physic.MilliVolt, physic.MilliAmpere, physic.MicroWatt
	want := []drivers.Sample{
		{Bus: 5012 * mV, Current: 903 * mA, Power: 4_525_836 * uW},
		{Power: 4_520_000 * uW},
		{Power: -7 * uW},
		{Bus: 12000 * mV, Current: -250 * mA, Power: -3 * physic.Watt},
		{Bus: 60000 * mV, Current: 1000 * mA, Power: 60 * physic.Watt, Overflow: true},
	}
	var prev time.Time
	for i, w := range want {
		s, err := l.Next(ctx)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if s.Bus != w.Bus || s.Current != w.Current || s.Power != w.Power || s.Overflow != w.Overflow {
			t.Fatalf("line %d: got %+v, want %+v", i, s, w)
		}
		if s.Start != s.End || s.Contiguous || s.Start.Before(prev) {
			t.Fatalf("line %d: %+v is not a point reading after %v", i, s, prev)
		}
		prev = s.End
	}
	if l.Garbled() != 3 || l.Duplicates() != 1 {
		t.Fatalf("garbled %d duplicates %d, want 3 and 1", l.Garbled(), l.Duplicates())
	}
	// Nothing more arrives: a clear timeout, not a zero sample.
	s, err := l.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "no valid line") || !errors.Is(err, drivers.ErrStalled) {
		t.Fatalf("silent meter: %+v, %v", s, err)
	}
	// The meter comes back.
	master.Write([]byte("3300,10\n"))
	if s, err := l.Next(ctx); err != nil || s.Power != 33*physic.MilliWatt {
		t.Fatalf("after silence: %+v, %v", s, err)
	}
}

// TestLineStamps sends one line at a time on a simulated clock: each line
// is all the port holds when it is read, so it is stamped at the read and
// its uncertainty is its own wire time.
func TestLineStamps(t *testing.T) {
	master, slave := pty(t)
	clk := drivertest.NewClock(drivertest.Epoch, true)
	l, err := OpenLine(LineConfig{Path: slave, MaxPower: 50 * physic.Watt, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i, line := range []string{"5012,903\n", "1735689600000000000,4520000\r\n"} {
		if _, err := master.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		s, err := l.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Start != drivertest.Epoch || s.End != drivertest.Epoch || s.Uncertainty != lineWire(len(line)) {
			t.Fatalf("line %d: stamped [%v, %v] ± %v, want the read instant ± %v",
				i, s.Start.Sub(drivertest.Epoch), s.End.Sub(drivertest.Epoch), s.Uncertainty, lineWire(len(line)))
		}
	}
}

func TestLineNeedsFullScale(t *testing.T) {
	_, slave := pty(t)
	if l, err := OpenLine(LineConfig{Path: slave}); err == nil {
		l.Close()
		t.Fatal("opened a line meter without its full scale")
	}
	if _, err := OpenLine(LineConfig{Path: slave, MaxPower: physic.Watt, Offset: -1}); err == nil {
		t.Fatal("negative offset accepted")
	}
}
