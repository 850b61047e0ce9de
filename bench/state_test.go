package bench

import (
	"strings"
	"testing"

	boardstate "meshd/agent/board"
	"meshd/steward"
)

func TestCheckState(t *testing.T) {
	const openState = `{"cpus":[{"cpu":0,"cur_khz":2400000,"governor":"performance"},{"cpu":1,"cur_khz":600000,"governor":"performance"}],"thermal":[{"milli_c":45000,"type":"cpu-thermal","zone":"thermal_zone0"},{"error":"read: input/output error","type":"gpu","zone":"thermal_zone1"}]}`
	const closeState = `{"cpus":[{"cpu":0,"cur_khz":1800000,"governor":"performance"},{"cpu":1,"cur_khz":1800000,"governor":"performance"}],"thermal":[{"milli_c":78500,"type":"cpu-thermal","zone":"thermal_zone0"},{"error":"read: input/output error","type":"gpu","zone":"thermal_zone1"}]}`
	od := &steward.RunOpenDoc{State: openState}
	cd := &steward.RunCloseDoc{State: closeState}
	sec, err := StateOf(od, cd)
	if err != nil {
		t.Fatal(err)
	}
	if p := checkState(od, cd, sec); len(p) != 0 {
		t.Fatalf("the sealed states: %v", p)
	}
	if got := StateLine(sec.Open); got != "governor performance×2; 600..2400 MHz; hottest 45 °C (cpu-thermal) of 2 zones" {
		t.Errorf("open line %q", got)
	}
	if got := StateLine(sec.Close); !strings.Contains(got, "1800..1800 MHz; hottest 78.5 °C") {
		t.Errorf("close line %q", got)
	}
	cooler := func(s StateSection) StateSection {
		c := *s.Close
		c.Thermal = append([]boardstate.Zone(nil), c.Thermal...)
		v := *c.Thermal[0].MilliC - 20_000
		c.Thermal[0].MilliC = &v
		s.Close = &c
		return s
	}
	for _, tc := range []struct {
		name       string
		open       *steward.RunOpenDoc
		close      *steward.RunCloseDoc
		sec        StateSection
		want       string // the first problem's text, "" for none
		wantPlaces int
	}{
		{"a cooler close", od, cd, cooler(sec), "state.close: differs from the state the run-close record seals", 1},
		{"open and close swapped", od, cd, StateSection{Open: sec.Close, Close: sec.Open}, "state.open: differs", 2},
		{"the open dropped", od, cd, StateSection{Close: sec.Close}, "state.open: missing: the run-open record seals the machine state", 1},
		{"a state the record never sealed", &steward.RunOpenDoc{}, cd, sec, "state.open: the run-open record seals no machine state", 1},
		{"records the report does not hold", nil, nil, sec, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := checkState(tc.open, tc.close, tc.sec)
			if len(p) != tc.wantPlaces || tc.want != "" && !strings.HasPrefix(p[0].String(), tc.want) {
				t.Fatalf("problems %v, want %d starting %q", p, tc.wantPlaces, tc.want)
			}
		})
	}
	if _, err := StateOf(&steward.RunOpenDoc{State: `{"cpus":[],"thermal":[],"fan":1}`}, nil); err == nil {
		t.Fatal("a state with an unknown member was read")
	}
}
