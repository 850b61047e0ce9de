package probe

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/drivers/inasim"
	"meshd/drivers/internal/metersim"
	"meshd/drivers/internal/ptypair"
)

func TestScanI2C(t *testing.T) {
	bus := inasim.NewBus("sim-1")
	a := bus.Add(inasim.INA226, 0x40)
	a.SetInputs(20_000_000, 11_980_000)
	a.Convert()
	b := bus.Add(inasim.INA219, 0x44)
	b.SetInputs(-1_000_000, 5_000_000)
	b.Convert()
	c := bus.Add(inasim.INA219, 0x45)
	if err := bus.Tx(0x45, []byte{0x00, 0x01, 0x9F}, nil); err != nil {
		t.Fatal(err)
	}
	found := ScanI2C([]Bus{{Name: "sim-1", Bus: bus}})
	want := []struct {
		kind, where string
		busUV       int64
		shuntNV     int64
	}{
		{"ina226", "sim-1:0x40", 11_980_000, 20_000_000},
		{"ina219", "sim-1:0x44", 5_000_000, -1_000_000},
		{"i2c-unknown", "sim-1:0x45", 0, 0},
	}
	if len(found) != len(want) {
		t.Fatalf("found %v", found)
	}
	for i, w := range want {
		f := found[i]
		if f.Kind != w.kind || f.Where != w.where || f.Err != nil {
			t.Errorf("found[%d] = %s, want %s at %s", i, f, w.kind, w.where)
			continue
		}
		if w.kind == "i2c-unknown" {
			if f.Sample != nil {
				t.Errorf("unknown device reported a reading")
			}
			continue
		}
		if f.Sample == nil || f.Sample.BusUV != w.busUV || f.Sample.ShuntNV != w.shuntNV || !f.VoltagesOnly {
			t.Errorf("found[%d] reading %+v", i, f.Sample)
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
	root := t.TempDir()
	dir := filepath.Join(root, "hwmon0")
	os.MkdirAll(dir, 0o755)
	for name, v := range map[string]string{"name": "ina3221", "in1_input": "19000", "curr1_input": "1000", "in1_label": "VDD_IN"} {
		os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644)
	}
	umMaster, umSlave, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer umMaster.Close()
	go (&metersim.UM{Reply: func(int) []byte { return metersim.UMFrame(0x09C9, 5000, 5000, 2500, 25) }}).Serve(umMaster)
	lineMaster, lineSlave, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer lineMaster.Close()
	go func() {
		for range 20 {
			if _, err := lineMaster.Write([]byte("12000,500\n")); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	found, err := Scan(context.Background(), Options{
		HwmonRoot: root, UMPorts: []string{umSlave}, LinePorts: []string{lineSlave},
		Timeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 3 {
		t.Fatalf("found %v", found)
	}
	checks := []struct {
		kind  string
		power int64
	}{{"ina3221", 19_000_000}, {"UM25C", 2_500_000}, {"line", 6_000_000}}
	for i, c := range checks {
		f := found[i]
		if f.Kind != c.kind || f.Err != nil || f.Sample == nil || f.Sample.PowerUW != c.power {
			t.Errorf("found[%d] = %s; want %s reading %d µW", i, f, c.kind, c.power)
		}
	}
	if !strings.Contains(found[0].String(), "VDD_IN") {
		t.Errorf("rail label missing from %q", found[0])
	}
}

func TestScanSerialFailures(t *testing.T) {
	master, slave, err := ptypair.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	found := ScanSerial(context.Background(), []string{slave, "/nonexistent/ttyUSB9"}, nil, 200*time.Millisecond)
	if len(found) != 2 || found[0].Err == nil || found[1].Err == nil || found[0].Sample != nil {
		t.Fatalf("silent and missing meters: %v", found)
	}
}
