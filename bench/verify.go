package bench

// Verify: check a report from its bytes alone (`meshctl bench verify`):
// every envelope, the chain, the checkpoint, the run's sealed records and
// what they bind, each serve's receipt, every summary figure recomputed
// and the section digests, naming the place of every problem found.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"meshd/agent/api"
	"meshd/rag"
	"meshd/steward"
)

// Problem is one thing wrong with a report, at its place: a section
// ("board", "digests"), a record ("run.close (receipt sequence 30)"), an envelope ("chain.envelopes[3] (receipt
// sequence 7)"), a serve, or a summary figure ("summary cell 4×8
// (summary.cells[0]) gross_uj_per_token.max"). Verify lists the evidence
// first, so the first problem is the most specific.
type Problem struct {
	// Place is where the problem is; What is what is wrong there.
	Place string
	What  string
}

// String is the problem as bench verify prints it: "place: what".
func (p Problem) String() string { return p.Place + ": " + p.What }

func problemf(place, format string, a ...any) Problem {
	return Problem{Place: place, What: fmt.Sprintf(format, a...)}
}

// placed is an error at a place in a report, which problemOf turns back
// into a Problem.
type placed struct {
	place string
	err   error
}

func (p *placed) Error() string { return p.place + ": " + p.err.Error() }
func (p *placed) Unwrap() error { return p.err }

// at is an error at place.
func at(place, format string, a ...any) error {
	return &placed{place: place, err: fmt.Errorf(format, a...)}
}

// problemOf is err as a Problem: at its own place when it names one,
// else at place.
func problemOf(place string, err error) Problem {
	var p *placed
	if errors.As(err, &p) {
		return Problem{Place: p.place, What: p.err.Error()}
	}
	return Problem{Place: place, What: err.Error()}
}

// Verified is a report with its evidence opened. What Verify could not
// open is nil.
type Verified struct {
	Report *Report
	// Key is the steward key the report names.
	Key ed25519.PublicKey
	// Receipts are the chain segment's, in sequence order.
	Receipts []*steward.Opened
	bySeq    map[uint64]*steward.Opened
	// Checkpoint anchors the segment's last receipt.
	Checkpoint *steward.SignedCheckpoint
	// Open and Close are the run's sealed documents.
	Open  *steward.RunOpenDoc
	Close *steward.RunCloseDoc
	// Node is the board section, read.
	Node Node
}

// Receipt is the segment's receipt of sequence seq, or nil.
func (v *Verified) Receipt(seq uint64) *steward.Opened { return v.bySeq[seq] }

// Node is the board section as compare and plot read it.
type Node struct {
	Steward  string           `json:"steward"`
	Version  string           `json:"version"`
	Board    api.Board        `json:"board"`
	Meters   []map[string]any `json:"meters"`
	Backends []map[string]any `json:"backends"`
}

// Label names the board for tables and plots.
func (n Node) Label() string {
	b := n.Board
	name := b.DeviceTreeModel
	if name == "" {
		name = b.CPUModel
	}
	if name == "" {
		name = "unknown board"
	}
	return fmt.Sprintf("%s (%d cores)", name, b.Cores)
}

// Verify verifies a bench report file (Kind "") from its bytes alone. It
// returns the report (nil when it cannot be read at all) and every
// problem, each at its place. The figures follow from the chain alone:
// the run-open binds the workload, the repetitions and the board; the
// run-close the set of serves, the idle records, the status and the
// trace; the checkpoint anchors the run-close. Evidence is checked first
// (envelopes, chain, checkpoint, run records, idle records, serves,
// summary), then the section digests and completeness, so the first
// problem is the most specific. trust, when set, is the key the report
// must be signed with.
func Verify(data []byte, trust ed25519.PublicKey) (*Verified, []Problem) {
	// Canonical form: every byte of the file is significant. The scan
	// comes first: a canonical file is decoded without the chain's
	// envelopes passing through encoding/json.
	canonical := canonicalFile(data)
	var rep *Report
	var err error
	if canonical {
		rep, err = decodeCanonical(data)
	} else {
		rep, err = Decode(data)
	}
	if err != nil {
		return nil, []Problem{{Place: "file", What: err.Error()}}
	}
	v := &Verified{Report: rep}
	var problems []Problem
	add := func(place, format string, a ...any) { problems = append(problems, problemf(place, format, a...)) }
	body := &rep.Body
	if !canonical {
		cp := canonicalProblems(data)
		canonical = len(cp) == 0
		problems = append(problems, cp...)
	}
	if body.Format != Format {
		add("format", "%q, want %q", body.Format, Format)
	}
	if v.Key, err = signerKey("steward", body.Steward, trust, add); err != nil {
		return v, problems
	}
	if err := json.Unmarshal(body.Board, &v.Node); err != nil {
		add("board", "not the run-open's board section: %v", err)
	}
	v.Node.Steward = body.Steward
	w := &body.Workload
	if err := w.Check(); err != nil {
		add("workload", "%v", err)
		return v, problems
	}

	// The chain segment and the checkpoint that anchors it.
	v.bySeq, v.Receipts, err = openSegment(body.Chain, v.Key)
	if err != nil {
		problems = append(problems, problemOf("chain", err))
		v.bySeq = nil
	} else {
		v.Checkpoint, err = checkAnchor(body.Chain, v.Receipts, v.Key)
		if err != nil {
			add("chain.checkpoint", "%v", err)
		}
	}
	if v.bySeq == nil {
		return v, problems
	}

	// The run: its records, then what they bind.
	problems = append(problems, v.checkRun(body)...)
	problems = append(problems, v.checkIdle(body)...)
	problems = append(problems, v.checkServes(body)...)
	problems = append(problems, v.checkSegment(body)...)

	// Every summary figure, recomputed by the function that made it.
	got, err := Summarise(w, body.Serves, v.bySeq, body.Idle)
	if err != nil {
		add("summary", "%v", err)
	} else {
		problems = append(problems, diffSummary(body.Summary, got)...)
	}

	// The section digests name a section a third party altered. A file in
	// its canonical form holds each section's canonical JSON as it is, so
	// the digests are taken over those bytes rather than a second
	// canonicalisation of the whole body.
	if got, err := fileDigests(data, canonical); err != nil {
		add("digests", "%v", err)
	} else {
		problems = append(problems, digestProblems(body.Digests, got)...)
	}
	problems = append(problems, checkCounts(body)...)
	return v, problems
}

// recordAt opens the run's record of kind at ref: its document decoded
// from base64, its receipt in the segment, of that kind, the document
// checked against its request_id. The error is placed at where.
func (v *Verified) recordAt(where string, ref RecordRef, kind string) (*steward.Receipt, []byte, error) {
	doc, err := base64.StdEncoding.Strict().DecodeString(ref.Document)
	if err != nil {
		return nil, nil, at(where, "the document is not base64: %w", err)
	}
	o := v.bySeq[ref.Sequence]
	if o == nil {
		return nil, nil, at(where, "the record is not in the chain segment")
	}
	r := o.Receipt
	if r.Record == nil || *r.Record != kind {
		return nil, nil, at(where, "receipt %d is %s, not a %s record", ref.Sequence, recordKind(r), kind)
	}
	if err := steward.CheckRecordDocument(r, doc); err != nil {
		return nil, nil, at(where, "%w", err)
	}
	return r, doc, nil
}

func recordKind(r *steward.Receipt) string {
	if r.Record == nil {
		return "a serve"
	}
	return "a " + *r.Record + " record"
}

func recordPlace(name string, seq uint64) string {
	return fmt.Sprintf("%s (receipt sequence %d)", name, seq)
}

// checkRun checks the run-open and run-close records and what they bind:
// the workload, repetitions, declared serves, harness, caller, board,
// status, seal times and trace.
func (v *Verified) checkRun(body *Body) []Problem {
	var out []Problem
	add := func(place, format string, a ...any) { out = append(out, problemf(place, format, a...)) }
	w := &body.Workload
	openAt := recordPlace("run.open", body.Run.Open.Sequence)
	if body.Run.Open.Sequence != body.Chain.First {
		add(openAt, "the run-open must begin the chain segment, which begins at sequence %d", body.Chain.First)
	}
	or, odoc, err := v.recordAt(openAt, body.Run.Open, steward.RecordRunOpen)
	if err != nil {
		out = append(out, problemOf(openAt, err))
	} else if d, err := steward.DecodeRunOpenDoc(odoc); err != nil {
		add(openAt, "%v", err)
	} else {
		v.Open = &d
		warm, measured := planServes(w)
		switch wsum, err := sectionSHA256(w); {
		case err != nil:
			add("workload", "no canonical form: %v", err)
		case d.WorkloadSHA256 != wsum:
			add(openAt, "binds workload SHA-256 %s; the report's workload section is %s", d.WorkloadSHA256, wsum)
		}
		if d.Repetitions != uint64(w.Matrix.Repetitions) {
			add(openAt, "declares %d repetitions, the report's workload %d", d.Repetitions, w.Matrix.Repetitions)
		}
		if want := uint64(len(warm) + len(measured)); d.ServesDeclared != want {
			add(openAt, "declares %d serves, the report's workload plans %d", d.ServesDeclared, want)
		}
		if d.Harness != body.Status.Harness {
			add(openAt, "declares harness %q, status.harness is %q", d.Harness, body.Status.Harness)
		}
		if d.Caller != body.Status.Caller {
			add(openAt, "declares caller %q, status.caller is %q", d.Caller, body.Status.Caller)
		}
		if ms := sealedMs(or); body.Status.StartedUnixMs != ms {
			add("status.started_unix_ms", "%d, the run-open was sealed at %d", body.Status.StartedUnixMs, ms)
		}
		if want, err := boardOf(odoc); err != nil {
			add(openAt, "%v", err)
		} else if got, err := rag.Canonical(body.Board); err != nil || !bytes.Equal(got, want) {
			add("board", "is not what the steward sealed at run open (%s): %s", openAt, firstDiff(body.Board, want))
		}
	}

	closeAt := recordPlace("run.close", body.Run.Close.Sequence)
	cr, cdoc, err := v.recordAt(closeAt, body.Run.Close, steward.RecordRunClose)
	if err != nil {
		return append(out, problemOf(closeAt, err))
	}
	d, err := steward.DecodeRunCloseDoc(cdoc)
	if err != nil {
		return append(out, problemf(closeAt, "%v", err))
	}
	v.Close = &d
	if d.Run != body.Run.Open.Sequence {
		add(closeAt, "closes run %d, not this run (%d)", d.Run, body.Run.Open.Sequence)
	}
	if v.Open != nil && d.ServesDeclared != v.Open.ServesDeclared {
		add(closeAt, "%d serves declared, the run-open %d", d.ServesDeclared, v.Open.ServesDeclared)
	}
	if complete := d.Status == steward.RunComplete; body.Status.Complete != complete || body.Status.Incomplete != d.Reason {
		add("status", "complete %v (%q); the run-close sealed %s (%q)", body.Status.Complete, body.Status.Incomplete, d.Status, d.Reason)
	}
	if ms := sealedMs(cr); body.Status.EndedUnixMs != ms {
		add("status.ended_unix_ms", "%d, the run-close was sealed at %d", body.Status.EndedUnixMs, ms)
	}
	switch tsum, err := sectionSHA256(body.Trace); {
	case err != nil:
		add("trace", "no canonical form: %v", err)
	case d.TraceSHA256 == "":
		add(closeAt, "declares no trace_sha256: the trace is bound to nothing")
	case d.TraceSHA256 != tsum:
		add("trace", "its SHA-256 is %s; the run-close (%s) sealed the harness's %s", tsum, closeAt, d.TraceSHA256)
	}
	var st StateSection
	if body.State != nil {
		st = *body.State
	}
	return append(out, checkState(v.Open, &d, st)...)
}

// firstDiff says where two JSON texts first differ, for a person.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i >= len(want) {
		return fmt.Sprintf("the report's has %d bytes more", len(got)-len(want))
	}
	return fmt.Sprintf("from byte %d, in %s", i, pathAt(want, int64(i)))
}

// checkIdle checks the idle sections are exactly the run's idle records
// (the run-close's idle list), each on the run's backend, as long as the
// workload asks, before (or after) every measured serve.
func (v *Verified) checkIdle(body *Body) []Problem {
	var out []Problem
	w := &body.Workload
	var first, last uint64
	for i, s := range body.Serves {
		if s.Warmup {
			continue
		}
		if first == 0 || s.Sequence < first {
			first = s.Sequence
		}
		if i == 0 || s.Sequence > last {
			last = s.Sequence
		}
	}
	stated := map[uint64]string{}
	for _, m := range []struct {
		name    string
		m       *IdleMeasurement
		seconds float64
	}{{"idle.before", body.Idle.Before, w.Idle.BeforeSeconds}, {"idle.after", body.Idle.After, w.Idle.AfterSeconds}} {
		if m.m == nil || m.m.Sequence == nil {
			if m.m != nil && m.m.Document != "" {
				out = append(out, problemf(m.name, "a document without its record's sequence"))
			}
			continue
		}
		seq := *m.m.Sequence
		where := recordPlace(m.name, seq)
		if other, dup := stated[seq]; dup {
			out = append(out, problemf(where, "is also %s", other))
			continue
		}
		stated[seq] = m.name
		r, doc, err := v.recordAt(where, RecordRef{Sequence: seq, Document: m.m.Document}, steward.RecordIdle)
		if err != nil {
			out = append(out, problemOf(where, err))
			continue
		}
		d, _ := steward.DecodeIdleDoc(doc) // CheckRecordDocument decoded it
		switch {
		case d.Run == nil || *d.Run != body.Run.Open.Sequence:
			out = append(out, problemf(where, "is an idle record of %s, not of this run (%d)", runName(d.Run), body.Run.Open.Sequence))
		case r.Backend != body.Idle.Backend:
			out = append(out, problemf(where, "measured backend %s, the run's is %s", r.Backend, body.Idle.Backend))
		case m.m.Seconds != m.seconds || d.DurationMs != uint64(math.Round(m.seconds*1000)):
			out = append(out, problemf(where, "a %d ms window stated as %gs; the workload asks for %gs", d.DurationMs, m.m.Seconds, m.seconds))
		case m.name == "idle.before" && first != 0 && seq > first:
			out = append(out, problemf(where, "sealed after the first measured serve (sequence %d)", first))
		case m.name == "idle.after" && seq < last:
			out = append(out, problemf(where, "sealed before the last measured serve (sequence %d)", last))
		}
	}
	if v.Close == nil {
		return out
	}
	for _, seq := range v.Close.Idle {
		if _, ok := stated[seq]; !ok {
			out = append(out, problemf(recordPlace("idle", seq), "the run-close lists this idle record of the run; the report's idle section leaves it out"))
		}
	}
	sealed := map[uint64]bool{}
	for _, seq := range v.Close.Idle {
		sealed[seq] = true
	}
	for _, seq := range slices.Sorted(maps.Keys(stated)) {
		if !sealed[seq] {
			out = append(out, problemf(recordPlace(stated[seq], seq), "not among the run-close's idle records %v", v.Close.Idle))
		}
	}
	return out
}

func runName(run *uint64) string {
	if run == nil {
		return "no run"
	}
	return fmt.Sprintf("run %d", *run)
}

// checkServes checks each serve's receipt answers it, in the run, and
// that the report's serves are the run-close's.
func (v *Verified) checkServes(body *Body) []Problem {
	var out []Problem
	add := func(place, format string, a ...any) { out = append(out, problemf(place, format, a...)) }
	w := &body.Workload
	run := body.Run.Open.Sequence
	seen := make(map[uint64]int, len(body.Serves))
	for i := range body.Serves {
		s := &body.Serves[i]
		// Named only for a problem.
		where := func() string {
			return fmt.Sprintf("serves[%d] (serve %d, %s %s)", i, s.Index, Cell{s.PromptWords, s.MaxTokens}, repName(s))
		}
		if j, dup := seen[s.Sequence]; dup {
			add(where(), "sequence %d is also serves[%d]'s", s.Sequence, j)
			continue
		}
		seen[s.Sequence] = i
		o := v.bySeq[s.Sequence]
		if o == nil {
			add(where(), "its receipt (sequence %d) is not in the chain segment", s.Sequence)
			continue
		}
		r := o.Receipt
		id, err := benchRequestID(w, s)
		switch {
		case err != nil:
			add(where(), "%v", err)
		case r.Record != nil:
			add(where(), "receipt %d is %s, not a serve", s.Sequence, recordKind(r))
		case r.Run == nil || *r.Run != run:
			add(where(), "receipt %d was sealed in %s, not in this run (%d)", s.Sequence, runName(r.Run), run)
		case r.RequestID != id:
			add(where(), "receipt %d answers request %s, not this serve's %s", s.Sequence, r.RequestID, id)
		case body.Status.Complete && r.Recipe != w.Model.Resolved:
			add(where(), "receipt %d names recipe %s, the workload %s", s.Sequence, r.Recipe, w.Model.Resolved)
		case body.Status.Complete && body.Idle.Backend != "" && r.Backend != body.Idle.Backend:
			add(where(), "receipt %d was served by %s, the run's backend is %s", s.Sequence, r.Backend, body.Idle.Backend)
		}
		// In an incomplete run such a serve is the one that stopped it
		// (the router chose another backend): listed, in no figure.
	}
	if v.Close == nil {
		return out
	}
	closeAt := recordPlace("run.close", body.Run.Close.Sequence)
	sealed := map[uint64]bool{}
	for _, seq := range v.Close.Serves {
		sealed[seq] = true
		if _, ok := seen[seq]; !ok {
			add("serves", "the run-close (%s) counts serve receipt %d, which the report's serves leave out", closeAt, seq)
		}
	}
	for i, s := range body.Serves {
		if !sealed[s.Sequence] {
			add(fmt.Sprintf("serves[%d] (serve %d)", i, s.Index), "receipt %d is not among the %d serves the run-close counts", s.Sequence, v.Close.ServesSealed)
		}
	}
	return out
}

// checkSegment checks every receipt of the segment that names the run is
// one the report accounts for, and counts the others.
func (v *Verified) checkSegment(body *Body) []Problem {
	var out []Problem
	run := body.Run.Open.Sequence
	mine := map[uint64]bool{run: true, body.Run.Close.Sequence: true}
	for _, s := range body.Serves {
		mine[s.Sequence] = true
	}
	for _, m := range []*IdleMeasurement{body.Idle.Before, body.Idle.After} {
		if m != nil && m.Sequence != nil {
			mine[*m.Sequence] = true
		}
	}
	others := 0
	for i, o := range v.Receipts {
		r := o.Receipt
		inRun := r.Sequence == run || r.Run != nil && *r.Run == run
		switch {
		case !inRun:
			others++
		case !mine[r.Sequence]:
			out = append(out, problemf(fmt.Sprintf("chain.envelopes[%d] (receipt sequence %d)", i, r.Sequence),
				"%s of this run (%d) that the report does not account for", recordKind(r), run))
		}
		if r.Sequence > body.Run.Close.Sequence && inRun {
			out = append(out, problemf(fmt.Sprintf("chain.envelopes[%d] (receipt sequence %d)", i, r.Sequence), "sealed in the run after its close"))
		}
	}
	if others != body.Run.Others {
		out = append(out, problemf("run.others", "%d, the segment holds %d receipts of other callers", body.Run.Others, others))
	}
	return out
}

// fileDigests is the digest of every section of a bench report file:
// over the section's bytes in the file when the file is canonical (they
// are then the section's canonical JSON), else by canonicalising each.
func fileDigests(data []byte, canonical bool) (map[string]string, error) {
	if !canonical {
		rep, err := Decode(data)
		if err != nil {
			return nil, err
		}
		return sectionDigests(&rep.Body)
	}
	body, err := canonicalMember(data, "body")
	if err != nil {
		return nil, err
	}
	members, err := canonicalMembers(body)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(digestSections))
	for _, k := range digestSections {
		raw, ok := members[k]
		if !ok {
			raw = []byte("null")
		}
		sum := sha256.Sum256(raw)
		out[k] = hex.EncodeToString(sum[:])
	}
	return out, nil
}

// canonicalMembers splits a JSON object in canonical form (no
// whitespace) into its members' values, by a scan that only tracks
// strings and nesting: the file was parsed already.
func canonicalMembers(obj []byte) (map[string][]byte, error) {
	spans, err := canonicalSpans(obj)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(spans))
	for _, m := range spans {
		out[m.key] = obj[m.start:m.end]
	}
	return out, nil
}

// memberSpan is a member of a JSON object: its name, and where its value
// lies in the object's bytes.
type memberSpan struct {
	key        string
	start, end int
}

// canonicalSpans is canonicalMembers' scan, in the object's order.
func canonicalSpans(obj []byte) ([]memberSpan, error) {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, errors.New("not a JSON object")
	}
	var out []memberSpan
	i := 1
	for i < len(obj)-1 {
		if obj[i] != '"' {
			return nil, fmt.Errorf("byte %d: want a member name", i)
		}
		end := skipString(obj, i)
		var key string
		if err := json.Unmarshal(obj[i:end], &key); err != nil || end >= len(obj) || obj[end] != ':' {
			return nil, fmt.Errorf("byte %d: a member name", i)
		}
		start := end + 1
		j, depth := start, 0
		for ; j < len(obj)-1; j++ {
			switch c := obj[j]; {
			case c == '"':
				j = skipString(obj, j) - 1
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
			case c == ',' && depth == 0:
				goto member
			}
		}
	member:
		out = append(out, memberSpan{key, start, j})
		i = j + 1
	}
	return out, nil
}

// skipString is the index just past the JSON string that begins at i.
// It looks for each quote with bytes.IndexByte rather than byte by byte
// (a report is mostly long base64 strings): a quote ends the string
// unless an odd run of backslashes stands before it.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// canonicalMember is the value of member name of the canonical object
// data (a whole file, its trailing newline allowed).
func canonicalMember(data []byte, name string) ([]byte, error) {
	m, err := canonicalMembers(bytes.TrimSuffix(data, []byte("\n")))
	if err != nil {
		return nil, err
	}
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("no %q member", name)
	}
	return v, nil
}

// canonicalProblems checks that data is its own RFC 8785 form and one
// newline, naming the byte and the member where it is not. Bench and
// fleet reports share it.
func canonicalProblems(data []byte) []Problem {
	if canonicalFile(data) {
		return nil
	}
	c, err := rag.Canonical(bytes.TrimSuffix(data, []byte("\n")))
	if err != nil {
		return []Problem{problemf("file", "not canonical JSON: %v", err)}
	}
	if want := append(c, '\n'); !bytes.Equal(want, data) {
		i := 0
		for i < len(want) && i < len(data) && want[i] == data[i] {
			i++
		}
		return []Problem{problemf("file", "not in canonical form (RFC 8785, one line) from byte %d, in %s", i, pathAt(data, int64(i)))}
	}
	return nil
}

// canonicalFile is whether data is its own RFC 8785 form and one
// newline, by a scan: canonicalProblems finds nothing exactly then.
func canonicalFile(data []byte) bool {
	n := len(data)
	return n > 0 && data[n-1] == '\n' && rag.IsCanonical(data[:n-1])
}

// digestProblems compares the digests a report states with those of its
// sections as they are, naming each section that was altered.
func digestProblems(stated, got map[string]string) []Problem {
	var out []Problem
	for _, k := range sortedKeys(got) {
		switch s, ok := stated[k]; {
		case !ok:
			out = append(out, problemf("digests", "no digest for the %s section", k))
		case s != got[k]:
			out = append(out, problemf(k, "the section was altered: its SHA-256 is %s, the report's digest says %s", got[k], s))
		}
	}
	for _, k := range sortedKeys(stated) {
		if _, ok := got[k]; !ok {
			out = append(out, problemf("digests", "%q is not a section of the report", k))
		}
	}
	return out
}

// repName says which repetition a serve is.
func repName(s *Serve) string {
	if s.Warmup {
		return fmt.Sprintf("warm-up %d", s.Rep)
	}
	return fmt.Sprintf("rep %d", s.Rep)
}

// checkAnchor opens the checkpoint and checks that its head is the
// segment's last receipt.
func checkAnchor(ch Chain, list []*steward.Opened, key ed25519.PublicKey) (*steward.SignedCheckpoint, error) {
	env, err := base64.StdEncoding.Strict().DecodeString(ch.Checkpoint)
	if err != nil || len(env) == 0 {
		return nil, fmt.Errorf("missing or not base64 (%v)", err)
	}
	cp, err := steward.OpenCheckpoint(env, key)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("anchors sequence %d, but the segment is empty", cp.Count-1)
	}
	last := list[len(list)-1]
	if cp.Count != last.Receipt.Sequence+1 || cp.HeadID != last.ID {
		return nil, fmt.Errorf("covers %d receipts with head %s; the segment ends at sequence %d (%s), which it does not anchor",
			cp.Count, cp.Head, last.Receipt.Sequence, last.ID)
	}
	return cp, nil
}

// checkCounts checks a complete run has every serve its workload asks for.
func checkCounts(body *Body) []Problem {
	if !body.Status.Complete {
		if body.Status.Incomplete == "" {
			return []Problem{{Place: "status", What: "incomplete without a reason"}}
		}
		return nil
	}
	w := &body.Workload
	want := map[Cell]int{}
	for _, c := range w.Cells() {
		want[c] = w.Matrix.Repetitions
	}
	got, warm := map[Cell]int{}, 0
	for _, s := range body.Serves {
		if s.Warmup {
			warm++
			continue
		}
		got[Cell{s.PromptWords, s.MaxTokens}]++
	}
	var out []Problem
	if warm != w.Matrix.Warmup {
		out = append(out, problemf("serves", "%d warm-up serves, the workload asks for %d", warm, w.Matrix.Warmup))
	}
	for _, c := range w.Cells() {
		if got[c] != want[c] {
			out = append(out, problemf("serves", "cell %s has %d serves, the workload asks for %d repetitions", c, got[c], want[c]))
		}
		delete(got, c)
	}
	for c, n := range got {
		out = append(out, problemf("serves", "%d serves of %s, which is not in the workload's matrix", n, c))
	}
	return out
}

// diffSummary compares the stated summary with the recomputed one, naming
// each figure that differs by its cell and field.
func diffSummary(stated, got Summary) []Problem {
	var out []Problem
	if d := diffJSON("summary.idle_uw", stated.IdleUW, got.IdleUW); d != nil {
		out = append(out, *d)
	}
	if d := diffJSON("summary.idle_error_uw", stated.IdleErrorUW, got.IdleErrorUW); d != nil {
		out = append(out, *d)
	}
	if len(stated.Cells) != len(got.Cells) {
		return append(out, problemf("summary", "%d cells, the receipts give %d", len(stated.Cells), len(got.Cells)))
	}
	for i := range got.Cells {
		where := fmt.Sprintf("summary cell %s (summary.cells[%d])", Cell{got.Cells[i].PromptWords, got.Cells[i].MaxTokens}, i)
		if d := diffJSON(where, stated.Cells[i], got.Cells[i]); d != nil {
			out = append(out, *d)
		}
	}
	return out
}

// diffJSON compares the JSON forms of stated and recomputed values and
// names the first member that differs, or returns nil.
func diffJSON(where string, stated, got any) *Problem {
	norm := func(v any) any {
		b, _ := json.Marshal(v)
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var x any
		_ = dec.Decode(&x)
		return x
	}
	return diffValue(where, "", norm(stated), norm(got))
}

func diffValue(where, path string, a, b any) *Problem {
	field := func() string {
		if path == "" {
			return where
		}
		return where + " " + strings.TrimPrefix(path, ".")
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			if d := diffValue(where, path+"."+k, av[k], bv[k]); d != nil {
				return d
			}
		}
		return nil
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			break
		}
		for i := range av {
			if d := diffValue(where, fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]); d != nil {
				return d
			}
		}
		return nil
	}
	as, bs := show(a), show(b)
	if as == bs {
		return nil
	}
	p := problemf(field(), "the report says %s, the receipts give %s", as, bs)
	return &p
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// signerKey parses id, a report's signing key, adding a problem at place
// when it is no key or, with trust set, not the trusted one; only the
// first stops the checks that need the key.
func signerKey(place, id string, trust ed25519.PublicKey, add func(place, format string, a ...any)) (ed25519.PublicKey, error) {
	key, err := steward.ParsePublicKey(id)
	if err != nil {
		add(place, "%v", err)
		return nil, err
	}
	if trust != nil && !trust.Equal(key) {
		add(place, "the report is signed by %s, not by the trusted key %s", id, hex.EncodeToString(trust))
	}
	return key, nil
}
