package conformance

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"lukechampine.com/blake3"

	"meshd/steward"
	"meshd/wire"
)

// ReceiptMeta is receipts/<name>/meta.json: what a verifier must conclude
// from envelope.hex, and every input that produced the envelopes.
type ReceiptMeta struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Expect is "accept" (every envelope verifies and each links to the one
	// before) or "refuse" (the first failure must carry Refusal).
	Expect  string `json:"expect"`
	Refusal string `json:"refusal,omitempty"`
	// RefusedAt is the index in envelope.hex of the envelope (or, for
	// chain-link, the later envelope of the pair) that is refused.
	RefusedAt *int `json:"refused_at,omitempty"`
	// StewardSeedHex is the Ed25519 seed that signed; TrustedKey the key a
	// verifier is to trust (the seed's public key).
	StewardSeedHex string         `json:"steward_seed_hex"`
	TrustedKey     string         `json:"trusted_key"`
	Envelopes      []EnvelopeMeta `json:"envelopes"`
}

// EnvelopeMeta describes one line of envelope.hex.
type EnvelopeMeta struct {
	EnvelopeID string `json:"envelope_id"`
	// Draft is the steward.Draft and chain position meshd's steward built
	// the receipt from; absent for a hand-encoded core.
	Draft *DraftMeta `json:"draft,omitempty"`
	// HandEncodedCoreHex is a core written without meshd's encoder.
	HandEncodedCoreHex string `json:"hand_encoded_core_hex,omitempty"`
	// Mutation says how a negative vector's bytes differ from what the
	// draft seals, and whether the result was re-signed.
	Mutation string `json:"mutation,omitempty"`
}

// DraftMeta is a steward.Draft with its chain position, nonce and clock.
type DraftMeta struct {
	Sequence       uint64 `json:"sequence"`
	Prev           string `json:"prev,omitempty"`
	NonceHex       string `json:"nonce_hex"`
	SealedUnixMs   int64  `json:"sealed_unix_ms"`
	RequestID      string `json:"request_id"`
	GrantID        string `json:"grant_id,omitempty"`
	GrantHold      uint64 `json:"grant_hold,omitempty"`
	GrantDebitUJ   uint64 `json:"grant_debit_uj,omitempty"`
	Backend        string `json:"backend"`
	Recipe         string `json:"recipe"`
	Route          string `json:"route"`
	TokensIn       uint32 `json:"tokens_in"`
	TokensOut      uint32 `json:"tokens_out"`
	TokensAccepted uint32 `json:"tokens_accepted"`
	CacheHitTokens uint32 `json:"cache_hit_tokens"`
	SpecProposed   uint32 `json:"spec_proposed"`
	SpecAccepted   uint32 `json:"spec_accepted"`
	FidelityFloor  uint8  `json:"fidelity_floor"`
	ServedFidelity uint8  `json:"served_fidelity"`
	Provenance     string `json:"energy_provenance"`
	MeasuredUJ     uint64 `json:"measured_uj,omitempty"`
	EstimatedUJ    uint64 `json:"estimated_uj"`
	// The wire.Metering fields, as the agent hands them to the steward.
	Meter       string  `json:"meter"`
	MeterKind   string  `json:"meter_kind"`
	WindowNs    uint64  `json:"window_ns"`
	ServeNs     uint64  `json:"serve_ns"`
	ErrorUJ     uint64  `json:"error_uj"`
	Samples     uint64  `json:"samples"`
	MaxGapNs    uint64  `json:"max_gap_ns"`
	CoveredPPM  uint64  `json:"covered_ppm"`
	PeriodNs    uint64  `json:"period_ns"`
	AccuracyPPM uint64  `json:"accuracy_ppm"`
	Shared      uint64  `json:"shared"`
	IdleUW      *uint64 `json:"idle_uw,omitempty"`
	FullScaleUW uint64  `json:"full_scale_uw,omitempty"`
	// StatUJ is x_stat_uj: a ModelBased figure's statistical uncertainty
	// (PROFILE §13), never a bound.
	StatUJ *uint64 `json:"stat_uj,omitempty"`
	// RouteCandidates is x_route_candidates as the steward writes it from
	// the draft's candidates, and CeilingUJ the request's ceiling; both
	// absent on a draft that carries no route.
	RouteCandidates string `json:"route_candidates,omitempty"`
	CeilingUJ       uint64 `json:"ceiling_uj,omitempty"`
	// Record and Run are x_record and x_run (PROFILE §22); DocumentHex is
	// the record's document, whose content id is request_id.
	Record      string  `json:"record,omitempty"`
	Run         *uint64 `json:"run,omitempty"`
	DocumentHex string  `json:"document_hex,omitempty"`
	// IdleRecord is x_idle_record: the idle record whose power IdleUW is.
	IdleRecord *uint64 `json:"idle_record,omitempty"`
	// PinPrev is x_pin_prev: a corpus-pin record's predecessor.
	PinPrev *uint64 `json:"pin_prev,omitempty"`
}

func (m DraftMeta) draft() (steward.Draft, *wire.ContentID, []byte, time.Time, error) {
	req, err := wire.ParseContentID(m.RequestID)
	if err != nil {
		return steward.Draft{}, nil, nil, time.Time{}, err
	}
	d := steward.Draft{
		Request: req, Backend: m.Backend, Recipe: m.Recipe, Route: m.Route,
		Outcome: wire.ServeOutcome{TokensIn: m.TokensIn, TokensOut: m.TokensOut, TokensAccepted: m.TokensAccepted,
			CacheHitTokens: m.CacheHitTokens, SpecProposed: m.SpecProposed, SpecAccepted: m.SpecAccepted},
		Floor: wire.Fidelity(m.FidelityFloor), Served: wire.Fidelity(m.ServedFidelity),
		Metering: wire.Metering{Meter: m.Meter, Kind: m.MeterKind, WindowNs: m.WindowNs, ServeNs: m.ServeNs,
			ErrorUJ: m.ErrorUJ, Samples: m.Samples, MaxGapNs: m.MaxGapNs, CoveredPPM: m.CoveredPPM, PeriodNs: m.PeriodNs,
			AccuracyPPM: m.AccuracyPPM, Shared: m.Shared, IdleUW: m.IdleUW, FullScaleUW: m.FullScaleUW, StatUJ: m.StatUJ},
		Record: m.Record, Run: m.Run, IdleRecord: m.IdleRecord, PinPrev: m.PinPrev,
	}
	p, err := wire.ParseProvenance(m.Provenance)
	if err != nil {
		return steward.Draft{}, nil, nil, time.Time{}, err
	}
	if m.RouteCandidates != "" {
		if d.Candidates, err = steward.ParseCandidates(m.RouteCandidates); err != nil {
			return steward.Draft{}, nil, nil, time.Time{}, err
		}
		d.CeilingUJ = m.CeilingUJ
	}
	var measured *uint64
	if p == wire.HwShunt {
		measured = &m.MeasuredUJ
	}
	if d.Energy, err = wire.NewEnergy(measured, m.EstimatedUJ, p); err != nil {
		return steward.Draft{}, nil, nil, time.Time{}, err
	}
	if m.GrantID != "" {
		g, err := wire.ParseContentID(m.GrantID)
		if err != nil {
			return steward.Draft{}, nil, nil, time.Time{}, err
		}
		d.Grant, d.GrantHold, d.GrantDebit = &g, &m.GrantHold, &m.GrantDebitUJ
	}
	var prev *wire.ContentID
	if m.Prev != "" {
		p, err := wire.ParseContentID(m.Prev)
		if err != nil {
			return steward.Draft{}, nil, nil, time.Time{}, err
		}
		prev = &p
	}
	nonce, err := wire.ParseHex(m.NonceHex, steward.NonceSize)
	if err != nil {
		return steward.Draft{}, nil, nil, time.Time{}, err
	}
	return d, prev, nonce, time.UnixMilli(m.SealedUnixMs), nil
}

// receiptVector is one generated vector before it is written out.
type receiptVector struct {
	meta  ReceiptMeta
	envs  [][]byte
	cores [][]byte // positives only
}

// vectorKey is the fixed steward of the receipt vectors.
type vectorKey struct {
	seed []byte
	key  *steward.Key
	st   *steward.Steward
}

func newVectorKey(label string) (*vectorKey, error) {
	s := blake3.Sum256([]byte(label))
	k, err := steward.NewKeyFromSeed(s[:])
	if err != nil {
		return nil, err
	}
	return &vectorKey{seed: s[:], key: k, st: steward.New(k, nil, steward.Options{})}, nil
}

func (vk *vectorKey) meta(name, desc, expect string, refusal steward.Reason, at int) ReceiptMeta {
	m := ReceiptMeta{Name: name, Description: desc, Expect: expect, Refusal: string(refusal),
		StewardSeedHex: hex.EncodeToString(vk.seed), TrustedKey: vk.key.ID()}
	if expect == "refuse" {
		m.RefusedAt = &at
	}
	return m
}

// build makes the receipt for dm with meshd's steward.
func (vk *vectorKey) build(dm DraftMeta) (*steward.Receipt, error) {
	d, prev, nonce, now, err := dm.draft()
	if err != nil {
		return nil, err
	}
	return vk.st.Build(d, dm.Sequence, prev, nonce, now)
}

// seal encodes r and signs the core with meshd's Sign1.
func (vk *vectorKey) seal(r *steward.Receipt) (core, env []byte, err error) {
	if core, err = r.EncodeCore(); err != nil {
		return nil, nil, err
	}
	if env, err = steward.Sign1(vk.key, core); err != nil {
		return nil, nil, err
	}
	return core, env, nil
}

// signRaw signs payload under an arbitrary protected header bstr with plain
// crypto/ed25519, so a negative vector can carry a valid signature over a
// header meshd would never write.
func (vk *vectorKey) signRaw(protectedBstr, payload []byte) []byte {
	tbs := []byte("\x84\x6aSignature1")
	tbs = append(tbs, protectedBstr...)
	tbs = append(tbs, 0x40)
	tbs = append(tbs, cborBytes(payload)...)
	env := []byte{0xd2, 0x84}
	env = append(env, protectedBstr...)
	env = append(env, 0xa0)
	env = append(env, cborBytes(payload)...)
	env = append(env, 0x58, 0x40)
	return append(env, ed25519.Sign(ed25519.NewKeyFromSeed(vk.seed), tbs)...)
}

// The hand-written CBOR below is deliberately separate from wire's
// encoder: the vectors must not merely agree with the code under test.
func cborHead(major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return []byte{m | byte(n)}
	case n < 1<<8:
		return []byte{m | 24, byte(n)}
	case n < 1<<16:
		return []byte{m | 25, byte(n >> 8), byte(n)}
	case n < 1<<32:
		return []byte{m | 26, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	return []byte{m | 27, byte(n >> 56), byte(n >> 48), byte(n >> 40), byte(n >> 32), byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func cborBytes(b []byte) []byte { return append(cborHead(2, uint64(len(b))), b...) }
func cborText(s string) []byte  { return append(cborHead(3, uint64(len(s))), s...) }

// handMap encodes a map of text keys whose values are already encoded,
// sorting the keys as RFC 8949 §4.2.1 does for text: shorter first, then
// bytewise.
func handMap(fields map[string][]byte) []byte {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ { // insertion sort: a handful of keys
		for j := i; j > 0 && (len(keys[j]) < len(keys[j-1]) || len(keys[j]) == len(keys[j-1]) && keys[j] < keys[j-1]); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	out := cborHead(5, uint64(len(keys)))
	for _, k := range keys {
		out = append(out, cborText(k)...)
		out = append(out, fields[k]...)
	}
	return out
}

// mapEntries splits an encoded map into its raw key and value encodings.
func mapEntries(core []byte) (keys, vals [][]byte, err error) {
	major, n, off, err := wire.ReadHead(core, 0)
	if err != nil || major != wire.MajorMap {
		return nil, nil, fmt.Errorf("not a map: %v", err)
	}
	for i := uint64(0); i < n; i++ {
		kEnd, err := wire.SkipItem(core, off)
		if err != nil {
			return nil, nil, err
		}
		vEnd, err := wire.SkipItem(core, kEnd)
		if err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, core[off:kEnd]), append(vals, core[kEnd:vEnd])
		off = vEnd
	}
	return keys, vals, nil
}

// rewriteCore rebuilds core with edit applied to each key's raw value
// and one extra raw entry (key, value) inserted where its key sorts, so
// that the only fault in the result is the one a vector is about.
func rewriteCore(core []byte, edit func(key string, val []byte) []byte, extra ...[]byte) ([]byte, error) {
	keys, vals, err := mapEntries(core)
	if err != nil {
		return nil, err
	}
	if len(extra) == 2 {
		i := 0
		for i < len(keys) && wire.CompareKeys(keys[i], extra[0]) < 0 {
			i++
		}
		keys = append(keys[:i:i], append([][]byte{extra[0]}, keys[i:]...)...)
		vals = append(vals[:i:i], append([][]byte{extra[1]}, vals[i:]...)...)
	}
	body := []byte{}
	for i := range keys {
		k, _, err := wire.ReadString(keys[i], 0, wire.MajorText)
		if err != nil {
			return nil, err
		}
		v := vals[i]
		if edit != nil {
			v = edit(string(k), v)
		}
		body = append(append(body, keys[i]...), v...)
	}
	return append(cborHead(5, uint64(len(keys))), body...), nil
}

// receiptVectors builds every vector under receipts/. The drafts are fixed
// here; everything else follows from them and the seeds.
func receiptVectors() ([]receiptVector, error) {
	vk, err := newVectorKey("mesh/1 conformance v1 receipts steward seed")
	if err != nil {
		return nil, err
	}
	nonce := func(i int) string {
		n := blake3.Sum256([]byte(fmt.Sprintf("mesh/1 conformance v1 receipt nonce %d", i)))
		return hex.EncodeToString(n[:steward.NonceSize])
	}
	req := func(s string) string { return wire.ContentOf([]byte(s)).String() }
	const t0 = 1_767_225_600_000
	hw := DraftMeta{Sequence: 0, NonceHex: nonce(0), SealedUnixMs: t0,
		RequestID: req("conformance request hwshunt"), Backend: "gguf-q4", Recipe: "gguf:" + req("model file"),
		Route:    "gguf-q4: cheapest of 1 admissible (of 2 weighed) at F2 >= F2, est 30000 µJ <= ceiling 50000 µJ",
		TokensIn: 40, TokensOut: 60, TokensAccepted: 60, CacheHitTokens: 12, SpecProposed: 30, SpecAccepted: 21,
		FidelityFloor: 2, ServedFidelity: 2, Provenance: "HwShunt", MeasuredUJ: 28_913, EstimatedUJ: 30_000,
		Meter: "ina226@i2c-1:0x40", MeterKind: wire.KindADC, WindowNs: 412_132_000, ServeNs: 410_250_000,
		ErrorUJ: 87, Samples: 371, MaxGapNs: 1_104_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 3_000,
		Shared: 1, FullScaleUW: 41_000_000}
	mb := DraftMeta{Sequence: 1, NonceHex: nonce(1), SealedUnixMs: t0 + 1500,
		RequestID: req("conformance request modelbased"), Backend: "gguf-q4", Recipe: "gguf:" + req("model file"),
		Route:    "gguf-q4: cheapest of 1 admissible (of 2 weighed) at F2 >= F1, est 9000 µJ <= ceiling 50000 µJ",
		TokensIn: 10, TokensOut: 20, TokensAccepted: 20,
		FidelityFloor: 1, ServedFidelity: 2, Provenance: "ModelBased", EstimatedUJ: 9_377,
		Meter: "ina226@i2c-1:0x40", MeterKind: wire.KindADC, WindowNs: 140_000_000, ServeNs: 138_900_000,
		ErrorUJ: 1_204, Samples: 115, MaxGapNs: 9_000_000, CoveredPPM: 912_000, PeriodNs: 1_111_000, AccuracyPPM: 3_000,
		Shared: 2, FullScaleUW: 41_000_000}
	gr := DraftMeta{Sequence: 2, NonceHex: nonce(2), SealedUnixMs: t0 + 3000,
		RequestID: req("conformance request granted"), GrantID: req("conformance grant envelope"), GrantHold: 7, GrantDebitUJ: 4_000,
		Backend: "ref-mid", Recipe: "reference/v1:work=64",
		Route:    "ref-mid: cheapest of 2 admissible (of 4 weighed) at F2 >= F2, est 4000 µJ <= ceiling 4000 µJ",
		TokensIn: 8, TokensOut: 12, TokensAccepted: 12, FidelityFloor: 2, ServedFidelity: 2,
		Provenance: "Estimator", EstimatedUJ: 6_000, Meter: steward.EstimatorMeter, MeterKind: wire.KindEstimator,
		WindowNs: 2_500_000, ServeNs: 2_500_000}

	// A run as records (PROFILE §22): run-open at 0, an idle record and a
	// serve in the run, the run-close naming them.
	run0 := uint64(0)
	openDoc := steward.RunOpenDoc{WorkloadSHA256: hex.EncodeToString(make([]byte, 32)), Repetitions: 2, ServesDeclared: 1,
		Harness: "meshctl conformance", Caller: "conformance", Board: `{"arch":"arm64","cores":4,"cpu_model":"Cortex-A78AE","kernel":"5.15.0","memory_bytes":8000000000}`,
		Version: "v1.0.0", Meters: `[{"declared_accuracy_ppm":3000,"driver":"ina226","kind":"adc","name":"vdd"}]`}.Encode()
	idleDoc := steward.IdleDoc{Backend: "gguf-q4", DurationMs: 2000, Run: &run0}.Encode()
	closeDoc := steward.RunCloseDoc{Run: 0, ServesDeclared: 1, ServesSealed: 1, Serves: []uint64{2}, Idle: []uint64{1}, Status: steward.RunComplete}.Encode()
	estMeter := func(dm DraftMeta) DraftMeta {
		dm.Provenance, dm.Meter, dm.MeterKind = "Estimator", steward.EstimatorMeter, wire.KindEstimator
		return dm
	}
	recOpen := estMeter(DraftMeta{Sequence: 0, NonceHex: nonce(10), SealedUnixMs: t0 + 10_000, RequestID: wire.ContentOf(openDoc).String(),
		Backend: steward.RunBackend, Recipe: steward.RunRecipe, Route: "run open: workload 0000000000000000, 1 serves declared, 2 repetitions",
		Record: steward.RecordRunOpen, DocumentHex: hex.EncodeToString(openDoc)})
	recIdle := DraftMeta{Sequence: 1, NonceHex: nonce(11), SealedUnixMs: t0 + 12_000, RequestID: wire.ContentOf(idleDoc).String(),
		Backend: "gguf-q4", Recipe: steward.IdleRecipe, Route: "idle: 2000 ms on ina226@i2c-1:0x40", Provenance: "HwShunt", MeasuredUJ: 3_700_000,
		Meter: "ina226@i2c-1:0x40", MeterKind: wire.KindADC, WindowNs: 2_001_000_000, ServeNs: 2_000_100_000,
		ErrorUJ: 11_000, Samples: 1802, MaxGapNs: 1_104_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 3_000, Shared: 1, FullScaleUW: 98_304_000,
		Record: steward.RecordIdle, Run: &run0, DocumentHex: hex.EncodeToString(idleDoc)}
	recServe := hw
	recServe.Sequence, recServe.NonceHex, recServe.SealedUnixMs, recServe.Run = 2, nonce(12), t0+13_000, &run0
	recClose := estMeter(DraftMeta{Sequence: 3, NonceHex: nonce(13), SealedUnixMs: t0 + 14_000, RequestID: wire.ContentOf(closeDoc).String(),
		Backend: steward.RunBackend, Recipe: steward.RunRecipe, Route: "run close 0: complete, 1 of 1 serves sealed",
		Record: steward.RecordRunClose, Run: &run0, DocumentHex: hex.EncodeToString(closeDoc)})

	var out []receiptVector
	// The positive chain: each receipt built by meshd's steward from its
	// draft, prev naming the envelope before it.
	type sealed struct {
		dm   DraftMeta
		r    *steward.Receipt
		core []byte
		env  []byte
	}
	var chain []sealed
	for _, dm := range []DraftMeta{hw, mb, gr} {
		if len(chain) > 0 {
			dm.Prev = wire.ContentOf(chain[len(chain)-1].env).String()
		}
		r, err := vk.build(dm)
		if err != nil {
			return nil, fmt.Errorf("vector draft %d: %w", dm.Sequence, err)
		}
		core, env, err := vk.seal(r)
		if err != nil {
			return nil, err
		}
		chain = append(chain, sealed{dm, r, core, env})
	}
	positive := func(name, desc string, items ...sealed) {
		v := receiptVector{meta: vk.meta(name, desc, "accept", "", 0)}
		for _, it := range items {
			dm := it.dm
			v.envs, v.cores = append(v.envs, it.env), append(v.cores, it.core)
			v.meta.Envelopes = append(v.meta.Envelopes, EnvelopeMeta{EnvelopeID: wire.ContentOf(it.env).String(), Draft: &dm})
		}
		out = append(out, v)
	}
	positive("hwshunt", "HwShunt genesis receipt: measured_uj and all of meshd's metering extensions; the evidence supports HwShunt (adc, full coverage, gap within a period, bound within 3000 ppm of measured_uj, alone)", chain[0])
	positive("modelbased", "ModelBased receipt at sequence 1: no measured_uj, the metering evidence of a partly covered window shared by 2 serves, prev names hwshunt's envelope", chain[1])
	positive("granted", "Estimator receipt at sequence 2 on a grant: grant_id with x_grant_hold and x_grant_debit_uj (debit 4000 <= charged 6000); x_meter and x_meter_kind \"estimator\", no meter evidence", chain[2])
	positive("chain", "hwshunt, modelbased and granted as one chain: each verifies and links to the one before", chain...)

	var runChain []sealed
	for _, dm := range []DraftMeta{recOpen, recIdle, recServe, recClose} {
		if len(runChain) > 0 {
			dm.Prev = wire.ContentOf(runChain[len(runChain)-1].env).String()
		}
		r, err := vk.build(dm)
		if err != nil {
			return nil, fmt.Errorf("record vector %d: %w", dm.Sequence, err)
		}
		core, env, err := vk.seal(r)
		if err != nil {
			return nil, err
		}
		runChain = append(runChain, sealed{dm, r, core, env})
	}
	positive("records-run", "a run as sealed records (PROFILE §22): run-open at 0 (Estimator, no energy, no window, backend meshd, recipe run, no x_run), an HwShunt idle record and a serve with x_run 0, and the run-close with x_run 0; each record's request_id is the BLAKE3 of its document_hex", runChain...)

	// An idle figure backed by the chain (PROFILE §22): the quiet stretch
	// the span measured, sealed as an idle record of source span, then a
	// serve whose x_idle_uw is that record's power,
	// ⌊100000 × 10⁹ ÷ 2001000000⌋ = 49975 µW, naming it.
	spanDoc := steward.IdleDoc{Backend: "gguf-q4", DurationMs: 2000, Source: steward.IdleSourceSpan}.Encode()
	spanIdle := DraftMeta{Sequence: 0, NonceHex: nonce(20), SealedUnixMs: t0 + 20_000, RequestID: wire.ContentOf(spanDoc).String(),
		Backend: "gguf-q4", Recipe: steward.IdleRecipe, Route: "idle: 2000 ms on ina226@i2c-1:0x40 (span)", Provenance: "HwShunt", MeasuredUJ: 100_000,
		Meter: "ina226@i2c-1:0x40", MeterKind: wire.KindADC, WindowNs: 2_001_000_000, ServeNs: 2_000_100_000,
		ErrorUJ: 300, Samples: 1802, MaxGapNs: 1_104_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 3_000, Shared: 1, FullScaleUW: 41_000_000,
		Record: steward.RecordIdle, DocumentHex: hex.EncodeToString(spanDoc)}
	spanPower, spanRec := uint64(49_975), uint64(0)
	idleServe := hw
	idleServe.Sequence, idleServe.NonceHex, idleServe.SealedUnixMs = 1, nonce(21), t0+21_000
	idleServe.IdleUW, idleServe.IdleRecord = &spanPower, &spanRec
	var idleChain []sealed
	for _, dm := range []DraftMeta{spanIdle, idleServe} {
		if len(idleChain) > 0 {
			dm.Prev = wire.ContentOf(idleChain[len(idleChain)-1].env).String()
		}
		r, err := vk.build(dm)
		if err != nil {
			return nil, fmt.Errorf("idle vector %d: %w", dm.Sequence, err)
		}
		core, env, err := vk.seal(r)
		if err != nil {
			return nil, err
		}
		idleChain = append(idleChain, sealed{dm, r, core, env})
	}
	if p, err := steward.IdlePowerUW(idleChain[0].r); err != nil || p != spanPower {
		return nil, fmt.Errorf("idle vector: the record's power is %d (%v), the serve states %d", p, err, spanPower)
	}
	positive("idle-span", "an idle figure the chain backs (PROFILE §22): at 0 the quiet stretch a span measured, an HwShunt idle record whose document says source span, no x_run; at 1 an HwShunt serve whose x_idle_uw 49975 is the record's power (⌊100000 µJ × 10⁹ ÷ 2001000000 ns⌋) on the same x_meter, naming it in x_idle_record 0", idleChain...)

	// A corpus's pins as records (PROFILE §22): its first pin at 0, a
	// serve, the pin a sync moved it to at 2 naming the first.
	pinRepos := []steward.PinRepo{{ID: "site", Branch: "main", Commit: strings.Repeat("a1", 20)}}
	pinRecipe := func(h string) string { return "rag/v1:corpus=" + h + ":embed=gguf:" + req("embedding model file") }
	pinMeta := func(seq uint64, doc steward.CorpusPinDoc, prev *uint64) DraftMeta {
		b := doc.Encode()
		return estMeter(DraftMeta{Sequence: seq, NonceHex: nonce(30 + int(seq)), SealedUnixMs: t0 + 30_000 + int64(seq)*1000, RequestID: wire.ContentOf(b).String(),
			Backend: steward.CorpusPinBackend(doc.Corpus), Recipe: pinRecipe(doc.CorpusHash), Route: steward.PinRoute(doc),
			Record: steward.RecordCorpusPin, PinPrev: prev, DocumentHex: hex.EncodeToString(b)})
	}
	pinHash1, pinHash2 := req("conformance corpus at a1"), req("conformance corpus at b2")
	pin0 := pinMeta(0, steward.CorpusPinDoc{Corpus: "acme/docs", CorpusHash: pinHash1, Repos: pinRepos, Embedded: 120, Why: steward.PinStart}, nil)
	pinServe := hw
	pinServe.Sequence, pinServe.NonceHex, pinServe.SealedUnixMs = 1, nonce(31), t0+31_000
	var pinChain []sealed
	seal := func(dm DraftMeta) (sealed, error) {
		if len(pinChain) > 0 {
			dm.Prev = wire.ContentOf(pinChain[len(pinChain)-1].env).String()
		}
		r, err := vk.build(dm)
		if err != nil {
			return sealed{}, fmt.Errorf("pin vector %d: %w", dm.Sequence, err)
		}
		core, env, err := vk.seal(r)
		if err != nil {
			return sealed{}, err
		}
		return sealed{dm, r, core, env}, nil
	}
	for _, dm := range []DraftMeta{pin0, pinServe} {
		it, err := seal(dm)
		if err != nil {
			return nil, err
		}
		pinChain = append(pinChain, it)
	}
	moved := pinRepos[0]
	moved.Commit = strings.Repeat("b2", 20)
	pinPrev0 := uint64(0)
	pin2 := pinMeta(2, steward.CorpusPinDoc{Corpus: "acme/docs", CorpusHash: pinHash2, Repos: []steward.PinRepo{moved}, Embedded: 3, Reused: 41,
		Why: steward.PinSync, Prev: wire.ContentOf(pinChain[0].env).String()}, &pinPrev0)
	it, err := seal(pin2)
	if err != nil {
		return nil, err
	}
	pinChain = append(pinChain, it)
	positive("records-corpus-pin", "a corpus's pins as sealed records (PROFILE §22): at 0 its first corpus-pin record (Estimator, no energy, no window, backend rag:acme/docs, recipe the corpus's answer recipe, no x_pin_prev), a serve at 1, and at 2 the pin a sync moved it to, x_pin_prev 0 and its document's prev the envelope id of line 0; each record's request_id is the BLAKE3 of its document_hex", pinChain...)

	// A point meter that averages (PROFILE §13): a steady 1 s, 12 W serve
	// on a Jetson's INA3221 rail read under the averaged-reading model,
	// its bound 9 % of the figure and x_stat_uj beside it.
	stat := uint64(80_412)
	avg := DraftMeta{Sequence: 0, NonceHex: nonce(20), SealedUnixMs: t0 + 20_000,
		RequestID: req("conformance request averaged point meter"), Backend: "gguf-q4", Recipe: "gguf:" + req("model file"),
		Route:    "gguf-q4: cheapest of 1 admissible (of 2 weighed) at F2 >= F1, est 11000000 µJ <= ceiling 50000000 µJ",
		TokensIn: 32, TokensOut: 96, TokensAccepted: 96, FidelityFloor: 1, ServedFidelity: 2,
		Provenance: "ModelBased", EstimatedUJ: 12_004_310,
		Meter: "hwmon:hwmon1/ina3221:1(VDD_IN)", MeterKind: wire.KindPoint, WindowNs: 1_000_000_000, ServeNs: 1_000_000_000,
		ErrorUJ: 1_085_221, Samples: 211, MaxGapNs: 4_931_000, CoveredPPM: 997_000, PeriodNs: 4_752_000, AccuracyPPM: 100_000,
		Shared: 1, FullScaleUW: 851_760_000, StatUJ: &stat}
	{
		r, err := vk.build(avg)
		if err != nil {
			return nil, fmt.Errorf("averaged vector: %w", err)
		}
		core, env, err := vk.seal(r)
		if err != nil {
			return nil, err
		}
		positive("modelbased-averaged", "ModelBased genesis receipt from a point meter read under the averaged-reading model (hwmon INA3221, PROFILE §13): x_stat_uj 80412 beside x_error_uj 1085221 (9 % of 12004310 µJ), never added to it (evidence rule 13)",
			sealed{avg, r, core, env})
	}

	foreign, err := foreignVector()
	if err != nil {
		return nil, err
	}
	out = append(out, foreign)

	// Negative vectors: one fault each, with a valid signature wherever the
	// fault is not the signature, so only the named rule can refuse them.
	negative := func(name, desc string, refusal steward.Reason, at int, envs [][]byte, ems []EnvelopeMeta) {
		v := receiptVector{meta: vk.meta(name, desc, "refuse", refusal, at), envs: envs}
		for i := range ems {
			ems[i].EnvelopeID = wire.ContentOf(envs[i]).String()
		}
		v.meta.Envelopes = ems
		out = append(out, v)
	}
	with := func(dm DraftMeta, mutation string) EnvelopeMeta { return EnvelopeMeta{Draft: &dm, Mutation: mutation} }
	hwEnv, hwCore := chain[0].env, chain[0].core

	// The payload bstr's length re-encoded in 4 bytes instead of 2: the
	// signature still verifies over the canonical Sig_structure, but the
	// envelope (and its content id) is a second encoding.
	padded := append([]byte(nil), hwEnv[:2+40+1]...)
	padded = append(padded, 0x5a, 0, 0, byte(len(hwCore)>>8), byte(len(hwCore)))
	padded = append(padded, hwEnv[2+40+1+len(cborHead(2, uint64(len(hwCore)))):]...)
	negative("payload-length-not-shortest", "hwshunt's envelope with the payload length written as 5a 00 00 nn nn; signature untouched and valid",
		steward.RefusedPayload, 0, [][]byte{padded}, []EnvelopeMeta{with(hw, "payload bstr head 59 nn nn rewritten as 5a 00 00 nn nn; not re-signed")})

	kid := vk.key.Public()
	swapped := append([]byte{0x58, 0x26, 0xa2, 0x04, 0x58, 0x20}, kid...)
	swapped = append(swapped, 0x01, 0x27)
	negative("protected-kid-before-alg", "hwshunt's core under a protected header {4: kid, 1: -8} (kid first), validly signed over that header",
		steward.RefusedProtected, 0, [][]byte{vk.signRaw(swapped, hwCore)}, []EnvelopeMeta{with(hw, "protected header a2 04 58 20 <kid> 01 27; re-signed")})

	negative("trailing-bytes", "hwshunt's envelope followed by one 00 byte",
		steward.RefusedTrailing, 0, [][]byte{append(bytes.Clone(hwEnv), 0)}, []EnvelopeMeta{with(hw, "00 appended after the signature; not re-signed")})

	up := *chain[0].r
	up.RequestID = strings.ToUpper(up.RequestID)
	_, upEnv, err := vk.seal(&up)
	if err != nil {
		return nil, err
	}
	negative("request-id-upper-case", "hwshunt with request_id in upper-case hex, re-signed",
		steward.RefusedFieldValue, 0, [][]byte{upEnv}, []EnvelopeMeta{with(hw, "request_id upper-cased; re-signed")})

	est := *chain[2].r
	m := uint64(6_000)
	est.MeasuredUJ = &m
	_, estEnv, err := vk.seal(&est)
	if err != nil {
		return nil, err
	}
	negative("measured-on-estimator", "granted with measured_uj 6000 added to an Estimator receipt, re-signed",
		steward.RefusedCoupling, 0, [][]byte{estEnv}, []EnvelopeMeta{with(gr, "measured_uj = 6000 added; re-signed")})

	cov := *chain[2].r
	e, s, g := uint64(10), uint64(3), uint64(1000)
	cov.ErrorUJ, cov.Samples, cov.MaxGapNs = &e, &s, &g
	_, covEnv, err := vk.seal(&cov)
	if err != nil {
		return nil, err
	}
	negative("coverage-on-estimator", "granted with x_error_uj, x_samples and x_max_gap_ns added to an Estimator receipt, re-signed",
		steward.RefusedCoupling, 0, [][]byte{covEnv}, []EnvelopeMeta{with(gr, "x_error_uj=10, x_samples=3, x_max_gap_ns=1000 added; re-signed")})

	unk, err := rewriteCore(hwCore, nil, cborText("vendor"), cborText("acme"))
	if err != nil {
		return nil, err
	}
	unkEnv, _ := steward.Sign1(vk.key, unk)
	negative("unknown-field", "hwshunt with a key \"vendor\" that is neither mesh/1 nor x_, in its sorted place, re-signed",
		steward.RefusedUnknownField, 0, [][]byte{unkEnv}, []EnvelopeMeta{with(hw, `"vendor": "acme" added; re-signed`)})

	padInt, err := rewriteCore(hwCore, func(k string, v []byte) []byte {
		if k == "sequence" {
			return []byte{0x18, 0x00} // 0 in two bytes
		}
		return v
	})
	if err != nil {
		return nil, err
	}
	padEnv, _ := steward.Sign1(vk.key, padInt)
	negative("core-integer-not-shortest", "hwshunt with sequence 0 written as 18 00, re-signed",
		steward.RefusedCoreEncoding, 0, [][]byte{padEnv}, []EnvelopeMeta{with(hw, "sequence value 00 rewritten as 18 00; re-signed")})

	// Forged evidence: each takes a receipt meshd sealed, changes what its
	// metering extensions claim and re-signs it, so that only the evidence
	// rules (PROFILE.md §6) can refuse it.
	forge := func(name, desc string, refusal steward.Reason, base int, dm DraftMeta, mutation string, mut func(*steward.Receipt)) error {
		r := *chain[base].r
		mut(&r)
		_, env, err := vk.seal(&r)
		if err != nil {
			return fmt.Errorf("vector %s: %w", name, err)
		}
		negative(name, desc, refusal, 0, [][]byte{env}, []EnvelopeMeta{with(dm, mutation+"; re-signed")})
		return nil
	}
	u64 := func(v uint64) *uint64 { return &v }
	text := func(s string) *string { return &s }
	forgeries := []struct {
		name, desc string
		refusal    steward.Reason
		base       int
		mutation   string
		mut        func(*steward.Receipt)
	}{
		{"evidence-hwshunt-meter-estimator", "hwshunt claiming the estimator as its meter, with 0 samples over a 0 ns window",
			steward.RefusedEvidence, 0, `x_meter = "estimator", x_samples = 0, x_window_ns = 0, x_serve_ns = 0`,
			func(r *steward.Receipt) {
				r.Meter, r.Samples, r.WindowNs, r.ServeNs = text("estimator"), u64(0), u64(0), u64(0)
			}},
		{"evidence-hwshunt-kind-point", "hwshunt from a meter of kind point, which cannot support HwShunt",
			steward.RefusedEvidence, 0, `x_meter_kind = "point"`, func(r *steward.Receipt) { r.MeterKind = text(wire.KindPoint) }},
		{"evidence-hwshunt-no-samples", "hwshunt with no reading at all",
			steward.RefusedEvidence, 0, "x_samples = 0", func(r *steward.Receipt) { r.Samples = u64(0) }},
		{"evidence-hwshunt-gap-over-period", "hwshunt with a 10 s gap between readings of a 1 ms conversion period",
			steward.RefusedEvidence, 0, "x_max_gap_ns = 10000000000, x_period_ns = 1000000",
			func(r *steward.Receipt) { r.MaxGapNs, r.PeriodNs = u64(10_000_000_000), u64(1_000_000) }},
		{"evidence-hwshunt-bound-over-accuracy", "hwshunt with a 1e9 µJ error bound, beyond 3000 ppm of its 28913 µJ (at most 87 µJ)",
			steward.RefusedEvidence, 0, "x_error_uj = 1000000000", func(r *steward.Receipt) { r.ErrorUJ = u64(1_000_000_000) }},
		{"evidence-hwshunt-partial-coverage", "hwshunt whose readings covered 999999 ppm of the window",
			steward.RefusedEvidence, 0, "x_covered_ppm = 999999", func(r *steward.Receipt) { r.CoveredPPM = u64(999_999) }},
		{"evidence-hwshunt-shared", "hwshunt apportioned between 2 serves",
			steward.RefusedEvidence, 0, "x_shared = 2", func(r *steward.Receipt) { r.Shared = u64(2) }},
		{"evidence-hwshunt-bus-assumed", "hwshunt whose power rests on a bus voltage assumed within [11976, 12024] mV (a shunt-only meter), not measured",
			steward.RefusedEvidence, 0, "x_bus_lo_mv = 11976, x_bus_hi_mv = 12024", func(r *steward.Receipt) { r.BusLoMV, r.BusHiMV = u64(11976), u64(12024) }},
		{"evidence-stat-on-hwshunt", "hwshunt carrying x_stat_uj: a statistical uncertainty is a ModelBased figure's, never beside a hardware bound (rule 13)",
			steward.RefusedCoupling, 0, "x_stat_uj = 40", func(r *steward.Receipt) { r.StatUJ = u64(40) }},
		{"evidence-stat-on-estimator", "granted (Estimator) carrying x_stat_uj: no meter, no readings, no statistic (rule 13)",
			steward.RefusedCoupling, 2, "x_stat_uj = 40", func(r *steward.Receipt) { r.StatUJ = u64(40) }},
		{"evidence-hwshunt-accuracy-over-ceiling", "hwshunt from a meter declaring 100001 ppm, above the 100000 ppm ceiling",
			steward.RefusedEvidence, 0, "x_accuracy_ppm = 100001", func(r *steward.Receipt) { r.AccuracyPPM = u64(100_001) }},
		{"evidence-serve-over-window", "hwshunt whose serve is longer than the gross window that must contain it",
			steward.RefusedEvidence, 0, "x_serve_ns = 412132001", func(r *steward.Receipt) { r.ServeNs = u64(412_132_001) }},
		{"evidence-estimator-names-meter", "granted (Estimator) naming a hardware meter",
			steward.RefusedEvidence, 2, `x_meter = "ina226@i2c-1:0x40"`, func(r *steward.Receipt) { r.Meter = text("ina226@i2c-1:0x40") }},
		{"evidence-kind-missing", "hwshunt without x_meter_kind",
			steward.RefusedMissingField, 0, "x_meter_kind removed", func(r *steward.Receipt) { r.MeterKind = nil }},
		{"evidence-kind-unknown", "hwshunt with an x_meter_kind that is none of the five kinds",
			steward.RefusedFieldValue, 0, `x_meter_kind = "shunt"`, func(r *steward.Receipt) { r.MeterKind = text("shunt") }},
		// Evidence that does not add up (evidence rules 5-10).
		{"evidence-samples-short-of-window", "hwshunt claiming 1 reading of a 1.111 ms period over a 10 s window (rule 5)",
			steward.RefusedEvidence, 0, "x_samples = 1, x_window_ns = 10000000000, x_serve_ns = 9000000000",
			func(r *steward.Receipt) {
				r.Samples, r.WindowNs, r.ServeNs = u64(1), u64(10_000_000_000), u64(9_000_000_000)
			}},
		{"evidence-samples-over-window", "hwshunt claiming 1e9 INA226 readings in 412 ms (rule 5)",
			steward.RefusedEvidence, 0, "x_samples = 1000000000", func(r *steward.Receipt) { r.Samples = u64(1_000_000_000) }},
		{"evidence-period-out-of-range", "hwshunt from an INA226 declaring a 1 h period and gap, more than 1024 averages of two 8.244 ms conversions allow (rule 6)",
			steward.RefusedEvidence, 0, "x_period_ns = x_max_gap_ns = 3600000000000, x_window_ns = x_serve_ns = 3600000000000",
			func(r *steward.Receipt) {
				r.PeriodNs, r.MaxGapNs, r.WindowNs, r.ServeNs = u64(3_600_000_000_000), u64(3_600_000_000_000), u64(3_600_000_000_000), u64(3_600_000_000_000)
			}},
		{"evidence-hwshunt-no-serve", "hwshunt over a serve of 0 ns (rule 7)",
			steward.RefusedEvidence, 0, "x_serve_ns = 0", func(r *steward.Receipt) { r.ServeNs = u64(0) }},
		{"evidence-hwshunt-window-under-period", "hwshunt for 60 tokens over a 1 ns window, shorter than one conversion (rule 7)",
			steward.RefusedEvidence, 0, "x_window_ns = 1, x_serve_ns = 1, x_samples = 1, x_max_gap_ns = 1",
			func(r *steward.Receipt) {
				r.WindowNs, r.ServeNs, r.Samples, r.MaxGapNs = u64(1), u64(1), u64(1), u64(1)
			}},
		{"evidence-over-full-scale", "hwshunt charging more than 41 W of full scale over its 412 ms window (rule 8)",
			steward.RefusedEvidence, 0, "x_full_scale_uw = 10000",
			func(r *steward.Receipt) { r.FullScaleUW = u64(10_000) }},
		{"evidence-idle-over-full-scale", "hwshunt whose idle power is 1e12 µW, above its full scale (rule 8)",
			steward.RefusedEvidence, 0, "x_idle_uw = 1000000000000", func(r *steward.Receipt) { r.IdleUW = u64(1_000_000_000_000) }},
		{"evidence-idle-over-energy", "hwshunt whose idle power over the window exceeds its charged energy: net energy negative (rule 9)",
			steward.RefusedEvidence, 0, "x_idle_uw = 1000000", func(r *steward.Receipt) { r.IdleUW = u64(1_000_000) }},
		{"evidence-kind-not-derived", "hwshunt from span(ina226@i2c-1:0x40+rapl:package-0) declared adc: the span's kind is its weakest member's, model (rule 10)",
			steward.RefusedEvidence, 0, `x_meter = "span(ina226@i2c-1:0x40+rapl:package-0)"`,
			func(r *steward.Receipt) { r.Meter = text("span(ina226@i2c-1:0x40+rapl:package-0)") }},
	}
	// Forged records: each takes a record of the run above, changes it and
	// re-signs it, so that only the record rules can refuse it.
	recordForgeries := []struct {
		name, desc string
		refusal    steward.Reason
		base       int
		mutation   string
		mut        func(*steward.Receipt)
	}{
		{"record-kind-unknown", "the run-open record with an x_record that is none of idle, run-open, run-close",
			steward.RefusedFieldValue, 0, `x_record = "pause"`, func(r *steward.Receipt) { r.Record = text("pause") }},
		{"record-with-tokens", "the idle record claiming 5 tokens served",
			steward.RefusedRecord, 1, "tokens_in = 5", func(r *steward.Receipt) { r.TokensIn = 5 }},
		{"record-idle-estimator", "the idle record as an Estimator figure: an idle record is a meter figure",
			steward.RefusedRecord, 1, `energy_provenance = "Estimator", measured_uj and meter evidence removed, x_meter and x_meter_kind "estimator"`,
			func(r *steward.Receipt) {
				r.EnergyProvenance, r.MeasuredUJ, r.Meter, r.MeterKind = "Estimator", nil, text(steward.EstimatorMeter), text(wire.KindEstimator)
				r.ErrorUJ, r.Samples, r.MaxGapNs, r.CoveredPPM, r.PeriodNs, r.AccuracyPPM, r.Shared = nil, nil, nil, nil, nil, nil, nil
				r.FullScaleUW = nil
			}},
		{"record-idle-shared", "the idle record apportioned with a serve (ModelBased, x_shared 2): it is not idle",
			steward.RefusedRecord, 1, `energy_provenance = "ModelBased", measured_uj removed, estimated_uj = 3700000, x_shared = 2`,
			func(r *steward.Receipt) {
				r.EnergyProvenance, r.MeasuredUJ, r.EstimatedUJ, r.Shared = "ModelBased", nil, 3_700_000, u64(2)
			}},
		{"record-run-open-energy", "the run-open record claiming 1 µJ of estimated energy",
			steward.RefusedRecord, 0, "estimated_uj = 1", func(r *steward.Receipt) { r.EstimatedUJ = 1 }},
		{"record-run-open-with-run", "the run-open record naming a run of its own",
			steward.RefusedRecord, 3, "x_record = \"run-open\" on the run-close (x_run 0 kept)", func(r *steward.Receipt) { r.Record = text(steward.RecordRunOpen) }},
		{"record-run-close-without-run", "the run-close record without x_run",
			steward.RefusedRecord, 3, "x_run removed", func(r *steward.Receipt) { r.Run = nil }},
		{"record-run-not-earlier", "the serve of the run naming itself (x_run = its own sequence 2)",
			steward.RefusedRecord, 2, "x_run = 2", func(r *steward.Receipt) { r.Run = u64(2) }},
	}
	for _, f := range recordForgeries {
		r := *runChain[f.base].r
		f.mut(&r)
		_, env, err := vk.seal(&r)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", f.name, err)
		}
		negative(f.name, f.desc, f.refusal, 0, [][]byte{env}, []EnvelopeMeta{with(runChain[f.base].dm, f.mutation+"; re-signed")})
	}

	for _, f := range forgeries {
		if err := forge(f.name, f.desc, f.refusal, f.base, chain[f.base].dm, f.mutation, f.mut); err != nil {
			return nil, err
		}
	}

	// The route as taken (PROFILE.md §4): six candidates with every
	// verdict, a name that holds the grammar's own separators, a tie the
	// earlier one wins and a node that failed before the served backend.
	routed := hw
	routed.NonceHex, routed.RequestID = nonce(3), req("conformance request routed")
	routed.Route = "gguf-q4: cheapest of 2 admissible (of 6 weighed) after 1 failed at F2 >= F2, est 30000 µJ <= ceiling 50000 µJ (configured 300 µJ/token)"
	routed.CeilingUJ = 50_000
	routed.RouteCandidates = "8:ref-tiny F1 4000 below floor;6:node-a F2 20000 failed;6:node-b F3 25000 unhealthy;" +
		"7:gguf-q4 F2 30000 admissible;28:gguf q8; F3 30000 admissible F3 30000 admissible;8:frontier F4 900000 over ceiling"
	rr, err := vk.build(routed)
	if err != nil {
		return nil, fmt.Errorf("vector routed: %w", err)
	}
	if *rr.RouteCandidates != routed.RouteCandidates {
		return nil, fmt.Errorf("vector routed: the steward writes x_route_candidates %q", *rr.RouteCandidates)
	}
	rCore, rEnv, err := vk.seal(rr)
	if err != nil {
		return nil, err
	}
	positive("routed", "HwShunt receipt carrying the route: x_ceiling_uj 50000 and x_route_candidates with every verdict (below floor, failed, unhealthy, admissible, over ceiling), a length-prefixed name holding \";\", spaces and a verdict, and a 30000 µJ tie won by the earlier; gguf-q4 is the cheapest admissible, node-a failed before it",
		sealed{routed, rr, rCore, rEnv})
	for _, f := range []struct {
		name, desc, mutation string
		mut                  func(*steward.Receipt)
	}{
		{"route-not-cheapest", "routed with node-b (25000 µJ) admissible: gguf-q4 (30000 µJ) is no longer the cheapest admissible",
			`node-b's verdict "unhealthy" -> "admissible"`,
			func(r *steward.Receipt) {
				*r.RouteCandidates = strings.Replace(*r.RouteCandidates, "25000 unhealthy", "25000 admissible", 1)
			}},
		{"route-tie-not-earliest", "routed served by the later of two 30000 µJ admissible candidates",
			`backend = "gguf q8; F3 30000 admissible"`,
			func(r *steward.Receipt) { r.Backend = "gguf q8; F3 30000 admissible" }},
		{"route-verdict-below-floor", "routed with ref-tiny (F1 under floor F2) marked admissible",
			`ref-tiny's verdict "below floor" -> "admissible"`,
			func(r *steward.Receipt) {
				*r.RouteCandidates = strings.Replace(*r.RouteCandidates, "4000 below floor", "4000 admissible", 1)
			}},
		{"route-verdict-over-ceiling", "routed with frontier (900000 µJ over the 50000 µJ x_ceiling_uj) marked admissible",
			`frontier's verdict "over ceiling" -> "admissible"`,
			func(r *steward.Receipt) {
				*r.RouteCandidates = strings.Replace(*r.RouteCandidates, "900000 over ceiling", "900000 admissible", 1)
			}},
		{"route-ceiling-lowered", "routed with x_ceiling_uj lowered to 29999: the served candidate's 30000 µJ estimate is over it",
			"x_ceiling_uj = 29999", func(r *steward.Receipt) { v := uint64(29_999); r.CeilingUJ = &v }},
		{"route-failed-after-served", "routed with the later 30000 µJ candidate marked failed, though backends are tried cheapest first and gguf-q4 served before it",
			`"gguf q8; F3 30000 admissible"'s verdict -> "failed"`,
			func(r *steward.Receipt) {
				*r.RouteCandidates = strings.Replace(*r.RouteCandidates, "admissible F3 30000 admissible", "admissible F3 30000 failed", 1)
			}},
		{"route-malformed", "routed with a name's length prefix one short (27 for a 28-byte name)",
			"28: -> 27:", func(r *steward.Receipt) { *r.RouteCandidates = strings.Replace(*r.RouteCandidates, "28:", "27:", 1) }},
		{"route-ceiling-missing", "routed without x_ceiling_uj: the candidates cannot be judged",
			"x_ceiling_uj removed", func(r *steward.Receipt) { r.CeilingUJ = nil }},
	} {
		r := *rr
		rc := *rr.RouteCandidates
		r.RouteCandidates = &rc
		f.mut(&r)
		_, env, err := vk.seal(&r)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", f.name, err)
		}
		negative(f.name, f.desc, steward.RefusedRoute, 0, [][]byte{env}, []EnvelopeMeta{with(routed, f.mutation+"; re-signed")})
	}

	broken := mb
	broken.Prev = wire.ContentOf([]byte("not the previous envelope")).String()
	br, err := vk.build(broken)
	if err != nil {
		return nil, err
	}
	_, brEnv, err := vk.seal(br)
	if err != nil {
		return nil, err
	}
	negative("chain-prev-broken", "hwshunt, then modelbased whose prev names another envelope: each verifies alone, the link does not",
		steward.RefusedChainLink, 1, [][]byte{hwEnv, brEnv}, []EnvelopeMeta{with(hw, ""), with(broken, "prev = BLAKE3(\"not the previous envelope\")")})

	// Idle links (PROFILE §22): the serve of idle-span altered, after the
	// idle record, re-signed; each verifies alone except where the
	// receipt itself breaks the rule, and the chain refuses the rest.
	for _, f := range []struct {
		name, desc, mutation string
		refusal              steward.Reason
		at                   int
		first                *sealed
		mut                  func(*steward.Receipt)
	}{
		{"idle-link-power-differs", "idle-span with the serve's x_idle_uw 49976, one more than its idle record's power: each envelope verifies alone, the chain does not",
			"x_idle_uw = 49976", steward.RefusedEvidence, 1, &idleChain[0], func(r *steward.Receipt) { *r.IdleUW = 49_976 }},
		{"idle-link-not-idle", "hwshunt at 0, then idle-span's serve naming it in x_idle_record 0: a serve, not an idle record",
			"x_idle_record 0 names hwshunt's serve; prev = hwshunt's envelope", steward.RefusedRecord, 1, &chain[0], nil},
		{"idle-link-other-meter", "a span idle record of ina226@i2c-1:0x41, then idle-span's serve (x_meter ina226@i2c-1:0x40) naming it",
			"the idle record's x_meter = \"ina226@i2c-1:0x41\"", steward.RefusedRecord, 1, nil, nil},
		{"idle-record-without-idle", "idle-span's serve with x_idle_uw removed: x_idle_record names the record of an idle figure it does not state",
			"x_idle_uw removed", steward.RefusedMissingField, 1, &idleChain[0], func(r *steward.Receipt) { r.IdleUW = nil }},
		{"idle-record-not-earlier", "idle-span's serve naming itself (x_idle_record 1 at sequence 1)",
			"x_idle_record = 1", steward.RefusedRecord, 1, &idleChain[0], func(r *steward.Receipt) { *r.IdleRecord = 1 }},
	} {
		first := f.first
		if first == nil {
			dm := spanIdle
			dm.Meter = "ina226@i2c-1:0x41"
			fr, err := vk.build(dm)
			if err != nil {
				return nil, fmt.Errorf("vector %s: %w", f.name, err)
			}
			fc, fe, err := vk.seal(fr)
			if err != nil {
				return nil, err
			}
			first = &sealed{dm, fr, fc, fe}
		}
		dm := idleServe
		dm.Prev = wire.ContentOf(first.env).String()
		r, err := vk.build(dm)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", f.name, err)
		}
		rc := *r
		idle, rec := *r.IdleUW, *r.IdleRecord
		rc.IdleUW, rc.IdleRecord = &idle, &rec
		if f.mut != nil {
			f.mut(&rc)
		}
		_, env, err := vk.seal(&rc)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", f.name, err)
		}
		negative(f.name, f.desc, f.refusal, f.at, [][]byte{first.env, env}, []EnvelopeMeta{with(first.dm, ""), with(dm, f.mutation+"; re-signed")})
	}

	// Pin links (PROFILE §22): records-corpus-pin with a third pin whose
	// x_pin_prev forks the corpus's line, or that names none.
	pinHash3 := req("conformance corpus at c3")
	third := moved
	third.Commit = strings.Repeat("c3", 20)
	for _, f := range []struct {
		name, desc, mutation string
		prev                 *uint64
		docPrev              string
	}{
		{"pin-link-fork", "records-corpus-pin, then a third pin of acme/docs naming pin 0 (not the corpus's last pin, 2) in x_pin_prev: a fork",
			"x_pin_prev = 0", &pinPrev0, wire.ContentOf(pinChain[0].env).String()},
		{"pin-link-none", "records-corpus-pin, then a third pin of acme/docs naming no predecessor although pins 0 and 2 precede it",
			"x_pin_prev absent", nil, ""},
	} {
		dm := pinMeta(3, steward.CorpusPinDoc{Corpus: "acme/docs", CorpusHash: pinHash3, Repos: []steward.PinRepo{third}, Embedded: 1, Reused: 43,
			Why: steward.PinSync, Prev: f.docPrev}, f.prev)
		dm.Prev = wire.ContentOf(pinChain[2].env).String()
		r, err := vk.build(dm)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", f.name, err)
		}
		_, env, err := vk.seal(r)
		if err != nil {
			return nil, err
		}
		envs := [][]byte{pinChain[0].env, pinChain[1].env, pinChain[2].env, env}
		negative(f.name, f.desc, steward.RefusedRecord, 3, envs, []EnvelopeMeta{with(pinChain[0].dm, ""), with(pinChain[1].dm, ""), with(pinChain[2].dm, ""), with(dm, f.mutation)})
	}
	return out, nil
}

// foreignVector is a receipt as another implementation might seal it:
// only the §6.1 fields, a grant_id without meshd's ledger fields, and two
// extensions meshd does not define, encoded and signed without any of
// meshd's code.
func foreignVector() (receiptVector, error) {
	vk, err := newVectorKey("mesh/1 conformance v1 foreign steward seed")
	if err != nil {
		return receiptVector{}, err
	}
	u := func(n uint64) []byte { return cborHead(0, n) }
	t := cborText
	n := blake3.Sum256([]byte("mesh/1 conformance v1 foreign nonce"))
	list := append(cborHead(4, 2), append(t("a"), u(1)...)...)
	core := handMap(map[string][]byte{
		"mesh_receipt":          t("mesh/1"),
		"request_id":            t(wire.ContentOf([]byte("foreign request")).String()),
		"grant_id":              t(wire.ContentOf([]byte("foreign grant")).String()),
		"backend":               t("other-backend"),
		"recipe":                t("other/recipe@1"),
		"route":                 t("other-backend: the only backend"),
		"tokens_in":             u(7),
		"tokens_out":            u(9),
		"tokens_accepted":       u(9),
		"cache_hit_tokens":      u(0),
		"spec_proposed":         u(0),
		"spec_accepted":         u(0),
		"fidelity_floor":        u(1),
		"fidelity_met":          u(1),
		"estimated_uj":          u(1234),
		"uj_per_accepted_token": u(1234 / 9),
		"energy_provenance":     t("Estimator"),
		"sequence":              u(0),
		"nonce":                 t(hex.EncodeToString(n[:16])),
		"steward":               t(vk.key.ID()),
		"x_vendor_note":         t("sealed by another implementation"),
		"x_vendor_list":         list,
	})
	protected := append([]byte{0x58, 0x26, 0xa2, 0x01, 0x27, 0x04, 0x58, 0x20}, vk.key.Public()...)
	env := vk.signRaw(protected, core)
	v := receiptVector{meta: vk.meta("foreign-minimal",
		"a receipt from another implementation: only the §6.1 fields, grant_id without x_grant_*, and unknown x_vendor_note (text) and x_vendor_list (array), hand-encoded and signed with plain Ed25519",
		"accept", "", 0), envs: [][]byte{env}, cores: [][]byte{core}}
	v.meta.Envelopes = []EnvelopeMeta{{EnvelopeID: wire.ContentOf(env).String(), HandEncodedCoreHex: hex.EncodeToString(core)}}
	return v, nil
}

// files renders the vector's files, named relative to receipts/<name>/.
func (v receiptVector) files() (map[string][]byte, error) {
	var mj bytes.Buffer
	enc := json.NewEncoder(&mj)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v.meta); err != nil {
		return nil, err
	}
	lines := func(bs [][]byte) []byte {
		var b []byte
		for _, x := range bs {
			b = append(append(b, hex.EncodeToString(x)...), '\n')
		}
		return b
	}
	f := map[string][]byte{"meta.json": mj.Bytes(), "envelope.hex": lines(v.envs)}
	if len(v.cores) > 0 {
		f["signed_core.hex"] = lines(v.cores)
	}
	return f, nil
}

// ReceiptFiles maps every file under receipts/ (as "receipts/<name>/<file>")
// to its bytes.
func ReceiptFiles() (map[string][]byte, error) {
	vs, err := receiptVectors()
	if err != nil {
		return nil, fmt.Errorf("receipt vectors: %w", err)
	}
	out := map[string][]byte{}
	for _, v := range vs {
		fs, err := v.files()
		if err != nil {
			return nil, err
		}
		for name, b := range fs {
			out[path.Join("receipts", v.meta.Name, name)] = b
		}
	}
	return out, nil
}

// VerifyVector runs the procedure conformance/v1/README.md prescribes on
// one vector's envelopes: open each with the trusted key, in order, and
// check each link. It returns the index of the refused envelope and the
// error, or -1 and nil when everything verifies.
func VerifyVector(trusted ed25519.PublicKey, envs [][]byte) (int, error) {
	var prev *steward.Opened
	var idle steward.IdleLinks
	var pins steward.PinLinks
	for i, env := range envs {
		o, err := steward.OpenEnvelope(env, trusted)
		if err != nil {
			return i, err
		}
		if prev != nil {
			if err := steward.CheckLink(prev, o); err != nil {
				return i, err
			}
		}
		// x_idle_record names an idle record earlier in the chain, of
		// the same meter, whose power is x_idle_uw.
		if err := idle.Add(o.Receipt); err != nil {
			return i, err
		}
		// Each corpus's corpus-pin records name their predecessor.
		if err := pins.Add(o.Receipt); err != nil {
			return i, err
		}
		prev = o
	}
	if len(envs) == 0 {
		return 0, errors.New("vector holds no envelope")
	}
	return -1, nil
}
