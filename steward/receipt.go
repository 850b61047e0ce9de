package steward

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"meshd/wire"
)

// Profile is the value of the mesh_receipt field.
const Profile = "mesh/1"

// NonceSize is the size in bytes of a receipt nonce (hex on the wire).
const NonceSize = 16

// Receipt is the signed core of a mesh/1 receipt (§6.1) plus meshd's
// documented extension fields (PROFILE.md §6). Optional fields are pointers
// and are dropped when nil; every other field is always present, zero
// included. It is encoded as a deterministic CBOR map with text keys and
// only unsigned integer and text values: no floats, booleans or nulls.
//
// meshd's extensions are pointers too: meshd always seals them, but a
// receipt from another implementation need not carry them (PROFILE.md §15).
type Receipt struct {
	MeshReceipt        string  `cbor:"mesh_receipt"`
	RequestID          string  `cbor:"request_id"`
	GrantID            *string `cbor:"grant_id,omitempty"`
	Backend            string  `cbor:"backend"`
	Recipe             string  `cbor:"recipe"`
	Route              string  `cbor:"route"`
	TokensIn           uint32  `cbor:"tokens_in"`
	TokensOut          uint32  `cbor:"tokens_out"`
	TokensAccepted     uint32  `cbor:"tokens_accepted"`
	CacheHitTokens     uint32  `cbor:"cache_hit_tokens"`
	SpecProposed       uint32  `cbor:"spec_proposed"`
	SpecAccepted       uint32  `cbor:"spec_accepted"`
	FidelityFloor      uint8   `cbor:"fidelity_floor"`
	FidelityMet        uint8   `cbor:"fidelity_met"`
	EstimatedUJ        uint64  `cbor:"estimated_uj"`
	MeasuredUJ         *uint64 `cbor:"measured_uj,omitempty"`
	UJPerAcceptedToken *uint64 `cbor:"uj_per_accepted_token,omitempty"`
	EnergyProvenance   string  `cbor:"energy_provenance"`
	Sequence           uint64  `cbor:"sequence"`
	Prev               *string `cbor:"prev,omitempty"`
	Nonce              string  `cbor:"nonce"`
	Steward            string  `cbor:"steward"`

	// Extensions (PROFILE.md §6): the evidence an auditor needs to judge
	// the energy figure (wire.Metering, field for field), and the link to
	// the grant ledger.
	Meter       *string `cbor:"x_meter,omitempty"`
	MeterKind   *string `cbor:"x_meter_kind,omitempty"`
	WindowNs    *uint64 `cbor:"x_window_ns,omitempty"`
	ServeNs     *uint64 `cbor:"x_serve_ns,omitempty"`
	ErrorUJ     *uint64 `cbor:"x_error_uj,omitempty"`
	Samples     *uint64 `cbor:"x_samples,omitempty"`
	MaxGapNs    *uint64 `cbor:"x_max_gap_ns,omitempty"`
	CoveredPPM  *uint64 `cbor:"x_covered_ppm,omitempty"`
	PeriodNs    *uint64 `cbor:"x_period_ns,omitempty"`
	AccuracyPPM *uint64 `cbor:"x_accuracy_ppm,omitempty"`
	Shared      *uint64 `cbor:"x_shared,omitempty"`
	IdleUW      *uint64 `cbor:"x_idle_uw,omitempty"`
	// FullScaleUW is the largest power the meter can register (a span:
	// its members' sum), so a verifier can bound the window's energy.
	FullScaleUW  *uint64 `cbor:"x_full_scale_uw,omitempty"`
	SealedUnixMs *uint64 `cbor:"x_sealed_unix_ms,omitempty"`
	GrantHold    *uint64 `cbor:"x_grant_hold,omitempty"`
	// GrantDebitUJ is what the serve debited from the grant: the charged
	// figure capped at the hold (the request's ceiling), so a budget is
	// never overdrawn even when a serve costs more than its ceiling; the
	// overrun stays visible as charged − debit.
	GrantDebitUJ *uint64 `cbor:"x_grant_debit_uj,omitempty"`
	// UpstreamReceipt and UpstreamSteward name the receipt another
	// steward sealed for a serve this one forwarded (PROFILE §19): the
	// energy figure and its evidence are that receipt's.
	UpstreamReceipt *string `cbor:"x_upstream_receipt,omitempty"`
	UpstreamSteward *string `cbor:"x_upstream_steward,omitempty"`
	// CeilingUJ is the request's joule_ceiling_uj and RouteCandidates
	// every backend the router weighed (PROFILE §4), so that the route is
	// auditable from the receipt: the backend served must be the cheapest
	// admissible candidate.
	CeilingUJ       *uint64 `cbor:"x_ceiling_uj,omitempty"`
	RouteCandidates *string `cbor:"x_route_candidates,omitempty"`
	// Record says the receipt is a sealed record, not a serve (PROFILE
	// §22): "idle", "run-open" or "run-close". Run is the sequence of the
	// run-open record of the run a serve, an idle record or a run-close
	// belongs to.
	Record *string `cbor:"x_record,omitempty"`
	Run    *uint64 `cbor:"x_run,omitempty"`
	// IdleRecord is the sequence of the idle record x_idle_uw is the
	// power of (PROFILE §22): the quiet stretch the span subtracts is
	// itself sealed, so the idle figure is evidence, not display.
	IdleRecord *uint64 `cbor:"x_idle_record,omitempty"`
	// PinPrev is, on a corpus-pin record, the sequence of the corpus's
	// previous corpus-pin record (PROFILE §22); absent on its first. The
	// link is in the receipt so that a walk of the chain alone checks
	// each corpus's pins form one line.
	PinPrev *uint64 `cbor:"x_pin_prev,omitempty"`

	// BusLoMV and BusHiMV are the bus-voltage band, mV, a shunt-only meter
	// assumed (wire.Metering.BusBand): such a figure is never HwShunt.
	BusLoMV *uint64 `cbor:"x_bus_lo_mv,omitempty"`
	BusHiMV *uint64 `cbor:"x_bus_hi_mv,omitempty"`

	// StatUJ is the statistical uncertainty of a ModelBased figure
	// (wire.Metering.StatUJ, PROFILE §13): never a bound, never added to
	// x_error_uj; only ModelBased figures carry it (evidence rule 13).
	StatUJ *uint64 `cbor:"x_stat_uj,omitempty"`
	// FirstTokenNs is the daemon's time to first token: ns from the serve's
	// start (the start of x_serve_ns) to the first output piece the engine
	// emitted; present only when the engine emitted its output piece by
	// piece.
	FirstTokenNs *uint64 `cbor:"x_first_token_ns,omitempty"`

	// Foreign holds the "x_" keys meshd does not define, from receipts
	// sealed by other implementations. They are signed, so they are kept
	// and re-encoded exactly.
	Foreign []Extension `cbor:"-"`
}

// Extension is one "x_" field meshd does not define: its key and the
// deterministic CBOR encoding of its value (PROFILE.md §15 says which
// values are allowed).
type Extension struct {
	Key   string
	Value []byte
}

// ErrField is wrapped by every violation of the receipt field rules.
var ErrField = errors.New("receipt field rule violated")

// RefusedEvidence: the metering evidence does not support
// energy_provenance, or contradicts itself (PROFILE.md §6, evidence rules
// 2–10). Like every Reason it names refusals in the conformance vectors, so
// it is never renamed.
const RefusedEvidence Reason = "evidence"

// EstimatorMeter is x_meter on an Estimator receipt: no meter at all.
const EstimatorMeter = "estimator"

// fieldErr is a field-rule violation with its stable reason.
func fieldErr(r Reason, format string, a ...any) error {
	return refuse(r, fmt.Errorf("%w: %s", ErrField, fmt.Sprintf(format, a...)))
}

// u64p returns a pointer to a copy of v, for the optional fields.
func u64p(v uint64) *uint64 { return &v }

// Energy reconstructs the Energy record the receipt states, checking the
// coupling on the way.
func (r *Receipt) Energy() (wire.Energy, error) {
	p, err := wire.ParseProvenance(r.EnergyProvenance)
	if err != nil {
		return wire.Energy{}, fieldErr(RefusedFieldValue, "%v", err)
	}
	e, err := wire.NewEnergy(r.MeasuredUJ, r.EstimatedUJ, p)
	if err != nil {
		return wire.Energy{}, refuse(RefusedCoupling, err)
	}
	return e, nil
}

// Check enforces everything meshd demands of a receipt it seals: the rules
// of CheckConforming, and meshd's own extensions all present (x_meter,
// x_window_ns, x_sealed_unix_ms always; grant_id, x_grant_hold and
// x_grant_debit_uj together), and no extension meshd does not define.
func (r *Receipt) Check() error {
	if err := r.CheckConforming(); err != nil {
		return err
	}
	if r.Meter == nil || r.WindowNs == nil || r.SealedUnixMs == nil {
		return fieldErr(RefusedMissingField, "meshd seals x_meter, x_window_ns and x_sealed_unix_ms on every receipt")
	}
	granted := r.GrantID != nil
	if (r.GrantHold != nil) != granted || (r.GrantDebitUJ != nil) != granted {
		return fieldErr(RefusedMissingField, "grant_id, x_grant_hold and x_grant_debit_uj must be present together")
	}
	if len(r.Foreign) != 0 {
		return fieldErr(RefusedFieldValue, "meshd seals no extension it does not define (%s)", r.Foreign[0].Key)
	}
	if r.IdleUW != nil && r.IdleRecord == nil {
		return fieldErr(RefusedMissingField, "meshd seals x_idle_uw only with x_idle_record, the idle record it is the power of")
	}
	return nil
}

// CheckConforming enforces every rule a mesh/1 receipt from any
// implementation must satisfy that can be judged from the receipt alone
// (PROFILE.md §15): the §6.1 fields, and meshd's extensions only where
// they are present. OpenEnvelope applies it.
func (r *Receipt) CheckConforming() error {
	if r.MeshReceipt != Profile {
		return fieldErr(RefusedFieldValue, "mesh_receipt is %q, want %q", r.MeshReceipt, Profile)
	}
	if !wire.IsLowerHex(r.RequestID, 32) {
		return fieldErr(RefusedFieldValue, "request_id must be 64 lower-case hex characters")
	}
	if r.GrantID != nil && !wire.IsLowerHex(*r.GrantID, 32) {
		return fieldErr(RefusedFieldValue, "grant_id must be 64 lower-case hex characters")
	}
	if r.Backend == "" || r.Recipe == "" || r.Route == "" {
		return fieldErr(RefusedFieldValue, "backend, recipe and route must be non-empty")
	}
	if r.TokensAccepted > r.TokensOut {
		return fieldErr(RefusedFieldValue, "tokens_accepted %d exceeds tokens_out %d", r.TokensAccepted, r.TokensOut)
	}
	if r.SpecAccepted > r.SpecProposed {
		return fieldErr(RefusedFieldValue, "spec_accepted %d exceeds spec_proposed %d", r.SpecAccepted, r.SpecProposed)
	}
	if _, err := wire.FidelityFromUint(uint64(r.FidelityFloor)); err != nil {
		return fieldErr(RefusedFieldValue, "fidelity_floor: %v", err)
	}
	if r.FidelityMet > 1 {
		return fieldErr(RefusedFieldValue, "fidelity_met is %d, want 0 or 1", r.FidelityMet)
	}
	e, err := r.Energy()
	if err != nil {
		return err
	}
	// §6.1: measured_uj is present iff HwShunt. The coupling allows a
	// ModelBased measurement in the Energy record, but the wire form keeps
	// measured_uj for hardware readings only (PROFILE.md §5).
	if _, has := e.MeasuredUJ(); has != (e.Provenance() == wire.HwShunt) {
		return fieldErr(RefusedCoupling, "measured_uj must be present iff energy_provenance is HwShunt")
	}
	switch {
	case r.TokensAccepted == 0 && r.UJPerAcceptedToken != nil:
		return fieldErr(RefusedFieldValue, "uj_per_accepted_token present with no accepted tokens")
	case r.TokensAccepted > 0 && r.UJPerAcceptedToken == nil:
		return fieldErr(RefusedFieldValue, "uj_per_accepted_token missing with %d accepted tokens", r.TokensAccepted)
	case r.TokensAccepted > 0 && *r.UJPerAcceptedToken != e.UJ()/uint64(r.TokensAccepted):
		return fieldErr(RefusedFieldValue, "uj_per_accepted_token %d, want %d/%d = %d",
			*r.UJPerAcceptedToken, e.UJ(), r.TokensAccepted, e.UJ()/uint64(r.TokensAccepted))
	}
	if (r.Sequence == 0) != (r.Prev == nil) {
		return fieldErr(RefusedFieldValue, "prev must be absent at sequence 0 and present after")
	}
	if r.Prev != nil && !wire.IsLowerHex(*r.Prev, 32) {
		return fieldErr(RefusedFieldValue, "prev must be 64 lower-case hex characters")
	}
	if !wire.IsLowerHex(r.Nonce, NonceSize) {
		return fieldErr(RefusedFieldValue, "nonce must be %d bytes of lower-case hex", NonceSize)
	}
	if !wire.IsLowerHex(r.Steward, 32) {
		return fieldErr(RefusedFieldValue, "steward must be a 32-byte Ed25519 public key in lower-case hex")
	}
	// meshd's metering extensions travel as a group: once a receipt uses
	// any of them it is held to all of the evidence rules, so neither a
	// partial set nor a forged one can pass as meshd's.
	if r.hasMetering() {
		if err := r.checkEvidence(e); err != nil {
			return err
		}
	}
	if err := r.checkFirstToken(); err != nil {
		return err
	}
	// A grant_id alone is mesh/1; meshd's ledger fields, once present, must
	// name the grant and stay within the charged figure.
	if r.GrantHold != nil || r.GrantDebitUJ != nil {
		if r.GrantID == nil || r.GrantHold == nil || r.GrantDebitUJ == nil {
			return fieldErr(RefusedMissingField, "grant_id, x_grant_hold and x_grant_debit_uj must be present together")
		}
		if *r.GrantDebitUJ > e.UJ() {
			return fieldErr(RefusedFieldValue, "x_grant_debit_uj %d exceeds the charged %d µJ", *r.GrantDebitUJ, e.UJ())
		}
	}
	// A record (PROFILE §22) is a zero-token receipt held to its own
	// rules; x_run, on a record or a serve, names an earlier receipt.
	if err := r.checkRecord(e); err != nil {
		return err
	}
	if err := r.checkIdleRecord(); err != nil {
		return err
	}
	// A forwarded serve names the upstream receipt and its steward
	// together, both as content ids and keys are written.
	if (r.UpstreamReceipt != nil) != (r.UpstreamSteward != nil) {
		return fieldErr(RefusedMissingField, "x_upstream_receipt and x_upstream_steward must be present together")
	}
	if r.UpstreamReceipt != nil && (!wire.IsLowerHex(*r.UpstreamReceipt, 32) || !wire.IsLowerHex(*r.UpstreamSteward, 32)) {
		return fieldErr(RefusedFieldValue, "x_upstream_receipt and x_upstream_steward must be 32-byte values in lower-case hex")
	}
	if r.CeilingUJ != nil || r.RouteCandidates != nil {
		if err := r.checkRoute(); err != nil {
			return err
		}
	}
	for i, x := range r.Foreign {
		if !strings.HasPrefix(x.Key, "x_") || fieldIndex(x.Key) >= 0 {
			return fieldErr(RefusedUnknownField, "%q is not an extension key meshd leaves to others", x.Key)
		}
		if i > 0 && !keyLess(r.Foreign[i-1].Key, x.Key) {
			return fieldErr(RefusedCoreEncoding, "extensions %q and %q are unsorted or duplicated", r.Foreign[i-1].Key, x.Key)
		}
		if end, err := wire.SkipItem(x.Value, 0); err != nil || end != len(x.Value) {
			return fieldErr(RefusedCoreEncoding, "extension %q is not one deterministic CBOR item of integers, strings, arrays and maps", x.Key)
		}
	}
	return nil
}

// hasMetering reports whether any of meshd's metering extensions is
// present.
func (r *Receipt) hasMetering() bool {
	return r.Meter != nil || r.MeterKind != nil || r.WindowNs != nil || r.ServeNs != nil || r.SealedUnixMs != nil ||
		r.ErrorUJ != nil || r.Samples != nil || r.MaxGapNs != nil || r.CoveredPPM != nil || r.PeriodNs != nil ||
		r.AccuracyPPM != nil || r.Shared != nil || r.IdleUW != nil || r.IdleRecord != nil || r.FullScaleUW != nil || r.BusLoMV != nil || r.BusHiMV != nil ||
		r.StatUJ != nil
}

// checkFirstToken: x_first_token_ns times the first output piece inside
// the serve, so it needs x_serve_ns, is at most it, and needs an output
// token to time.
func (r *Receipt) checkFirstToken() error {
	if r.FirstTokenNs == nil {
		return nil
	}
	switch {
	case r.ServeNs == nil:
		return fieldErr(RefusedMissingField, "x_first_token_ns times a point of the serve and needs x_serve_ns")
	case *r.FirstTokenNs > *r.ServeNs:
		return fieldErr(RefusedFieldValue, "x_first_token_ns %d exceeds x_serve_ns %d: the first piece is emitted within the serve", *r.FirstTokenNs, *r.ServeNs)
	case r.TokensOut == 0:
		return fieldErr(RefusedFieldValue, "x_first_token_ns present with tokens_out 0: no output piece to time")
	}
	return nil
}

// optUint is one optional integer extension, by key.
type optUint struct {
	key string
	v   *uint64
}

// meterEvidence is what a figure from a meter must carry and an Estimator
// figure must not (evidence rules 2 and 3).
func (r *Receipt) meterEvidence() [7]optUint {
	return [...]optUint{
		{"x_error_uj", r.ErrorUJ}, {"x_samples", r.Samples}, {"x_max_gap_ns", r.MaxGapNs},
		{"x_covered_ppm", r.CoveredPPM}, {"x_period_ns", r.PeriodNs}, {"x_accuracy_ppm", r.AccuracyPPM},
		{"x_shared", r.Shared},
	}
}

// checkEvidence enforces the evidence rules of PROFILE.md §6 on a receipt
// that carries the metering group: the provenance must follow from what
// the receipt says the hardware observed, so that a receipt never claims a
// measurement the hardware did not make. Absent members are missing-field,
// values outside a field's domain field-value, fields present against the
// provenance coupling, and evidence that does not support the provenance
// (or contradicts itself) evidence.
func (r *Receipt) checkEvidence(e wire.Energy) error {
	for _, f := range [...]struct {
		key     string
		present bool
	}{
		{"x_meter", r.Meter != nil}, {"x_meter_kind", r.MeterKind != nil}, {"x_window_ns", r.WindowNs != nil},
		{"x_serve_ns", r.ServeNs != nil}, {"x_sealed_unix_ms", r.SealedUnixMs != nil},
	} {
		if !f.present {
			return fieldErr(RefusedMissingField, "evidence rule 1: %s is missing; x_meter, x_meter_kind, x_window_ns, x_serve_ns and x_sealed_unix_ms travel together", f.key)
		}
	}
	meter, kind := *r.Meter, *r.MeterKind
	if meter == "" {
		return fieldErr(RefusedFieldValue, "evidence rule 1: x_meter must name the meter")
	}
	if !wire.MeterKindValid(kind) {
		return fieldErr(RefusedFieldValue, "evidence rule 1: x_meter_kind %q is not one of %s, %s, %s, %s, %s",
			kind, wire.KindADC, wire.KindCounter, wire.KindPoint, wire.KindModel, wire.KindEstimator)
	}
	p := e.Provenance()
	estimator := p == wire.Estimator
	for _, f := range r.meterEvidence() {
		if estimator && f.v != nil {
			return fieldErr(RefusedCoupling, "evidence rule 2: Estimator names no meter and carries no samples, but %s is present", f.key)
		}
		if !estimator && f.v == nil {
			return fieldErr(RefusedCoupling, "evidence rule 3: a %v figure comes from a meter and must carry %s", p, f.key)
		}
	}
	for _, f := range [...]optUint{{"x_idle_uw", r.IdleUW}, {"x_full_scale_uw", r.FullScaleUW}} {
		if estimator && f.v != nil {
			return fieldErr(RefusedCoupling, "evidence rule 2: Estimator names no meter and carries no samples, but %s is present", f.key)
		}
	}
	if (r.BusLoMV == nil) != (r.BusHiMV == nil) {
		return fieldErr(RefusedCoupling, "evidence rule 11: x_bus_lo_mv and x_bus_hi_mv travel together")
	}
	if r.BusLoMV != nil {
		if estimator {
			return fieldErr(RefusedCoupling, "evidence rule 2: Estimator names no meter and carries no samples, but x_bus_lo_mv is present")
		}
		if *r.BusLoMV > *r.BusHiMV {
			return fieldErr(RefusedFieldValue, "evidence rule 11: x_bus_lo_mv %d exceeds x_bus_hi_mv %d", *r.BusLoMV, *r.BusHiMV)
		}
	}
	if r.StatUJ != nil && p != wire.ModelBased {
		return fieldErr(RefusedCoupling, "evidence rule 13: x_stat_uj is the statistical uncertainty of a ModelBased figure; a %v figure never carries it", p)
	}
	if (kind == wire.KindEstimator) != estimator || (meter == EstimatorMeter) != estimator {
		return evidenceErr(2, "Estimator names no meter and carries no samples, and only Estimator uses the estimator: energy_provenance %v, x_meter_kind %q, x_meter %q", p, kind, meter)
	}
	if estimator {
		return nil
	}
	samples, window, serve := *r.Samples, *r.WindowNs, *r.ServeNs
	covered, period := *r.CoveredPPM, *r.PeriodNs
	switch {
	case samples == 0:
		return evidenceErr(3, "a %v figure needs at least one reading, x_samples is 0", p)
	case covered > wire.FullPPM:
		return evidenceErr(3, "x_covered_ppm %d exceeds %d (the whole window)", covered, wire.FullPPM)
	case period == 0:
		return evidenceErr(3, "x_period_ns is 0: a meter converts over a positive period")
	case window == 0:
		return evidenceErr(3, "x_window_ns is 0: a %v figure integrates over a positive window", p)
	case serve > window:
		return evidenceErr(3, "x_serve_ns %d exceeds x_window_ns %d: the gross window contains the serve", serve, window)
	}
	if p == wire.HwShunt {
		if err := r.checkHardware(e); err != nil {
			return err
		}
	}
	return r.checkAddsUp(e)
}

// checkHardware enforces evidence rules 4 and 7: what only a hardware
// meter's complete observation can claim.
func (r *Receipt) checkHardware(e wire.Energy) error {
	kind, window, serve := *r.MeterKind, *r.WindowNs, *r.ServeNs
	covered, period, gap := *r.CoveredPPM, *r.PeriodNs, *r.MaxGapNs
	acc, shared, errUJ := *r.AccuracyPPM, *r.Shared, *r.ErrorUJ
	measured, _ := e.MeasuredUJ()
	switch {
	case !wire.HardwareKind(kind):
		return evidenceErr(4, "HwShunt needs a meter of kind %s or %s, x_meter_kind is %q", wire.KindADC, wire.KindCounter, kind)
	case covered != wire.FullPPM:
		return evidenceErr(4, "HwShunt needs full coverage, x_covered_ppm is %d of %d", covered, wire.FullPPM)
	case gap > period:
		return evidenceErr(4, "HwShunt needs every gap within one conversion period, x_max_gap_ns %d exceeds x_period_ns %d", gap, period)
	case acc > wire.MaxHwAccuracyPPM:
		return evidenceErr(4, "x_accuracy_ppm %d exceeds the HwShunt ceiling of %d", acc, wire.MaxHwAccuracyPPM)
	case shared > 1:
		return evidenceErr(4, "an apportioned figure is never HwShunt, x_shared is %d", shared)
	case r.BusLoMV != nil:
		return evidenceErr(11, "a figure resting on an assumed bus voltage (x_bus_lo_mv %d .. x_bus_hi_mv %d) is never HwShunt", *r.BusLoMV, *r.BusHiMV)
	}
	if limit, fits := wire.AccuracyLimitUJ(measured, acc); fits && errUJ > limit {
		return evidenceErr(4, "x_error_uj %d exceeds the meter's declared accuracy: %d ppm of measured_uj %d allows at most %d µJ", errUJ, acc, measured, limit)
	}
	// Rule 7: a hardware claim is over a serve that happened, and over at
	// least one whole conversion of the meter.
	if serve == 0 {
		return evidenceErr(7, "HwShunt meters a serve, x_serve_ns is 0")
	}
	wh, wl := bits.Mul64(window, wire.FullPPM)
	if ph, pl := bits.Mul64(period, r.meters().shortestPPM); !geq128(wh, wl, ph, pl) {
		return evidenceErr(7, "HwShunt integrates whole conversions: x_window_ns %d is shorter than one conversion of a meter declaring x_period_ns %d", window, period)
	}
	return nil
}

// meterSet is what the families of the meters x_meter names guarantee
// (wire.MeterFamily): a span's members are named in its name.
type meterSet struct {
	// known: every member's family is known; any: at least one is.
	known, any bool
	families   []wire.MeterFamily
	// shortestPPM is the smallest of the members' ShortestPPM (the
	// generic one for a member meshd does not know).
	shortestPPM uint64
}

func (r *Receipt) meters() meterSet {
	set := meterSet{known: true, shortestPPM: wire.GenericShortestPPM}
	names, ok := wire.SpanMembers(*r.Meter)
	if !ok {
		return meterSet{shortestPPM: wire.GenericShortestPPM}
	}
	for _, n := range names {
		f, ok := wire.FamilyOf(n)
		if !ok {
			set.known = false
			continue
		}
		set.any = true
		set.families = append(set.families, f)
		set.shortestPPM = min(set.shortestPPM, f.ShortestPPM)
	}
	return set
}

// checkAddsUp enforces evidence rules 5, 6 and 8–10 on a meter figure:
// the evidence must be arithmetic the named hardware could have produced.
// Rules that need a meter's family apply only to meters meshd knows
// (wire.FamilyOf); the others hold for any meter.
func (r *Receipt) checkAddsUp(e wire.Energy) error {
	samples, window, covered, period := *r.Samples, *r.WindowNs, *r.CoveredPPM, *r.PeriodNs
	charged, errUJ := e.UJ(), *r.ErrorUJ
	set := r.meters()

	// Rule 5: readings of at most one period each cover the covered part
	// of the window, and the window holds no more readings than the
	// meters' shortest readings fit, plus one cut by each edge. A
	// reading covers at most one period where it is one conversion (kind
	// adc) or where every gap is within a period (HwShunt); the difference
	// of an energy counter read late covers the whole time since the
	// previous read, so a ModelBased counter or model figure read less
	// often than its period (a loaded machine) still adds up.
	if *r.MeterKind == wire.KindADC || e.Provenance() == wire.HwShunt {
		hi, lo := bits.Mul64(window, covered)
		if h2, l2 := mul3(samples, period, wire.FullPPM); !geq128(h2, l2, hi, lo) {
			return evidenceErr(5, "%d readings of at most x_period_ns %d cannot cover %d ppm of x_window_ns %d", samples, period, covered, window)
		}
	}
	if set.known {
		most := uint64(0)
		for _, f := range set.families {
			most = satAdd(most, satAdd(window/f.ShortestNs, 2))
		}
		if samples > most {
			return evidenceErr(5, "x_samples %d exceeds the %d readings %s can make in x_window_ns %d", samples, most, *r.Meter, window)
		}
	}

	// Rule 6: the declared period is one the drivers can configure. A
	// span declares its members' largest.
	if set.any {
		var least, most uint64
		for _, f := range set.families {
			least, most = max(least, f.MinPeriodNs), max(most, f.MaxPeriodNs)
		}
		if period < least || (set.known && period > most) {
			return evidenceErr(6, "x_period_ns %d is outside what %s can declare (%d to %d ns)", period, *r.Meter, least, most)
		}
	}

	// Rule 8: no window holds more energy than the meter's full scale
	// over it, error bound included (the limit rounded up), and no idle
	// power exceeds it.
	if r.FullScaleUW != nil {
		fs := *r.FullScaleUW
		if fs == 0 {
			return evidenceErr(8, "x_full_scale_uw is 0: a meter registers a positive power")
		}
		// charged × 10⁹ ≤ fs × window + errUJ × 10⁹ + 10⁹ − 1
		lh, ll := bits.Mul64(charged, 1e9)
		rh, rl := bits.Mul64(fs, window)
		eh, el := bits.Mul64(errUJ, 1e9)
		rh, rl, c1 := add128(rh, rl, eh, el)
		rh, rl, c2 := add128(rh, rl, 0, 1e9-1)
		if c1 == 0 && c2 == 0 && !geq128(rh, rl, lh, ll) {
			return evidenceErr(8, "the charged %d µJ exceeds x_full_scale_uw %d over x_window_ns %d plus x_error_uj %d", charged, fs, window, errUJ)
		}
		if r.IdleUW != nil && *r.IdleUW > fs {
			return evidenceErr(8, "x_idle_uw %d exceeds x_full_scale_uw %d", *r.IdleUW, fs)
		}
	}

	// Rule 9: the idle power over the window is part of the window's
	// energy (net never negative): ⌊idle × window / 10⁹⌋ ≤ charged + error.
	if r.IdleUW != nil {
		idle := *r.IdleUW
		lh, ll := bits.Mul64(idle, window)
		sum, carry := bits.Add64(charged, errUJ, 0)
		rh, rl := bits.Mul64(sum, 1e9)
		rh += carry * 1e9
		rh, rl, _ = add128(rh, rl, 0, 1e9-1)
		if !geq128(rh, rl, lh, ll) {
			return evidenceErr(9, "x_idle_uw %d over x_window_ns %d exceeds the charged %d µJ plus x_error_uj %d: net energy would be negative", idle, window, charged, errUJ)
		}
	}

	// Rule 10: the kind follows from the meters named, never from the
	// declaration: a single meter's is its family's, a span's the
	// weakest of its members'. With a member meshd does not know, the
	// span is still no stronger than its weakest known member.
	kind := *r.MeterKind
	if set.any {
		strong, weak := 0, 0
		for _, f := range set.families {
			strong = max(strong, wire.KindRank(f.Kinds[0]))
			weak = max(weak, wire.KindRank(f.Kinds[len(f.Kinds)-1]))
		}
		rank := wire.KindRank(kind)
		possible := rank >= strong && (!set.known || rank <= weak)
		if set.known && possible {
			possible = false
			for _, f := range set.families {
				if slices.Contains(f.Kinds, kind) {
					possible = true
				}
			}
		}
		if !possible {
			return evidenceErr(10, "x_meter_kind %q does not follow from the meters %s names", kind, *r.Meter)
		}
	}
	return nil
}

// geq128 reports whether (ah, al) ≥ (bh, bl) as 128-bit integers.
func geq128(ah, al, bh, bl uint64) bool { return ah > bh || (ah == bh && al >= bl) }

// add128 adds two 128-bit integers, returning the carry out.
func add128(ah, al, bh, bl uint64) (h, l, carry uint64) {
	l, c := bits.Add64(al, bl, 0)
	h, carry = bits.Add64(ah, bh, c)
	return h, l, carry
}

// mul3 is a × b × c, saturating at 2¹²⁸ − 1.
func mul3(a, b, c uint64) (h, l uint64) {
	ph, pl := bits.Mul64(a, b)
	h1, l1 := bits.Mul64(pl, c)
	h2, l2 := bits.Mul64(ph, c)
	if h2 != 0 {
		return math.MaxUint64, math.MaxUint64
	}
	h, carry := bits.Add64(h1, l2, 0)
	if carry != 0 {
		return math.MaxUint64, math.MaxUint64
	}
	return h, l1
}

// satAdd adds, saturating at 2⁶⁴ − 1.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// evidenceErr is a violation of evidence rule n.
func evidenceErr(n int, format string, a ...any) error {
	return fieldErr(RefusedEvidence, "evidence rule %d: %s", n, fmt.Sprintf(format, a...))
}

// coreField describes one key meshd knows. The table is in the bytewise
// order of the encoded keys, which for text keys is shorter first, then
// bytewise: the order both the encoder and the decoder walk.
type coreField struct {
	key      string
	id       fieldID
	text     bool   // a text string; otherwise an unsigned integer
	max      uint64 // the largest integer the Go field holds
	required bool   // §6.1 "always"
}

type fieldID uint8

const (
	fPrev fieldID = iota
	fNonce
	fRoute
	fXRun
	fRecipe
	fBackend
	fSteward
	fXMeter
	fGrantID
	fSequence
	fXRecord
	fXShared
	fTokensIn
	fXIdleUW
	fXSamples
	fXStatUJ
	fRequestID
	fTokensOut
	fXErrorUJ
	fXPinPrev
	fXServeNs
	fMeasuredUJ
	fXBusHiMV
	fXBusLoMV
	fXPeriodNs
	fXWindowNs
	fEstimatedUJ
	fFidelityMet
	fMeshReceipt
	fXCeilingUJ
	fXGrantHold
	fXMaxGapNs
	fXMeterKind
	fSpecAccepted
	fSpecProposed
	fXCoveredPPM
	fXIdleRecord
	fFidelityFloor
	fXAccuracyPPM
	fTokensAccepted
	fXFullScaleUW
	fCacheHitTokens
	fXFirstTokenNs
	fXGrantDebitUJ
	fXSealedUnixMs
	fEnergyProvenance
	fXRouteCandidates
	fXUpstreamReceipt
	fXUpstreamSteward
	fUJPerAcceptedToken
	numFields
)

var coreFields = [numFields]coreField{
	{"prev", fPrev, true, 0, false},
	{"nonce", fNonce, true, 0, true},
	{"route", fRoute, true, 0, true},
	{"x_run", fXRun, false, math.MaxUint64, false},
	{"recipe", fRecipe, true, 0, true},
	{"backend", fBackend, true, 0, true},
	{"steward", fSteward, true, 0, true},
	{"x_meter", fXMeter, true, 0, false},
	{"grant_id", fGrantID, true, 0, false},
	{"sequence", fSequence, false, math.MaxUint64, true},
	{"x_record", fXRecord, true, 0, false},
	{"x_shared", fXShared, false, math.MaxUint64, false},
	{"tokens_in", fTokensIn, false, math.MaxUint32, true},
	{"x_idle_uw", fXIdleUW, false, math.MaxUint64, false},
	{"x_samples", fXSamples, false, math.MaxUint64, false},
	{"x_stat_uj", fXStatUJ, false, math.MaxUint64, false},
	{"request_id", fRequestID, true, 0, true},
	{"tokens_out", fTokensOut, false, math.MaxUint32, true},
	{"x_error_uj", fXErrorUJ, false, math.MaxUint64, false},
	{"x_pin_prev", fXPinPrev, false, math.MaxUint64, false},
	{"x_serve_ns", fXServeNs, false, math.MaxUint64, false},
	{"measured_uj", fMeasuredUJ, false, math.MaxUint64, false},
	{"x_bus_hi_mv", fXBusHiMV, false, math.MaxUint64, false},
	{"x_bus_lo_mv", fXBusLoMV, false, math.MaxUint64, false},
	{"x_period_ns", fXPeriodNs, false, math.MaxUint64, false},
	{"x_window_ns", fXWindowNs, false, math.MaxUint64, false},
	{"estimated_uj", fEstimatedUJ, false, math.MaxUint64, true},
	{"fidelity_met", fFidelityMet, false, math.MaxUint8, true},
	{"mesh_receipt", fMeshReceipt, true, 0, true},
	{"x_ceiling_uj", fXCeilingUJ, false, math.MaxUint64, false},
	{"x_grant_hold", fXGrantHold, false, math.MaxUint64, false},
	{"x_max_gap_ns", fXMaxGapNs, false, math.MaxUint64, false},
	{"x_meter_kind", fXMeterKind, true, 0, false},
	{"spec_accepted", fSpecAccepted, false, math.MaxUint32, true},
	{"spec_proposed", fSpecProposed, false, math.MaxUint32, true},
	{"x_covered_ppm", fXCoveredPPM, false, math.MaxUint64, false},
	{"x_idle_record", fXIdleRecord, false, math.MaxUint64, false},
	{"fidelity_floor", fFidelityFloor, false, math.MaxUint8, true},
	{"x_accuracy_ppm", fXAccuracyPPM, false, math.MaxUint64, false},
	{"tokens_accepted", fTokensAccepted, false, math.MaxUint32, true},
	{"x_full_scale_uw", fXFullScaleUW, false, math.MaxUint64, false},
	{"cache_hit_tokens", fCacheHitTokens, false, math.MaxUint32, true},
	{"x_first_token_ns", fXFirstTokenNs, false, math.MaxUint64, false},
	{"x_grant_debit_uj", fXGrantDebitUJ, false, math.MaxUint64, false},
	{"x_sealed_unix_ms", fXSealedUnixMs, false, math.MaxUint64, false},
	{"energy_provenance", fEnergyProvenance, true, 0, true},
	{"x_route_candidates", fXRouteCandidates, true, 0, false},
	{"x_upstream_receipt", fXUpstreamReceipt, true, 0, false},
	{"x_upstream_steward", fXUpstreamSteward, true, 0, false},
	{"uj_per_accepted_token", fUJPerAcceptedToken, false, math.MaxUint64, false},
}

// keyLess orders text keys as their deterministic encodings sort: the
// shortest-form head grows with the length, so shorter first, then bytes.
func keyLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// fieldIndex returns the table index of a known key, or -1.
func fieldIndex(key string) int {
	for i := range coreFields {
		if coreFields[i].key == key {
			return i
		}
	}
	return -1
}

// text returns a text field and whether it is present.
func (r *Receipt) text(id fieldID) (string, bool) {
	switch id {
	case fNonce:
		return r.Nonce, true
	case fRoute:
		return r.Route, true
	case fPrev:
		if r.Prev != nil {
			return *r.Prev, true
		}
	case fRecipe:
		return r.Recipe, true
	case fBackend:
		return r.Backend, true
	case fSteward:
		return r.Steward, true
	case fXMeter:
		if r.Meter != nil {
			return *r.Meter, true
		}
	case fXMeterKind:
		if r.MeterKind != nil {
			return *r.MeterKind, true
		}
	case fXRecord:
		if r.Record != nil {
			return *r.Record, true
		}
	case fGrantID:
		if r.GrantID != nil {
			return *r.GrantID, true
		}
	case fXRouteCandidates:
		if r.RouteCandidates != nil {
			return *r.RouteCandidates, true
		}
	case fXUpstreamReceipt:
		if r.UpstreamReceipt != nil {
			return *r.UpstreamReceipt, true
		}
	case fXUpstreamSteward:
		if r.UpstreamSteward != nil {
			return *r.UpstreamSteward, true
		}
	case fRequestID:
		return r.RequestID, true
	case fMeshReceipt:
		return r.MeshReceipt, true
	case fEnergyProvenance:
		return r.EnergyProvenance, true
	}
	return "", false
}

// uint returns an integer field and whether it is present.
func (r *Receipt) uint(id fieldID) (uint64, bool) {
	opt := func(p *uint64) (uint64, bool) {
		if p == nil {
			return 0, false
		}
		return *p, true
	}
	switch id {
	case fSequence:
		return r.Sequence, true
	case fTokensIn:
		return uint64(r.TokensIn), true
	case fXShared:
		return opt(r.Shared)
	case fXRun:
		return opt(r.Run)
	case fXPinPrev:
		return opt(r.PinPrev)
	case fXIdleUW:
		return opt(r.IdleUW)
	case fXFullScaleUW:
		return opt(r.FullScaleUW)
	case fXBusHiMV:
		return opt(r.BusHiMV)
	case fXBusLoMV:
		return opt(r.BusLoMV)
	case fXSamples:
		return opt(r.Samples)
	case fXStatUJ:
		return opt(r.StatUJ)
	case fXServeNs:
		return opt(r.ServeNs)
	case fXPeriodNs:
		return opt(r.PeriodNs)
	case fXCoveredPPM:
		return opt(r.CoveredPPM)
	case fXAccuracyPPM:
		return opt(r.AccuracyPPM)
	case fTokensOut:
		return uint64(r.TokensOut), true
	case fXErrorUJ:
		return opt(r.ErrorUJ)
	case fMeasuredUJ:
		return opt(r.MeasuredUJ)
	case fXWindowNs:
		return opt(r.WindowNs)
	case fEstimatedUJ:
		return r.EstimatedUJ, true
	case fFidelityMet:
		return uint64(r.FidelityMet), true
	case fXCeilingUJ:
		return opt(r.CeilingUJ)
	case fXIdleRecord:
		return opt(r.IdleRecord)
	case fXGrantHold:
		return opt(r.GrantHold)
	case fXMaxGapNs:
		return opt(r.MaxGapNs)
	case fSpecAccepted:
		return uint64(r.SpecAccepted), true
	case fSpecProposed:
		return uint64(r.SpecProposed), true
	case fFidelityFloor:
		return uint64(r.FidelityFloor), true
	case fTokensAccepted:
		return uint64(r.TokensAccepted), true
	case fCacheHitTokens:
		return uint64(r.CacheHitTokens), true
	case fXFirstTokenNs:
		return opt(r.FirstTokenNs)
	case fXGrantDebitUJ:
		return opt(r.GrantDebitUJ)
	case fXSealedUnixMs:
		return opt(r.SealedUnixMs)
	case fUJPerAcceptedToken:
		return opt(r.UJPerAcceptedToken)
	}
	return 0, false
}

// decoded is a Receipt with room for its optional integers and text, so
// that decoding one costs a couple of allocations rather than one per
// field.
type decoded struct {
	r    Receipt
	u    [numFields]uint64
	text [numFields]string
}

func (d *decoded) setText(id fieldID, s string) {
	r := &d.r
	switch id {
	case fNonce:
		r.Nonce = s
	case fRoute:
		r.Route = s
	case fPrev:
		d.text[id] = s
		r.Prev = &d.text[id]
	case fRecipe:
		r.Recipe = s
	case fBackend:
		r.Backend = s
	case fSteward:
		r.Steward = s
	case fXMeter:
		d.text[id] = s
		r.Meter = &d.text[id]
	case fXMeterKind:
		d.text[id] = s
		r.MeterKind = &d.text[id]
	case fXRecord:
		d.text[id] = s
		r.Record = &d.text[id]
	case fGrantID:
		d.text[id] = s
		r.GrantID = &d.text[id]
	case fXRouteCandidates:
		d.text[id] = s
		r.RouteCandidates = &d.text[id]
	case fXUpstreamReceipt:
		d.text[id] = s
		r.UpstreamReceipt = &d.text[id]
	case fXUpstreamSteward:
		d.text[id] = s
		r.UpstreamSteward = &d.text[id]
	case fRequestID:
		r.RequestID = s
	case fMeshReceipt:
		r.MeshReceipt = s
	case fEnergyProvenance:
		r.EnergyProvenance = s
	}
}

// setUint stores v, which the caller has checked against the field's max.
func (d *decoded) setUint(id fieldID, v uint64) {
	r := &d.r
	opt := func() *uint64 { d.u[id] = v; return &d.u[id] }
	switch id {
	case fSequence:
		r.Sequence = v
	case fTokensIn:
		r.TokensIn = uint32(v)
	case fXShared:
		r.Shared = opt()
	case fXRun:
		r.Run = opt()
	case fXPinPrev:
		r.PinPrev = opt()
	case fXIdleUW:
		r.IdleUW = opt()
	case fXFullScaleUW:
		r.FullScaleUW = opt()
	case fXBusHiMV:
		r.BusHiMV = opt()
	case fXBusLoMV:
		r.BusLoMV = opt()
	case fXSamples:
		r.Samples = opt()
	case fXStatUJ:
		r.StatUJ = opt()
	case fXServeNs:
		r.ServeNs = opt()
	case fXPeriodNs:
		r.PeriodNs = opt()
	case fXCoveredPPM:
		r.CoveredPPM = opt()
	case fXAccuracyPPM:
		r.AccuracyPPM = opt()
	case fTokensOut:
		r.TokensOut = uint32(v)
	case fXErrorUJ:
		r.ErrorUJ = opt()
	case fMeasuredUJ:
		r.MeasuredUJ = opt()
	case fXWindowNs:
		r.WindowNs = opt()
	case fEstimatedUJ:
		r.EstimatedUJ = v
	case fFidelityMet:
		r.FidelityMet = uint8(v)
	case fXCeilingUJ:
		r.CeilingUJ = opt()
	case fXIdleRecord:
		r.IdleRecord = opt()
	case fXGrantHold:
		r.GrantHold = opt()
	case fXMaxGapNs:
		r.MaxGapNs = opt()
	case fSpecAccepted:
		r.SpecAccepted = uint32(v)
	case fSpecProposed:
		r.SpecProposed = uint32(v)
	case fFidelityFloor:
		r.FidelityFloor = uint8(v)
	case fTokensAccepted:
		r.TokensAccepted = uint32(v)
	case fCacheHitTokens:
		r.CacheHitTokens = uint32(v)
	case fXFirstTokenNs:
		r.FirstTokenNs = opt()
	case fXGrantDebitUJ:
		r.GrantDebitUJ = opt()
	case fXSealedUnixMs:
		r.SealedUnixMs = opt()
	case fUJPerAcceptedToken:
		r.UJPerAcceptedToken = opt()
	}
}

// EncodeCore returns the deterministic CBOR of the receipt: the signed
// core. Known keys are written in the table's (bytewise) order with the
// foreign extensions merged in by the same order. It judges encodability
// only; Check judges the rules.
func (r *Receipt) EncodeCore() ([]byte, error) {
	foreign := r.Foreign
	if !slices.IsSortedFunc(foreign, func(a, b Extension) int { return cmpKey(a.Key, b.Key) }) {
		foreign = slices.Clone(foreign)
		slices.SortFunc(foreign, func(a, b Extension) int { return cmpKey(a.Key, b.Key) })
	}
	n := len(foreign)
	for i := range coreFields {
		f := &coreFields[i]
		if f.text {
			if _, ok := r.text(f.id); ok {
				n++
			}
		} else if _, ok := r.uint(f.id); ok {
			n++
		}
	}
	size := 512
	for _, x := range foreign {
		size += len(x.Key) + len(x.Value) + 2
	}
	b := wire.AppendHead(make([]byte, 0, size), wire.MajorMap, uint64(n))
	j := 0
	for i := range coreFields {
		f := &coreFields[i]
		for ; j < len(foreign) && keyLess(foreign[j].Key, f.key); j++ {
			var err error
			if b, err = appendForeign(b, foreign[j]); err != nil {
				return nil, err
			}
		}
		if j < len(foreign) && foreign[j].Key == f.key {
			return nil, fmt.Errorf("encode receipt core: extension %q duplicates a known field", f.key)
		}
		if f.text {
			if s, ok := r.text(f.id); ok {
				b = wire.AppendText(wire.AppendText(b, f.key), s)
			}
		} else if v, ok := r.uint(f.id); ok {
			b = wire.AppendHead(wire.AppendText(b, f.key), wire.MajorUint, v)
		}
	}
	for ; j < len(foreign); j++ {
		var err error
		if b, err = appendForeign(b, foreign[j]); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func cmpKey(a, b string) int {
	switch {
	case keyLess(a, b):
		return -1
	case keyLess(b, a):
		return 1
	}
	return 0
}

func appendForeign(b []byte, x Extension) ([]byte, error) {
	if !strings.HasPrefix(x.Key, "x_") {
		return nil, fmt.Errorf("encode receipt core: extension key %q does not start with x_", x.Key)
	}
	if end, err := wire.SkipItem(x.Value, 0); err != nil || end != len(x.Value) {
		return nil, fmt.Errorf("encode receipt core: extension %q is not one deterministic CBOR item", x.Key)
	}
	return append(wire.AppendText(b, x.Key), x.Value...), nil
}

// maxCoreFields bounds the map size a core may declare, far above the 39
// keys meshd knows, so that a hostile count is refused before any loop.
const maxCoreFields = 256

// DecodeCore decodes a signed core strictly, without reflection: it must be
// one definite-length map with text keys in strictly increasing bytewise
// order (so no duplicates), shortest-form heads, the right type for every
// known field, only "x_" keys besides those, and nothing after the map.
// Such input is exactly its deterministic re-encoding; EncodeCore reproduces
// it byte for byte. Field rules are CheckConforming's.
func DecodeCore(b []byte) (*Receipt, error) {
	// One string holds every text value: the fields are sub-strings of it.
	d := new(decoded)
	if err := decodeCoreInto(d, b, string(b), false); err != nil {
		return nil, err
	}
	return &d.r, nil
}

// decodeCoreInto is DecodeCore into d, which it resets: all is b as a
// string, whose sub-strings become the text fields. With share, the
// foreign extensions' values are sub-slices of b and d.r.Foreign's array
// is reused; without, each value is a copy.
func decodeCoreInto(d *decoded, b []byte, all string, share bool) error {
	// Only the receipt needs zeroing: an entry of d.u or d.text is written
	// before a field points at it.
	foreign := d.r.Foreign[:0]
	d.r = Receipt{}
	coreErr := func(format string, a ...any) error {
		return refuse(RefusedCoreEncoding, fmt.Errorf("decode receipt core: %w: %s", wire.ErrNotDeterministic, fmt.Sprintf(format, a...)))
	}
	major, n, off, err := wire.ReadHead(b, 0)
	if err != nil {
		return refuse(RefusedCoreEncoding, fmt.Errorf("decode receipt core: %w", err))
	}
	if major != wire.MajorMap {
		return coreErr("the core is CBOR major type %d, want a map", major)
	}
	if n > maxCoreFields {
		return coreErr("the core declares %d keys", n)
	}
	var seen [numFields]bool
	var prevKey []byte
	next := 0 // the first table entry not yet passed
	for i := uint64(0); i < n; i++ {
		keyStart := off
		key, kEnd, err := wire.ReadString(b, off, wire.MajorText)
		if err != nil {
			return coreErr("key %d: %v", i, err)
		}
		rawKey := b[keyStart:kEnd]
		if prevKey != nil && wire.CompareKeys(prevKey, rawKey) >= 0 {
			return coreErr("key %q is out of order or repeated", key)
		}
		prevKey = rawKey
		keyStr := all[kEnd-len(key) : kEnd]
		off = kEnd
		for next < len(coreFields) && keyLess(coreFields[next].key, keyStr) {
			next++
		}
		if next == len(coreFields) || coreFields[next].key != keyStr {
			if !strings.HasPrefix(keyStr, "x_") {
				return fieldErr(RefusedUnknownField, "unknown key %q", keyStr)
			}
			end, err := wire.SkipItem(b, off)
			if err != nil {
				return refuse(RefusedCoreEncoding, fmt.Errorf("decode receipt core: extension %q: %w", keyStr, err))
			}
			val := b[off:end:end]
			if !share {
				val = bytes.Clone(val)
			} else if d.r.Foreign == nil {
				d.r.Foreign = foreign
			}
			d.r.Foreign = append(d.r.Foreign, Extension{Key: keyStr, Value: val})
			off = end
			continue
		}
		f := &coreFields[next]
		seen[f.id] = true
		vm, v, vEnd, err := wire.ReadHead(b, off)
		if err != nil {
			return refuse(RefusedCoreEncoding, fmt.Errorf("decode receipt core: %s: %w", f.key, err))
		}
		switch {
		case f.text && vm == wire.MajorText:
			s, end, err := wire.ReadString(b, off, wire.MajorText)
			if err != nil {
				return refuse(RefusedCoreEncoding, fmt.Errorf("decode receipt core: %s: %w", f.key, err))
			}
			d.setText(f.id, all[end-len(s):end])
			off = end
		case !f.text && vm == wire.MajorUint:
			if v > f.max {
				return fieldErr(RefusedFieldValue, "%s %d is out of range (at most %d)", f.key, v, f.max)
			}
			d.setUint(f.id, v)
			off = vEnd
		case vm == wire.MajorOther || vm == wire.MajorTag:
			// Not a type error: PROFILE.md §1 keeps floats, booleans, nulls
			// and tags out of the encoding itself.
			return coreErr("%s holds a float, boolean, null, simple value or tag", f.key)
		default:
			want := "an unsigned integer"
			if f.text {
				want = "a text string"
			}
			return fieldErr(RefusedFieldType, "%s is CBOR major type %d, want %s", f.key, vm, want)
		}
	}
	if off != len(b) {
		return coreErr("%d bytes after the map", len(b)-off)
	}
	for i := range coreFields {
		if f := &coreFields[i]; f.required && !seen[f.id] {
			return fieldErr(RefusedMissingField, "%s is missing", f.key)
		}
	}
	return nil
}

// MeterName returns x_meter, or "" when the receipt does not carry meshd's
// metering extensions.
func (r *Receipt) MeterName() string {
	if r.Meter == nil {
		return ""
	}
	return *r.Meter
}

// Metering is the evidence the receipt carries, as a draft states it: a
// forwarding steward seals it again, and the same evidence rules judge it.
func (r *Receipt) Metering() wire.Metering {
	v := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	m := wire.Metering{WindowNs: v(r.WindowNs), ServeNs: v(r.ServeNs), ErrorUJ: v(r.ErrorUJ), Samples: v(r.Samples),
		MaxGapNs: v(r.MaxGapNs), CoveredPPM: v(r.CoveredPPM), PeriodNs: v(r.PeriodNs), AccuracyPPM: v(r.AccuracyPPM), Shared: v(r.Shared)}
	if r.Meter != nil {
		m.Meter = *r.Meter
	}
	if r.MeterKind != nil {
		m.Kind = *r.MeterKind
	}
	if r.IdleUW != nil {
		x := *r.IdleUW
		m.IdleUW = &x
	}
	if r.FullScaleUW != nil {
		m.FullScaleUW = *r.FullScaleUW
	}
	if r.StatUJ != nil {
		x := *r.StatUJ
		m.StatUJ = &x
	}
	if r.BusLoMV != nil && r.BusHiMV != nil {
		m.BusBand = &wire.BusBand{LoMV: *r.BusLoMV, HiMV: *r.BusHiMV}
	}
	return m
}
