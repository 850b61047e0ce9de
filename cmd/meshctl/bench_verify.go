package main

// `meshctl bench verify`: check a report from its bytes alone — every
// envelope, the chain, the checkpoint, each serve's receipt, every summary
// figure recomputed, the section digests and the steward's attestation —
// naming the place of every problem found.

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"meshd/agent/api"
	"meshd/rag"
	"meshd/steward"
)

// verifiedReport is a report with its evidence opened.
type verifiedReport struct {
	rep      *benchReport
	key      ed25519.PublicKey
	receipts []*steward.Opened
	bySeq    map[uint64]*steward.Opened
	cp       *steward.SignedCheckpoint
	att      *api.Attestation
	node     nodeView
}

// nodeView is the board section as compare and plot read it.
type nodeView struct {
	Steward  string           `json:"steward"`
	Version  string           `json:"version"`
	Board    api.Board        `json:"board"`
	Meters   []map[string]any `json:"meters"`
	Backends []map[string]any `json:"backends"`
}

// label names the board for tables and plots.
func (n nodeView) label() string {
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

// checkReport verifies a report file. It returns the report (nil when it
// cannot be read at all) and every problem, each beginning with its place:
// the evidence first (envelopes, chain, checkpoint, serves, summary), then
// the section digests, the run's completeness and the attestation, so the
// first problem is the most specific. trust, when set, is the key the
// report must be signed with.
func checkReport(data []byte, trust ed25519.PublicKey) (*verifiedReport, []string) {
	rep, err := decodeReport(data)
	if err != nil {
		return nil, []string{"file: " + err.Error()}
	}
	v := &verifiedReport{rep: rep}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	body := &rep.Body

	// Canonical form: every byte of the file is significant.
	problems = append(problems, canonicalProblems(data)...)
	if body.Format != benchFormat {
		add("format: %q, want %q", body.Format, benchFormat)
	}
	v.key, err = steward.ParsePublicKey(body.Steward)
	if err != nil {
		add("steward: %v", err)
		return v, problems
	}
	if trust != nil && !trust.Equal(v.key) {
		add("steward: the report is signed by %s, not by the trusted key %s", body.Steward, hex.EncodeToString(trust))
	}
	if err := json.Unmarshal(body.Board, &v.node); err != nil {
		add("board: not GET /v1/node's answer: %v", err)
	}
	w := &body.Workload
	if err := w.check(); err != nil {
		add("workload: %v", err)
		return v, problems
	}

	// The chain segment and the checkpoint that anchors it.
	v.bySeq, v.receipts, err = openSegment(body.Chain, v.key)
	if err != nil {
		add("%v", err)
	}
	if len(body.Serves) > 0 && err == nil {
		v.cp, err = checkAnchor(body.Chain, v.receipts, v.key)
		if err != nil {
			add("chain.checkpoint: %v", err)
		}
	}

	// Each serve and its receipt.
	seen := map[uint64]int{}
	for i := range body.Serves {
		s := &body.Serves[i]
		where := fmt.Sprintf("serves[%d] (serve %d, %s %s)", i, s.Index, benchCell{s.PromptWords, s.MaxTokens}, repName(s))
		if j, dup := seen[s.Sequence]; dup {
			add("%s: sequence %d is also serves[%d]'s", where, s.Sequence, j)
			continue
		}
		seen[s.Sequence] = i
		o := v.bySeq[s.Sequence]
		if o == nil {
			if v.bySeq != nil {
				add("%s: its receipt (sequence %d) is not in the chain segment", where, s.Sequence)
			}
			continue
		}
		r := o.Receipt
		id, err := benchRequestID(w, s)
		switch {
		case err != nil:
			add("%s: %v", where, err)
		case r.RequestID != id:
			add("%s: receipt %d answers request %s, not this serve's %s", where, s.Sequence, r.RequestID, id)
		case r.Recipe != w.Model.Resolved:
			add("%s: receipt %d names recipe %s, the workload %s", where, s.Sequence, r.Recipe, w.Model.Resolved)
		case body.Idle.Backend != "" && r.Backend != body.Idle.Backend:
			add("%s: receipt %d was served by %s, the run's backend is %s", where, s.Sequence, r.Backend, body.Idle.Backend)
		}
	}

	// Every summary figure, recomputed by the function that made it.
	if v.bySeq != nil {
		got, err := summarise(w, body.Serves, v.bySeq, body.Idle)
		if err != nil {
			add("summary: %v", err)
		} else {
			problems = append(problems, diffSummary(body.Summary, got)...)
		}
	}

	// The section digests name a section altered with no evidence to
	// contradict it (the board, the trace, the workload's text).
	if got, err := sectionDigests(body); err != nil {
		add("digests: %v", err)
	} else {
		problems = append(problems, digestProblems(body.Digests, got)...)
	}
	problems = append(problems, checkCounts(body)...)

	// The steward's signature over the canonical body.
	if rep.Attestation == "" {
		add("attestation: none (the daemon was not asked or refused): nothing binds this report to the steward")
	} else if env, err := base64.StdEncoding.Strict().DecodeString(rep.Attestation); err != nil {
		add("attestation: not base64: %v", err)
	} else if a, err := api.OpenAttestation(env, v.key); err != nil {
		add("attestation: the signature does not verify under the steward key: %v", err)
	} else if sum, err := bodyDigest(body); err != nil {
		add("attestation: the body has no canonical form: %v", err)
	} else {
		v.att = a
		switch {
		case a.Purpose != benchFormat:
			add("attestation: signed for %q, not a %s", a.Purpose, benchFormat)
		case a.Steward != body.Steward:
			add("attestation: names steward %s, the report %s", a.Steward, body.Steward)
		case !bytes.Equal(a.SHA256, sum[:]):
			add("attestation: the steward signed body SHA-256 %x, the body's is %x: the body was altered after signing", a.SHA256, sum)
		}
	}
	return v, problems
}

// canonicalProblems checks that data is its own RFC 8785 form and one
// newline, naming the byte and the member where it is not. Bench and
// fleet reports share it.
func canonicalProblems(data []byte) []string {
	c, err := rag.Canonical(bytes.TrimSuffix(data, []byte("\n")))
	if err != nil {
		return []string{fmt.Sprintf("file: not canonical JSON: %v", err)}
	}
	if want := append(c, '\n'); !bytes.Equal(want, data) {
		i := 0
		for i < len(want) && i < len(data) && want[i] == data[i] {
			i++
		}
		return []string{fmt.Sprintf("file: not in canonical form (RFC 8785, one line) from byte %d, in %s", i, pathAt(data, int64(i)))}
	}
	return nil
}

// digestProblems compares the digests a report states with those of its
// sections as they are, naming each section that was altered.
func digestProblems(stated, got map[string]string) []string {
	var out []string
	for _, k := range sortedKeys(got) {
		switch s, ok := stated[k]; {
		case !ok:
			out = append(out, fmt.Sprintf("digests: no digest for the %s section", k))
		case s != got[k]:
			out = append(out, fmt.Sprintf("%s: the section was altered: its SHA-256 is %s, the report's digest says %s", k, got[k], s))
		}
	}
	for _, k := range sortedKeys(stated) {
		if _, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("digests: %q is not a section of the report", k))
		}
	}
	return out
}

// repName says which repetition a serve is.
func repName(s *serveRecord) string {
	if s.Warmup {
		return fmt.Sprintf("warm-up %d", s.Rep)
	}
	return fmt.Sprintf("rep %d", s.Rep)
}

// checkAnchor opens the checkpoint and checks that its head is the
// segment's last receipt.
func checkAnchor(ch chainSection, list []*steward.Opened, key ed25519.PublicKey) (*steward.SignedCheckpoint, error) {
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
func checkCounts(body *reportBody) []string {
	if !body.Status.Complete {
		if body.Status.Incomplete == "" {
			return []string{"status: incomplete without a reason"}
		}
		return nil
	}
	w := &body.Workload
	want := map[benchCell]int{}
	for _, c := range w.cells() {
		want[c] = w.Matrix.Repetitions
	}
	got, warm := map[benchCell]int{}, 0
	for _, s := range body.Serves {
		if s.Warmup {
			warm++
			continue
		}
		got[benchCell{s.PromptWords, s.MaxTokens}]++
	}
	var out []string
	if warm != w.Matrix.Warmup {
		out = append(out, fmt.Sprintf("serves: %d warm-up serves, the workload asks for %d", warm, w.Matrix.Warmup))
	}
	for _, c := range w.cells() {
		if got[c] != want[c] {
			out = append(out, fmt.Sprintf("serves: cell %s has %d serves, the workload asks for %d repetitions", c, got[c], want[c]))
		}
		delete(got, c)
	}
	for c, n := range got {
		out = append(out, fmt.Sprintf("serves: %d serves of %s, which is not in the workload's matrix", n, c))
	}
	return out
}

// diffSummary compares the stated summary with the recomputed one, naming
// each figure that differs by its cell and field.
func diffSummary(stated, got summary) []string {
	var out []string
	if d := diffJSON("summary.idle_uw", stated.IdleUW, got.IdleUW); d != "" {
		out = append(out, d)
	}
	if d := diffJSON("summary.idle_error_uw", stated.IdleErrorUW, got.IdleErrorUW); d != "" {
		out = append(out, d)
	}
	if len(stated.Cells) != len(got.Cells) {
		return append(out, fmt.Sprintf("summary: %d cells, the receipts give %d", len(stated.Cells), len(got.Cells)))
	}
	for i := range got.Cells {
		where := fmt.Sprintf("summary cell %s (summary.cells[%d])", benchCell{got.Cells[i].PromptWords, got.Cells[i].MaxTokens}, i)
		if d := diffJSON(where, stated.Cells[i], got.Cells[i]); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// diffJSON compares the JSON forms of stated and recomputed values and
// names the first member that differs, or returns "".
func diffJSON(where string, stated, got any) string {
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

func diffValue(where, path string, a, b any) string {
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
			if d := diffValue(where, path+"."+k, av[k], bv[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			break
		}
		for i := range av {
			if d := diffValue(where, fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]); d != "" {
				return d
			}
		}
		return ""
	}
	as, bs := show(a), show(b)
	if as == bs {
		return ""
	}
	return fmt.Sprintf("%s: the report says %s, the receipts give %s", field(), as, bs)
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// printVerified writes what a verified report proves.
func printVerified(w *strings.Builder, path string, v *verifiedReport) {
	b := &v.rep.Body
	warm := 0
	for _, s := range b.Serves {
		if s.Warmup {
			warm++
		}
	}
	status := "complete"
	if !b.Status.Complete {
		status = "INCOMPLETE: " + b.Status.Incomplete
	}
	fmt.Fprintf(w, "report %s: workload %q, %d serves (%d warm-up), %s\n", path, b.Workload.Name, len(b.Serves), warm, status)
	fmt.Fprintf(w, "board: %s, meshd %s\n", v.node.label(), v.node.Version)
	fmt.Fprintf(w, "steward: %s\n", b.Steward)
	if n := len(v.receipts); n > 0 {
		fmt.Fprintf(w, "chain: %d receipts, sequences %d..%d, every signature and link verified\n", n, b.Chain.First, b.Chain.First+uint64(n)-1)
	}
	if v.cp != nil {
		fmt.Fprintf(w, "checkpoint: count %d, head %s: anchors the last receipt\n", v.cp.Count, v.cp.Head)
	}
	fmt.Fprintf(w, "serves: every receipt answers its serve's request and names recipe %s\n", b.Workload.Model.Resolved)
	fmt.Fprintf(w, "summary: %d cells, every figure recomputed from the receipts\n", len(b.Summary.Cells))
	fmt.Fprintf(w, "digests: %d sections\n", len(b.Digests))
	if v.att != nil {
		fmt.Fprintf(w, "attestation: %s signed by the steward at %s over the body's SHA-256 %x\n", v.att.Purpose,
			time.UnixMilli(int64(v.att.SealedMs)).UTC().Format(time.RFC3339), v.att.SHA256)
	}
}
