package bench

// Verify: check a report from its bytes alone (`meshctl bench verify`):
// every envelope, the chain, the checkpoint, each serve's receipt, every
// summary figure recomputed, the section digests and the steward's
// attestation, naming the place of every problem found.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"meshd/agent/api"
	"meshd/rag"
	"meshd/steward"
)

// Problem is one thing wrong with a report, at its place: a section
// ("attestation", "digests"), an envelope ("chain.envelopes[3] (receipt
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
	// Attestation is the steward's signature over the body.
	Attestation *api.Attestation
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
// problem, each at its place:
// the evidence first (envelopes, chain, checkpoint, serves, summary), then
// the section digests, the run's completeness and the attestation, so the
// first problem is the most specific. trust, when set, is the key the
// report must be signed with.
func Verify(data []byte, trust ed25519.PublicKey) (*Verified, []Problem) {
	rep, err := Decode(data)
	if err != nil {
		return nil, []Problem{{Place: "file", What: err.Error()}}
	}
	v := &Verified{Report: rep}
	var problems []Problem
	add := func(place, format string, a ...any) { problems = append(problems, problemf(place, format, a...)) }
	body := &rep.Body

	// Canonical form: every byte of the file is significant.
	problems = append(problems, canonicalProblems(data)...)
	if body.Format != Format {
		add("format", "%q, want %q", body.Format, Format)
	}
	v.Key, err = steward.ParsePublicKey(body.Steward)
	if err != nil {
		add("steward", "%v", err)
		return v, problems
	}
	if trust != nil && !trust.Equal(v.Key) {
		add("steward", "the report is signed by %s, not by the trusted key %s", body.Steward, hex.EncodeToString(trust))
	}
	if err := json.Unmarshal(body.Board, &v.Node); err != nil {
		add("board", "not GET /v1/node's answer: %v", err)
	}
	w := &body.Workload
	if err := w.Check(); err != nil {
		add("workload", "%v", err)
		return v, problems
	}

	// The chain segment and the checkpoint that anchors it.
	v.bySeq, v.Receipts, err = openSegment(body.Chain, v.Key)
	if err != nil {
		problems = append(problems, problemOf("chain", err))
	}
	if len(body.Serves) > 0 && err == nil {
		v.Checkpoint, err = checkAnchor(body.Chain, v.Receipts, v.Key)
		if err != nil {
			add("chain.checkpoint", "%v", err)
		}
	}

	// Each serve and its receipt.
	seen := map[uint64]int{}
	for i := range body.Serves {
		s := &body.Serves[i]
		where := fmt.Sprintf("serves[%d] (serve %d, %s %s)", i, s.Index, Cell{s.PromptWords, s.MaxTokens}, repName(s))
		if j, dup := seen[s.Sequence]; dup {
			add(where, "sequence %d is also serves[%d]'s", s.Sequence, j)
			continue
		}
		seen[s.Sequence] = i
		o := v.bySeq[s.Sequence]
		if o == nil {
			if v.bySeq != nil {
				add(where, "its receipt (sequence %d) is not in the chain segment", s.Sequence)
			}
			continue
		}
		r := o.Receipt
		id, err := benchRequestID(w, s)
		switch {
		case err != nil:
			add(where, "%v", err)
		case r.RequestID != id:
			add(where, "receipt %d answers request %s, not this serve's %s", s.Sequence, r.RequestID, id)
		case r.Recipe != w.Model.Resolved:
			add(where, "receipt %d names recipe %s, the workload %s", s.Sequence, r.Recipe, w.Model.Resolved)
		case body.Idle.Backend != "" && r.Backend != body.Idle.Backend:
			add(where, "receipt %d was served by %s, the run's backend is %s", s.Sequence, r.Backend, body.Idle.Backend)
		}
	}

	// Every summary figure, recomputed by the function that made it.
	if v.bySeq != nil {
		got, err := Summarise(w, body.Serves, v.bySeq, body.Idle)
		if err != nil {
			add("summary", "%v", err)
		} else {
			problems = append(problems, diffSummary(body.Summary, got)...)
		}
	}

	// The section digests name a section altered with no evidence to
	// contradict it (the board, the trace, the workload's text).
	if got, err := sectionDigests(body); err != nil {
		add("digests", "%v", err)
	} else {
		problems = append(problems, digestProblems(body.Digests, got)...)
	}
	problems = append(problems, checkCounts(body)...)

	// The steward's signature over the canonical body.
	if rep.Attestation == "" {
		add("attestation", "none (the daemon was not asked or refused): nothing binds this report to the steward")
	} else if env, err := base64.StdEncoding.Strict().DecodeString(rep.Attestation); err != nil {
		add("attestation", "not base64: %v", err)
	} else if a, err := api.OpenAttestation(env, v.Key); err != nil {
		add("attestation", "the signature does not verify under the steward key: %v", err)
	} else if sum, err := bodyDigest(body); err != nil {
		add("attestation", "the body has no canonical form: %v", err)
	} else {
		v.Attestation = a
		switch {
		case a.Purpose != Format:
			add("attestation", "signed for %q, not a %s", a.Purpose, Format)
		case a.Steward != body.Steward:
			add("attestation", "names steward %s, the report %s", a.Steward, body.Steward)
		case !bytes.Equal(a.SHA256, sum[:]):
			add("attestation", "the steward signed body SHA-256 %x, the body's is %x: the body was altered after signing", a.SHA256, sum)
		}
	}
	return v, problems
}

// canonicalProblems checks that data is its own RFC 8785 form and one
// newline, naming the byte and the member where it is not. Bench and
// fleet reports share it.
func canonicalProblems(data []byte) []Problem {
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
