// Package inareg holds what the TI INA219 and INA226 drivers share: 16-bit
// big-endian registers read one per transaction, the register map common
// to both chips, the integer arithmetic that turns register counts into
// physic units, and the life of an open chip (Chip): programming and
// verifying Config and Calibration, repairing a chip that reset itself,
// noticing one that stopped converting, bracketing the bus voltage in
// shunt-only mode, and following the ready flag so that each conversion is
// read once, untorn, and placed in time with a stated uncertainty.
//
// What differs between the chips stays in their packages: where the ready
// flag lives and what clears it, the register LSBs, the calibration formula
// and the accuracy budget (a Model says).
package inareg

import (
	"fmt"
	"math"
	"math/bits"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
)

// Registers at the same address on both chips (SBOS448 §8.6, SBOS547 §7.6).
const (
	RegConfig  = 0x00
	RegShunt   = 0x01
	RegBus     = 0x02
	RegPower   = 0x03
	RegCurrent = 0x04
	RegCal     = 0x05

	// ConfigReset is the RST bit of the configuration register: writing it
	// returns every register to its power-on value.
	ConfigReset = 0x8000

	// Mode field values common to both chips (Config bits 2..0).
	ModeMask      = 0x7
	ModeBusTrig   = 0x2 // one bus conversion, then idle
	ModeShuntCont = 0x5 // shunt only, continuously
	ModeBothCont  = 0x7 // shunt then bus, continuously
)

// Read reads one 16-bit register: write the pointer, then read two bytes.
func Read(d *i2c.Dev, reg byte) (uint16, error) {
	var b [2]byte
	if err := d.Tx([]byte{reg}, b[:]); err != nil {
		return 0, fmt.Errorf("read register 0x%02x: %w", reg, err)
	}
	return uint16(b[0])<<8 | uint16(b[1]), nil
}

// Write writes one 16-bit register, MSB first.
func Write(d *i2c.Dev, reg byte, v uint16) error {
	if err := d.Tx([]byte{reg, byte(v >> 8), byte(v)}, nil); err != nil {
		return fmt.Errorf("write register 0x%02x: %w", reg, err)
	}
	return nil
}

// ReadVoltages reads the raw bus and shunt voltage registers of the chip
// at addr without configuring it; chip names it in errors.
func ReadVoltages(bus i2c.Bus, addr uint16, chip string) (busRaw, shuntRaw uint16, err error) {
	d := &i2c.Dev{Bus: bus, Addr: addr}
	if shuntRaw, err = Read(d, RegShunt); err != nil {
		return 0, 0, fmt.Errorf("%s at 0x%02x: %w", chip, addr, err)
	}
	if busRaw, err = Read(d, RegBus); err != nil {
		return 0, 0, fmt.Errorf("%s at 0x%02x: %w", chip, addr, err)
	}
	return busRaw, shuntRaw, nil
}

// RoundDiv divides n by d (d > 0), rounding half away from zero.
func RoundDiv(n, d int64) int64 {
	if n < 0 {
		return -((-n + d/2) / d)
	}
	return (n + d/2) / d
}

// MulDiv returns a × b / d rounded half away from zero, for d > 0, without
// overflowing the 64-bit product; a quotient beyond 64 bits saturates.
func MulDiv(a, b, d int64) int64 {
	neg := (a < 0) != (b < 0)
	ua, ub := uint64(a), uint64(b)
	if a < 0 {
		ua = uint64(-a)
	}
	if b < 0 {
		ub = uint64(-b)
	}
	hi, lo := bits.Mul64(ua, ub)
	lo, carry := bits.Add64(lo, uint64(d)/2, 0)
	hi += carry
	q := uint64(math.MaxInt64)
	if hi < uint64(d) {
		q, _ = bits.Div64(hi, lo, uint64(d))
		q = min(q, math.MaxInt64)
	}
	if neg {
		return -int64(q)
	}
	return int64(q)
}

// Model is what the shared code needs to know of one chip type.
type Model struct {
	// Name is the chip's name in errors and default sensor names, e.g.
	// "ina226".
	Name string
	// FlagReg holds the conversion-ready flag, FlagMask selects it and
	// OVFMask the math-overflow flag in the same register.
	FlagReg           byte
	FlagMask, OVFMask uint16
	// ReservedMask holds bits of FlagReg that always read 0: a poll that
	// sees one set did not read FlagReg (the chip's pointer moved, as a
	// reset moves it to Config).
	ReservedMask uint16
	// Consume, when set, is read right after the flag was seen to clear
	// it (the INA219's Power); otherwise reading FlagReg clears it.
	Consume    byte
	HasConsume bool
	// Results are read after the flag was seen (and consumed), before
	// FlagReg is read again to prove that no newer conversion latched
	// meanwhile. A result held by FlagReg itself (the INA219's bus
	// voltage) is taken from that second read.
	Results []byte
	// CalNum is the calibration constant with Current_LSB in nA and R in
	// µΩ: CAL = CalNum / (Current_LSB × R).
	CalNum int64
	// MaxCal is the largest value the calibration register holds.
	MaxCal int64
	// CalDiv is the divisor of the chip's current multiply:
	// Current = Shunt × CAL / CalDiv.
	CalDiv int64
	// PowerRatio is Power_LSB / Current_LSB and PowerDiv the divisor of the
	// chip's power multiply in register counts:
	// Power = |Current| × Bus / PowerDiv.
	PowerRatio, PowerDiv int64
	// ShuntLSB and BusLSB are the voltage registers' LSBs; BusShift is
	// how far the bus value sits left in its register.
	ShuntLSB, BusLSB physic.ElectricPotential
	BusShift         uint
}

// BusMax is the highest bus voltage the bus register can hold: every
// reading's bus lies at or below it.
func (m Model) BusMax() physic.ElectricPotential {
	return physic.ElectricPotential(0xFFFF>>m.BusShift) * m.BusLSB
}

// CheckBoard refuses a shunt or maximum current that is not positive.
func (m Model) CheckBoard(shuntMicroOhms, maxCurrentUA int64) error {
	if shuntMicroOhms <= 0 {
		return fmt.Errorf("%s: shunt resistance must be positive, got %d µΩ", m.Name, shuntMicroOhms)
	}
	if maxCurrentUA <= 0 {
		return fmt.Errorf("%s: maximum current must be positive, got %d µA", m.Name, maxCurrentUA)
	}
	return nil
}

// CurrentLSB returns fixedNanoAmps, or when that is 0 derives Current_LSB
// as maxCurrentUA / 32767 rounded up to a whole nA, and refuses an LSB
// that cannot represent maxCurrentUA in the signed 16-bit current register.
// The board must have passed CheckBoard.
func (m Model) CurrentLSB(shuntMicroOhms, maxCurrentUA, fixedNanoAmps int64) (int64, error) {
	lsb := fixedNanoAmps
	if lsb == 0 {
		lsb = (maxCurrentUA*1000 + 32766) / 32767
		// A small full-scale drop asks for a calibration beyond the
		// register; the coarsest LSB that fits loses nothing the shunt ADC
		// could resolve.
		lsb = max(lsb, (m.CalNum+m.MaxCal*shuntMicroOhms-1)/(m.MaxCal*shuntMicroOhms))
	}
	if lsb*32767 < maxCurrentUA*1000 {
		return 0, fmt.Errorf("%s: Current_LSB %d nA cannot represent %d µA in the 16-bit current register", m.Name, lsb, maxCurrentUA)
	}
	return lsb, nil
}
