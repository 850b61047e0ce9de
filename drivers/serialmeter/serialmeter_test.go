package serialmeter

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/internal/metersim"
	"meshd/drivers/internal/ptypair"
)

func pty(t *testing.T) (*os.File, string) {
	t.Helper()
	m, s, err := ptypair.Open()
	if err != nil {
		t.Fatalf("pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m, s
}

func TestParseUM(t *testing.T) {
	tests := []struct {
		name          string
		frame         []byte
		model         Model
		busUV, currUA int64
		powUW         int64
		wantErr       bool
	}{
		{"UM25C mV and 0.1 mA", metersim.UMFrame(0x09C9, 5123, 12345, 6324, 30), UM25C, 5_123_000, 1_234_500, 6_324_000, false},
		{"UM24C 10 mV and mA", metersim.UMFrame(0x0963, 512, 1234, 6318, 30), UM24C, 5_120_000, 1_234_000, 6_318_000, false},
		{"UM34C 10 mV and mA", metersim.UMFrame(0x0D4C, 2003, 3001, 60110, 40), UM34C, 20_030_000, 3_001_000, 60_110_000, false},
		{"unknown model", metersim.UMFrame(0x1234, 1, 1, 1, 1), 0, 0, 0, 0, true},
		{"short", metersim.UMFrame(0x09C9, 1, 1, 1, 1)[:129], 0, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseUM(tt.frame)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if r.Model != tt.model || r.BusUV != tt.busUV || r.CurrentUA != tt.currUA || r.ReportedPowerUW != tt.powUW {
				t.Fatalf("got %+v", r)
			}
		})
	}
	if _, err := ParseUM(metersim.UMFrame(0x1234, 1, 1, 1, 1)); !errors.Is(err, drivers.ErrNoDevice) {
		t.Fatalf("unknown model error %v does not wrap ErrNoDevice", err)
	}
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		line    string
		want    LineReading
		wantErr bool
	}{
		{"1735689600123456789,4520000", LineReading{UnixNS: 1735689600123456789, PowerUW: 4_520_000}, false},
		{"1735689600123456789,-12", LineReading{UnixNS: 1735689600123456789, PowerUW: -12}, false},
		{"5012,903\r", LineReading{BusUV: 5_012_000, CurrentUA: 903_000, PowerUW: 5012 * 903}, false},
		{"12000,-250", LineReading{BusUV: 12_000_000, CurrentUA: -250_000, PowerUW: -3_000_000}, false},
		{"5012;903", LineReading{}, true},
		{"abc,12", LineReading{}, true},
		{"12,", LineReading{}, true},
		{"-5,3", LineReading{}, true},
		{"1,2,3", LineReading{}, true},
	}
	for _, tt := range tests {
		got, err := ParseLine([]byte(tt.line))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v, error %v", tt.line, got, err, tt.want, tt.wantErr)
		}
	}
}

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
	m, err := OpenUM(ctx, UMConfig{Path: slave, PollInterval: time.Millisecond, Timeout: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Model() != UM25C || m.Name() != "um25c@"+slave {
		t.Fatalf("model %v name %s", m.Model(), m.Name())
	}
	// Request 1 was the identification at open.
	for _, n := range []int{2, 4, 5} {
		s, err := m.Next(ctx)
		if err != nil {
			t.Fatalf("reply %d: %v", n, err)
		}
		wantV, wantI := int64(5000+n)*1000, int64(10000*n)*100
		if s.BusUV != wantV || s.CurrentUA != wantI || s.PowerUW != wantV*wantI/1_000_000 {
			t.Fatalf("reply %d: got %+v, want %d µV %d µA", n, s, wantV, wantI)
		}
	}
	if a := m.Accuracy(); a.GainErr != 0.0015 || a.OffsetUW(5_000_000) != 2000+10000 {
		t.Fatalf("accuracy %v %v", a.GainErr, a.OffsetUW(5_000_000))
	}
}

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
	if !strings.Contains(err.Error(), "silent") {
		t.Fatalf("error %q does not say the meter is silent", err)
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

func TestLineOverPTY(t *testing.T) {
	master, slave := pty(t)
	l, err := OpenLine(LineConfig{Path: slave, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stream := "\x00\xff\xfegarbage\n" + // noise before sync
		"5012,903\r\n" +
		"1735689600000000000,4520000\n" +
		"1735689600000000000,4520000\n" + // repeated timestamp: dropped
		strings.Repeat("x", 300) + "\n" + // over-long line
		"5,no\n" +
		"1735689600100000000,-7\n" +
		"12000,-250\n"
	if _, err := master.Write([]byte(stream)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := []drivers.Sample{
		{BusUV: 5_012_000, CurrentUA: 903_000, PowerUW: 4_525_836},
		{PowerUW: 4_520_000},
		{PowerUW: -7},
		{BusUV: 12_000_000, CurrentUA: -250_000, PowerUW: -3_000_000},
	}
	for i, w := range want {
		s, err := l.Next(ctx)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if s.BusUV != w.BusUV || s.CurrentUA != w.CurrentUA || s.PowerUW != w.PowerUW || s.At.IsZero() {
			t.Fatalf("line %d: got %+v, want %+v", i, s, w)
		}
	}
	if l.Garbled() != 3 || l.Duplicates() != 1 {
		t.Fatalf("garbled %d duplicates %d, want 3 and 1", l.Garbled(), l.Duplicates())
	}
	// Nothing more arrives: a clear timeout, not a zero sample.
	s, err := l.Next(ctx)
	if err == nil || !strings.Contains(err.Error(), "no valid line") {
		t.Fatalf("silent meter: %+v, %v", s, err)
	}
	// The meter comes back.
	master.Write([]byte("3300,10\n"))
	if s, err := l.Next(ctx); err != nil || s.PowerUW != 33_000 {
		t.Fatalf("after silence: %+v, %v", s, err)
	}
}
