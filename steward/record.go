package steward

import (
	"errors"
	"fmt"
	"strings"

	"meshd/wire"
)

// Records (PROFILE §22) are receipts in the steward's chain that serve
// nothing: an idle window's energy, the opening of a benchmark run and its
// closing. Each is a mesh/1 receipt with no tokens, so any mesh/1
// verifier chains it; x_record says which it is, and its request_id is the
// content id of a document the daemon built and hands to the client, so a
// verifier can recompute the id and read what the record binds.

// The values of x_record.
const (
	RecordIdle     = "idle"
	RecordRunOpen  = "run-open"
	RecordRunClose = "run-close"
)

// RefusedRecord: a record breaks the record rules (PROFILE §22), or x_run
// does not name an earlier receipt. Stable, like every Reason.
const RefusedRecord Reason = "record"

// Run records name the daemon as their backend, and "run" as the recipe:
// nothing was served, the daemon itself vouches for the document.
const (
	RunBackend = "meshd"
	RunRecipe  = "run"
	IdleRecipe = "idle"
)

// Run-close statuses.
const (
	RunComplete   = "complete"
	RunIncomplete = "incomplete"
)

// IsRecordKind says whether k is one of the x_record values.
func IsRecordKind(k string) bool {
	return k == RecordIdle || k == RecordRunOpen || k == RecordRunClose || k == RecordCorpusPin
}

func recordErr(format string, a ...any) error {
	return fieldErr(RefusedRecord, "record rule: %s", fmt.Sprintf(format, a...))
}

// checkRecord enforces the record rules and x_run's place in the chain.
func (r *Receipt) checkRecord(e wire.Energy) error {
	if r.Run != nil && *r.Run >= r.Sequence {
		return recordErr("x_run %d must name an earlier receipt than sequence %d", *r.Run, r.Sequence)
	}
	if r.PinPrev != nil && (r.Record == nil || *r.Record != RecordCorpusPin) {
		return recordErr("x_pin_prev is carried by corpus-pin records only")
	}
	if r.Record == nil {
		return nil
	}
	kind := *r.Record
	if !IsRecordKind(kind) {
		return fieldErr(RefusedFieldValue, "x_record %q is not one of %s, %s, %s, %s", kind, RecordIdle, RecordRunOpen, RecordRunClose, RecordCorpusPin)
	}
	if !r.hasMetering() {
		return fieldErr(RefusedMissingField, "a record carries meshd's metering group (x_meter, x_meter_kind, x_window_ns, x_serve_ns, x_sealed_unix_ms)")
	}
	if r.TokensIn != 0 || r.TokensOut != 0 || r.TokensAccepted != 0 || r.CacheHitTokens != 0 || r.SpecProposed != 0 || r.SpecAccepted != 0 {
		return recordErr("a %s record serves nothing: every token counter must be 0", kind)
	}
	if r.FidelityFloor != 0 || r.FidelityMet != 1 {
		return recordErr("a %s record has fidelity_floor 0 and fidelity_met 1, not %d and %d", kind, r.FidelityFloor, r.FidelityMet)
	}
	if r.GrantID != nil || r.UpstreamReceipt != nil {
		return recordErr("a %s record debits no grant and forwards nothing", kind)
	}
	p := e.Provenance()
	switch kind {
	case RecordIdle:
		switch {
		case p == wire.Estimator:
			return recordErr("an idle record is a meter figure, not Estimator")
		case r.IdleUW != nil:
			return recordErr("an idle record is the idle measurement: it subtracts no x_idle_uw")
		case *r.Shared > 1:
			return recordErr("an idle window shared with %d serves is not idle (x_shared %d)", *r.Shared-1, *r.Shared)
		}
	default:
		switch {
		case p != wire.Estimator || r.EstimatedUJ != 0:
			return recordErr("a %s record measures nothing: Estimator with estimated_uj 0, not %v with %d", kind, p, r.EstimatedUJ)
		case *r.WindowNs != 0 || *r.ServeNs != 0:
			return recordErr("a %s record has no window: x_window_ns and x_serve_ns 0", kind)
		case kind == RecordRunOpen && r.Run != nil:
			return recordErr("a run-open record opens its run: it carries no x_run")
		case kind == RecordRunClose && r.Run == nil:
			return recordErr("a run-close record names the run it closes in x_run")
		case kind == RecordCorpusPin:
			return r.checkCorpusPin()
		}
	}
	return nil
}

// RecordDraft is the draft of a record of kind whose document is doc:
// request_id is doc's content id, no tokens, floor F0 (met).
func RecordDraft(kind string, doc []byte, run *uint64, backend, recipe, route string, e wire.Energy, m wire.Metering) Draft {
	k := kind
	var rn *uint64
	if run != nil {
		v := *run
		rn = &v
	}
	return Draft{Request: wire.ContentOf(doc), Backend: backend, Recipe: recipe, Route: route, Energy: e, Metering: m,
		Record: k, Run: rn}
}

// RunRecordDraft is the draft of a run-open (run nil) or run-close record:
// Estimator, no energy, no window, backend "meshd", recipe "run".
func RunRecordDraft(kind string, doc []byte, run *uint64, route string) Draft {
	return RecordDraft(kind, doc, run, RunBackend, RunRecipe, route, wire.Estimated(0),
		wire.Metering{Meter: EstimatorMeter, Kind: wire.KindEstimator})
}

// The documents. Each is a deterministic CBOR map (PROFILE §1) of text
// keys whose values are unsigned integers, text strings or arrays of
// unsigned integers; "mesh_record" names its kind, so one kind's document
// can never pass for another's.

// IdleDoc is an idle record's document.
type IdleDoc struct {
	Backend    string  // the backend whose span was measured
	DurationMs uint64  // the idle window asked for, ms
	Run        *uint64 // the run it was taken in, if any
	// Source is "" for a window a client asked for, IdleSourceSpan for
	// the quiet stretch a span measured before a serve (DurationMs is
	// then the stretch's length).
	Source string
}

// RunOpenDoc is a run-open record's document: what the client declares
// and what only the daemon can vouch for.
type RunOpenDoc struct {
	WorkloadSHA256 string // 64 lower-case hex: SHA-256 of the workload file
	Repetitions    uint64
	ServesDeclared uint64
	Harness        string // the client's build
	Caller         string
	// Board and Meters are the RFC 8785 canonical JSON of GET /v1/node's
	// "board" and "meters" members at open; Version is its "version".
	Board   string
	Version string
	Meters  string
	// State is the RFC 8785 canonical JSON of the machine state the
	// daemon read at open (CPU governors and frequencies, thermal zones:
	// package agent/board); "" where none was read, and then absent.
	State string
}

// RunCloseDoc is a run-close record's document.
type RunCloseDoc struct {
	Run            uint64   // the run-open record's sequence
	ServesDeclared uint64   // as the run-open declared
	ServesSealed   uint64   // receipts sealed with x_run = Run, excluding records
	Serves         []uint64 // their sequences, ascending
	Idle           []uint64 // the sequences of the run's idle records, ascending
	Status         string   // "complete" or "incomplete"
	Reason         string   // why incomplete; "" when complete
	// TraceSHA256 is the caller's declaration (64 lower-case hex, or ""
	// when it declared none): the SHA-256 of whatever it recorded beside
	// the run, such as a benchmark report's trace section. The daemon
	// checks its form only; it seals it so the declaration cannot change
	// after the close.
	TraceSHA256 string
	State       string // the machine state at close, as RunOpenDoc.State
}

// docField is one entry of a document map: a text, an unsigned integer
// or an array of unsigned integers, by kind.
type docField struct {
	key   string
	kind  byte // wire.MajorText, wire.MajorUint or wire.MajorArray
	text  string
	uint  uint64
	list  []uint64
	texts []string // an array of text strings (kind wire.MajorArray, list nil)
}

// encodeDoc writes fields as one deterministic CBOR map. The documents
// have a handful of keys, so an insertion sort is all the ordering needs.
func encodeDoc(fields []docField) []byte {
	size := 1
	for i := range fields {
		f := &fields[i]
		size += len(f.key) + len(f.text) + 9*len(f.list) + 20
		for _, t := range f.texts {
			size += len(t) + 9
		}
		for j := i; j > 0 && keyLess(fields[j].key, fields[j-1].key); j-- {
			fields[j], fields[j-1] = fields[j-1], fields[j]
		}
	}
	b := wire.AppendHead(make([]byte, 0, size), wire.MajorMap, uint64(len(fields)))
	for i := range fields {
		f := &fields[i]
		b = wire.AppendText(b, f.key)
		switch f.kind {
		case wire.MajorText:
			b = wire.AppendText(b, f.text)
		case wire.MajorUint:
			b = wire.AppendHead(b, wire.MajorUint, f.uint)
		case textList:
			b = wire.AppendHead(b, wire.MajorArray, uint64(len(f.texts)))
			for _, t := range f.texts {
				b = wire.AppendText(b, t)
			}
		default:
			b = wire.AppendHead(b, wire.MajorArray, uint64(len(f.list)))
			for _, v := range f.list {
				b = wire.AppendHead(b, wire.MajorUint, v)
			}
		}
	}
	return b
}

func txt(k, v string) docField           { return docField{key: k, kind: wire.MajorText, text: v} }
func num(k string, v uint64) docField    { return docField{key: k, kind: wire.MajorUint, uint: v} }
func list(k string, v []uint64) docField { return docField{key: k, kind: wire.MajorArray, list: v} }

// Encode is the document's deterministic CBOR.
func (d IdleDoc) Encode() []byte {
	f := []docField{txt("mesh_record", RecordIdle), txt("backend", d.Backend), num("duration_ms", d.DurationMs)}
	if d.Run != nil {
		f = append(f, num("run", *d.Run))
	}
	if d.Source != "" {
		f = append(f, txt("source", d.Source))
	}
	return encodeDoc(f)
}

// Encode is the document's deterministic CBOR.
func (d RunOpenDoc) Encode() []byte {
	return encodeDoc(withState([]docField{txt("mesh_record", RecordRunOpen), txt("workload_sha256", d.WorkloadSHA256),
		num("repetitions", d.Repetitions), num("serves_declared", d.ServesDeclared), txt("harness", d.Harness),
		txt("caller", d.Caller), txt("board", d.Board), txt("version", d.Version), txt("meters", d.Meters)}, d.State))
}

// withState adds the "state" member when there is one.
func withState(f []docField, state string) []docField {
	if state != "" {
		f = append(f, txt("state", state))
	}
	return f
}

// Encode is the document's deterministic CBOR.
func (d RunCloseDoc) Encode() []byte {
	f := []docField{txt("mesh_record", RecordRunClose), num("run", d.Run), num("serves_declared", d.ServesDeclared),
		num("serves_sealed", d.ServesSealed), list("serves", d.Serves), list("idle", d.Idle), txt("status", d.Status)}
	if d.Reason != "" {
		f = append(f, txt("reason", d.Reason))
	}
	if d.TraceSHA256 != "" {
		f = append(f, txt("trace_sha256", d.TraceSHA256))
	}
	return encodeDoc(withState(f, d.State))
}

// ErrDocument is wrapped by every problem with a record's document.
var ErrDocument = errors.New("record document refused")

func docErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrDocument, fmt.Sprintf(format, a...))
}

// decodeDoc reads a document map into its values (string, uint64 or
// []uint64 by key); the caller re-encodes what it understood and compares,
// so only the one deterministic encoding with exactly the known keys
// passes.
func decodeDoc(b []byte) (map[string]any, error) {
	major, n, off, err := wire.ReadHead(b, 0)
	if err != nil || major != wire.MajorMap {
		return nil, docErr("not a CBOR map")
	}
	if n > 32 {
		return nil, docErr("%d keys", n)
	}
	out := map[string]any{}
	for i := uint64(0); i < n; i++ {
		k, end, err := wire.ReadString(b, off, wire.MajorText)
		if err != nil {
			return nil, docErr("key %d: %v", i, err)
		}
		off = end
		vm, v, vEnd, err := wire.ReadHead(b, off)
		if err != nil {
			return nil, docErr("%s: %v", k, err)
		}
		switch vm {
		case wire.MajorUint:
			out[string(k)], off = v, vEnd
		case wire.MajorText:
			s, end, err := wire.ReadString(b, off, wire.MajorText)
			if err != nil {
				return nil, docErr("%s: %v", k, err)
			}
			out[string(k)], off = string(s), end
		case wire.MajorArray:
			if v > uint64(len(b)) {
				return nil, docErr("%s: %d items in %d bytes", k, v, len(b))
			}
			off = vEnd
			if im, _, _, err := wire.ReadHead(b, off); v > 0 && err == nil && im == wire.MajorText {
				// An array of text strings (a corpus-pin's repos).
				ts := make([]string, 0, v)
				for j := uint64(0); j < v; j++ {
					s, e, err := wire.ReadString(b, off, wire.MajorText)
					if err != nil {
						return nil, docErr("%s[%d]: want a text string", k, j)
					}
					ts, off = append(ts, string(s)), e
				}
				out[string(k)] = ts
				continue
			}
			xs := make([]uint64, 0, v)
			for j := uint64(0); j < v; j++ {
				im, x, e, err := wire.ReadHead(b, off)
				if err != nil || im != wire.MajorUint {
					return nil, docErr("%s[%d]: want an unsigned integer", k, j)
				}
				xs, off = append(xs, x), e
			}
			out[string(k)] = xs
		default:
			return nil, docErr("%s: CBOR major type %d is not allowed in a document", k, vm)
		}
	}
	if off != len(b) {
		return nil, docErr("%d bytes after the map", len(b)-off)
	}
	return out, nil
}

// docReader takes typed values out of a decoded document.
type docReader struct {
	m   map[string]any
	err error
}

func (r *docReader) text(k string, required bool) string {
	v, ok := r.m[k]
	if !ok {
		if required && r.err == nil {
			r.err = docErr("%s is missing", k)
		}
		return ""
	}
	s, ok := v.(string)
	if !ok && r.err == nil {
		r.err = docErr("%s must be a text string", k)
	}
	return s
}

func (r *docReader) uint(k string) (uint64, bool) {
	v, ok := r.m[k]
	if !ok {
		return 0, false
	}
	u, ok := v.(uint64)
	if !ok && r.err == nil {
		r.err = docErr("%s must be an unsigned integer", k)
	}
	return u, ok
}

func (r *docReader) need(k string) uint64 {
	u, ok := r.uint(k)
	if !ok && r.err == nil {
		r.err = docErr("%s is missing", k)
	}
	return u
}

func (r *docReader) list(k string) []uint64 {
	v, ok := r.m[k]
	if !ok {
		if r.err == nil {
			r.err = docErr("%s is missing", k)
		}
		return nil
	}
	xs, ok := v.([]uint64)
	if !ok && r.err == nil {
		r.err = docErr("%s must be an array of unsigned integers", k)
	}
	return xs
}

// decodeAs decodes b as a document of kind, parsing with parse and
// requiring that its re-encoding is b itself.
func decodeAs[T interface{ Encode() []byte }](b []byte, kind string, parse func(*docReader) T) (T, error) {
	var zero T
	m, err := decodeDoc(b)
	if err != nil {
		return zero, err
	}
	r := &docReader{m: m}
	if got := r.text("mesh_record", true); r.err == nil && got != kind {
		return zero, docErr("mesh_record is %q, want %q", got, kind)
	}
	d := parse(r)
	if r.err != nil {
		return zero, r.err
	}
	if string(d.Encode()) != string(b) {
		return zero, docErr("not the deterministic encoding of a %s document (unsorted, unknown or repeated keys, or a non-shortest form)", kind)
	}
	return d, nil
}

// DecodeIdleDoc decodes an idle record's document strictly.
func DecodeIdleDoc(b []byte) (IdleDoc, error) {
	return decodeAs(b, RecordIdle, func(r *docReader) IdleDoc {
		d := IdleDoc{Backend: r.text("backend", true), DurationMs: r.need("duration_ms"), Source: r.text("source", false)}
		if v, ok := r.uint("run"); ok {
			d.Run = &v
		}
		if _, ok := r.m["source"]; ok && d.Source != IdleSourceSpan && r.err == nil {
			r.err = docErr("source %q: an idle document's source is absent (on request) or %q", d.Source, IdleSourceSpan)
		}
		return d
	})
}

// DecodeRunOpenDoc decodes a run-open record's document strictly.
func DecodeRunOpenDoc(b []byte) (RunOpenDoc, error) {
	return decodeAs(b, RecordRunOpen, func(r *docReader) RunOpenDoc {
		return RunOpenDoc{WorkloadSHA256: r.text("workload_sha256", true), Repetitions: r.need("repetitions"),
			ServesDeclared: r.need("serves_declared"), Harness: r.text("harness", true), Caller: r.text("caller", true),
			Board: r.text("board", true), Version: r.text("version", true), Meters: r.text("meters", true), State: r.text("state", false)}
	})
}

// DecodeRunCloseDoc decodes a run-close record's document strictly and
// checks that it agrees with itself: serves_sealed counts serves, both
// lists ascend, and the status is "complete" exactly when every declared
// serve was sealed and no reason was given.
func DecodeRunCloseDoc(b []byte) (RunCloseDoc, error) {
	d, err := decodeAs(b, RecordRunClose, func(r *docReader) RunCloseDoc {
		return RunCloseDoc{Run: r.need("run"), ServesDeclared: r.need("serves_declared"), ServesSealed: r.need("serves_sealed"),
			Serves: r.list("serves"), Idle: r.list("idle"), Status: r.text("status", true), Reason: r.text("reason", false),
			TraceSHA256: r.text("trace_sha256", false),
			State:       r.text("state", false)}
	})
	if err != nil {
		return d, err
	}
	if d.TraceSHA256 != "" && !wire.IsLowerHex(d.TraceSHA256, 32) {
		return d, docErr("trace_sha256 must be 64 lower-case hex digits")
	}
	if uint64(len(d.Serves)) != d.ServesSealed {
		return d, docErr("serves_sealed %d, but %d serves are listed", d.ServesSealed, len(d.Serves))
	}
	for name, xs := range map[string][]uint64{"serves": d.Serves, "idle": d.Idle} {
		for i := range xs {
			if xs[i] <= d.Run || i > 0 && xs[i] <= xs[i-1] {
				return d, docErr("%s must ascend and follow the run-open (sequence %d)", name, d.Run)
			}
		}
	}
	complete := d.ServesSealed == d.ServesDeclared && d.Reason == ""
	switch {
	case d.Status != RunComplete && d.Status != RunIncomplete:
		return d, docErr("status %q is neither %q nor %q", d.Status, RunComplete, RunIncomplete)
	case complete != (d.Status == RunComplete):
		return d, docErr("status %q with %d of %d serves sealed and reason %q", d.Status, d.ServesSealed, d.ServesDeclared, d.Reason)
	case d.Status == RunIncomplete && d.Reason == "":
		return d, docErr("an incomplete run says why")
	}
	return d, nil
}

// CheckRecordDocument checks that doc is the document of record r: its
// content id is r's request_id, its kind is r's x_record, and what both
// state agrees (an idle record's backend and run, a run-close's run). A
// verifier that holds the document then reads it with the Decode
// function of its kind.
func CheckRecordDocument(r *Receipt, doc []byte) error {
	if r.Record == nil {
		return docErr("receipt %d is not a record", r.Sequence)
	}
	if id := wire.ContentOf(doc).String(); id != r.RequestID {
		return docErr("the document's content id %s is not request_id %s of record %d", id, r.RequestID, r.Sequence)
	}
	eqRun := func(doc *uint64) error {
		if (doc == nil) != (r.Run == nil) || doc != nil && *doc != *r.Run {
			return docErr("the document's run and x_run of record %d differ", r.Sequence)
		}
		return nil
	}
	switch *r.Record {
	case RecordIdle:
		d, err := DecodeIdleDoc(doc)
		if err != nil {
			return err
		}
		if d.Backend != r.Backend {
			return docErr("idle document names backend %q, the record %q", d.Backend, r.Backend)
		}
		return eqRun(d.Run)
	case RecordRunOpen:
		_, err := DecodeRunOpenDoc(doc)
		return err
	case RecordRunClose:
		d, err := DecodeRunCloseDoc(doc)
		if err != nil {
			return err
		}
		return eqRun(&d.Run)
	case RecordCorpusPin:
		d, err := DecodeCorpusPinDoc(doc)
		if err != nil {
			return err
		}
		return d.matches(r)
	}
	return docErr("x_record %q", *r.Record)
}

// RunRoute is the route line of a run record: one line, no client text
// beyond what is checked to be printable.
func RunRoute(kind string, open *RunOpenDoc, close *RunCloseDoc) string {
	if kind == RecordRunOpen && open != nil {
		w := open.WorkloadSHA256
		if len(w) > 16 {
			w = w[:16]
		}
		return fmt.Sprintf("run open: workload %s, %d serves declared, %d repetitions", w, open.ServesDeclared, open.Repetitions)
	}
	if close != nil {
		return fmt.Sprintf("run close %d: %s, %d of %d serves sealed", close.Run, close.Status, close.ServesSealed, close.ServesDeclared)
	}
	return "run"
}

// PrintableLine reports whether s is a non-empty line of printable text
// of at most max bytes, as client-given text in a document must be.
func PrintableLine(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd })
}
