package board

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root, rel, data string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadState(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct{ n, gov, cur string }{{"0", "performance", "2400000"}, {"1", "schedutil", "1200000"}, {"10", "schedutil", "600000"}} {
		d := "sys/devices/system/cpu/cpu" + c.n + "/cpufreq/"
		write(t, root, d+"scaling_governor", c.gov+"\n")
		write(t, root, d+"scaling_cur_freq", c.cur+"\n")
		write(t, root, d+"scaling_min_freq", "600000\n")
		write(t, root, d+"scaling_max_freq", "2400000\n")
	}
	// A CPU without cpufreq and entries that are not CPUs are skipped.
	write(t, root, "sys/devices/system/cpu/cpu2/online", "1\n")
	write(t, root, "sys/devices/system/cpu/cpufreq/boost", "1\n")
	write(t, root, "sys/devices/system/cpu/cpuidle/x", "")
	write(t, root, "sys/class/thermal/thermal_zone0/type", "cpu-thermal\n")
	write(t, root, "sys/class/thermal/thermal_zone0/temp", "51234\n")
	write(t, root, "sys/class/thermal/thermal_zone1/type", "gpu-thermal\n")
	write(t, root, "sys/class/thermal/thermal_zone1/temp", "garbage\n")
	write(t, root, "sys/class/thermal/thermal_zone2/type", "pmic\n") // no temp file
	write(t, root, "sys/class/thermal/cooling_device0/type", "fan\n")

	st, err := ReadState(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.CPUs) != 3 || st.CPUs[0].CPU != 0 || st.CPUs[1].CPU != 1 || st.CPUs[2].CPU != 10 {
		t.Fatalf("cpus %+v, want 0, 1, 10 in numeric order", st.CPUs)
	}
	if c := st.CPUs[2]; c.Governor != "schedutil" || c.CurKHz != 600000 || c.MinKHz != 600000 || c.MaxKHz != 2400000 {
		t.Fatalf("cpu10 %+v", c)
	}
	if g := st.Governors(); g["schedutil"] != 2 || g["performance"] != 1 {
		t.Fatalf("governors %v", g)
	}
	if len(st.Thermal) != 3 {
		t.Fatalf("zones %+v", st.Thermal)
	}
	if z := st.Thermal[0]; z.Type != "cpu-thermal" || z.MilliC == nil || *z.MilliC != 51234 || z.Error != "" {
		t.Fatalf("zone0 %+v", z)
	}
	if z := st.Thermal[1]; z.MilliC != nil || z.Error == "" {
		t.Fatalf("zone1 with a garbage temperature must say so, got %+v", z)
	}
	if z := st.Thermal[2]; z.MilliC != nil || z.Error == "" || filepath.IsAbs(z.Error) {
		t.Fatalf("zone2 without temp must carry an error without the path, got %+v", z)
	}
	if m, ok := st.MaxMilliC(); !ok || m != 51234 {
		t.Fatalf("max %d %v", m, ok)
	}
}

func TestReadStateEmptyMachine(t *testing.T) {
	st, err := ReadState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if st.CPUs == nil || st.Thermal == nil || len(st.CPUs)+len(st.Thermal) != 0 {
		t.Fatalf("an empty tree gives empty, non-nil lists: %+v", st)
	}
	if _, ok := st.MaxMilliC(); ok {
		t.Fatal("no zone, no maximum")
	}
	if _, err := ReadState(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing root is an error")
	}
}
