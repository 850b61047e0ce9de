package steward

import (
	"bytes"
	"strings"
	"testing"

	"meshd/wire"
)

// Names that would break a delimiter- or escape-based grammar: the
// separators themselves, something that looks like a length prefix, a
// verdict and a multi-byte character.
func TestCandidatesRoundTrip(t *testing.T) {
	cs := []Candidate{
		{Backend: "a;b c", Fidelity: wire.F1, EstTotalUJ: 10, Verdict: VerdictBelowFloor},
		{Backend: "3:x F2 5 admissible", Fidelity: wire.F2, EstTotalUJ: 0, Verdict: VerdictAdmissible},
		{Backend: "ü", Fidelity: wire.F4, Overflow: true, Verdict: VerdictOverCeiling},
		{Backend: "over ceiling", Fidelity: wire.F3, EstTotalUJ: ^uint64(0), Verdict: VerdictUnhealthy},
		{Backend: ";", Fidelity: wire.F0, EstTotalUJ: 7, Verdict: VerdictFailed},
	}
	s, err := FormatCandidates(cs)
	if err != nil {
		t.Fatal(err)
	}
	want := "5:a;b c F1 10 below floor;19:3:x F2 5 admissible F2 0 admissible;2:ü F4 overflow over ceiling;" +
		"12:over ceiling F3 18446744073709551615 unhealthy;1:; F0 7 failed"
	if s != want {
		t.Fatalf("formatted\n%s\nwant\n%s", s, want)
	}
	got, err := ParseCandidates(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cs) {
		t.Fatalf("parsed %d candidates, want %d", len(got), len(cs))
	}
	for i := range cs {
		if got[i] != cs[i] {
			t.Errorf("candidate %d: %+v, want %+v", i, got[i], cs[i])
		}
	}
}

func TestParseCandidatesRefuses(t *testing.T) {
	for _, c := range []struct{ name, in, why string }{
		{"empty", "", `no ":"`},
		{"no length", "a F1 10 admissible", `no ":"`},
		{"leading zero length", "01:a F1 10 admissible", "without leading zeros"},
		{"zero length", "0: F1 10 admissible", "positive decimal"},
		{"signed length", "+1:a F1 10 admissible", "positive decimal"},
		{"length past the end", "9:a F1", "runs past the end"},
		{"length too short", "1:ab F1 10 admissible", "no space after"},
		{"huge length", "99999999999999999999:a", "positive decimal"},
		{"fidelity out of range", "1:a F5 10 admissible", "F0..F4"},
		{"fidelity lower case", "1:a f1 10 admissible", "F0..F4"},
		{"leading zero estimate", "1:a F1 010 admissible", "without leading zeros"},
		{"estimate past uint64", "1:a F1 18446744073709551616 admissible", "without leading zeros"},
		{"negative estimate", "1:a F1 -1 admissible", "without leading zeros"},
		{"no verdict", "1:a F1 10", "no verdict"},
		{"unknown verdict", "1:a F1 10 cheapest", "not one of"},
		{"verdict with a hyphen", "1:a F1 10 below-floor", "not one of"},
		{"double space", "1:a F1  10 admissible", "without leading zeros"},
		{"trailing separator", "1:a F1 10 admissible;", `no ":"`},
		{"trailing space", "1:a F1 10 admissible ", "not one of"},
		{"invalid UTF-8", "1:\xff F1 10 admissible", "not UTF-8"},
		{"duplicate backend", "1:a F1 10 admissible;1:a F2 10 admissible", `both name backend "a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCandidates(c.in)
			if err == nil || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("ParseCandidates(%q) = %v, want an error containing %q", c.in, err, c.why)
			}
		})
	}
}

func TestFormatCandidatesRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		cs   []Candidate
		why  string
	}{
		{"none", nil, "none to record"},
		{"empty name", []Candidate{{Fidelity: wire.F1, Verdict: VerdictAdmissible}}, "name is empty"},
		{"bad verdict", []Candidate{{Backend: "a", Verdict: "cheap"}}, "not one of"},
		{"bad fidelity", []Candidate{{Backend: "a", Fidelity: 9, Verdict: VerdictAdmissible}}, "F0..F4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := FormatCandidates(c.cs); err == nil || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("FormatCandidates = %v, want %q", err, c.why)
			}
		})
	}
}

// routedDraft is draft(0) routed among four candidates with floor F1 and
// ceiling 5000 µJ: cheap is below the floor, mid and mid-b tie at 4000 µJ
// (mid served, the earlier), large is over the ceiling.
func routedDraft() Draft {
	d := draft(0)
	d.Backend, d.Floor, d.Served, d.CeilingUJ = "mid", wire.F1, wire.F2, 5000
	d.Candidates = []Candidate{
		{Backend: "cheap", Fidelity: wire.F0, EstTotalUJ: 100, Verdict: VerdictBelowFloor},
		{Backend: "mid", Fidelity: wire.F2, EstTotalUJ: 4000, Verdict: VerdictAdmissible},
		{Backend: "mid-b", Fidelity: wire.F3, EstTotalUJ: 4000, Verdict: VerdictAdmissible},
		{Backend: "large", Fidelity: wire.F4, EstTotalUJ: 5001, Verdict: VerdictOverCeiling},
	}
	return d
}

func TestRouteRules(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	nonce := bytes.Repeat([]byte{1}, NonceSize)
	ok, err := st.Build(routedDraft(), 0, nil, nonce, testClock())
	if err != nil {
		t.Fatalf("a valid route is refused: %v", err)
	}
	if *ok.CeilingUJ != 5000 || !strings.HasPrefix(*ok.RouteCandidates, "5:cheap F0 100 below floor;3:mid F2 4000 admissible;") {
		t.Fatalf("sealed x_ceiling_uj %d, x_route_candidates %q", *ok.CeilingUJ, *ok.RouteCandidates)
	}
	cases := []struct {
		name string
		edit func(*Draft)
		why  string
	}{
		{"served backend not the cheapest", func(d *Draft) {
			d.Candidates[3] = Candidate{Backend: "large", Fidelity: wire.F4, EstTotalUJ: 3999, Verdict: VerdictAdmissible}
		}, `"large" (est 3999 µJ) is admissible and ranks first`},
		{"tie served by the later", func(d *Draft) { d.Backend = "mid-b" }, `"mid" (est 4000 µJ) is admissible and ranks first`},
		{"backend not a candidate", func(d *Draft) { d.Backend = "elsewhere" }, `backend "elsewhere" is not among the 4 candidates`},
		{"served a below-floor candidate", func(d *Draft) { d.Backend = "cheap" }, `its candidate is "below floor"`},
		{"below floor claimed at the floor", func(d *Draft) { d.Candidates[0].Fidelity = wire.F1 }, `cannot be "below floor"`},
		{"admissible below the floor", func(d *Draft) {
			d.Candidates[0].Verdict = VerdictAdmissible
		}, `"cheap" at F0 with estimate 100 against floor F1 and ceiling 5000 µJ cannot be "admissible"`},
		{"over ceiling within the ceiling", func(d *Draft) { d.Candidates[3].EstTotalUJ = 5000 }, `cannot be "over ceiling"`},
		{"admissible over the ceiling", func(d *Draft) { d.CeilingUJ = 3999 }, `"mid" at F2 with estimate 4000`},
		{"overflow admissible", func(d *Draft) {
			d.Candidates[3] = Candidate{Backend: "large", Fidelity: wire.F4, Overflow: true, Verdict: VerdictAdmissible}
		}, `estimate overflow`},
		{"unhealthy below the floor", func(d *Draft) { d.Candidates[0].Verdict = VerdictUnhealthy }, `cannot be "unhealthy"`},
		{"served an unhealthy candidate", func(d *Draft) { d.Candidates[1].Verdict = VerdictUnhealthy }, `its candidate is "unhealthy"`},
		{"failed after the served backend", func(d *Draft) { d.Candidates[2].Verdict = VerdictFailed }, `"mid-b" failed, but it ranks after "mid"`},
		{"bad candidate", func(d *Draft) { d.Candidates[0].Backend = "" }, "name is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := routedDraft()
			c.edit(&d)
			_, err := st.Build(d, 0, nil, nonce, testClock())
			if ReasonOf(err) != RefusedRoute || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("Build = %v, want reason %q and %q", err, RefusedRoute, c.why)
			}
		})
	}

	// What survives a fallback: unhealthy and failed backends that ranked
	// first, the served one the cheapest admissible after them.
	d := routedDraft()
	d.Candidates[0].Fidelity = wire.F1
	d.Candidates[0].Verdict = VerdictFailed
	d.Candidates[1].Verdict = VerdictUnhealthy
	d.Backend = "mid-b"
	if _, err := st.Build(d, 0, nil, nonce, testClock()); err != nil {
		t.Fatalf("a fallback route is refused: %v", err)
	}

	// Fields a draft cannot get wrong, forged on the receipt.
	for _, c := range []struct {
		name string
		edit func(*Receipt)
		why  string
	}{
		{"ceiling alone", func(r *Receipt) { r.RouteCandidates = nil }, "present together"},
		{"candidates alone", func(r *Receipt) { r.CeilingUJ = nil }, "present together"},
		{"fidelity_met 0", func(r *Receipt) { r.FidelityMet = 0 }, "fidelity_met is 0"},
		{"malformed grammar", func(r *Receipt) { s := "3:mid F2 4000"; r.RouteCandidates = &s }, "x_route_candidates: route candidate 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := *ok
			c.edit(&r)
			err := r.CheckConforming()
			if ReasonOf(err) != RefusedRoute || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("CheckConforming = %v, want reason %q and %q", err, RefusedRoute, c.why)
			}
		})
	}
}

// The two fields survive the strict decoder byte for byte.
func TestRouteFieldsDecode(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	r, err := st.Build(routedDraft(), 0, nil, bytes.Repeat([]byte{1}, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	core, err := r.EncodeCore()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeCore(core)
	if err != nil {
		t.Fatal(err)
	}
	if back.CeilingUJ == nil || *back.CeilingUJ != 5000 || back.RouteCandidates == nil || *back.RouteCandidates != *r.RouteCandidates {
		t.Fatalf("decoded x_ceiling_uj %v, x_route_candidates %v", back.CeilingUJ, back.RouteCandidates)
	}
	again, err := back.EncodeCore()
	if err != nil || !bytes.Equal(again, core) {
		t.Fatalf("re-encoding differs: %v", err)
	}
	if err := back.Check(); err != nil {
		t.Fatal(err)
	}
}
