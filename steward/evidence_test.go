package steward

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"meshd/wire"
)

// hwMetering is evidence that supports HwShunt for any measured figure of
// at least 5000 µJ: an ADC's conversions chained across the whole window,
// with the error bound exactly at the declared accuracy for 5000 µJ.
func hwMetering() wire.Metering {
	return wire.Metering{Meter: "ina226@i2c-1:0x40", Kind: wire.KindADC, WindowNs: 10_000_000, ServeNs: 9_500_000,
		ErrorUJ: 25, Samples: 10, MaxGapNs: 1_100_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 5_000, Shared: 1,
		FullScaleUW: 10_000_000}
}

// hwDraft is draft(i) measured by hardware: 5000 µJ against 4500 estimated.
func hwDraft(i int) Draft {
	d := draft(i)
	d.Energy = wire.Measured(5000, 4500)
	d.Metering = hwMetering()
	return d
}

// mbDraft is draft(i) as a ModelBased figure from a point meter whose
// readings covered part of the window, shared with two other serves.
func mbDraft(i int) Draft {
	d := draft(i)
	d.Energy = wire.Modelled(nil, 5200)
	d.Metering = wire.Metering{Meter: "hwmon:ina3221:VDD_IN", Kind: wire.KindPoint, WindowNs: 40_000_000, ServeNs: 38_000_000,
		ErrorUJ: 900, Samples: 3, MaxGapNs: 30_000_000, CoveredPPM: 250_000, PeriodNs: 10_000_000, AccuracyPPM: 20_000, Shared: 3}
	return d
}

func withMetering(d Draft, f func(*wire.Metering)) Draft {
	f(&d.Metering)
	return d
}

func withEnergy(d Draft, e wire.Energy) Draft {
	d.Energy = e
	return d
}

// handCore encodes r with the test's own CBOR writer (foreign_test.go), so
// that the envelopes below are built and signed without meshd's encoder or
// any of Seal's checks.
func handCore(r *Receipt) []byte {
	m := map[string][]byte{
		"mesh_receipt":      fText(r.MeshReceipt),
		"request_id":        fText(r.RequestID),
		"backend":           fText(r.Backend),
		"recipe":            fText(r.Recipe),
		"route":             fText(r.Route),
		"tokens_in":         fUint(uint64(r.TokensIn)),
		"tokens_out":        fUint(uint64(r.TokensOut)),
		"tokens_accepted":   fUint(uint64(r.TokensAccepted)),
		"cache_hit_tokens":  fUint(uint64(r.CacheHitTokens)),
		"spec_proposed":     fUint(uint64(r.SpecProposed)),
		"spec_accepted":     fUint(uint64(r.SpecAccepted)),
		"fidelity_floor":    fUint(uint64(r.FidelityFloor)),
		"fidelity_met":      fUint(uint64(r.FidelityMet)),
		"estimated_uj":      fUint(r.EstimatedUJ),
		"energy_provenance": fText(r.EnergyProvenance),
		"sequence":          fUint(r.Sequence),
		"nonce":             fText(r.Nonce),
		"steward":           fText(r.Steward),
	}
	for k, v := range map[string]*string{"grant_id": r.GrantID, "prev": r.Prev, "x_meter": r.Meter, "x_meter_kind": r.MeterKind} {
		if v != nil {
			m[k] = fText(*v)
		}
	}
	for k, v := range map[string]*uint64{
		"measured_uj": r.MeasuredUJ, "uj_per_accepted_token": r.UJPerAcceptedToken,
		"x_window_ns": r.WindowNs, "x_serve_ns": r.ServeNs, "x_error_uj": r.ErrorUJ, "x_samples": r.Samples,
		"x_max_gap_ns": r.MaxGapNs, "x_covered_ppm": r.CoveredPPM, "x_period_ns": r.PeriodNs,
		"x_accuracy_ppm": r.AccuracyPPM, "x_shared": r.Shared, "x_idle_uw": r.IdleUW, "x_full_scale_uw": r.FullScaleUW,
		"x_bus_lo_mv": r.BusLoMV, "x_bus_hi_mv": r.BusHiMV, "x_idle_record": r.IdleRecord,
		"x_sealed_unix_ms": r.SealedUnixMs, "x_grant_hold": r.GrantHold, "x_grant_debit_uj": r.GrantDebitUJ,
	} {
		if v != nil {
			m[k] = fUint(*v)
		}
	}
	return fMap(m)
}

// sealedEvidence reads the metering evidence back off a receipt.
func sealedEvidence(r *Receipt) wire.Metering {
	v := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	m := wire.Metering{WindowNs: v(r.WindowNs), ServeNs: v(r.ServeNs), ErrorUJ: v(r.ErrorUJ), Samples: v(r.Samples),
		MaxGapNs: v(r.MaxGapNs), CoveredPPM: v(r.CoveredPPM), PeriodNs: v(r.PeriodNs), AccuracyPPM: v(r.AccuracyPPM),
		Shared: v(r.Shared), IdleUW: r.IdleUW, FullScaleUW: v(r.FullScaleUW)}
	if r.Meter != nil {
		m.Meter = *r.Meter
	}
	if r.MeterKind != nil {
		m.Kind = *r.MeterKind
	}
	return m
}

func sameMetering(a, b wire.Metering) bool {
	if (a.IdleUW == nil) != (b.IdleUW == nil) || a.IdleUW != nil && *a.IdleUW != *b.IdleUW {
		return false
	}
	a.IdleUW, b.IdleUW = nil, nil
	return a == b
}

// Every kind of evidence that supports its provenance seals, carries each
// field of the draft's Metering under its key, encodes as an independent
// encoder would, and verifies.
func TestEvidenceValidCombinations(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	idle := uint64(185_000)   // 1 850 µJ over the 10 ms window, under the 5 000 µJ charged
	mbIdle := uint64(100_000) // 4 000 µJ over the 40 ms window, under the 5 200 µJ charged
	cases := []struct {
		name string
		d    Draft
	}{
		{"Estimator", draft(1)},
		{"HwShunt adc, bound exactly at the accuracy", hwDraft(1)},
		{"HwShunt counter", withMetering(hwDraft(1), func(m *wire.Metering) { m.Kind = wire.KindCounter; m.Meter = "rapl-msr:energy-counter" })},
		{"HwShunt with idle power", withIdleRecord(withMetering(hwDraft(1), func(m *wire.Metering) { m.IdleUW = &idle }), 3)},
		{"HwShunt alone as shared 0", withMetering(hwDraft(1), func(m *wire.Metering) { m.Shared = 0 })},
		{"HwShunt gap of exactly one period", withMetering(hwDraft(1), func(m *wire.Metering) { m.MaxGapNs = m.PeriodNs })},
		{"HwShunt serve filling the window", withMetering(hwDraft(1), func(m *wire.Metering) { m.ServeNs = m.WindowNs })},
		{"HwShunt zero bound", withMetering(hwDraft(1), func(m *wire.Metering) { m.ErrorUJ = 0 })},
		{"HwShunt at the accuracy ceiling", withMetering(hwDraft(1), func(m *wire.Metering) { m.AccuracyPPM = wire.MaxHwAccuracyPPM; m.ErrorUJ = 500 })},
		{"HwShunt bound rounded up", withMetering(withEnergy(hwDraft(1), wire.Measured(5001, 4500)), func(m *wire.Metering) { m.ErrorUJ = 26 })},
		{"HwShunt largest figure, bound past 2^64/10 needs 128 bits", withMetering(withEnergy(hwDraft(1), wire.Measured(math.MaxUint64, 4500)), func(m *wire.Metering) {
			m.AccuracyPPM, m.ErrorUJ, m.FullScaleUW = wire.MaxHwAccuracyPPM, 1_844_674_407_370_955_162, 0
		})},
		{"ModelBased point, apportioned, partial coverage", mbDraft(1)},
		{"ModelBased adc", withMetering(mbDraft(1), func(m *wire.Metering) { m.Kind = wire.KindADC; m.Meter = "ina226@i2c-1:0x41" })},
		{"ModelBased counter", withMetering(mbDraft(1), func(m *wire.Metering) { m.Kind = wire.KindCounter })},
		{"ModelBased model", withMetering(mbDraft(1), func(m *wire.Metering) { m.Kind = wire.KindModel; m.Meter = "rapl:package-0" })},
		{"ModelBased with no coverage and idle power", withIdleRecord(withMetering(mbDraft(1), func(m *wire.Metering) { m.CoveredPPM = 0; m.IdleUW = &mbIdle }), 0)},
		{"ModelBased with an unbounded error", withMetering(mbDraft(1), func(m *wire.Metering) { m.ErrorUJ = math.MaxUint64; m.AccuracyPPM = math.MaxUint64 })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// An idle figure names an earlier idle record, so its serve is
			// sealed after it.
			seq, prev := uint64(0), (*wire.ContentID)(nil)
			if c.d.IdleRecord != nil {
				p := wire.ContentOf([]byte("the envelope before"))
				seq, prev = *c.d.IdleRecord+1, &p
			}
			r, err := st.Build(c.d, seq, prev, make([]byte, NonceSize), testClock())
			if err != nil {
				t.Fatalf("valid evidence refused: %v", err)
			}
			if (r.IdleRecord == nil) != (c.d.IdleRecord == nil) || r.IdleRecord != nil && *r.IdleRecord != *c.d.IdleRecord {
				t.Fatalf("x_idle_record %v, the draft's %v", r.IdleRecord, c.d.IdleRecord)
			}
			want := c.d.Metering
			if c.d.Energy.Provenance() == wire.Estimator {
				want = wire.Metering{Meter: want.Meter, Kind: want.Kind, WindowNs: want.WindowNs, ServeNs: want.ServeNs}
			}
			if got := sealedEvidence(r); !sameMetering(got, want) {
				t.Fatalf("sealed evidence %+v, want %+v", got, want)
			}
			core, err := r.EncodeCore()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(core, handCore(r)) {
				t.Fatal("EncodeCore differs from an independent encoding of the same receipt")
			}
			o, err := OpenEnvelope(fSign1(k.priv, core), k.Public())
			if err != nil {
				t.Fatalf("sealed receipt does not verify: %v", err)
			}
			if got := sealedEvidence(o.Receipt); !sameMetering(got, want) {
				t.Fatalf("decoded evidence %+v, want %+v", got, want)
			}
		})
	}
}

// withIdleRecord names the idle record d's idle power is taken from.
func withIdleRecord(d Draft, seq uint64) Draft {
	d.IdleRecord = &seq
	return d
}

// An Estimator figure has no meter behind it: whatever readings its draft
// carries are not sealed as evidence.
func TestEstimatorSealsNoEvidence(t *testing.T) {
	idle := uint64(7)
	d := withMetering(draft(1), func(m *wire.Metering) {
		m.ErrorUJ, m.Samples, m.MaxGapNs, m.CoveredPPM, m.PeriodNs, m.AccuracyPPM, m.Shared, m.IdleUW = 1, 2, 3, 4, 5, 6, 1, &idle
	})
	r, err := New(testKey(t), nil, Options{}).Build(d, 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.meterEvidence() {
		if f.v != nil {
			t.Errorf("Estimator receipt carries %s", f.key)
		}
	}
	if r.IdleUW != nil {
		t.Error("Estimator receipt carries x_idle_uw")
	}
}

// evidenceForgeries are receipts whose provenance does not follow from
// their evidence. A nil mut is a forged Draft, which Build must refuse; a
// mut forges the receipt itself, as only a hand-built envelope can.
func evidenceForgeries() []struct {
	name string
	d    Draft
	mut  func(*Receipt)
	want Reason
	msg  string
} {
	hw := hwDraft(1)
	hwM := func(f func(*wire.Metering)) Draft { return withMetering(hw, f) }
	mbM := func(f func(*wire.Metering)) Draft { return withMetering(mbDraft(1), f) }
	estM := func(f func(*wire.Metering)) Draft { return withMetering(draft(1), f) }
	return []struct {
		name string
		d    Draft
		mut  func(*Receipt)
		want Reason
		msg  string
	}{
		// The combinations an independent check found sealed and verified.
		{"HwShunt from the estimator, 0 samples, 0 ns window", hwM(func(m *wire.Metering) {
			m.Meter, m.Kind, m.Samples, m.WindowNs, m.ServeNs = EstimatorMeter, wire.KindEstimator, 0, 0, 0
		}), nil, RefusedEvidence, "evidence rule 2"},
		{"HwShunt with 1 sample and a 10 s gap", hwM(func(m *wire.Metering) {
			m.Samples, m.MaxGapNs, m.PeriodNs, m.WindowNs, m.ServeNs = 1, 10e9, 1e6, 10e9, 10e9
		}), nil, RefusedEvidence, "x_max_gap_ns 10000000000 exceeds x_period_ns 1000000"},
		{"HwShunt with a 1e9 µJ bound", hwM(func(m *wire.Metering) { m.ErrorUJ = 1e9 }), nil, RefusedEvidence,
			"x_error_uj 1000000000 exceeds the meter's declared accuracy: 5000 ppm of measured_uj 5000 allows at most 25 µJ"},
		// Rule 1: the group's members and their domains.
		{"no meter name", hwM(func(m *wire.Metering) { m.Meter = "" }), nil, RefusedFieldValue, "x_meter must name the meter"},
		{"empty kind", hwM(func(m *wire.Metering) { m.Kind = "" }), nil, RefusedFieldValue, `x_meter_kind ""`},
		{"unknown kind", hwM(func(m *wire.Metering) { m.Kind = "shunt" }), nil, RefusedFieldValue, `x_meter_kind "shunt" is not one of`},
		{"missing kind", hw, func(r *Receipt) { r.MeterKind = nil }, RefusedMissingField, "x_meter_kind is missing"},
		{"missing serve", hw, func(r *Receipt) { r.ServeNs = nil }, RefusedMissingField, "x_serve_ns is missing"},
		{"missing window", draft(1), func(r *Receipt) { r.WindowNs = nil }, RefusedMissingField, "x_window_ns is missing"},
		{"missing seal time", draft(1), func(r *Receipt) { r.SealedUnixMs = nil }, RefusedMissingField, "x_sealed_unix_ms is missing"},
		{"kind alone", draft(1), func(r *Receipt) { r.Meter, r.WindowNs, r.ServeNs, r.SealedUnixMs = nil, nil, nil, nil }, RefusedMissingField, "x_meter is missing"},
		// Rule 2: the estimator and only the estimator; it carries nothing.
		{"HwShunt naming the estimator", hwM(func(m *wire.Metering) { m.Meter = EstimatorMeter }), nil, RefusedEvidence, `x_meter "estimator"`},
		{"HwShunt of kind estimator", hwM(func(m *wire.Metering) { m.Kind = wire.KindEstimator }), nil, RefusedEvidence, `x_meter_kind "estimator"`},
		{"ModelBased naming the estimator", mbM(func(m *wire.Metering) { m.Meter = EstimatorMeter }), nil, RefusedEvidence, "energy_provenance ModelBased"},
		{"ModelBased of kind estimator", mbM(func(m *wire.Metering) { m.Kind = wire.KindEstimator }), nil, RefusedEvidence, "evidence rule 2"},
		{"Estimator naming a meter", estM(func(m *wire.Metering) { m.Meter = "ina226@i2c-1:0x40" }), nil, RefusedEvidence, `x_meter "ina226@i2c-1:0x40"`},
		{"Estimator of kind adc", estM(func(m *wire.Metering) { m.Kind = wire.KindADC }), nil, RefusedEvidence, `x_meter_kind "adc"`},
		{"Estimator with samples", draft(1), func(r *Receipt) { r.Samples = u64p(3) }, RefusedCoupling, "Estimator names no meter and carries no samples, but x_samples"},
		{"Estimator with coverage", draft(1), func(r *Receipt) { r.CoveredPPM = u64p(wire.FullPPM) }, RefusedCoupling, "x_covered_ppm is present"},
		{"Estimator with shared", draft(1), func(r *Receipt) { r.Shared = u64p(1) }, RefusedCoupling, "x_shared is present"},
		{"Estimator with idle power", draft(1), func(r *Receipt) { r.IdleUW = u64p(1) }, RefusedCoupling, "x_idle_uw is present"},
		// Rule 3: a figure from a meter.
		{"HwShunt without coverage", hw, func(r *Receipt) { r.CoveredPPM = nil }, RefusedCoupling, "must carry x_covered_ppm"},
		{"HwShunt without period", hw, func(r *Receipt) { r.PeriodNs = nil }, RefusedCoupling, "must carry x_period_ns"},
		{"ModelBased without accuracy", mbDraft(1), func(r *Receipt) { r.AccuracyPPM = nil }, RefusedCoupling, "must carry x_accuracy_ppm"},
		{"ModelBased without shared", mbDraft(1), func(r *Receipt) { r.Shared = nil }, RefusedCoupling, "must carry x_shared"},
		{"HwShunt with 0 samples", hwM(func(m *wire.Metering) { m.Samples = 0 }), nil, RefusedEvidence, "x_samples is 0"},
		{"ModelBased with 0 samples", mbM(func(m *wire.Metering) { m.Samples = 0 }), nil, RefusedEvidence, "a ModelBased figure needs at least one reading"},
		{"HwShunt over a 0 ns window", hwM(func(m *wire.Metering) { m.WindowNs, m.ServeNs = 0, 0 }), nil, RefusedEvidence, "x_window_ns is 0"},
		{"HwShunt with a 0 ns period", hwM(func(m *wire.Metering) { m.PeriodNs, m.MaxGapNs = 0, 0 }), nil, RefusedEvidence, "x_period_ns is 0"},
		{"coverage above the whole window", mbM(func(m *wire.Metering) { m.CoveredPPM = wire.FullPPM + 1 }), nil, RefusedEvidence, "x_covered_ppm 1000001 exceeds 1000000"},
		{"HwShunt serve longer than window", hwM(func(m *wire.Metering) { m.ServeNs = m.WindowNs + 1 }), nil, RefusedEvidence, "x_serve_ns 10000001 exceeds x_window_ns 10000000"},
		{"ModelBased serve longer than window", mbM(func(m *wire.Metering) { m.ServeNs = 2 * m.WindowNs }), nil, RefusedEvidence, "the gross window contains the serve"},
		// Rule 4: what only hardware can claim.
		{"HwShunt from a point meter", hwM(func(m *wire.Metering) { m.Kind = wire.KindPoint }), nil, RefusedEvidence, `HwShunt needs a meter of kind adc or counter, x_meter_kind is "point"`},
		{"HwShunt from a model", hwM(func(m *wire.Metering) { m.Kind = wire.KindModel }), nil, RefusedEvidence, `x_meter_kind is "model"`},
		{"HwShunt at 999 999 ppm coverage", hwM(func(m *wire.Metering) { m.CoveredPPM = wire.FullPPM - 1 }), nil, RefusedEvidence, "x_covered_ppm is 999999 of 1000000"},
		{"HwShunt gap one ns over the period", hwM(func(m *wire.Metering) { m.MaxGapNs = m.PeriodNs + 1 }), nil, RefusedEvidence, "x_max_gap_ns 1111001 exceeds x_period_ns 1111000"},
		{"HwShunt accuracy above the ceiling", hwM(func(m *wire.Metering) { m.AccuracyPPM = wire.MaxHwAccuracyPPM + 1 }), nil, RefusedEvidence, "x_accuracy_ppm 100001 exceeds the HwShunt ceiling of 100000"},
		{"HwShunt apportioned", hwM(func(m *wire.Metering) { m.Shared = 2 }), nil, RefusedEvidence, "an apportioned figure is never HwShunt, x_shared is 2"},
		{"HwShunt bound one µJ over the accuracy", hwM(func(m *wire.Metering) { m.ErrorUJ = 26 }), nil, RefusedEvidence, "allows at most 25 µJ"},
		// Rule 5: a figure resting on an assumed bus voltage.
		{"HwShunt with an assumed bus band", hwM(func(m *wire.Metering) { m.BusBand = &wire.BusBand{LoMV: 11975, HiMV: 12025} }), nil, RefusedEvidence,
			"assumed bus voltage (x_bus_lo_mv 11975 .. x_bus_hi_mv 12025) is never HwShunt"},
		{"bus band low without high", mbDraft(1), func(r *Receipt) { r.BusLoMV = u64p(11975) }, RefusedCoupling, "x_bus_lo_mv and x_bus_hi_mv travel together"},
		{"bus band upside down", mbM(func(m *wire.Metering) { m.BusBand = &wire.BusBand{LoMV: 12025, HiMV: 11975} }), nil, RefusedFieldValue, "x_bus_lo_mv 12025 exceeds x_bus_hi_mv 11975"},
		{"Estimator with a bus band", draft(1), func(r *Receipt) { r.BusLoMV, r.BusHiMV = u64p(1), u64p(2) }, RefusedCoupling, "x_bus_lo_mv is present"},
		// 2^63 × 100 and 2^62 × 10^6 both wrap to 0 in 64 bits, where the
		// bound would wrongly pass.
		{"HwShunt bound that 64-bit products would pass", withMetering(withEnergy(hw, wire.Measured(1<<63, 4500)), func(m *wire.Metering) {
			m.AccuracyPPM, m.ErrorUJ = 100, 1<<62
		}), nil, RefusedEvidence, "allows at most 922337203685478 µJ"},
	}
}

// Every forgery is refused at seal with its reason and a message naming the
// rule and the values; hand-built and signed with the steward's own key, it
// is refused by envelope opening and by log verification for the same
// reason.
func TestEvidenceForgeriesRefused(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	for _, c := range evidenceForgeries() {
		t.Run(c.name, func(t *testing.T) {
			check := func(stage string, err error) {
				t.Helper()
				if got := ReasonOf(err); got != c.want || !errors.Is(err, ErrField) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("%s: reason %q, want %q with a message containing %q (err %v)", stage, got, c.want, c.msg, err)
				}
			}
			if c.mut == nil {
				_, err := st.Build(c.d, 0, nil, nonce, testClock())
				check("seal", err)
			}
			forge := func(seq uint64, prev *wire.ContentID) []byte {
				r, err := st.assemble(c.d, seq, prev, nonce, testClock())
				if err != nil {
					t.Fatal(err)
				}
				if c.mut != nil {
					c.mut(r)
				}
				check("Check", r.Check())
				return fSign1(k.priv, handCore(r))
			}
			_, err := OpenEnvelope(forge(0, nil), k.Public())
			check("open envelope", err)

			// A log whose second record is the forgery: the seal path
			// refuses it and leaves the log as it was; appended raw, it
			// fails verification at sequence 1.
			dir := filepath.Join(t.TempDir(), "receipts")
			lst, l, _ := openTestLog(t, dir, k, LogOptions{NoSync: true, CheckpointEvery: -1})
			if _, err := lst.Seal(bg, draft(0)); err != nil {
				t.Fatal(err)
			}
			if c.mut == nil {
				_, err := lst.Seal(bg, c.d)
				check("Seal", err)
				if l.Next() != 1 {
					t.Fatalf("a refused seal moved the log to %d", l.Next())
				}
			}
			if _, _, err := l.Append(bg, func(seq uint64, prev *wire.ContentID) ([]byte, error) { return forge(seq, prev), nil }); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
			var de *DamageError
			if !errors.As(err, &de) || de.Sequence != 1 {
				t.Fatalf("log verification: %v, want damage at sequence 1", err)
			}
			check("verify log", err)
		})
	}
}

// The impossible receipts an independent check found sealed and verified
// with the steward's own key, each refused at seal (Build and Seal) and at
// verify (OpenEnvelope) by the evidence rule that names it; the same draft
// with consistent evidence seals and verifies.
func TestImpossibleEvidenceRefused(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	idle := uint64(1_000_000_000_000)
	hw := func(f func(*wire.Metering)) Draft { return withMetering(hwDraft(1), f) }
	cases := []struct {
		name string
		d    Draft
		rule string // "" for consistent evidence
	}{
		{"consistent: chained INA226 conversions", hwDraft(1), ""},
		{"consistent: one whole conversion", withMetering(withEnergy(hwDraft(1), wire.Measured(1100, 1000)), func(m *wire.Metering) {
			// A single 1 ms conversion (nominal 1 ms, declared 1.1 ms) read
			// at 1 W against a 10 W full scale.
			m.WindowNs, m.ServeNs, m.Samples, m.MaxGapNs, m.PeriodNs, m.ErrorUJ = 1_000_000, 900_000, 1, 1_000_000, 1_100_000, 5
		}), ""},
		{"consistent: a span of INA226 and RAPL, ModelBased of kind model", withEnergy(hw(func(m *wire.Metering) {
			m.Meter, m.Kind, m.Shared = "span(ina226@i2c-1:0x40+rapl:package-0)", wire.KindModel, 1
		}), wire.Modelled(nil, 5000)), ""},
		{"consistent: a foreign meter, generic rules only", hw(func(m *wire.Metering) { m.Meter, m.FullScaleUW = "acme-meter/7", 0 }), ""},
		// An INA228's energy accumulator under the kernel's driver, read
		// late on a loaded machine: 5 differences of a 40 ms-period counter
		// cover a 263 ms window (each covers the time since the read before,
		// the largest 106 ms). ModelBased, so its readings need not each
		// lie within a period.
		{"consistent: a ModelBased energy counter read late", withEnergy(hw(func(m *wire.Metering) {
			m.Meter, m.Kind, m.Samples, m.PeriodNs, m.WindowNs, m.ServeNs, m.MaxGapNs = "hwmon:hwmon0/ina228:1", wire.KindCounter, 5, 40_000_000, 262_827_644, 200_000_000, 105_868_428
		}), wire.Modelled(nil, 5000)), ""},
		{"an HwShunt energy counter read late", hw(func(m *wire.Metering) {
			m.Meter, m.Kind, m.Samples, m.PeriodNs, m.WindowNs, m.ServeNs, m.MaxGapNs = "hwmon:hwmon0/ina228:1", wire.KindCounter, 5, 40_000_000, 262_827_644, 200_000_000, 40_000_000
		}), "evidence rule 5"},
		{"1 sample over a 10 s window at a 1.1 ms period", hw(func(m *wire.Metering) {
			m.Samples, m.WindowNs, m.ServeNs, m.PeriodNs, m.MaxGapNs = 1, 10e9, 9e9, 1_100_000, 1_100_000
		}), "evidence rule 5"},
		{"a 1-hour period and gap from one sample", hw(func(m *wire.Metering) {
			m.Samples, m.WindowNs, m.ServeNs, m.PeriodNs, m.MaxGapNs = 1, 3600e9, 3600e9, 3600e9, 3600e9
		}), "evidence rule 6"},
		{"1e9 samples in 101 ms", hw(func(m *wire.Metering) { m.Samples, m.WindowNs, m.ServeNs = 1e9, 101e6, 100e6 }), "evidence rule 5"},
		{"x_idle_uw = 1e12 µW", hw(func(m *wire.Metering) { m.IdleUW = &idle }), "evidence rule 8"},
		{"x_idle_uw = 1e12 µW on a foreign meter", hw(func(m *wire.Metering) { m.Meter, m.FullScaleUW, m.IdleUW = "acme-meter/7", 0, &idle }), "evidence rule 9"},
		{"a span naming rapl declared adc", hw(func(m *wire.Metering) { m.Meter = "span(ina226@i2c-1:0x40+rapl:package-0)" }), "evidence rule 10"},
		{"a span naming rapl and a foreign meter declared adc", hw(func(m *wire.Metering) { m.Meter = "span(acme-meter/7+rapl:package-0)" }), "evidence rule 10"},
		{"a RAPL zone declared counter", withEnergy(hw(func(m *wire.Metering) { m.Meter, m.Kind = "rapl:package-0", wire.KindCounter }), wire.Modelled(nil, 5000)), "evidence rule 10"},
		{"a 1 ns window for 5 tokens", hw(func(m *wire.Metering) { m.WindowNs, m.ServeNs, m.Samples, m.MaxGapNs = 1, 1, 1, 1 }), "evidence rule 7"},
		{"HwShunt over no serve", hw(func(m *wire.Metering) { m.ServeNs = 0 }), "evidence rule 7"},
		{"energy beyond full scale", hw(func(m *wire.Metering) { m.FullScaleUW = 100_000 }), "evidence rule 8"},
		{"a full scale of 0", hw(func(m *wire.Metering) { m.FullScaleUW = 0 }), ""}, // unstated: Build drops it
		{"idle above the window's energy", hw(func(m *wire.Metering) { v := uint64(600_000); m.IdleUW = &v }), "evidence rule 9"},
		{"INA219 period below its fastest conversion", hw(func(m *wire.Metering) {
			m.Meter, m.PeriodNs, m.MaxGapNs, m.Samples = "ina219@i2c-1:0x41", 80_000, 80_000, 125
		}), "evidence rule 6"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := st.Build(c.d, 0, nil, nonce, testClock())
			if c.rule == "" {
				if err != nil {
					t.Fatalf("consistent evidence refused at seal: %v", err)
				}
				if _, err := OpenEnvelope(fSign1(k.priv, handCore(r)), k.Public()); err != nil {
					t.Fatalf("consistent evidence refused at verify: %v", err)
				}
				return
			}
			check := func(stage string, err error) {
				t.Helper()
				if ReasonOf(err) != RefusedEvidence || !strings.Contains(err.Error(), c.rule+":") {
					t.Fatalf("%s: %v, want %s [%s]", stage, err, c.rule, RefusedEvidence)
				}
			}
			check("Build", err)
			dir := filepath.Join(t.TempDir(), "receipts")
			lst, l, _ := openTestLog(t, dir, k, LogOptions{NoSync: true, CheckpointEvery: -1})
			_, err = lst.Seal(bg, c.d)
			check("Seal", err)
			if l.Next() != 0 {
				t.Fatalf("a refused seal moved the log to %d", l.Next())
			}
			l.Close()
			forged, err := st.assemble(c.d, 0, nil, nonce, testClock())
			if err != nil {
				t.Fatal(err)
			}
			_, err = OpenEnvelope(fSign1(k.priv, handCore(forged)), k.Public())
			check("OpenEnvelope", err)
		})
	}
}

// A ModelBased figure that assumed its bus voltage seals the band, and the
// band reads back off the decoded receipt as the draft stated it.
func TestBusBandSealed(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	d := withMetering(mbDraft(1), func(m *wire.Metering) { m.BusBand = &wire.BusBand{LoMV: 11975, HiMV: 12025} })
	r, err := st.Build(d, 0, nil, make([]byte, NonceSize), testClock())
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
	if err := back.CheckConforming(); err != nil {
		t.Fatal(err)
	}
	if b := back.Metering().BusBand; b == nil || *b != (wire.BusBand{LoMV: 11975, HiMV: 12025}) {
		t.Fatalf("bus band read back as %+v", b)
	}
}
