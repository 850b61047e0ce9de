package agent

import (
	"errors"
	"strings"
	"testing"

	"meshd/engine"
	"meshd/wire"
)

func refs(t *testing.T, cfgs ...engine.ReferenceConfig) []engine.Backend {
	t.Helper()
	var out []engine.Backend
	for _, c := range cfgs {
		if c.Work == 0 {
			c.Work = 1
		}
		b, err := engine.NewReference(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func req(floor wire.Fidelity, ceiling uint64) wire.ServeRequest {
	return wire.ServeRequest{PromptHash: wire.ContentOf([]byte("p")), PromptTokens: 10, MaxTokens: 90, FidelityFloor: floor, JouleCeilingUJ: ceiling}
}

func TestRoute(t *testing.T) {
	bs := refs(t,
		engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10},   // est 1000
		engine.ReferenceConfig{Name: "mid", Fidelity: wire.F2, UJPerToken: 50},    // est 5000
		engine.ReferenceConfig{Name: "mid2", Fidelity: wire.F3, UJPerToken: 50},   // est 5000 (tie)
		engine.ReferenceConfig{Name: "large", Fidelity: wire.F4, UJPerToken: 400}, // est 40000
	)
	cases := []struct {
		name       string
		req        wire.ServeRequest
		want       string
		admissible []bool
		reasons    []string
	}{
		{"cheapest wins", req(wire.F0, 1e6), "tiny", []bool{true, true, true, true}, nil},
		{"floor excludes tiny, tie to first registered", req(wire.F2, 1e6), "mid", []bool{false, true, true, true},
			[]string{"below floor: F1 < F2"}},
		{"ceiling excludes large", req(wire.F4, 39_999), "", []bool{false, false, false, false},
			[]string{"below floor", "below floor", "below floor", "over ceiling: est 40000 µJ > 39999 µJ"}},
		{"exact ceiling admissible", req(wire.F4, 40_000), "large", []bool{false, false, false, true}, nil},
		{"frontier is the last resort", req(wire.F3, 1e6), "mid2", []bool{false, false, true, true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Route(c.req, bs)
			if len(d.Candidates) != len(bs) {
				t.Fatalf("recorded %d candidates, want %d", len(d.Candidates), len(bs))
			}
			for i, a := range c.admissible {
				cand := d.Candidates[i]
				if cand.Admissible != a {
					t.Errorf("%s admissible = %v, want %v", cand.Backend, cand.Admissible, a)
				}
				if !a && cand.Reason == "" {
					t.Errorf("%s inadmissible with no reason", cand.Backend)
				}
				if a && cand.Reason != "" {
					t.Errorf("%s admissible but has reason %q", cand.Backend, cand.Reason)
				}
				if i < len(c.reasons) && !strings.Contains(cand.Reason, c.reasons[i]) {
					t.Errorf("%s reason %q, want %q", cand.Backend, cand.Reason, c.reasons[i])
				}
			}
			if c.want == "" {
				if !errors.Is(err, ErrNoRoute) || d.Chosen != -1 || !strings.Contains(err.Error(), "none of 4 backends admissible") {
					t.Fatalf("want a refusal naming why, got %v (chosen %d)", err, d.Chosen)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Candidates[d.Chosen].Backend; got != c.want {
				t.Fatalf("chose %s, want %s", got, c.want)
			}
			if !strings.HasPrefix(d.Justification, c.want+": cheapest") || strings.Contains(d.Justification, "\n") {
				t.Fatalf("justification %q", d.Justification)
			}
		})
	}
}

func TestRouteEdgeCases(t *testing.T) {
	if _, err := Route(req(wire.F0, 100), nil); !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), "no backends registered") {
		t.Fatalf("empty registry: %v", err)
	}
	huge := refs(t, engine.ReferenceConfig{Name: "huge", Fidelity: wire.F4, UJPerToken: 1 << 60})
	d, err := Route(req(wire.F0, ^uint64(0)), huge)
	if !errors.Is(err, ErrNoRoute) || !d.Candidates[0].Overflow {
		t.Fatalf("overflowing estimate admitted: %v %+v", err, d.Candidates[0])
	}
	bad := req(wire.F0, 0)
	if _, err := Route(bad, huge); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("request without ceiling routed: %v", err)
	}
}
