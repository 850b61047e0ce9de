// Package inareg holds what the TI INA219 and INA226 drivers share: 16-bit
// big-endian registers read one per transaction, the register map common
// to both chips, the integer arithmetic that turns register counts into
// micro-units, and the life of an open chip (Chip): programming and
// verifying Config and Calibration, repairing a chip that reset itself, and
// polling a ready flag until a conversion can be read.
//
// What differs between the chips stays in their packages: where the ready
// flag lives and when it clears (a Model says), the register LSBs, the
// calibration formula and the accuracy budget.
package inareg

import (
	"context"
	"fmt"
	"time"

	"periph.io/x/conn/v3/i2c"
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

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
