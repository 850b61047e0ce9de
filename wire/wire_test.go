package wire

import (
	"errors"
	"strings"
	"testing"
)

func validRequest() ServeRequest {
	return ServeRequest{PromptHash: ContentOf([]byte("hi")), PromptTokens: 3, MaxTokens: 8, FidelityFloor: F2, JouleCeilingUJ: 5000}
}

func TestRequestRoundTripAndID(t *testing.T) {
	r := validRequest()
	b, err := r.MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	var back ServeRequest
	if err := back.UnmarshalCBOR(b); err != nil {
		t.Fatal(err)
	}
	if back != r {
		t.Fatalf("round trip: %+v != %+v", back, r)
	}
	id1, _ := r.ID()
	r.MaxTokens++
	id2, _ := r.ID()
	if id1 == id2 || id1 != ContentOf(b) {
		t.Fatal("request id is not the content id of its CBOR")
	}
}

func TestRequestMissingFieldsNamed(t *testing.T) {
	h := ContentOf([]byte("x"))
	full := map[string]any{
		"prompt_hash": h[:], "prompt_tokens": 1, "max_tokens": 4,
		"fidelity_floor": 1, "joule_ceiling_uj": 100,
	}
	for key := range full {
		t.Run(key, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range full {
				if k != key {
					m[k] = v
				}
			}
			b, _ := EncMode().Marshal(m)
			var r ServeRequest
			err := r.UnmarshalCBOR(b)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), key+" is missing") {
				t.Fatalf("error %v does not name missing %s", err, key)
			}
		})
	}
	bad := []struct {
		name string
		mut  func(map[string]any)
		want string
	}{
		{"fidelity 5", func(m map[string]any) { m["fidelity_floor"] = 5 }, "outside F0..F4"},
		{"zero ceiling", func(m map[string]any) { m["joule_ceiling_uj"] = 0 }, "joule_ceiling_uj"},
		{"short hash", func(m map[string]any) { m["prompt_hash"] = []byte{1, 2} }, "32 bytes"},
		{"float tokens", func(m map[string]any) { m["max_tokens"] = 4.5 }, "invalid serve request"},
		{"unknown field", func(m map[string]any) { m["prompt"] = "leak" }, "invalid serve request"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range full {
				m[k] = v
			}
			c.mut(m)
			b, _ := EncMode().Marshal(m)
			var r ServeRequest
			if err := r.UnmarshalCBOR(b); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want mention of %q", err, c.want)
			}
		})
	}
	var r ServeRequest
	if err := r.UnmarshalCBOR([]byte{0xa5, 0x01}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("malformed CBOR: %v", err)
	}
}

func TestFidelity(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Fidelity
		ok   bool
	}{{"F0", F0, true}, {"f4", F4, true}, {"3", F3, true}, {"F5", 0, false}, {"-1", 0, false}, {"high", 0, false}} {
		got, err := ParseFidelity(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseFidelity(%q) = %v, %v", c.in, got, err)
		}
	}
	if !(F0 < F1 && F3 < F4) || Fidelity(5).Valid() {
		t.Error("fidelity order or range wrong")
	}
	r := validRequest()
	r.FidelityFloor = 7
	if err := r.Validate(); err == nil {
		t.Error("floor F7 accepted")
	}
}

func TestEnergyCoupling(t *testing.T) {
	m := uint64(120)
	cases := []struct {
		name     string
		measured *uint64
		p        Provenance
		ok       bool
	}{
		{"HwShunt with reading", &m, HwShunt, true},
		{"HwShunt without reading", nil, HwShunt, false},
		{"Estimator without reading", nil, Estimator, true},
		{"Estimator with reading", &m, Estimator, false},
		{"ModelBased without reading", nil, ModelBased, true},
		{"ModelBased with reading", &m, ModelBased, true},
		{"unset provenance", nil, 0, false},
		{"unknown provenance", nil, 9, false},
	}
	for _, c := range cases {
		e, err := NewEnergy(c.measured, 100, c.p)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v", c.name, err)
			continue
		}
		if !c.ok && !errors.Is(err, ErrCoupling) {
			t.Errorf("%s: error does not wrap ErrCoupling", c.name)
		}
		if c.ok {
			want := uint64(100)
			if c.measured != nil {
				want = m
			}
			if e.UJ() != want {
				t.Errorf("%s: UJ() = %d, want %d", c.name, e.UJ(), want)
			}
		}
	}
	if (Energy{}).Validate() == nil {
		t.Error("zero Energy validates")
	}
	if Measured(5, 9).UJ() != 5 || Estimated(9).UJ() != 9 {
		t.Error("UJ prefers the measurement")
	}
}

func TestContentID(t *testing.T) {
	id := ContentOf([]byte("abc"))
	back, err := ParseContentID(id.String())
	if err != nil || back != id {
		t.Fatal(err)
	}
	for _, s := range []string{"", "zz", strings.Repeat("g", 64)} {
		if _, err := ParseContentID(s); err == nil {
			t.Errorf("ParseContentID(%q) accepted", s)
		}
	}
}

func TestOutcomeValidate(t *testing.T) {
	if (ServeOutcome{TokensOut: 2, TokensAccepted: 3}).Validate() == nil {
		t.Error("accepted > out accepted")
	}
	if (ServeOutcome{SpecProposed: 1, SpecAccepted: 2}).Validate() == nil {
		t.Error("spec accepted > proposed accepted")
	}
}
