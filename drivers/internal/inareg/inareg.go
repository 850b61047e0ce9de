// Package inareg holds the register access shared by the TI INA drivers:
// 16-bit big-endian registers, one register per transaction, and the
// integer arithmetic that turns register counts into micro-units.
package inareg

import (
	"context"
	"fmt"
	"time"

	"periph.io/x/conn/v3/i2c"
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
