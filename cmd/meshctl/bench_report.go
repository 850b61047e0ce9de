package main

// The benchmark report (PROFILE.md §20): its layout, its canonical form,
// and the one function that computes the summary from the enclosed
// receipts, which both `bench run` and `bench verify` call, so a figure
// that verify recomputes differently is a figure someone changed.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"

	"meshd/agent/api/client"
	"meshd/rag"
	"meshd/steward"
)

// benchFormat names the report layout, and is the attestation's purpose.
const benchFormat = "meshd-bench-report/v1"

// traceNote says in the report itself what the trace is not.
const traceNote = "display data, not evidence: live power readings sampled for plots; nothing in the summary is computed from them"

// benchReport is the file: the body and the steward's attestation over
// the SHA-256 of the body's canonical JSON.
type benchReport struct {
	Body reportBody `json:"body"`
	// Attestation is the COSE_Sign1 envelope of an api.Attestation, in
	// standard base64; empty when the daemon could not be asked for one.
	Attestation string `json:"attestation"`
}

// reportBody is everything the attestation covers.
type reportBody struct {
	Format string `json:"format"`
	// Steward is the key (64 hex) every envelope, the checkpoint and the
	// attestation are signed with.
	Steward  string    `json:"steward"`
	Status   runStatus `json:"status"`
	Workload Workload  `json:"workload"`
	// Board is GET /v1/node as the daemon answered: the board, the meshd
	// version, the meter inventory and the backends.
	Board json.RawMessage `json:"board"`
	Idle  idleSection     `json:"idle"`
	// Serves maps each serve the harness made to its receipt.
	Serves  []serveRecord `json:"serves"`
	Chain   chainSection  `json:"chain"`
	Summary summary       `json:"summary"`
	Trace   traceSection  `json:"trace"`
	// Digests are the SHA-256 (hex) of each other section's canonical
	// JSON, so a verifier can name the section an altered byte is in.
	Digests map[string]string `json:"digests"`
}

// runStatus says whether the run finished and when it ran.
type runStatus struct {
	Complete bool `json:"complete"`
	// Incomplete says why not: interrupted, a serve failed, ...
	Incomplete    string `json:"incomplete,omitempty"`
	StartedUnixMs int64  `json:"started_unix_ms"`
	EndedUnixMs   int64  `json:"ended_unix_ms"`
	// Harness is the meshctl that ran it.
	Harness string `json:"harness"`
}

// idleSection is the idle baseline: windows with no serve on the
// backend's span, before the measured serves and after them.
type idleSection struct {
	Backend string           `json:"backend,omitempty"`
	Before  *idleMeasurement `json:"before,omitempty"`
	After   *idleMeasurement `json:"after,omitempty"`
}

// idleMeasurement is one idle window as asked and as answered; Error says
// why there is no reading (an unmetered backend, a meter that measured
// nothing, an interrupted run).
type idleMeasurement struct {
	Seconds float64             `json:"seconds"`
	Reading *client.IdleReading `json:"reading,omitempty"`
	Error   string              `json:"error,omitempty"`
}

// serveRecord is one serve of the run: its coordinates in the matrix and
// the sequence of the receipt sealed for it.
type serveRecord struct {
	Index       int    `json:"index"`
	Warmup      bool   `json:"warmup"`
	PromptWords int    `json:"prompt_words"`
	MaxTokens   int    `json:"max_tokens"`
	Rep         int    `json:"rep"`
	Sequence    uint64 `json:"sequence"`
}

// chainSection is the chain segment from the run's first receipt to the
// checkpoint's head, every envelope of it (other clients' included), and
// the checkpoint sealed after the run.
type chainSection struct {
	First      uint64   `json:"first"`
	Envelopes  []string `json:"envelopes"`
	Checkpoint string   `json:"checkpoint,omitempty"`
}

// traceSection is the power trace (display data, not evidence).
type traceSection struct {
	Note       string              `json:"note"`
	IntervalMs int                 `json:"interval_ms"`
	Samples    []client.PowerEvent `json:"samples"`
}

// ---- figures ----

// milli is a figure in thousandths, written as a decimal with at most
// three fractional digits ("41.5", "-0.125", "12"): the form RFC 8785
// gives the same number, so the report's canonical form is how it is
// written. Every figure is computed in integers, so it is the same on
// every machine.
type milli int64

// MarshalJSON writes m as a decimal without trailing zeros.
func (m milli) MarshalJSON() ([]byte, error) { return []byte(m.String()), nil }

func (m milli) String() string {
	v := int64(m)
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := sign + strconv.FormatInt(v/1000, 10)
	if f := v % 1000; f != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", f), "0")
	}
	return s
}

// UnmarshalJSON reads a decimal of at most three fractional digits.
func (m *milli) UnmarshalJSON(b []byte) error {
	s := string(b)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	ip, fp, _ := strings.Cut(s, ".")
	if ip == "" || len(fp) > 3 || strings.ContainsAny(ip+fp, "eE+-") {
		return fmt.Errorf("figure %s: want a decimal with at most 3 fractional digits", b)
	}
	i, err := strconv.ParseInt(ip, 10, 64)
	if err != nil {
		return fmt.Errorf("figure %s: %w", b, err)
	}
	f := int64(0)
	if fp != "" {
		if f, err = strconv.ParseInt((fp + "00")[:3], 10, 64); err != nil {
			return fmt.Errorf("figure %s: %w", b, err)
		}
	}
	v := i*1000 + f
	if neg {
		v = -v
	}
	*m = milli(v)
	return nil
}

// stats are the order statistics of one figure over a cell's serves.
type stats struct {
	Median milli `json:"median"`
	Q1     milli `json:"q1"`
	Q3     milli `json:"q3"`
	IQR    milli `json:"iqr"`
	Min    milli `json:"min"`
	Max    milli `json:"max"`
}

// interval bounds a median: the true median lies within [Low, High].
type interval struct {
	Low  milli `json:"low"`
	High milli `json:"high"`
}

// summary is every figure the report states, all computed by summarise.
type summary struct {
	// IdleUW is the idle baseline subtracted for the net figures: the
	// mean of the before and after idle powers that were measured.
	IdleUW *uint64 `json:"idle_uw,omitempty"`
	// IdleErrorUW bounds IdleUW (the larger of the measurements' bounds
	// as power).
	IdleErrorUW *uint64       `json:"idle_error_uw,omitempty"`
	Cells       []summaryCell `json:"cells"`
}

// summaryCell is one (prompt length, output length) of the matrix. A
// fleet report's cells (fleet_report.go) embed it with the two left zero,
// and so left out: a bench cell's are always at least 1.
type summaryCell struct {
	PromptWords int `json:"prompt_words,omitempty"`
	MaxTokens   int `json:"max_tokens,omitempty"`
	// Serves counts the cell's measured serves; Counted those with an
	// accepted token (a µJ/token needs one).
	Serves  int `json:"serves"`
	Counted int `json:"counted"`
	// TokensIn and TokensOut are medians over the serves.
	TokensIn  milli `json:"tokens_in"`
	TokensOut milli `json:"tokens_out"`
	// Gross is the charged µJ per accepted token; GrossMedianBound bounds
	// its median from each receipt's x_error_uj (absent when a receipt
	// carries none: an Estimator figure is not bounded).
	Gross            *stats    `json:"gross_uj_per_token,omitempty"`
	GrossMedianBound *interval `json:"gross_median_bound,omitempty"`
	// Net is Gross less the idle baseline over each receipt's gross
	// window; absent without an idle baseline.
	Net            *stats    `json:"net_uj_per_token,omitempty"`
	NetMedianBound *interval `json:"net_median_bound,omitempty"`
	// ErrorPerToken is each receipt's x_error_uj / tokens_accepted.
	ErrorPerToken *stats `json:"error_uj_per_token,omitempty"`
	// TokensPerS is tokens_out / x_serve_ns.
	TokensPerS *stats `json:"tokens_per_s,omitempty"`
	// Provenance counts the serves by energy_provenance.
	Provenance map[string]int `json:"provenance"`
	// Backends counts the serves by the backend that served them.
	Backends map[string]int `json:"backends"`
}

// sample is one serve's per-token figures, in thousandths.
type sample struct {
	gross, grossLo, grossHi int64
	net, netLo, netHi       int64
	errPerTok               int64
	bounded, hasNet         bool
}

var (
	bigThousand = big.NewInt(1000)
	bigBillion  = big.NewInt(1_000_000_000)
)

// divFloor and divCeil divide rounding toward −∞ and +∞.
func divFloor(a, b *big.Int) int64 {
	q, m := new(big.Int), new(big.Int)
	q.DivMod(a, b, m) // Euclidean: m ≥ 0, so q is the floor for b > 0
	return q.Int64()
}

func divCeil(a, b *big.Int) int64 {
	return -divFloor(new(big.Int).Neg(a), b)
}

func u(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// perToken computes one receipt's figures: charged µJ, its bound and the
// idle energy over its gross window, each per accepted token, in
// thousandths. Exact integer arithmetic: floor for the figure and the
// low ends, ceiling for the high ends, so every bound is rounded outward.
func perToken(r *steward.Receipt, idleUW, idleErrUW *uint64) (sample, bool) {
	e, err := r.Energy()
	if err != nil || r.TokensAccepted == 0 {
		return sample{}, false
	}
	acc := u(uint64(r.TokensAccepted))
	// In units of µJ·10⁹ (so the idle term, µW × ns, is an integer).
	charged := new(big.Int).Mul(u(e.UJ()), bigBillion)
	den := new(big.Int).Mul(acc, bigBillion)
	scaled := func(x *big.Int) *big.Int { return new(big.Int).Mul(x, bigThousand) }
	var s sample
	s.gross = divFloor(scaled(charged), den)
	errE := new(big.Int)
	if r.ErrorUJ != nil {
		s.bounded = true
		errE.Mul(u(*r.ErrorUJ), bigBillion)
		lo := new(big.Int).Sub(charged, errE)
		if lo.Sign() < 0 {
			lo.SetInt64(0) // energy is never negative
		}
		s.grossLo = divFloor(scaled(lo), den)
		s.grossHi = divCeil(scaled(new(big.Int).Add(charged, errE)), den)
		s.errPerTok = divCeil(scaled(errE), den)
	}
	if idleUW != nil && r.WindowNs != nil {
		s.hasNet = true
		idle := new(big.Int).Mul(u(*idleUW), u(*r.WindowNs))
		net := new(big.Int).Sub(charged, idle)
		s.net = divFloor(scaled(net), den)
		if s.bounded && idleErrUW != nil {
			netErr := new(big.Int).Add(errE, new(big.Int).Mul(u(*idleErrUW), u(*r.WindowNs)))
			s.netLo = divFloor(scaled(new(big.Int).Sub(net, netErr)), den)
			s.netHi = divCeil(scaled(new(big.Int).Add(net, netErr)), den)
		}
	}
	return s, true
}

// quantile is the k/4 quantile of sorted xs by linear interpolation
// between order statistics (R's type 7), rounded down, or up when up is
// set (the high end of a bound).
func quantile(xs []int64, k int, up bool) int64 {
	n := len(xs)
	pos := k * (n - 1)
	lo, rem := pos/4, pos%4
	if rem == 0 {
		return xs[lo]
	}
	d := big.NewInt(xs[lo+1] - xs[lo])
	d.Mul(d, big.NewInt(int64(rem)))
	if up {
		return xs[lo] + divCeil(d, big.NewInt(4))
	}
	return xs[lo] + divFloor(d, big.NewInt(4))
}

func statsOf(xs []int64) *stats {
	if len(xs) == 0 {
		return nil
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	s := &stats{Median: milli(quantile(xs, 2, false)), Q1: milli(quantile(xs, 1, false)), Q3: milli(quantile(xs, 3, false)),
		Min: milli(xs[0]), Max: milli(xs[len(xs)-1])}
	s.IQR = s.Q3 - s.Q1
	return s
}

// medianBound bounds the median of the true values: the median is
// non-decreasing in every element, so if each true value lies in [lo_i,
// hi_i] the true median lies in [median(lo), median(hi)].
func medianBound(lo, hi []int64) *interval {
	if len(lo) == 0 {
		return nil
	}
	lo, hi = slices.Clone(lo), slices.Clone(hi)
	slices.Sort(lo)
	slices.Sort(hi)
	return &interval{Low: milli(quantile(lo, 2, false)), High: milli(quantile(hi, 2, true))}
}

// idleBaseline is the idle power subtracted for net figures, and its
// bound: the mean of the measured idle powers (each energy_uj × 10⁹ /
// window_ns, floor), and the largest of their bounds as power
// (error_uj × 10⁹ / window_ns, ceiling) plus the mean's rounding.
func idleBaseline(idle idleSection) (*uint64, *uint64) {
	var powers, bounds []uint64
	for _, m := range []*idleMeasurement{idle.Before, idle.After} {
		if m == nil || m.Reading == nil || m.Reading.WindowNs == 0 || m.Reading.Provenance == "Estimator" {
			continue
		}
		r := m.Reading
		powers = append(powers, uint64(divFloor(new(big.Int).Mul(u(r.EnergyUJ), bigBillion), u(r.WindowNs))))
		bounds = append(bounds, uint64(divCeil(new(big.Int).Mul(u(r.ErrorUJ), bigBillion), u(r.WindowNs))))
	}
	if len(powers) == 0 {
		return nil, nil
	}
	var sum uint64
	for _, p := range powers {
		sum += p
	}
	mean := sum / uint64(len(powers))
	bound := slices.Max(bounds)
	if sum%uint64(len(powers)) != 0 {
		bound++
	}
	return &mean, &bound
}

// summarise computes the summary from the receipts the serves point at
// and the idle readings. It is the only place a summary figure is made.
// It fails when a serve's receipt is not in the segment.
func summarise(w *Workload, serves []serveRecord, bySeq map[uint64]*steward.Opened, idle idleSection) (summary, error) {
	var out summary
	out.IdleUW, out.IdleErrorUW = idleBaseline(idle)
	for _, c := range w.cells() {
		sc := summaryCell{PromptWords: c.prompt, MaxTokens: c.output}
		var rs []*steward.Receipt
		for i := range serves {
			s := &serves[i]
			if s.Warmup || s.PromptWords != c.prompt || s.MaxTokens != c.output {
				continue
			}
			o := bySeq[s.Sequence]
			if o == nil {
				return summary{}, fmt.Errorf("serve %d: its receipt (sequence %d) is not in the chain segment", s.Index, s.Sequence)
			}
			rs = append(rs, o.Receipt)
		}
		fillCell(&sc, rs, out.IdleUW, out.IdleErrorUW)
		out.Cells = append(out.Cells, sc)
	}
	return out, nil
}

// fillCell computes a cell's figures from its receipts, with the idle
// baseline for the net figures when there is one. Bench cells (a
// prompt×output of the matrix) and fleet cells (a steward's backend and
// recipe) are both made here, so they follow the same rules.
func fillCell(sc *summaryCell, rs []*steward.Receipt, idleUW, idleErrUW *uint64) {
	sc.Provenance, sc.Backends = map[string]int{}, map[string]int{}
	var gross, grossLo, grossHi, net, netLo, netHi, errs, tps, tin, tout []int64
	allBounded, allNetBounded := true, true
	for _, r := range rs {
		sc.Serves++
		sc.Provenance[r.EnergyProvenance]++
		sc.Backends[r.Backend]++
		tin = append(tin, 1000*int64(r.TokensIn))
		tout = append(tout, 1000*int64(r.TokensOut))
		if r.ServeNs != nil && *r.ServeNs > 0 {
			tps = append(tps, divFloor(new(big.Int).Mul(u(uint64(r.TokensOut)), big.NewInt(1_000_000_000_000)), u(*r.ServeNs)))
		}
		p, ok := perToken(r, idleUW, idleErrUW)
		if !ok {
			continue
		}
		sc.Counted++
		gross = append(gross, p.gross)
		if p.bounded {
			grossLo, grossHi, errs = append(grossLo, p.grossLo), append(grossHi, p.grossHi), append(errs, p.errPerTok)
		} else {
			allBounded = false
		}
		if p.hasNet {
			net = append(net, p.net)
			if p.bounded && idleErrUW != nil {
				netLo, netHi = append(netLo, p.netLo), append(netHi, p.netHi)
			} else {
				allNetBounded = false
			}
		}
	}
	if len(tin) > 0 {
		sc.TokensIn, sc.TokensOut = statsOf(tin).Median, statsOf(tout).Median
	}
	sc.Gross, sc.Net, sc.ErrorPerToken, sc.TokensPerS = statsOf(gross), statsOf(net), statsOf(errs), statsOf(tps)
	// A bound on the median needs a bound on every serve in it.
	if allBounded {
		sc.GrossMedianBound = medianBound(grossLo, grossHi)
	} else {
		sc.ErrorPerToken = nil
	}
	if allBounded && allNetBounded && len(net) == len(gross) {
		sc.NetMedianBound = medianBound(netLo, netHi)
	}
}

// ---- canonical form ----

// canonicalJSON is v's RFC 8785 (JCS) form.
func canonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return rag.Canonical(b)
}

// digestSections are the body's sections a digest is kept for, by their
// JSON names.
var digestSections = []string{"format", "steward", "status", "workload", "board", "idle", "serves", "chain", "summary", "trace"}

// sectionDigests computes the digest of every section of body.
func sectionDigests(body *reportBody) (map[string]string, error) {
	return digestsOf(body, digestSections)
}

// digestsOf computes the SHA-256 of the canonical JSON of each named
// member of body (a bench or a fleet report's body).
func digestsOf(body any, sections []string) (map[string]string, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var parts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range sections {
		c, err := rag.Canonical(parts[k])
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", k, err)
		}
		sum := sha256.Sum256(c)
		out[k] = hex.EncodeToString(sum[:])
	}
	return out, nil
}

// bodyDigest is what the attestation signs: SHA-256 of the body's
// canonical JSON.
func bodyDigest(body *reportBody) ([32]byte, error) {
	c, err := canonicalJSON(body)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(c), nil
}

// encodeReport is the report file: its canonical JSON and a newline.
func encodeReport(r *benchReport) ([]byte, error) {
	c, err := canonicalJSON(r)
	if err != nil {
		return nil, err
	}
	return append(c, '\n'), nil
}

// decodeReport reads a report strictly: unknown fields and trailing data
// are errors, and a syntax error names its byte and the field it is in.
func decodeReport(data []byte) (*benchReport, error) {
	var r benchReport
	if err := decodeStrict(data, &r, "a bench report"); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeStrict decodes data into v (what names it in errors) as
// decodeReport does: unknown fields and trailing data are errors.
func decodeStrict(data []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		off := dec.InputOffset()
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			off = se.Offset
		case errors.As(err, &te):
			off = te.Offset
		}
		return fmt.Errorf("not %s at byte %d (%s): %w", what, off, pathAt(data, off), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the report at byte %d", dec.InputOffset())
	}
	return nil
}

// pathAt names the JSON member that byte off of data lies in, such as
// body.chain.envelopes[3]: where an altered byte is, for a person.
func pathAt(data []byte, off int64) string {
	type frame struct {
		array   bool
		wantKey bool
		key     string
		index   int
	}
	var stack []*frame
	top := func() *frame {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	name := func() string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.array && f.index >= 0:
				fmt.Fprintf(&b, "[%d]", f.index)
			case !f.array && f.key != "":
				b.WriteString("." + f.key)
			}
		}
		if b.Len() == 0 {
			return "the top level"
		}
		return strings.TrimPrefix(b.String(), ".")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return name()
		}
		d, delim := tok.(json.Delim)
		switch f := top(); {
		case delim && (d == '}' || d == ']'):
			stack = stack[:len(stack)-1]
			if p := top(); p != nil && !p.array {
				p.wantKey = true
			}
		case f != nil && !f.array && f.wantKey:
			f.key, f.wantKey = fmt.Sprint(tok), false
		default:
			if f != nil && f.array {
				f.index++
			}
			if delim {
				stack = append(stack, &frame{array: d == '[', wantKey: d == '{', index: -1})
			} else if f != nil && !f.array {
				f.wantKey = true
			}
		}
		if dec.InputOffset() >= off {
			return name()
		}
	}
}

// ---- reading the evidence ----

// openSegment opens the chain section's envelopes under key: each must
// verify, sit at its place and follow the one before. It returns the
// receipts by sequence, or the first problem with its place named.
func openSegment(ch chainSection, key []byte) (map[uint64]*steward.Opened, []*steward.Opened, error) {
	bySeq := make(map[uint64]*steward.Opened, len(ch.Envelopes))
	var list []*steward.Opened
	var prev *steward.Opened
	for i, s := range ch.Envelopes {
		seq := ch.First + uint64(i)
		where := fmt.Sprintf("chain.envelopes[%d] (receipt sequence %d)", i, seq)
		env, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not base64: %w", where, err)
		}
		o, err := steward.OpenEnvelope(env, key)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		if o.Receipt.Sequence != seq {
			return nil, nil, fmt.Errorf("%s: the envelope is sequence %d", where, o.Receipt.Sequence)
		}
		if prev != nil {
			if err := steward.CheckLink(prev, o); err != nil {
				return nil, nil, fmt.Errorf("%s: does not follow sequence %d: %w", where, prev.Receipt.Sequence, err)
			}
		}
		bySeq[seq] = o
		list = append(list, o)
		prev = o
	}
	return bySeq, list, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
