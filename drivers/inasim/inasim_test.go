package inasim

import (
	"math"
	"testing"
	"time"

	"meshd/drivers/drivertest"

	"periph.io/x/conn/v3/physic"
)

const us = time.Microsecond

func read(t *testing.T, b *Bus, addr uint16, reg byte) uint16 {
	t.Helper()
	var r [2]byte
	if err := b.Tx(addr, []byte{reg}, r[:]); err != nil {
		t.Fatal(err)
	}
	return uint16(r[0])<<8 | uint16(r[1])
}

func write(t *testing.T, b *Bus, addr uint16, reg byte, v uint16) {
	t.Helper()
	if err := b.Tx(addr, []byte{reg, byte(v >> 8), byte(v)}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestReadyFlagSemantics holds the register map in manual mode: what sets
// and clears each chip's ready flag, the reset bit, the calibration bits.
func TestReadyFlagSemantics(t *testing.T) {
	b := NewBus("sim", nil)
	c := b.Add(INA226, 0x40)
	c.SetManual(true)
	if read(t, b, 0x40, RegMask)&8 != 0 {
		t.Fatal("CVRF set before any conversion")
	}
	c.Convert()
	if read(t, b, 0x40, RegMask)&8 == 0 {
		t.Fatal("CVRF not set after a conversion")
	}
	if read(t, b, 0x40, RegMask)&8 != 0 {
		t.Fatal("reading Mask/Enable did not clear CVRF")
	}
	c.Convert()
	write(t, b, 0x40, RegConfig, 0x4127)
	if read(t, b, 0x40, RegMask)&8 != 0 {
		t.Fatal("writing Config did not clear CVRF")
	}
	write(t, b, 0x40, RegCal, 0xFFFF)
	if got := read(t, b, 0x40, RegCal); got != 0x7FFF {
		t.Fatalf("INA226 CAL bit 15 kept: 0x%04x", got)
	}
	write(t, b, 0x40, RegConfig, 0x8000)
	if read(t, b, 0x40, RegConfig) != 0x4127 || read(t, b, 0x40, RegCal) != 0 {
		t.Fatal("reset bit did not restore power-on values")
	}
	if read(t, b, 0x40, RegMfrID) != 0x5449 || read(t, b, 0x40, RegDieID) != 0x2260 {
		t.Fatal("ID registers")
	}

	i := b.Add(INA219, 0x41)
	i.SetManual(true)
	i.Convert()
	if read(t, b, 0x41, RegBus)&2 == 0 {
		t.Fatal("CNVR not set")
	}
	if read(t, b, 0x41, RegBus)&2 == 0 {
		t.Fatal("bus read cleared CNVR though the datasheet says Power does")
	}
	read(t, b, 0x41, RegPower)
	if read(t, b, 0x41, RegBus)&2 != 0 {
		t.Fatal("Power read did not clear CNVR")
	}
	i.SetCNVRClearsOnBusRead(true)
	i.Convert()
	read(t, b, 0x41, RegBus)
	if read(t, b, 0x41, RegBus)&2 != 0 {
		t.Fatal("bus read did not clear CNVR with the switch on")
	}
	write(t, b, 0x41, RegCal, 0x1235)
	if got := read(t, b, 0x41, RegCal); got != 0x1234 {
		t.Fatalf("INA219 CAL bit 0 kept: 0x%04x", got)
	}
	if err := b.Tx(0x42, []byte{0}, make([]byte, 2)); err == nil {
		t.Fatal("empty address acknowledged")
	}
}

// TestTransactionTime: each transaction spends its SCL clocks on the bus's
// clock, at the bus's speed.
func TestTransactionTime(t *testing.T) {
	for _, tt := range []struct {
		speed physic.Frequency
		w, r  int
		want  time.Duration
	}{
		{400 * physic.KiloHertz, 1, 2, 120 * us}, // register read: 48 clocks
		{100 * physic.KiloHertz, 1, 2, 480 * us},
		{400 * physic.KiloHertz, 0, 2, 72500 * time.Nanosecond}, // read at the held pointer: 29
		{400 * physic.KiloHertz, 3, 0, 95 * us},                 // register write: 38
	} {
		clock := drivertest.NewClock(drivertest.Epoch, true)
		b := NewBus("sim", clock, WithSpeed(tt.speed))
		b.Add(INA226, 0x40)
		w := []byte{RegCal, 0, 1}[:tt.w]
		if err := b.Tx(0x40, w, make([]byte, tt.r)); err != nil {
			t.Fatal(err)
		}
		if got := clock.Now().Sub(drivertest.Epoch); got != tt.want || b.TxTime(tt.w, tt.r) != tt.want {
			t.Errorf("%v w%d r%d: took %v, want %v", tt.speed, tt.w, tt.r, got, tt.want)
		}
	}
}

// TestConversionTimeline: in shunt-and-bus mode the shunt register
// averages the current over the shunt slots only, the bus register the
// bus voltage over the bus slots; cycles follow each other by AVG × (VSHCT
// + VBUSCT) scaled by the clock factor; a config write restarts the cycle.
func TestConversionTimeline(t *testing.T) {
	clock := drivertest.NewClock(drivertest.Epoch, true)
	b := NewBus("sim", clock)
	c := b.Add(INA226, 0x40)
	// AVG 4, VBUSCT 140 µs, VSHCT 1.1 ms: cycle 4 × 1.24 ms. The load
	// draws 8 A only during the first bus slot (1.1 ms–1.24 ms after the
	// write) and 4 A otherwise; the bus is 10 V then 12 V in that slot.
	write(t, b, 0x40, RegConfig, 0x4000|1<<9|0<<6|4<<3|7)
	start := clock.Now().Add(-5 * time.Microsecond / 2) // the write acts at its last byte
	c.SetLoad(NewTrace(start,
		Step{For: 1100 * us, Current: 4 * physic.Ampere, Bus: 10 * physic.Volt},
		Step{For: 140 * us, Current: 8 * physic.Ampere, Bus: 12 * physic.Volt},
		Step{Current: 4 * physic.Ampere, Bus: 10 * physic.Volt},
	))
	clock.Set(start.Add(3 * 4960 * us))
	c.Sync()
	log := c.Conversions()
	if len(log) != 3 {
		t.Fatalf("%d conversions in three cycles", len(log))
	}
	for i, cv := range log {
		if cv.Start != start.Add(time.Duration(i)*4960*us) || cv.End.Sub(cv.Start) != 4960*us || cv.ShuntTime != 4400*us || cv.BusTime != 560*us {
			t.Fatalf("conversion %d: [%v, %v] shunt %v bus %v", i, cv.Start.Sub(start), cv.End.Sub(start), cv.ShuntTime, cv.BusTime)
		}
	}
	// 4 A × 2 mΩ = 8 mV = 3200 counts: the 8 A pulse fell in a bus slot.
	if log[0].Shunt != 3200 {
		t.Fatalf("shunt register %d: the current during the bus slot was seen", log[0].Shunt)
	}
	// Bus: (12 V + 3 × 10 V) / 4 = 10.5 V = 8400 counts.
	if log[0].Bus != 8400 || log[1].Bus != 8000 {
		t.Fatalf("bus registers %d, %d, want 8400, 8000", log[0].Bus, log[1].Bus)
	}
	// A 30 % slow clock stretches the cycle.
	c.SetClockFactor(1.3)
	write(t, b, 0x40, RegConfig, 0x4000|4<<3|7)
	at := clock.Now()
	clock.Set(at.Add(2 * 1612 * us))
	c.Sync()
	log = c.Conversions()
	if got := log[len(log)-1].End.Sub(log[len(log)-1].Start); got != 1612*us || len(log) != 5 {
		t.Fatalf("slow clock: %d conversions, last %v long, want 5 and 1.612 ms", len(log), got)
	}
}

// TestModes: shunt-only keeps the bus register, a triggered conversion
// happens once, power-down converts nothing, a stall stops and Resume
// restarts the clock, and PowerCycle brings back the power-on state.
func TestModes(t *testing.T) {
	clock := drivertest.NewClock(drivertest.Epoch, true)
	b := NewBus("sim", clock)
	c := b.Add(INA226, 0x40)
	c.SetInputs(10*physic.MilliVolt, 12*physic.Volt)
	clock.Advance(2300 * us) // one power-on cycle of 2.2 ms
	if read(t, b, 0x40, RegBus) != 9600 {
		t.Fatal("the power-on configuration does not convert")
	}
	c.SetInputs(10*physic.MilliVolt, 5*physic.Volt)
	write(t, b, 0x40, RegConfig, 0x4000|4<<3|5) // shunt only, 1.1 ms
	clock.Advance(5 * time.Millisecond)
	if read(t, b, 0x40, RegBus) != 9600 || read(t, b, 0x40, RegShunt) != 4000 {
		t.Fatal("shunt-only mode converted the bus or not the shunt")
	}
	n := len(c.Conversions())
	write(t, b, 0x40, RegConfig, 0x4000|2) // bus, triggered: 1.1 ms
	clock.Advance(10 * time.Millisecond)
	if read(t, b, 0x40, RegBus) != 4000 || len(c.Conversions()) != n+1 {
		t.Fatalf("triggered bus conversion: bus %d, %d conversions", c.Reg(RegBus), len(c.Conversions())-n)
	}
	write(t, b, 0x40, RegConfig, 0x4000|4<<3|7)
	write(t, b, 0x40, RegConfig, 0x4000) // power-down
	n = len(c.Conversions())
	clock.Advance(10 * time.Millisecond)
	c.Sync()
	if len(c.Conversions()) != n || c.Convert() {
		t.Fatal("a powered-down chip converted")
	}
	write(t, b, 0x40, RegConfig, 0x4000|4<<3|7)
	c.Stall()
	clock.Advance(10 * time.Millisecond)
	c.Sync()
	if len(c.Conversions()) != n {
		t.Fatal("a stalled chip converted")
	}
	c.Resume()
	clock.Advance(1300 * us)
	c.Sync()
	if len(c.Conversions()) != n+1 {
		t.Fatal("Resume did not restart conversions")
	}
	c.FailNext(2)
	for range 2 {
		if err := b.Tx(0x40, []byte{RegConfig}, make([]byte, 2)); err == nil {
			t.Fatal("FailNext did not NACK")
		}
	}
	c.PowerCycle()
	var r [2]byte
	if err := b.Tx(0x40, nil, r[:]); err != nil || uint16(r[0])<<8|uint16(r[1]) != 0x4127 {
		t.Fatalf("after a power cycle the pointer reads 0x%02x%02x, %v; want Config at power-on", r[0], r[1], err)
	}
}

// TestTap: the conversion log counts result reads and the ready flag seen
// per conversion.
func TestTap(t *testing.T) {
	b := NewBus("sim", nil)
	c := b.Add(INA226, 0x40)
	c.SetManual(true)
	c.Convert()
	read(t, b, 0x40, RegMask)
	read(t, b, 0x40, RegCurrent)
	read(t, b, 0x40, RegCurrent)
	c.Convert()
	read(t, b, 0x40, RegBus)
	log := c.Conversions()
	if !log[0].FlagSeen || log[0].Reads[RegCurrent] != 2 || log[0].Reads[RegBus] != 0 {
		t.Fatalf("first conversion tap %+v", log[0])
	}
	if log[1].FlagSeen || log[1].Reads[RegBus] != 1 {
		t.Fatalf("second conversion tap %+v", log[1])
	}
	if conv, flagged, over := c.Stats(); conv != 2 || flagged != 1 || over != 0 {
		t.Fatalf("Stats %d %d %d", conv, flagged, over)
	}
}

// TestTraceIntegrals: means and energy are the closed forms over the
// steps, before, within and after the trace.
func TestTraceIntegrals(t *testing.T) {
	t0 := drivertest.Epoch
	tr := NewTrace(t0,
		Step{For: time.Second, Current: 2 * physic.Ampere, Bus: 10 * physic.Volt},
		Step{For: 2 * time.Second, Current: -1 * physic.Ampere, Bus: 12 * physic.Volt},
		Step{Current: 3 * physic.Ampere, Bus: 5 * physic.Volt},
	)
	s := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Second))) }
	for _, tt := range []struct {
		a, b   float64
		energy float64 // J
		cur    physic.ElectricCurrent
		bus    physic.ElectricPotential
	}{
		{0, 1, 20, 2 * physic.Ampere, 10 * physic.Volt},
		{0.5, 1.5, 10 - 6, 500 * physic.MilliAmpere, 11 * physic.Volt},
		{0, 4, 20 - 24 + 15, 750 * physic.MilliAmpere, 9750 * physic.MilliVolt},
		{-1, 0, 20, 2 * physic.Ampere, 10 * physic.Volt},
		{10, 12, 30, 3 * physic.Ampere, 5 * physic.Volt},
	} {
		if got := tr.EnergyJoules(s(tt.a), s(tt.b)); math.Abs(got-tt.energy) > 1e-9 {
			t.Errorf("[%v, %v]: energy %v J, want %v", tt.a, tt.b, got, tt.energy)
		}
		if got := tr.Energy(s(tt.a), s(tt.b)); got != physic.Energy(tt.energy*1e9) {
			t.Errorf("[%v, %v]: Energy %v", tt.a, tt.b, got)
		}
		if c, v := tr.MeanCurrent(s(tt.a), s(tt.b)), tr.MeanBus(s(tt.a), s(tt.b)); c != tt.cur || v != tt.bus {
			t.Errorf("[%v, %v]: means %v, %v; want %v, %v", tt.a, tt.b, c, v, tt.cur, tt.bus)
		}
	}
	if p := tr.MeanPower(s(0), s(1)); p != 20*physic.Watt {
		t.Errorf("MeanPower %v", p)
	}
}
