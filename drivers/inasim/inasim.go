// Package inasim models TI INA226 and INA219 power monitors at the register
// level behind a periph.io i2c.Bus, so that the drivers can be tested against
// the chip's documented behaviour (SBOS547, SBOS448): power-on values, the
// reset bit, the calibration multiply and its overflow, and the
// conversion-ready flags and what clears them. Conversions complete only when
// the test says so (Convert) or on a free-running ticker (Run), so tests
// control timing instead of racing it.
package inasim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"periph.io/x/conn/v3/physic"
)

// Kind is the simulated chip.
type Kind int

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

// Bus is a simulated I²C bus holding any number of chips.
type Bus struct {
	name string
	mu   sync.Mutex
	devs map[uint16]*Chip
}

// NewBus returns an empty bus called name.
func NewBus(name string) *Bus { return &Bus{name: name, devs: map[uint16]*Chip{}} }

// Add places a chip of kind k at addr and returns it.
func (b *Bus) Add(k Kind, addr uint16) *Chip {
	c := &Chip{kind: k, addr: addr}
	c.powerOn()
	b.mu.Lock()
	b.devs[addr] = c
	b.mu.Unlock()
	return c
}

// String implements i2c.Bus.
func (b *Bus) String() string { return b.name }

// SetSpeed implements i2c.Bus; the simulation has no clock to change.
func (b *Bus) SetSpeed(physic.Frequency) error { return nil }

// Tx implements i2c.Bus: a write of one byte sets the register pointer, a
// write of three bytes writes a register, a read returns the register at the
// pointer, MSB first.
func (b *Bus) Tx(addr uint16, w, r []byte) error {
	b.mu.Lock()
	c := b.devs[addr]
	b.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%s: addr 0x%02x: %w", b.name, addr, ErrNACK)
	}
	return c.tx(w, r)
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

// Chip is one simulated INA226 or INA219.
type Chip struct {
	kind Kind
	addr uint16

	mu     sync.Mutex
	regs   map[byte]uint16
	ptr    byte
	ready  bool // CVRF (INA226) or CNVR (INA219)
	ovf    bool
	nack   int
	inputs struct{ shuntNV, busUV int64 }

	// CNVRClearsOnBusRead makes the INA219 clear CNVR when the bus register
	// is read, as some reports say it does, instead of only on a Power read
	// as the datasheet says.
	CNVRClearsOnBusRead bool

	seq        uint64 // conversions completed
	delivered  uint64 // last conversion whose ready flag a read saw set
	overwrites uint64 // conversions replaced before their flag was read
	reads      map[byte]int
	writes     map[byte]int
	flagReads  int
}

func (c *Chip) powerOn() {
	c.regs = map[byte]uint16{}
	if c.kind == INA226 {
		c.regs[RegConfig] = 0x4127
		c.regs[RegMfrID] = 0x5449
		c.regs[RegDieID] = 0x2260
	} else {
		c.regs[RegConfig] = 0x399F
	}
	c.ready, c.ovf = false, false
	if c.reads == nil {
		c.reads, c.writes = map[byte]int{}, map[byte]int{}
	}
}

// PowerCycle makes the chip lose its state as on a brown-out: every register
// returns to its power-on value.
func (c *Chip) PowerCycle() {
	c.mu.Lock()
	c.powerOn()
	c.mu.Unlock()
}

// FailNext makes the next n transactions fail with ErrNACK.
func (c *Chip) FailNext(n int) {
	c.mu.Lock()
	c.nack = n
	c.mu.Unlock()
}

// SetInputs sets the analog inputs the next conversion will see: the shunt
// drop in nV and the bus voltage in µV.
func (c *Chip) SetInputs(shuntNV, busUV int64) {
	c.mu.Lock()
	c.inputs.shuntNV, c.inputs.busUV = shuntNV, busUV
	c.mu.Unlock()
}

// Reg returns a register's current value without side effects.
func (c *Chip) Reg(r byte) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regs[r]
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

// Stats reports the conversions completed, the newest whose ready flag was
// read as set, and how many were replaced by a newer one before any read
// saw their flag (a skip, from the chip's point of view).
func (c *Chip) Stats() (converted, delivered, overwritten uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq, c.delivered, c.overwrites
}

func (c *Chip) continuous() bool {
	m := c.regs[RegConfig] & 7
	return m >= 5
}

// Convert completes one conversion of the current inputs, as the chip does
// at the end of each conversion cycle in continuous mode. It reports false,
// changing nothing, when the chip is not in a continuous mode.
func (c *Chip) Convert() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.continuous() {
		return false
	}
	if c.ready {
		c.overwrites++
	}
	c.seq++
	if c.kind == INA226 {
		c.convert226()
	} else {
		c.convert219()
	}
	c.ready = true
	return true
}

func clamp(v, lo, hi int64) int64 {
	return max(lo, min(hi, v))
}

func roundDiv(n, d int64) int64 {
	if n < 0 {
		return -((-n + d/2) / d)
	}
	return (n + d/2) / d
}

func (c *Chip) convert226() {
	shunt := clamp(roundDiv(c.inputs.shuntNV, 2500), -32768, 32767)
	bus := clamp(roundDiv(c.inputs.busUV, 1250), 0, 0x7FFF)
	cal := int64(c.regs[RegCal] & 0x7FFF)
	c.latch(shunt, uint16(bus), shunt*cal/2048, bus, 20000)
}

// latch stores one conversion: the shunt and bus registers as given, and
// the current and power the chip's calibration multiply produces, flagging
// the math overflow (OVF) when either leaves its register's range.
// powDen folds the power register's LSB ratio and the bus LSB together.
func (c *Chip) latch(shunt int64, busReg uint16, cur, bus, powDen int64) {
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
	c.regs[RegShunt] = uint16(int16(shunt))
	c.regs[RegBus] = busReg
	c.regs[RegCurrent] = uint16(int16(cur))
	c.regs[RegPower] = uint16(pow)
}

func (c *Chip) convert219() {
	cfg := c.regs[RegConfig]
	pg := (cfg >> 11) & 3
	fs := int64(4000) << pg // ±40, 80, 160, 320 mV in 10 µV steps
	shunt := clamp(roundDiv(c.inputs.shuntNV, 10000), -fs, fs)
	busFS := int64(4000)
	if cfg&(1<<13) != 0 {
		busFS = 8000
	}
	bus := clamp(roundDiv(c.inputs.busUV, 4000), 0, busFS)
	cal := int64(c.regs[RegCal] &^ 1)
	c.latch(shunt, uint16(bus<<3), shunt*cal/4096, bus, 5000)
}

// Run converts every period until ctx ends, as a free-running chip does.
// When inputs is not nil it sets the inputs of conversion n (counting from
// 1 for this run) before the conversion completes.
func (c *Chip) Run(ctx context.Context, period time.Duration, inputs func(n uint64) (shuntNV, busUV int64)) {
	t := time.NewTicker(period)
	defer t.Stop()
	var n uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n++
			if inputs != nil {
				c.SetInputs(inputs(n))
			}
			c.Convert()
		}
	}
}

func (c *Chip) tx(w, r []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nack > 0 {
		c.nack--
		return fmt.Errorf("%s@0x%02x: %w", c.kind, c.addr, ErrNACK)
	}
	switch len(w) {
	case 0:
	case 1:
		c.ptr = w[0]
	case 3:
		c.ptr = w[0]
		if err := c.write(w[0], uint16(w[1])<<8|uint16(w[2])); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s@0x%02x: write of %d bytes: %w", c.kind, c.addr, len(w), ErrNACK)
	}
	if len(r) == 0 {
		return nil
	}
	if len(r) != 2 {
		return fmt.Errorf("%s@0x%02x: read of %d bytes: %w", c.kind, c.addr, len(r), ErrNACK)
	}
	v, err := c.read(c.ptr)
	if err != nil {
		return err
	}
	r[0], r[1] = byte(v>>8), byte(v)
	return nil
}

func (c *Chip) valid(reg byte) bool {
	if c.kind == INA226 {
		return reg <= RegAlert || reg == RegMfrID || reg == RegDieID
	}
	return reg <= RegCal
}

// Registers the chip does not have acknowledge like any other: a pointer
// to them reads 0 and a write to them is ignored.
func (c *Chip) write(reg byte, v uint16) error {
	if !c.valid(reg) {
		return nil
	}
	c.writes[reg]++
	switch reg {
	case RegConfig:
		if v&0x8000 != 0 {
			c.powerOn()
			return nil
		}
		if c.kind == INA226 {
			c.regs[RegConfig] = 0x4000 | v&0x0FFF
		} else {
			c.regs[RegConfig] = v & 0x3FFF
		}
		c.ready = false // a config write restarts conversion
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
	return nil
}

func (c *Chip) read(reg byte) (uint16, error) {
	if !c.valid(reg) {
		return 0, nil
	}
	c.reads[reg]++
	if c.kind == INA226 {
		if reg == RegMask {
			c.flagReads++
			v := c.regs[RegMask]
			if c.ready {
				v |= 1 << 3
				c.delivered = c.seq
			}
			if c.ovf {
				v |= 1 << 2
			}
			c.ready = false // reading Mask/Enable clears CVRF
			return v, nil
		}
		return c.regs[reg], nil
	}
	v := c.regs[reg]
	switch reg {
	case RegBus:
		c.flagReads++
		if c.ready {
			v |= 1 << 1
			c.delivered = c.seq
		}
		if c.ovf {
			v |= 1
		}
		if c.CNVRClearsOnBusRead {
			c.ready = false
		}
	case RegPower:
		c.ready = false // SBOS448: CNVR clears when Power is read
	}
	return v, nil
}
