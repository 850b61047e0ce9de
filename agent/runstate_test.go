package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"meshd/agent/board"
	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// The run-open and run-close records seal the machine state the daemon
// read from sysfs at each: governors, frequencies and temperatures as
// they were then, not as the client says.
func TestRunRecordsSealBoardState(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cpu := "sys/devices/system/cpu/cpu0/cpufreq/"
	write(cpu+"scaling_governor", "performance")
	write(cpu+"scaling_cur_freq", "2400000")
	write("sys/class/thermal/thermal_zone0/type", "cpu-thermal")
	write("sys/class/thermal/thermal_zone0/temp", "45000")

	clock := &testClock{t: time.Unix(1_767_225_600, 0)}
	a, err := New(Config{Backends: refs(t, engine.ReferenceConfig{Name: "ok", Fidelity: wire.F2, UJPerToken: 10}),
		Steward: newMemSealer(t), Clock: clock.now, BoardRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	open, err := a.OpenRun(context.Background(), RunOpen{WorkloadSHA256: fmt.Sprintf("%064x", 1), Repetitions: 1, ServesDeclared: 1,
		Harness: "meshctl test", Caller: "lab", Board: "{}", Version: "test", Meters: "[]", State: `{"forged":true}`})
	if err != nil {
		t.Fatal(err)
	}
	od, err := steward.DecodeRunOpenDoc(open.Document)
	if err != nil {
		t.Fatal(err)
	}
	// Under load: slower clock, hotter zone.
	write(cpu+"scaling_cur_freq", "1800000")
	write("sys/class/thermal/thermal_zone0/temp", "78500")
	rec, err := a.CloseRun(context.Background(), open.Sealed.Receipt.Sequence, "")
	if err != nil {
		t.Fatal(err)
	}
	cd := closeDoc(t, rec)
	read := func(what, doc string) board.State {
		t.Helper()
		var st board.State
		if err := json.Unmarshal([]byte(doc), &st); err != nil {
			t.Fatalf("%s state %q: %v", what, doc, err)
		}
		if len(st.CPUs) != 1 || len(st.Thermal) != 1 || st.Thermal[0].MilliC == nil || st.CPUs[0].Governor != "performance" {
			t.Fatalf("%s state %+v", what, st)
		}
		return st
	}
	o, c := read("open", od.State), read("close", cd.State)
	if o.CPUs[0].CurKHz != 2_400_000 || *o.Thermal[0].MilliC != 45_000 || c.CPUs[0].CurKHz != 1_800_000 || *c.Thermal[0].MilliC != 78_500 {
		t.Fatalf("open %+v %d, close %+v %d", o.CPUs, *o.Thermal[0].MilliC, c.CPUs, *c.Thermal[0].MilliC)
	}
	// Canonical JSON (sorted keys, no spaces): the bytes a verifier can
	// compare with the report's.
	if want := `{"cpus":[{"cpu":0,"cur_khz":2400000,"governor":"performance"}],"thermal":[{"milli_c":45000,"type":"cpu-thermal","zone":"thermal_zone0"}]}`; od.State != want {
		t.Fatalf("open state %s, want %s", od.State, want)
	}

	// A root that cannot be read refuses the open rather than seal a
	// run without the state.
	bad, err := New(Config{Backends: refs(t, engine.ReferenceConfig{Name: "ok", Fidelity: wire.F2, UJPerToken: 10}),
		Steward: newMemSealer(t), BoardRoot: filepath.Join(root, "missing")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.OpenRun(context.Background(), RunOpen{WorkloadSHA256: fmt.Sprintf("%064x", 1), Repetitions: 1, ServesDeclared: 1,
		Harness: "h", Caller: "c", Board: "{}", Version: "v", Meters: "[]"}); err == nil {
		t.Fatal("a run opened without its board state")
	}
}
