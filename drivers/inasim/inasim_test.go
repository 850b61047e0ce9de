package inasim

import "testing"

func read(t *testing.T, b *Bus, addr uint16, reg byte) uint16 {
	t.Helper()
	var r [2]byte
	if err := b.Tx(addr, []byte{reg}, r[:]); err != nil {
		t.Fatal(err)
	}
	return uint16(r[0])<<8 | uint16(r[1])
}

func TestReadyFlagSemantics(t *testing.T) {
	b := NewBus("sim")
	c := b.Add(INA226, 0x40)
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
	b.Tx(0x40, []byte{RegConfig, 0x41, 0x27}, nil)
	if read(t, b, 0x40, RegMask)&8 != 0 {
		t.Fatal("writing Config did not clear CVRF")
	}
	b.Tx(0x40, []byte{RegCal, 0xFF, 0xFF}, nil)
	if got := read(t, b, 0x40, RegCal); got != 0x7FFF {
		t.Fatalf("INA226 CAL bit 15 kept: 0x%04x", got)
	}
	b.Tx(0x40, []byte{RegConfig, 0x80, 0x00}, nil)
	if read(t, b, 0x40, RegConfig) != 0x4127 || read(t, b, 0x40, RegCal) != 0 {
		t.Fatal("reset bit did not restore power-on values")
	}

	i := b.Add(INA219, 0x41)
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
	b.Tx(0x41, []byte{RegCal, 0x12, 0x35}, nil)
	if got := read(t, b, 0x41, RegCal); got != 0x1234 {
		t.Fatalf("INA219 CAL bit 0 kept: 0x%04x", got)
	}
	if err := b.Tx(0x42, []byte{0}, make([]byte, 2)); err == nil {
		t.Fatal("empty address acknowledged")
	}
}
