package bench

// The benchmark report (PROFILE.md §20): its layout and its canonical
// form. The summary's figures are computed in summary.go.

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"meshd/agent/api/client"
	"meshd/rag"
	"meshd/steward"
)

// Format names the bench report layout. v2 reports carry the run's
// sealed records and no attestation: every section follows from the
// chain (PROFILE §20).
const Format = "meshd-bench-report/v2"

// FleetFormat names the fleet report layout (PROFILE §21), which the
// operator's own key signs.
const FleetFormat = "meshd-bench-report/v1"

// traceNote says in the report itself what the trace is not.
const traceNote = "display data, not evidence: live power readings sampled for plots; nothing in the summary is computed from them"

// Report is the file. A v2 bench report has no signature of its own:
// the steward signed every receipt and record of the run as it was
// sealed, and the checkpoint anchors them, so nothing needs signing after
// the run.
type Report struct {
	Body Body `json:"body"`
}

// Body is the report's content.
type Body struct {
	Format string `json:"format"`
	// Steward is the key (64 hex) every envelope and the checkpoint are
	// signed with.
	Steward  string   `json:"steward"`
	Status   Status   `json:"status"`
	Workload Workload `json:"workload"`
	// Board is the board, meter inventory and meshd version the steward
	// sealed in the run-open document: {"board", "meters", "version"}.
	Board json.RawMessage `json:"board"`
	// Run holds the run's sealed run-open and run-close documents.
	Run  RunSection  `json:"run"`
	Idle IdleSection `json:"idle"`
	// Serves maps each serve the harness made to its receipt.
	Serves  []Serve      `json:"serves"`
	Chain   Chain        `json:"chain"`
	Summary Summary      `json:"summary"`
	Trace   TraceSection `json:"trace"`
	// State is the machine state the steward sealed at the run's open and
	// close (state.go); absent where the run's records carry none.
	State *StateSection `json:"state,omitempty"`
	// Digests are the SHA-256 (hex) of each other section's canonical
	// JSON, so a verifier can name the section an altered byte is in.
	Digests map[string]string `json:"digests"`
}

// Status says whether the run finished and when it ran: the run-close's
// status and reason, and the run-open's and run-close's seal times.
type Status struct {
	Complete bool `json:"complete"`
	// Incomplete is the run-close's reason when the run is incomplete.
	Incomplete    string `json:"incomplete,omitempty"`
	StartedUnixMs int64  `json:"started_unix_ms"`
	EndedUnixMs   int64  `json:"ended_unix_ms"`
	// Harness is the meshctl that ran it, and Caller the label it gave,
	// as the run-open declared them.
	Harness string `json:"harness"`
	Caller  string `json:"caller"`
}

// RunSection is the run's two sealed records and what the segment held
// besides the run.
type RunSection struct {
	Open  RecordRef `json:"open"`
	Close RecordRef `json:"close"`
	// Others counts the segment's receipts that are not the run's (other
	// callers' serves and records sealed while it ran): enclosed for the
	// links, never part of a figure.
	Others int `json:"others"`
}

// RecordRef is a sealed record of the run: its receipt's sequence and
// the document its request_id addresses, in standard base64.
type RecordRef struct {
	Sequence uint64 `json:"sequence"`
	Document string `json:"document"`
}

// IdleSection is the idle baseline: the run's idle records on the
// backend's span, before the measured serves and after them.
type IdleSection struct {
	Backend string           `json:"backend,omitempty"`
	Before  *IdleMeasurement `json:"before,omitempty"`
	After   *IdleMeasurement `json:"after,omitempty"`
}

// IdleMeasurement is one idle window as asked: the idle record sealed for
// it (Sequence, Document), or Error saying why there is none (an
// unmetered backend, a meter that measured nothing, an interrupted run).
// Its figures are the record's receipt's.
type IdleMeasurement struct {
	Seconds  float64 `json:"seconds"`
	Sequence *uint64 `json:"sequence,omitempty"`
	Document string  `json:"document,omitempty"`
	Error    string  `json:"error,omitempty"`
}

// Serve is one serve of the run: its coordinates in the matrix and
// the sequence of the receipt sealed for it.
type Serve struct {
	Index       int    `json:"index"`
	Warmup      bool   `json:"warmup"`
	PromptWords int    `json:"prompt_words"`
	MaxTokens   int    `json:"max_tokens"`
	Rep         int    `json:"rep"`
	Sequence    uint64 `json:"sequence"`
}

// Chain is the chain segment from the run-open record to the
// checkpoint's head, every envelope of it (other callers' included), and
// the checkpoint sealed after the run-close.
type Chain struct {
	First      uint64   `json:"first"`
	Envelopes  []string `json:"envelopes"`
	Checkpoint string   `json:"checkpoint,omitempty"`
}

// TraceSection is the power trace (display data, not evidence).
type TraceSection struct {
	Note       string              `json:"note"`
	IntervalMs int                 `json:"interval_ms"`
	Samples    []client.PowerEvent `json:"samples"`
}

// ---- figures ----

// Milli is a figure in thousandths, written as a decimal with at most
// three fractional digits ("41.5", "-0.125", "12"): the form RFC 8785
// gives the same number, so the report's canonical form is how it is
// written. Every figure is computed in integers, so it is the same on
// every machine.
type Milli int64

// MarshalJSON writes m as a decimal without trailing zeros.
func (m Milli) MarshalJSON() ([]byte, error) { return []byte(m.String()), nil }

// String is m as the report writes it.
func (m Milli) String() string {
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
func (m *Milli) UnmarshalJSON(b []byte) error {
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
	*m = Milli(v)
	return nil
}

// Stats are the order statistics of one figure over a cell's serves.
type Stats struct {
	Median Milli `json:"median"`
	Q1     Milli `json:"q1"`
	Q3     Milli `json:"q3"`
	IQR    Milli `json:"iqr"`
	Min    Milli `json:"min"`
	Max    Milli `json:"max"`
}

// Interval bounds a median: the true median lies within [Low, High].
type Interval struct {
	Low  Milli `json:"low"`
	High Milli `json:"high"`
}

// Summary is every figure the report states, all computed by Summarise.
type Summary struct {
	// IdleUW is the idle baseline subtracted for the net figures: the
	// mean of the before and after idle powers that were measured.
	IdleUW *uint64 `json:"idle_uw,omitempty"`
	// IdleErrorUW bounds IdleUW (the larger of the measurements' bounds
	// as power).
	IdleErrorUW *uint64       `json:"idle_error_uw,omitempty"`
	Cells       []CellSummary `json:"cells"`
}

// CellSummary is one (prompt length, output length) of the matrix. A
// fleet report's cells (fleet.go) embed it with the two left zero,
// and so left out: a bench cell's are always at least 1.
type CellSummary struct {
	PromptWords int `json:"prompt_words,omitempty"`
	MaxTokens   int `json:"max_tokens,omitempty"`
	// Serves counts the cell's measured serves; Counted those with an
	// accepted token (a µJ/token needs one).
	Serves  int `json:"serves"`
	Counted int `json:"counted"`
	// TokensIn and TokensOut are medians over the serves.
	TokensIn  Milli `json:"tokens_in"`
	TokensOut Milli `json:"tokens_out"`
	// Gross is the charged µJ per accepted token; GrossMedianBound bounds
	// its median from each receipt's x_error_uj (absent when a receipt
	// carries none: an Estimator figure is not bounded).
	Gross            *Stats    `json:"gross_uj_per_token,omitempty"`
	GrossMedianBound *Interval `json:"gross_median_bound,omitempty"`
	// GrossMedianCI is the run's spread, beside the meter's bound: a 95 %
	// distribution-free confidence interval of the median over the
	// repetitions (MedianCI, order statistics of the per-serve figures).
	GrossMedianCI *MedianCI `json:"gross_median_ci,omitempty"`
	// Net is Gross less the idle baseline over each receipt's gross
	// window; absent without an idle baseline.
	Net            *Stats    `json:"net_uj_per_token,omitempty"`
	NetMedianBound *Interval `json:"net_median_bound,omitempty"`
	NetMedianCI    *MedianCI `json:"net_median_ci,omitempty"`
	// StatPerToken is the median over the serves of ⌈1000 · x_stat_uj /
	// tokens_accepted⌉ thousandths: a statistical uncertainty (95 %) of a
	// point meter's figure, never a bound; present only when every
	// counted serve carries x_stat_uj.
	StatPerToken *Milli `json:"stat_uj_per_token,omitempty"`
	// TTFTMs is the time to first token, x_first_token_ns in ms, as the
	// daemon measured it; present only when every serve carries it.
	TTFTMs *Stats `json:"ttft_ms,omitempty"`
	// MeterKinds counts the serves by x_meter_kind (absent on a receipt
	// without one: a foreign implementation's).
	MeterKinds map[string]int `json:"meter_kinds,omitempty"`
	// ErrorPerToken is each receipt's x_error_uj / tokens_accepted.
	ErrorPerToken *Stats `json:"error_uj_per_token,omitempty"`
	// TokensPerS is tokens_out / x_serve_ns.
	TokensPerS *Stats `json:"tokens_per_s,omitempty"`
	// Provenance counts the serves by energy_provenance.
	Provenance map[string]int `json:"provenance"`
	// Backends counts the serves by the backend that served them.
	Backends map[string]int `json:"backends"`
}

// sample is one serve's per-token figures, in thousandths.

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
var digestSections = []string{"format", "steward", "status", "workload", "board", "run", "idle", "serves", "chain", "summary", "trace"}

// sectionDigests computes the digest of every section of body.
func sectionDigests(body *Body) (map[string]string, error) {
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

// sectionSHA256 is the SHA-256 (hex) of v's canonical JSON: how the
// run-open binds the workload and the run-close the trace.
func sectionSHA256(v any) (string, error) {
	c, err := canonicalJSON(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// Encode is the report file: its canonical JSON and a newline.
func Encode(r *Report) ([]byte, error) { return encodeFile(r) }

// encodeFile is a report file of either kind: v's canonical JSON and a
// newline.
func encodeFile(v any) ([]byte, error) {
	c, err := canonicalJSON(v)
	if err != nil {
		return nil, err
	}
	return append(c, '\n'), nil
}

// Decode reads a report strictly: unknown fields and trailing data
// are errors, and a syntax error names its byte and the field it is in.
// A bench report of an earlier format is refused by name.
func Decode(data []byte) (*Report, error) {
	var r Report
	if err := decodeStrict(data, &r, "a bench report"); err != nil {
		// Only a file that fails is read again, for its format's name.
		var peek struct {
			Body struct {
				Format string `json:"format"`
			} `json:"body"`
		}
		if json.Unmarshal(data, &peek) == nil && peek.Body.Format != Format && strings.HasPrefix(peek.Body.Format, "meshd-bench-report/") {
			return nil, fmt.Errorf("a %s bench report: this verifier reads %s only (a v1 report's non-receipt sections were vouched for by a signature the daemon gave any caller; run the benchmark again)", peek.Body.Format, Format)
		}
		return nil, err
	}
	return &r, nil
}

// decodeCanonical is Decode of a file in canonical form (canonicalFile),
// the same report or the same error, faster: the chain's envelopes, nine
// tenths of a large report's bytes, are cut out of the text before
// encoding/json reads the rest, and taken from it as they stand. That is
// their decoded value: in canonical form a string without a backslash is
// its own content, valid UTF-8. Where the file is not shaped so (an
// envelope with an escape, a member name that encoding/json's
// case-insensitive matching would also read into the same field), or the
// rest does not decode, Decode reads the whole file, and gives the error.
func decodeCanonical(data []byte) (*Report, error) {
	if rep := decodeCut(data); rep != nil {
		return rep, nil
	}
	return Decode(data)
}

// decodeCut is decodeCanonical's fast path, or nil.
func decodeCut(data []byte) *Report {
	obj := bytes.TrimSuffix(data, []byte("\n"))
	start, end := 0, len(obj)
	for _, name := range []string{"body", "chain", "envelopes"} {
		spans, err := canonicalSpans(obj[start:end])
		if err != nil {
			return nil
		}
		var found *memberSpan
		for i, m := range spans {
			switch {
			case m.key == name:
				found = &spans[i]
			case strings.EqualFold(m.key, name):
				return nil
			}
		}
		if found == nil {
			return nil
		}
		start, end = start+found.start, start+found.end
	}
	envs, ok := plainStrings(obj[start:end])
	if !ok {
		return nil
	}
	rest := make([]byte, 0, len(data)-(end-start)+2)
	rest = append(append(append(rest, data[:start]...), "[]"...), data[end:]...)
	var r Report
	if decodeStrict(rest, &r, "a bench report") != nil {
		return nil
	}
	r.Body.Chain.Envelopes = envs
	return &r
}

// plainStrings reads a canonical JSON array of strings none of which
// holds a backslash, or says it is not one.
func plainStrings(arr []byte) ([]string, bool) {
	if len(arr) < 2 || arr[0] != '[' || arr[len(arr)-1] != ']' {
		return nil, false
	}
	out := make([]string, 0, bytes.Count(arr, []byte(`","`))+1)
	for i := 1; i < len(arr)-1; {
		if arr[i] != '"' {
			return nil, false
		}
		n := bytes.IndexByte(arr[i+1:], '"')
		if n < 0 {
			return nil, false
		}
		s := arr[i+1 : i+1+n]
		if bytes.IndexByte(s, '\\') >= 0 {
			return nil, false
		}
		out = append(out, string(s))
		i += n + 2
		switch {
		case i == len(arr)-1:
		case arr[i] == ',' && i+1 < len(arr)-1:
			i++
		default:
			return nil, false
		}
	}
	return out, true
}

// decodeStrict decodes data into v (what names it in errors) as
// Decode does: unknown fields and trailing data are errors.
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
func openSegment(ch Chain, key []byte) (map[uint64]*steward.Opened, []*steward.Opened, error) {
	bySeq := make(map[uint64]*steward.Opened, len(ch.Envelopes))
	list := make([]*steward.Opened, 0, len(ch.Envelopes))
	var prev *steward.Opened
	var idle steward.IdleLinks // x_idle_record names an idle record of the segment
	for i, s := range ch.Envelopes {
		seq := ch.First + uint64(i)
		// Named only for a problem: ten thousand names cost more than
		// the links they would name.
		where := func() string { return fmt.Sprintf("chain.envelopes[%d] (receipt sequence %d)", i, seq) }
		env, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return nil, nil, at(where(), "not base64: %w", err)
		}
		o, err := steward.OpenEnvelope(env, key)
		if err != nil {
			return nil, nil, &placed{place: where(), err: err}
		}
		if o.Receipt.Sequence != seq {
			return nil, nil, at(where(), "the envelope is sequence %d", o.Receipt.Sequence)
		}
		if prev != nil {
			if err := steward.CheckLink(prev, o); err != nil {
				return nil, nil, at(where(), "does not follow sequence %d: %w", prev.Receipt.Sequence, err)
			}
		}
		if err := idle.Add(o.Receipt); err != nil {
			return nil, nil, &placed{place: where(), err: err}
		}
		bySeq[seq] = o
		list = append(list, o)
		prev = o
	}
	return bySeq, list, nil
}
