package hwmon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fakeSysfs lays out a hwmon class directory with a CPU temperature
// sensor, an INA226, a Jetson-style INA3221 and an old-layout INA219.
func fakeSysfs(t *testing.T) string {
	root := t.TempDir()
	write(t, filepath.Join(root, "hwmon0"), map[string]string{"name": "coretemp", "temp1_input": "45000"})
	write(t, filepath.Join(root, "hwmon1"), map[string]string{
		"name": "ina226", "in0_input": "20", "in1_input": "11980", "curr1_input": "10000",
		"power1_input": "119800000", "update_interval": "20", "shunt_resistor": "2000",
	})
	write(t, filepath.Join(root, "hwmon2"), map[string]string{
		"name":      "ina3221",
		"in1_input": "19072", "in4_input": "3", "curr1_input": "1512", "in1_label": "VDD_IN",
		"in2_input": "19064", "in5_input": "1", "curr2_input": "-248", "in2_label": "VDD_CPU_GPU_CV",
		"update_interval": "30", "shunt1_resistor": "5000",
	})
	write(t, filepath.Join(root, "hwmon3", "device"), map[string]string{
		"name": "ina219", "in1_input": "5000", "curr1_input": "400", "power1_input": "2000000",
	})
	return root
}

func TestDiscover(t *testing.T) {
	rails, err := Discover(fakeSysfs(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"hwmon1/ina226:1", "hwmon2/ina3221:1(VDD_IN)", "hwmon2/ina3221:2(VDD_CPU_GPU_CV)", "device/ina219:1"}
	if len(rails) != len(want) {
		t.Fatalf("found %v, want %v", rails, want)
	}
	for i, r := range rails {
		if r.String() != want[i] {
			t.Errorf("rail %d = %s, want %s", i, r, want[i])
		}
	}
	if !rails[0].HasPower() || rails[1].HasPower() {
		t.Error("power attribute detection wrong")
	}
}

func TestDiscoverMissingRoot(t *testing.T) {
	rails, err := Discover(filepath.Join(t.TempDir(), "absent"))
	if err != nil || len(rails) != 0 {
		t.Fatalf("got %v, %v; want nothing and no error", rails, err)
	}
}

func TestRead(t *testing.T) {
	rails, err := Discover(fakeSysfs(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		rail                    int
		bus, shunt, curr, power int64
		period, averaged        time.Duration
	}{
		{0, 11_980_000, 20_000_000, 10_000_000, 119_800_000, 20 * time.Millisecond, 20 * time.Millisecond},
		{1, 19_072_000, 3_000_000, 1_512_000, 19072 * 1512, 30 * time.Millisecond, 0},
		{2, 19_064_000, 1_000_000, -248_000, -19064 * 248, 30 * time.Millisecond, 0},
		{3, 5_000_000, 0, 400_000, 2_000_000, 100 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		s, err := Open(rails[tt.rail], Options{})
		if err != nil {
			t.Fatal(err)
		}
		smp, err := s.Read()
		if err != nil {
			t.Fatal(err)
		}
		if smp.BusUV != tt.bus || smp.ShuntNV != tt.shunt || smp.CurrentUA != tt.curr || smp.PowerUW != tt.power {
			t.Errorf("%s: got %+v, want bus %d shunt %d curr %d power %d", s.Name(), smp, tt.bus, tt.shunt, tt.curr, tt.power)
		}
		if s.UpdatePeriod() != tt.period || smp.Averaged != tt.averaged {
			t.Errorf("%s: period %v averaged %v, want %v %v", s.Name(), s.UpdatePeriod(), smp.Averaged, tt.period, tt.averaged)
		}
	}
}

func TestNextPacesAndRereads(t *testing.T) {
	root := fakeSysfs(t)
	rails, _ := Discover(root)
	s, err := Open(rails[0], Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "hwmon1"), map[string]string{"power1_input": "60000000", "curr1_input": "5000"})
	second, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gap := second.At.Sub(first.At); gap < 20*time.Millisecond {
		t.Fatalf("second read %v after the first, before the 20 ms update interval", gap)
	}
	if second.PowerUW != 60_000_000 || second.CurrentUA != 5_000_000 {
		t.Fatalf("second read %+v did not see the new values", second)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if _, err := s.Next(short); err == nil {
		t.Fatal("Next returned before the interval despite a cancelled context")
	}
}

func TestReadErrorsNeverZero(t *testing.T) {
	root := fakeSysfs(t)
	rails, _ := Discover(root)
	s, err := Open(rails[1], Options{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "hwmon2"), map[string]string{"curr1_input": "garbage"})
	if smp, err := s.Read(); err == nil {
		t.Fatalf("malformed attribute gave %+v", smp)
	}
	os.Remove(filepath.Join(root, "hwmon2", "curr1_input"))
	if smp, err := s.Next(context.Background()); err == nil {
		t.Fatalf("vanished attribute gave %+v", smp)
	}
	if _, err := Open(Rail{Dir: root, Chip: "nvme"}, Options{}); err == nil {
		t.Fatal("unknown chip accepted")
	}
}

func TestAccuracy(t *testing.T) {
	rails, _ := Discover(fakeSysfs(t))
	ina226, _ := Open(rails[0], Options{})
	// 12 V × 10 µV / 2 mΩ = 60 mW, power attribute: no V × I rounding.
	if got := ina226.Accuracy().OffsetUW(12_000_000); got != 60_000 {
		t.Errorf("ina226 offset %v µW, want 60000", got)
	}
	ina3221, _ := Open(rails[1], Options{})
	// 19 V × 80 µV / 5 mΩ = 304 mW, plus 19 V × 0.5 mA = 9.5 mW.
	if got := ina3221.Accuracy().OffsetUW(19_000_000); got != 304_000+9_500 {
		t.Errorf("ina3221 offset %v µW, want 313500", got)
	}
	if ina3221.Accuracy().GainErr != 0.005 {
		t.Errorf("ina3221 gain %v", ina3221.Accuracy().GainErr)
	}
}
