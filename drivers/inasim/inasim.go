// Package inasim models TI INA226 and INA219 power monitors at the register
// level behind a periph.io i2c.Bus, on a simulated clock, so that the
// drivers can be tested against the chip's documented behaviour (SBOS547,
// SBOS448) and its timing: power-on values, the reset bit, the calibration
// multiply and its overflow, the conversion-ready flags and what clears
// them, and when each conversion happens.
//
// Time is a drivertest.Clock. Every bus transaction spends its I²C time on
// it (48 SCL clocks for a register read, 38 for a register write), and a
// chip converts lazily: whenever a transaction (or Sync) looks at it, it
// completes every conversion cycle that ended by then. In shunt-and-bus
// continuous mode a cycle is AVG × (shunt slot, bus slot), the shunt
// register averaging the load's current over the shunt slots only and the
// bus register the bus voltage over the bus slots, so the current during
// bus slots is never seen, as on the real chip. The chip's inputs come from
// a Trace whose integrals are exact, so tests hold the true energy to
// compare against.
//
// Faults are deterministic: NACK bursts (FailNext), a brown-out
// (PowerCycle), a stopped chip clock (Stall), a chip clock off nominal
// (SetClockFactor). Conversions lists every completed conversion with its
// true interval, how often its result registers were read while it was
// latched and whether its ready flag was ever seen set.
//
// Manual mode (SetManual) turns the clock-driven conversions off: only
// Convert completes one, which keeps register-map tests short.
package inasim

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"meshd/drivers/drivertest"

	"periph.io/x/conn/v3/physic"
)

// Kind is the simulated chip.
type Kind int

// The chips the simulator knows.
const (
	INA226 Kind = iota
	INA219
)

func (k Kind) String() string {
	if k == INA219 {
		return "ina219"
	}
	return "ina226"
}

// ErrNACK is returned for a transaction the simulated device does not
// acknowledge.
var ErrNACK = errors.New("i2c: no acknowledge")

// DefaultSpeed is the bus speed unless told otherwise: fast mode.
const DefaultSpeed = 400 * physic.KiloHertz

// DefaultShunt is the shunt resistance a chip is added with (the SBOS547
// example board).
const DefaultShunt = 2 * physic.MilliOhm

// Bus is a simulated I²C bus holding any number of chips. Transactions are
// serialised, as on a real bus.
type Bus struct {
	name  string
	clock *drivertest.Clock

	mu    sync.Mutex
	speed physic.Frequency
	devs  map[uint16]*Chip
}

// BusOption configures NewBus.
type BusOption func(*Bus)

// WithSpeed sets the SCL frequency (default DefaultSpeed).
func WithSpeed(f physic.Frequency) BusOption { return func(b *Bus) { b.speed = f } }

// NewBus returns an empty bus called name whose transactions spend time on
// clock; a nil clock means a fresh auto-mode clock at drivertest.Epoch.
func NewBus(name string, clock *drivertest.Clock, opts ...BusOption) *Bus {
	if clock == nil {
		clock = drivertest.NewClock(drivertest.Epoch, true)
	}
	b := &Bus{name: name, clock: clock, speed: DefaultSpeed, devs: map[uint16]*Chip{}}
	for _, o := range opts {
		o(b)
	}
	return b
}

// Clock is the bus's clock, which its chips convert by.
func (b *Bus) Clock() *drivertest.Clock { return b.clock }

// Add places a chip of kind k at addr, powered on now with DefaultShunt
// and a zero load, and returns it.
func (b *Bus) Add(k Kind, addr uint16) *Chip {
	c := &Chip{kind: k, addr: addr, clock: b.clock, shunt: DefaultShunt, factor: 1, load: NewTrace(time.Time{})}
	c.powerOn(b.clock.Now())
	b.mu.Lock()
	b.devs[addr] = c
	b.mu.Unlock()
	return c
}

// String implements i2c.Bus.
func (b *Bus) String() string { return b.name }

// SetSpeed implements i2c.Bus: later transactions take the time of the new
// SCL frequency.
func (b *Bus) SetSpeed(f physic.Frequency) error {
	if f <= 0 {
		return fmt.Errorf("%s: invalid speed %v", b.name, f)
	}
	b.mu.Lock()
	b.speed = f
	b.mu.Unlock()
	return nil
}

// Speed is the SCL frequency.
func (b *Bus) Speed() physic.Frequency {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.speed
}

// SCL clocks of each phase: a START or STOP is counted as one clock, a
// byte with its acknowledge as nine.
const (
	clkStart = 1
	clkByte  = 9
	clkStop  = 1
)

// TxTime is how long a transaction writing w and reading r bytes holds
// the bus: a register read is 48 SCL clocks (120 µs at 400 kHz), a read
// at the held pointer 29, a register write 38.
func (b *Bus) TxTime(w, r int) time.Duration {
	pre, post := txClocks(w, r)
	return b.clocks(pre + post)
}

// txClocks splits a transaction's clocks at the moment the chip acts on
// it: the start of the read phase (the register is loaded into the shift
// register) or the last written byte. A read without a pointer write is
// START, address, two bytes, STOP: 29 clocks.
func txClocks(w, r int) (pre, post int) {
	pre = clkStart + clkByte
	if w > 0 {
		pre += clkByte * w
		if r == 0 {
			return pre, clkStop
		}
		pre += clkStart + clkByte // repeated START and the address again
	}
	return pre, clkByte*r + clkStop
}

func (b *Bus) clocks(n int) time.Duration {
	b.mu.Lock()
	f := b.speed
	b.mu.Unlock()
	return time.Duration(int64(n) * int64(physic.Hertz) * int64(time.Second) / int64(f))
}

// Tx implements i2c.Bus: a write of one byte sets the register pointer, a
// write of three bytes writes a register, a read returns the register at the
// pointer, MSB first. The transaction spends its I²C time on the clock; the
// chip sees it at the start of the read phase (or at the last written
// byte), and an unacknowledged address costs the address byte.
func (b *Bus) Tx(addr uint16, w, r []byte) error {
	b.mu.Lock()
	c := b.devs[addr]
	b.mu.Unlock()
	nack := clkStart + clkByte + clkStop
	if c == nil {
		b.clock.Spend(b.clocks(nack))
		return fmt.Errorf("%s: addr 0x%02x: %w", b.name, addr, ErrNACK)
	}
	if err := c.takeNACK(); err != nil {
		b.clock.Spend(b.clocks(nack))
		return err
	}
	pre, post := txClocks(len(w), len(r))
	b.clock.Spend(b.clocks(pre))
	err := c.tx(w, r)
	b.clock.Spend(b.clocks(post))
	return err
}

// Addrs lists the addresses that hold a chip.
func (b *Bus) Addrs() []uint16 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var a []uint16
	for k := range b.devs {
		a = append(a, k)
	}
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	return a
}

// Register addresses shared by both chips.
const (
	RegConfig  = 0x00
	RegShunt   = 0x01
	RegBus     = 0x02
	RegPower   = 0x03
	RegCurrent = 0x04
	RegCal     = 0x05
	RegMask    = 0x06 // INA226 only
	RegAlert   = 0x07 // INA226 only
	RegMfrID   = 0xFE // INA226 only
	RegDieID   = 0xFF // INA226 only
)

// Conversion is the ground truth of one completed conversion cycle.
type Conversion struct {
	// Seq counts conversions from 1 over the chip's life.
	Seq uint64
	// Start and End bound the cycle; ShuntTime and BusTime are the time
	// spent converting each input (the current is unobserved during
	// BusTime).
	Start, End time.Time
	ShuntTime  time.Duration
	BusTime    time.Duration
	// The registers as latched (the INA219 bus register without its
	// flags) and the math overflow flag.
	Shunt, Bus, Current, Power uint16
	OVF                        bool
	// Reads counts reads of each result register (RegShunt..RegCurrent)
	// while this conversion was the latched one.
	Reads [RegCurrent + 1]int
	// FlagSeen is set once a read returned the ready flag set for it.
	FlagSeen bool
}

// Chip is one simulated INA226 or INA219.
type Chip struct {
	kind  Kind
	addr  uint16
	clock *drivertest.Clock

	mu      sync.Mutex
	regs    [8]uint16
	ptr     byte
	ready   bool // CVRF (INA226) or CNVR (INA219)
	ovf     bool
	nack    int
	load    *Trace
	shunt   physic.ElectricResistance
	factor  float64
	busClr  bool // the INA219 clears CNVR on a bus read too
	manual  bool
	stalled bool

	converting bool      // a cycle is under way
	cycleStart time.Time // when it began
	log        []Conversion
	latched    int // index in log of the conversion in the result registers, -1 none

	reads, writes [256]int
	flagReads     int
	overwrites    uint64
}

func (c *Chip) powerOn(now time.Time) {
	c.regs = [8]uint16{}
	if c.kind == INA226 {
		c.regs[RegConfig] = 0x4127
	} else {
		c.regs[RegConfig] = 0x399F
	}
	c.ready, c.ovf, c.stalled = false, false, false
	c.ptr = RegConfig // the pointer resets too
	c.latched = -1
	c.restart(now)
}

// restart begins a conversion cycle at now if the mode converts at all.
func (c *Chip) restart(now time.Time) {
	c.cycleStart = now
	c.converting = c.mode()&3 != 0
}

func (c *Chip) mode() uint16 { return c.regs[RegConfig] & 7 }

// ina226Times are VBUSCT/VSHCT by code (typical).
var ina226Times = [8]time.Duration{140e3, 204e3, 332e3, 588e3, 1100e3, 2116e3, 4156e3, 8244e3}

// ina219Time is the conversion time of a BADC/SADC code.
func ina219Time(code uint16) time.Duration {
	if code&8 == 0 {
		return [4]time.Duration{84e3, 148e3, 276e3, 532e3}[code&3]
	}
	return [8]time.Duration{532e3, 1060e3, 2130e3, 4260e3, 8510e3, 17020e3, 34050e3, 68100e3}[code&7]
}

// layout is one conversion cycle: avg repetitions of a shunt slot then a
// bus slot, each present only when the mode converts that input.
func (c *Chip) layout() (avg int, sh, bu time.Duration) {
	cfg := c.regs[RegConfig]
	if c.kind == INA226 {
		avg = [8]int{1, 4, 16, 64, 128, 256, 512, 1024}[cfg>>9&7]
		sh, bu = ina226Times[cfg>>3&7], ina226Times[cfg>>6&7]
	} else {
		avg = 1 // the INA219 averages inside its ADC time
		sh, bu = ina219Time(cfg>>3&0xF), ina219Time(cfg>>7&0xF)
	}
	m := c.mode()
	if m&1 == 0 {
		sh = 0
	}
	if m&2 == 0 {
		bu = 0
	}
	return avg, c.scale(sh), c.scale(bu)
}

func (c *Chip) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d)*c.factor + 0.5)
}

// sync completes every conversion cycle that ended by now.
func (c *Chip) sync(now time.Time) {
	if c.manual || c.stalled {
		return
	}
	for c.converting {
		avg, sh, bu := c.layout()
		end := c.cycleStart.Add(time.Duration(avg) * (sh + bu))
		if end.After(now) {
			return
		}
		c.complete(c.cycleStart, end)
		if c.mode()&4 != 0 {
			c.cycleStart = end
		} else {
			c.converting = false // triggered: one cycle, then idle
		}
	}
}

// complete latches the conversion cycle [start, end].
func (c *Chip) complete(start, end time.Time) {
	avg, sh, bu := c.layout()
	var q, v float64 // ∫I over the shunt slots, ∫V over the bus slots
	for i := range avg {
		s := start.Add(time.Duration(i) * (sh + bu))
		if sh > 0 {
			m, _ := c.load.means(s, s.Add(sh))
			q += m * float64(sh)
		}
		if bu > 0 {
			_, m := c.load.means(s.Add(sh), s.Add(sh+bu))
			v += m * float64(bu)
		}
	}
	rec := Conversion{Seq: uint64(len(c.log)) + 1, Start: start, End: end,
		ShuntTime: time.Duration(avg) * sh, BusTime: time.Duration(avg) * bu}
	var shuntNV, busNV *float64
	if sh > 0 {
		x := q / float64(rec.ShuntTime) * float64(c.shunt) / 1e9 // nA × nΩ = 1e-18 V
		shuntNV = &x
	}
	if bu > 0 {
		x := v / float64(rec.BusTime)
		busNV = &x
	}
	c.latch(shuntNV, busNV)
	if c.ready {
		c.overwrites++
	}
	c.ready = true
	rec.Shunt, rec.Current, rec.Power, rec.OVF = c.regs[RegShunt], c.regs[RegCurrent], c.regs[RegPower], c.ovf
	rec.Bus = c.regs[RegBus]
	if c.kind == INA219 {
		rec.Bus >>= 3
	}
	c.log = append(c.log, rec)
	c.latched = len(c.log) - 1
}

func clamp(v, lo, hi int64) int64 { return max(lo, min(hi, v)) }

// round rounds half away from zero, as the chips' ADCs are modelled to.
func round(x float64) int64 {
	if x < 0 {
		return -int64(-x + 0.5)
	}
	return int64(x + 0.5)
}

// latch stores the inputs a conversion measured (nil: that input was not
// converted and its register keeps its value) and the current and power the
// chip's calibration multiply makes of the registers, flagging the math
// overflow (OVF) when either leaves its register's range.
func (c *Chip) latch(shuntNV, busNV *float64) {
	var shunt, bus, cal, calDiv, powDen int64
	if c.kind == INA226 {
		if shuntNV != nil {
			c.regs[RegShunt] = uint16(int16(clamp(round(*shuntNV/2500), -32768, 32767)))
		}
		if busNV != nil {
			c.regs[RegBus] = uint16(clamp(round(*busNV/1.25e6), 0, 0x7FFF))
		}
		shunt, bus = int64(int16(c.regs[RegShunt])), int64(c.regs[RegBus])
		cal, calDiv, powDen = int64(c.regs[RegCal]&0x7FFF), 2048, 20000
	} else {
		cfg := c.regs[RegConfig]
		fs := int64(4000) << (cfg >> 11 & 3) // ±40, 80, 160, 320 mV in 10 µV steps
		busFS := int64(4000)
		if cfg&(1<<13) != 0 {
			busFS = 8000
		}
		if shuntNV != nil {
			c.regs[RegShunt] = uint16(int16(clamp(round(*shuntNV/1e4), -fs, fs)))
		}
		if busNV != nil {
			c.regs[RegBus] = uint16(clamp(round(*busNV/4e6), 0, busFS) << 3)
		}
		shunt, bus = int64(int16(c.regs[RegShunt])), int64(c.regs[RegBus]>>3)
		cal, calDiv, powDen = int64(c.regs[RegCal]&^1), 4096, 5000
	}
	cur := shunt * cal / calDiv
	c.ovf = false
	if cur > 32767 || cur < -32768 {
		c.ovf = true
		cur = clamp(cur, -32768, 32767)
	}
	pow := max(cur, -cur) * bus / powDen
	if pow > 0xFFFF {
		c.ovf = true
		pow = 0xFFFF
	}
	c.regs[RegCurrent] = uint16(int16(cur))
	c.regs[RegPower] = uint16(pow)
}

// Sync completes the conversions that ended by the clock's now.
func (c *Chip) Sync() {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.mu.Unlock()
}

// SetLoad installs the load the chip's inputs follow from now on.
func (c *Chip) SetLoad(t *Trace) {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.load = t
	c.mu.Unlock()
}

// Load is the installed load.
func (c *Chip) Load() *Trace {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.load
}

// SetShunt sets the shunt resistance that turns the load's current into
// the shunt voltage.
func (c *Chip) SetShunt(r physic.ElectricResistance) {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.shunt = r
	c.mu.Unlock()
}

// SetInputs installs a constant load that puts shunt across the shunt
// resistor and bus on the bus input.
func (c *Chip) SetInputs(shunt, bus physic.ElectricPotential) {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.load = constantF(float64(shunt)*1e9/float64(c.shunt), float64(bus))
	c.mu.Unlock()
}

// SetClockFactor stretches every conversion time by f (1 nominal; 1.3 is
// a chip clock 30 % slow). It applies from the cycle under way.
func (c *Chip) SetClockFactor(f float64) {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.factor = f
	c.mu.Unlock()
}

// SetCNVRClearsOnBusRead makes the INA219 clear CNVR when the bus register
// is read, as some reports say it does, as well as on a Power read as the
// datasheet says.
func (c *Chip) SetCNVRClearsOnBusRead(on bool) {
	c.mu.Lock()
	c.busClr = on
	c.mu.Unlock()
}

// SetManual turns the clock-driven conversions off (on) or back on (off:
// the cycle restarts now).
func (c *Chip) SetManual(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.sync(now)
	c.manual = on
	if !on {
		c.restart(now)
	}
}

// Convert completes the conversion cycle under way now, as if it had just
// ended, over the cycle's nominal span, and starts the next. It reports
// false, changing nothing, when the chip is powered down or idle after a
// triggered conversion.
func (c *Chip) Convert() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.sync(now)
	if !c.converting {
		return false
	}
	avg, sh, bu := c.layout()
	c.complete(now.Add(-time.Duration(avg)*(sh+bu)), now)
	c.restart(now)
	if c.mode()&4 == 0 {
		c.converting = false
	}
	return true
}

// PowerCycle makes the chip lose its state as on a brown-out, now: every
// register returns to its power-on value, the conversion under way is lost
// and a new cycle starts in the power-on configuration.
func (c *Chip) PowerCycle() {
	c.mu.Lock()
	now := c.clock.Now()
	c.sync(now)
	c.powerOn(now)
	c.mu.Unlock()
}

// Stall stops the chip's clock now: no conversion completes until Resume
// or PowerCycle, while the registers still answer.
func (c *Chip) Stall() {
	c.mu.Lock()
	c.sync(c.clock.Now())
	c.stalled = true
	c.mu.Unlock()
}

// Resume restarts a stalled clock; the cycle under way starts over now.
func (c *Chip) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stalled {
		c.stalled = false
		c.restart(c.clock.Now())
	}
}

// FailNext makes the next n transactions fail with ErrNACK.
func (c *Chip) FailNext(n int) {
	c.mu.Lock()
	c.nack = n
	c.mu.Unlock()
}

func (c *Chip) takeNACK() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nack > 0 {
		c.nack--
		return fmt.Errorf("%s@0x%02x: %w", c.kind, c.addr, ErrNACK)
	}
	return nil
}

// Reg returns a register's current value without side effects (and
// without completing pending conversions: call Sync first for that).
func (c *Chip) Reg(r byte) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peek(r)
}

func (c *Chip) peek(r byte) uint16 {
	switch {
	case c.kind == INA226 && r == RegMfrID:
		return 0x5449
	case c.kind == INA226 && r == RegDieID:
		return 0x2260
	case int(r) < len(c.regs):
		return c.regs[r]
	}
	return 0
}

// Reads returns how many times register r was read over the bus.
func (c *Chip) Reads(r byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[r]
}

// Writes returns how many times register r was written over the bus.
func (c *Chip) Writes(r byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes[r]
}

// FlagReads returns how many reads of the ready-flag register happened.
func (c *Chip) FlagReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flagReads
}

// Stats reports the conversions completed, how many of them a read saw
// the ready flag of, and how many were replaced by a newer one before
// their flag was cleared (a skip, from the chip's point of view).
func (c *Chip) Stats() (converted, flagged, overwritten uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.log {
		if r.FlagSeen {
			flagged++
		}
	}
	return uint64(len(c.log)), flagged, c.overwrites
}

// Conversions returns a copy of the conversion log, oldest first (Seq i
// at index i-1).
func (c *Chip) Conversions() []Conversion {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Conversion(nil), c.log...)
}

func (c *Chip) tx(w, r []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sync(c.clock.Now())
	switch len(w) {
	case 0:
	case 1:
		c.ptr = w[0]
	case 3:
		c.ptr = w[0]
		c.write(w[0], uint16(w[1])<<8|uint16(w[2]))
	default:
		return fmt.Errorf("%s@0x%02x: write of %d bytes: %w", c.kind, c.addr, len(w), ErrNACK)
	}
	if len(r) == 0 {
		return nil
	}
	if len(r) != 2 {
		return fmt.Errorf("%s@0x%02x: read of %d bytes: %w", c.kind, c.addr, len(r), ErrNACK)
	}
	v := c.read(c.ptr)
	r[0], r[1] = byte(v>>8), byte(v)
	return nil
}

func (c *Chip) valid(reg byte) bool {
	if c.kind == INA226 {
		return reg <= RegAlert || reg == RegMfrID || reg == RegDieID
	}
	return reg <= RegCal
}

// write acts on a register write. Registers the chip does not have
// acknowledge like any other: a write to them is ignored.
func (c *Chip) write(reg byte, v uint16) {
	if !c.valid(reg) {
		return
	}
	c.writes[reg]++
	now := c.clock.Now()
	switch reg {
	case RegConfig:
		if v&0x8000 != 0 {
			c.powerOn(now)
			return
		}
		if c.kind == INA226 {
			c.regs[RegConfig] = 0x4000 | v&0x0FFF
		} else {
			c.regs[RegConfig] = v & 0x3FFF
		}
		c.ready = false // a config write clears the flag and restarts conversion
		if !c.manual && !c.stalled {
			c.restart(now)
		} else {
			c.converting = c.mode()&3 != 0
		}
	case RegCal:
		if c.kind == INA226 {
			c.regs[RegCal] = v & 0x7FFF
		} else {
			c.regs[RegCal] = v &^ 1 // FS0 is void and reads 0
		}
	case RegMask:
		c.regs[RegMask] = v & 0xFC03
	case RegAlert:
		c.regs[RegAlert] = v
	default:
		// Data and ID registers are read-only; the chip ignores the write.
	}
}

func (c *Chip) countRead(reg byte) {
	c.reads[reg]++
	if c.latched >= 0 && reg >= RegShunt && reg <= RegCurrent {
		c.log[c.latched].Reads[reg]++
	}
}

func (c *Chip) flagSeen() {
	if c.latched >= 0 {
		c.log[c.latched].FlagSeen = true
	}
}

func (c *Chip) read(reg byte) uint16 {
	if !c.valid(reg) {
		return 0
	}
	c.countRead(reg)
	v := c.peek(reg)
	if c.kind == INA226 {
		if reg == RegMask {
			c.flagReads++
			if c.ready {
				v |= 1 << 3
				c.flagSeen()
			}
			if c.ovf {
				v |= 1 << 2
			}
			c.ready = false // reading Mask/Enable clears CVRF
		}
		return v
	}
	switch reg {
	case RegBus:
		c.flagReads++
		if c.ready {
			v |= 1 << 1
			c.flagSeen()
		}
		if c.ovf {
			v |= 1
		}
		if c.busClr {
			c.ready = false
		}
	case RegPower:
		c.ready = false // SBOS448: CNVR clears when Power is read
	}
	return v
}
