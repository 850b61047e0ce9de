package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"meshd/drivers"
	"meshd/drivers/drivertest"
	"meshd/drivers/inasim"
	"meshd/drivers/internal/metersim"
	"meshd/drivers/internal/ptypair"

	"periph.io/x/conn/v3/physic"
)

// hwmonTree is the hwmon driver's checked-in sysfs fixture (see its
// README); the probe only reads it.
const hwmonTree = "../hwmon/testdata/hwmon"

func TestScanI2C(t *testing.T) {
	mV := physic.MilliVolt
	clk := drivertest.NewClock(drivertest.Epoch, true)
	bus := inasim.NewBus("sim-1", clk)
	a := bus.Add(inasim.INA226, 0x40)
	a.SetManual(true)
	a.SetInputs(20*mV, 11980*mV)
	a.Convert()
	b := bus.Add(inasim.INA219, 0x44)
	b.SetManual(true)
	b.SetInputs(-1*mV, 5000*mV)
	b.Convert()
	c := bus.Add(inasim.INA219, 0x45)
	if err := bus.Tx(0x45, []byte{0x00, 0x01, 0x9F}, nil); err != nil {
		t.Fatal(err)
	}
	found := ScanI2C([]Bus{{Name: "sim-1", Bus: bus}}, clk)
	want := []struct {
		kind, where string
		reading     drivers.Kind
		bus, shunt  physic.ElectricPotential
	}{
		{"ina226", "sim-1:0x40", drivers.KindConversion, 11980 * mV, 20 * mV},
		{"ina219", "sim-1:0x44", drivers.KindConversion, 5000 * mV, -1 * mV},
		{"i2c-unknown", "sim-1:0x45", 0, 0, 0},
	}
	if len(found) != len(want) {
		t.Fatalf("found %v", found)
	}
	for i, w := range want {
		f := found[i]
		if f.Kind != w.kind || f.Where != w.where || f.Reading != w.reading || f.Err != nil {
			t.Errorf("found[%d] = %s, want %s at %s (%v)", i, f, w.kind, w.where, w.reading)
			continue
		}
		if w.kind == "i2c-unknown" {
			if f.Sample != nil {
				t.Errorf("unknown device reported a reading")
			}
			continue
		}
		s := f.Sample
		if s == nil || s.Bus != w.bus || s.Shunt != w.shunt || !f.VoltagesOnly {
			t.Errorf("found[%d] reading %+v", i, s)
			continue
		}
		// One instant, after the scan began and no later than it ended.
		if s.Start != s.End || s.Start.Before(drivertest.Epoch) || s.Start.After(clk.Now()) {
			t.Errorf("found[%d] stamped [%v, %v]", i, s.Start, s.End)
		}
	}
	// Discovery must not disturb the chips.
	for _, chip := range []*inasim.Chip{a, b} {
		if chip.Writes(inasim.RegConfig)+chip.Writes(inasim.RegCal) > 0 {
			t.Errorf("discovery wrote to a chip")
		}
	}
	if c.Writes(inasim.RegConfig) != 1 || c.Reg(inasim.RegConfig) != 0x019F {
		t.Error("discovery reset the configured INA219")
	}
}

func TestScanAll(t *testing.T) {
	um, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer um.Close()
	umSlave := um.Slave
	go (&metersim.UM{Reply: func(int) []byte { return metersim.UMFrame(0x09C9, 5000, 5000, 2500, 25) }}).Serve(um.Master)
	line, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer line.Close()
	lineMaster, lineSlave := line.Master, line.Slave
	// The pseudo-terminal holds the meter's line until the probe opens
	// the port and reads it.
	if _, err := lineMaster.Write([]byte("12000,500\n")); err != nil {
		t.Fatal(err)
	}
	clk := drivertest.NewClock(drivertest.Epoch, true)
	found, err := Scan(context.Background(), Options{
		HwmonRoot: hwmonTree, UMPorts: []string{umSlave}, LinePorts: []string{lineSlave},
		Timeout: 500 * time.Millisecond, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	uW := physic.MicroWatt
	checks := []struct {
		kind    string
		where   string
		reading drivers.Kind
		power   physic.Power
	}{
		{"ina3221", "hwmon:hwmon1/ina3221:1(VDD_IN)", drivers.KindPoint, 19072 * 1512 * uW},
		{"ina3221", "hwmon:hwmon1/ina3221:2(VDD_CPU_GPU_CV)", drivers.KindPoint, -19064 * 248 * uW},
		{"ina3221", "hwmon:hwmon1/ina3221:3(VDD_SOC)", drivers.KindPoint, 19080 * 400 * uW},
		{"ina226", "hwmon:hwmon2/ina226:1", drivers.KindPoint, 119781250 * uW},
		{"ina228", "hwmon:hwmon3/ina228:1", drivers.KindCounter, 24 * physic.Watt},
		{"ina219", "hwmon:device/ina219:1", drivers.KindPoint, 2 * physic.Watt},
		{"UM25C", umSlave, drivers.KindPoint, 2500 * physic.MilliWatt},
		{"line", lineSlave, drivers.KindPoint, 6 * physic.Watt},
	}
	if len(found) != len(checks) {
		t.Fatalf("found %v", found)
	}
	for i, c := range checks {
		f := found[i]
		if f.Kind != c.kind || f.Where != c.where || f.Reading != c.reading || f.Err != nil || f.Sample == nil || f.Sample.Power != c.power {
			t.Errorf("found[%d] = %s; want %s at %s (%v) reading %v", i, f, c.kind, c.where, c.reading, c.power)
		}
	}
	if s := found[0].String(); !strings.Contains(s, "VDD_IN") || !strings.Contains(s, "point") || !strings.Contains(s, "power = V × I") {
		t.Errorf("rail label, kind or note missing from %q", s)
	}
	if s := found[4].String(); !strings.Contains(s, "counter") {
		t.Errorf("energy rail not shown as a counter: %q", s)
	}
}

func TestScanSerialFailures(t *testing.T) {
	pty, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer pty.Close()
	found := ScanSerial(context.Background(), []string{pty.Slave, "/nonexistent/ttyUSB9"}, nil, 200*time.Millisecond, nil)
	if len(found) != 2 || found[0].Err == nil || found[1].Err == nil || found[0].Sample != nil {
		t.Fatalf("silent and missing meters: %v", found)
	}
}
