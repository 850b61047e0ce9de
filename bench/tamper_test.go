package bench

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"meshd/agent/api/client"
	boardstate "meshd/agent/board"
	"meshd/steward"
)

// tamperRun is a metered run with idle records before and after, a
// trace, and another caller that, while the run serves, opens and closes
// a run of its own (with an idle record and a serve) and takes an idle
// window outside any run: its records fall inside the segment, where a
// benchmarker could pick them up.
type tamperRun struct {
	key    ed25519.PublicKey
	rep    *Report // the run under test
	second *Report // a later run of the same workload on the same steward
	// The other caller's records, all inside rep's segment.
	otherOpen, otherClose, otherIdle, looseIdle RecordRef
	otherServe                                  uint64
}

func startTamperRun(t *testing.T) *tamperRun {
	t.Helper()
	s := meteredStack(t)
	other, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tamperRun{}
	ctx := context.Background()
	p := &hookProgress{onServed: func(n int) {
		if n != 4 {
			return
		}
		open, err := other.OpenRun(ctx, client.RunOpen{WorkloadSHA256: strings.Repeat("ab", 32), Repetitions: 1, ServesDeclared: 1, Harness: "another harness", Caller: "someone else"})
		if err != nil {
			t.Errorf("the other run: %v", err)
			return
		}
		run := open.Sequence
		idle, _, err := other.IdleRecord(ctx, "ref-bench", 0.05, &run)
		if err != nil {
			t.Errorf("the other run's idle: %v", err)
			return
		}
		sv, err := other.Serve(ctx, client.ServeRequest{Prompt: "someone else", MaxTokens: 2, Run: &run})
		if err != nil {
			t.Errorf("the other run's serve: %v", err)
			return
		}
		cl, err := other.CloseRun(ctx, run, "")
		if err != nil {
			t.Errorf("closing the other run: %v", err)
			return
		}
		loose, _, err := other.IdleRecord(ctx, "ref-bench", 0.05, nil)
		if err != nil {
			t.Errorf("an idle window outside any run: %v", err)
			return
		}
		ref := func(r *client.Record) RecordRef {
			return RecordRef{Sequence: r.Sequence, Document: base64.StdEncoding.EncodeToString(r.Document)}
		}
		tr.otherOpen, tr.otherIdle, tr.otherClose, tr.looseIdle = ref(open), ref(idle), ref(cl), ref(loose)
		tr.otherServe = sv.Receipt.Receipt.Sequence
	}}
	w := testWorkload(t, "[idle]\nbefore_seconds = 0.2\nafter_seconds = 0.2\n[trace]\ninterval_ms = 50\n")
	_, tr.rep = runToFile(t, s, w, true, p)
	_, tr.second = runToFile(t, s, w, true, nil)
	if tr.otherClose.Document == "" {
		t.Fatal("the other caller's run did not happen")
	}
	for _, r := range []*Report{tr.rep, tr.second} {
		for name, m := range map[string]*IdleMeasurement{"before": r.Body.Idle.Before, "after": r.Body.Idle.After} {
			if m == nil || m.Sequence == nil {
				t.Fatalf("the run sealed no idle record %s its serves: %+v", name, m)
			}
		}
	}
	if tr.key, err = steward.ParsePublicKey(tr.rep.Body.Steward); err != nil {
		t.Fatal(err)
	}
	return tr
}

// clone is a deep copy of a report, through its file form.
func clone(t *testing.T, r *Report) *Report {
	t.Helper()
	data, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rebuild does everything a benchmarker can after an edit: recompute the
// summary from the chain as it now is (with the steward's key, as verify
// would), recompute every digest and write the file canonically. There
// is no signature over the body to redo.
func rebuild(t *testing.T, r *Report, key ed25519.PublicKey) []byte {
	t.Helper()
	b := &r.Body
	if bySeq, _, err := openSegment(b.Chain, key); err == nil {
		if sum, err := Summarise(&b.Workload, b.Serves, bySeq, b.Idle); err == nil {
			b.Summary = sum
		}
	}
	var err error
	b.Digests = nil
	if b.Digests, err = sectionDigests(b); err != nil {
		t.Fatal(err)
	}
	data, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// envelopeIndex is the index in the chain section of receipt seq.
func envelopeIndex(b *Body, seq uint64) int { return int(seq - b.Chain.First) }

// reseal replaces receipt seq's envelope with one whose payload fn
// alters, signed with a key the benchmarker holds (not the steward's).
func reseal(t *testing.T, b *Body, seq uint64, fn func(map[string]any)) {
	t.Helper()
	i := envelopeIndex(b, seq)
	env, _ := base64.StdEncoding.DecodeString(b.Chain.Envelopes[i])
	payload, _, err := steward.OpenTrusted(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := cbor.Unmarshal(payload, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	em, _ := cbor.CoreDetEncOptions().EncMode()
	p, err := em.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	k, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	out, err := steward.Sign1(k, p)
	if err != nil {
		t.Fatal(err)
	}
	b.Chain.Envelopes[i] = base64.StdEncoding.EncodeToString(out)
}

// addUJ adds uj to a receipt payload's charged figure.
func addUJ(uj uint64) func(map[string]any) {
	return func(m map[string]any) {
		for _, k := range []string{"measured_uj", "estimated_uj"} {
			if v, ok := m[k].(uint64); ok && v > 0 {
				m[k] = v + uj
			}
		}
	}
}

// worstRep is, per measured cell, the serve with the highest gross
// figure: the repetition a benchmarker would rather leave out.
func worstRep(t *testing.T, r *Report, key ed25519.PublicKey) map[int]bool {
	t.Helper()
	bySeq, _, err := openSegment(r.Body.Chain, key)
	if err != nil {
		t.Fatal(err)
	}
	worst := map[Cell]int{}
	val := map[Cell]uint64{}
	for i, s := range r.Body.Serves {
		if s.Warmup {
			continue
		}
		e, _ := bySeq[s.Sequence].Receipt.Energy()
		c := Cell{s.PromptWords, s.MaxTokens}
		if _, ok := worst[c]; !ok || e.UJ() > val[c] {
			worst[c], val[c] = i, e.UJ()
		}
	}
	out := map[int]bool{}
	for _, i := range worst {
		out[i] = true
	}
	return out
}

func dropServes(b *Body, drop func(i int, s Serve) bool) {
	var keep []Serve
	for i, s := range b.Serves {
		if !drop(i, s) {
			keep = append(keep, s)
		}
	}
	b.Serves = keep
}

// TestTamperAsBenchmarker re-runs the tamper table as the person who
// runs the daemon: each edit is followed by everything they can do
// (recompute the summary and digests, rebuild the file canonically) and
// verify must still name the place. It prints the table.
func TestTamperAsBenchmarker(t *testing.T) {
	tr := startTamperRun(t)
	base := tr.rep.Body
	idleBefore, idleAfter := *base.Idle.Before.Sequence, *base.Idle.After.Sequence
	open, closeSeq := base.Run.Open.Sequence, base.Run.Close.Sequence
	at := func(name string, seq uint64) string { return fmt.Sprintf("%s (receipt sequence %d)", name, seq) }
	env := func(seq uint64) string {
		return fmt.Sprintf("chain.envelopes[%d] (receipt sequence %d)", envelopeIndex(&base, seq), seq)
	}
	firstMeasured := 0
	for i, s := range base.Serves {
		if !s.Warmup {
			firstMeasured = i
			break
		}
	}
	worst := worstRep(t, tr.rep, tr.key)
	var tamperRows [][3]string
	u64 := func(v uint64) *uint64 { return &v }
	board := func(from, to string) func(*testing.T, *Body) {
		return func(t *testing.T, b *Body) {
			s := string(b.Board)
			if !strings.Contains(s, from) {
				t.Fatalf("no %q in the board section %s", from, s)
			}
			b.Board = []byte(strings.Replace(s, from, to, 1))
		}
	}
	for _, tc := range []struct {
		name  string
		edit  func(*testing.T, *Body)
		place string // the first problem begins with it
	}{
		{"idle before energy_uj +1 J (resealed)", func(t *testing.T, b *Body) { reseal(t, b, idleBefore, addUJ(1_000_000)) }, env(idleBefore)},
		{"idle before energy_uj +5 J (resealed)", func(t *testing.T, b *Body) { reseal(t, b, idleBefore, addUJ(5_000_000)) }, env(idleBefore)},
		{"idle after energy_uj +1 J (resealed)", func(t *testing.T, b *Body) { reseal(t, b, idleAfter, addUJ(1_000_000)) }, env(idleAfter)},
		{"idle after removed", func(t *testing.T, b *Body) {
			b.Idle.After = &IdleMeasurement{Seconds: 0.2, Error: "the meter measured nothing"}
		}, at("idle", idleAfter)},
		{"idle before taken from another run", func(t *testing.T, b *Body) {
			b.Idle.Before.Sequence, b.Idle.Before.Document = u64(tr.otherIdle.Sequence), tr.otherIdle.Document
		}, at("idle.before", tr.otherIdle.Sequence)},
		{"idle before taken from outside any run", func(t *testing.T, b *Body) {
			b.Idle.Before.Sequence, b.Idle.Before.Document = u64(tr.looseIdle.Sequence), tr.looseIdle.Document
		}, at("idle.before", tr.looseIdle.Sequence)},
		{"idle before and after swapped", func(t *testing.T, b *Body) { b.Idle.Before, b.Idle.After = b.Idle.After, b.Idle.Before }, at("idle.before", idleAfter)},
		{"the unfavourable repetition of every cell dropped, run marked incomplete", func(t *testing.T, b *Body) {
			dropServes(b, func(i int, _ Serve) bool { return worst[i] })
			b.Status.Complete, b.Status.Incomplete = false, "interrupted after 9 of 13 serves"
		}, "status"},
		{"the unfavourable repetition of every cell dropped", func(t *testing.T, b *Body) {
			dropServes(b, func(i int, _ Serve) bool { return worst[i] })
		}, "serves"},
		{"repetitions lowered to 2, the third dropped", func(t *testing.T, b *Body) {
			b.Workload.Matrix.Repetitions = 2
			dropServes(b, func(_ int, s Serve) bool { return !s.Warmup && s.Rep == 2 })
		}, at("run.open", open)},
		{"the whole chain of another run of the same steward", func(t *testing.T, b *Body) {
			o := tr.second.Body
			b.Chain, b.Run, b.Serves, b.Idle, b.Trace = o.Chain, o.Run, o.Serves, o.Idle, o.Trace
		}, "status.started_unix_ms"},
		{"the board's CPU model", board(`"cpu_model":"`, `"cpu_model":"Faster `), "board"},
		{"a meter's kind", board(`"kind":"`, `"kind":"hw`), "board"},
		{"a meter's accuracy", board(`"declared_accuracy_ppm":`, `"declared_accuracy_ppm":1`), "board"},
		{"the meshd version", board(`"version":"`, `"version":"v9 `), "board"},
		{"the trace", func(t *testing.T, b *Body) { b.Trace.Samples = b.Trace.Samples[1:] }, "trace"},
		{"the machine state at open (a cooler zone added)", func(t *testing.T, b *Body) {
			if b.State == nil || b.State.Open == nil {
				t.Fatal("the report holds no machine state at open")
			}
			st := *b.State.Open
			cool := int64(35_000)
			st.Thermal = append(slices.Clone(st.Thermal), boardstate.Zone{Zone: "thermal_zone9", Type: "cpu", MilliC: &cool})
			b.State = &StateSection{Open: &st, Close: b.State.Close}
		}, "state.open"},
		{"the machine state at close removed", func(t *testing.T, b *Body) {
			if b.State == nil || b.State.Close == nil {
				t.Fatal("the report holds no machine state at close")
			}
			b.State = &StateSection{Open: b.State.Open}
		}, "state.close"},
		{"the workload description", func(t *testing.T, b *Body) { b.Workload.Description = "a faster board" }, at("run.open", open)},
		{"the warm-up count", func(t *testing.T, b *Body) {
			b.Workload.Matrix.Warmup = 0
			dropServes(b, func(_ int, s Serve) bool { return s.Warmup })
		}, at("run.open", open)},
		{"the end time", func(t *testing.T, b *Body) { b.Status.EndedUnixMs += 60_000 }, "status.ended_unix_ms"},
		{"the harness", func(t *testing.T, b *Body) { b.Status.Harness = "meshctl v9" }, at("run.open", open)},
		{"run-open taken from another run", func(t *testing.T, b *Body) { b.Run.Open = tr.otherOpen }, at("run.open", tr.otherOpen.Sequence)},
		{"run-open removed", func(t *testing.T, b *Body) {
			b.Chain.First++
			b.Chain.Envelopes = b.Chain.Envelopes[1:]
			b.Run.Open = RecordRef{Sequence: b.Chain.First}
		}, at("run.open", open+1)},
		{"run-close altered (complete with a serve fewer)", func(t *testing.T, b *Body) {
			d, _ := steward.DecodeRunCloseDoc(mustB64(t, b.Run.Close.Document))
			d.Serves, d.ServesSealed, d.ServesDeclared = d.Serves[1:], d.ServesSealed-1, d.ServesDeclared-1
			b.Run.Close.Document = base64.StdEncoding.EncodeToString(d.Encode())
		}, at("run.close", closeSeq)},
		{"run-close removed (segment cut before it)", func(t *testing.T, b *Body) {
			b.Chain.Envelopes = b.Chain.Envelopes[:envelopeIndex(b, closeSeq)]
			b.Run.Close = RecordRef{}
		}, "chain.checkpoint"},
		{"run-close taken from another run", func(t *testing.T, b *Body) { b.Run.Close = tr.otherClose }, at("run.close", tr.otherClose.Sequence)},
		{"a serve pointed at another caller's receipt", func(t *testing.T, b *Body) { b.Serves[firstMeasured].Sequence = tr.otherServe },
			fmt.Sprintf("serves[%d]", firstMeasured)},
		{"another caller's receipts hidden from the count", func(t *testing.T, b *Body) { b.Run.Others = 0 }, "run.others"},
	} {
		r := clone(t, tr.rep)
		tc.edit(t, &r.Body)
		data := rebuild(t, r, tr.key)
		_, problems := Verify(data, nil)
		got := "undetected"
		if len(problems) > 0 {
			got = problems[0].String()
		}
		tamperRows = append(tamperRows, [3]string{tc.name, tc.place, got})
		t.Run(tc.name, func(t *testing.T) {
			if len(problems) == 0 {
				t.Fatal("the edited report verifies")
			}
			if !strings.HasPrefix(problems[0].String(), tc.place) {
				t.Fatalf("first problem %q, want it to name %q; all:\n%s", problems[0], tc.place, joined(problems))
			}
		})
	}
	undetected := 0
	var b strings.Builder
	fmt.Fprintf(&b, "tamper table as the benchmarker (edit, then summary, digests and file rebuilt; no signature to redo):\n")
	for i, row := range tamperRows {
		if row[2] == "undetected" {
			undetected++
		}
		fmt.Fprintf(&b, "%2d  %-72s  %s\n", i+1, row[0], shorten(row[2], 150))
	}
	fmt.Fprintf(&b, "%d edits, %d undetected", len(tamperRows), undetected)
	t.Log(b.String())
	if len(tamperRows) < 27 || undetected != 0 {
		t.Fatalf("%d edits, %d undetected", len(tamperRows), undetected)
	}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInterruptedRun: a run stopped mid-way is closed by the daemon as
// incomplete, with the harness's reason, and verify reports it so.
func TestInterruptedRun(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &hookProgress{onServed: func(n int) {
		if n == 5 {
			cancel()
		}
	}}
	rep, err := Run(ctx, c, testWorkload(t, ""), Options{Progress: p})
	if !errors.Is(err, ErrInterrupted) || rep == nil {
		t.Fatalf("an interrupted run: %v", err)
	}
	data, err := Encode(rep)
	if err != nil {
		t.Fatal(err)
	}
	v, problems := Verify(data, nil)
	if len(problems) > 0 {
		t.Fatalf("the interrupted run's report: %s", joined(problems))
	}
	if v.Close.Status != steward.RunIncomplete || rep.Body.Status.Complete || !strings.HasPrefix(rep.Body.Status.Incomplete, "interrupted after 5 of 13 serves") ||
		v.Close.Reason != rep.Body.Status.Incomplete || v.Close.ServesSealed != uint64(len(rep.Body.Serves)) || len(rep.Body.Serves) < 5 {
		t.Fatalf("run-close %+v; status %+v with %d serves", v.Close, rep.Body.Status, len(rep.Body.Serves))
	}
	// Claiming it complete is named.
	r := clone(t, rep)
	r.Body.Status.Complete, r.Body.Status.Incomplete = true, ""
	if _, problems := Verify(rebuild(t, r, v.Key), nil); len(problems) == 0 || problems[0].Place != "status" {
		t.Fatalf("an interrupted run claimed complete: %s", joined(problems))
	}
}

// TestVerifyRefusesV1: a report of the earlier format, whose sections
// were vouched for only by a signature the daemon gave any caller, is
// refused by name.
func TestVerifyRefusesV1(t *testing.T) {
	_, problems := Verify([]byte(`{"attestation":"","body":{"format":"meshd-bench-report/v1"}}`+"\n"), nil)
	if len(problems) != 1 || !strings.Contains(problems[0].String(), "a meshd-bench-report/v1 bench report: this verifier reads meshd-bench-report/v2 only") {
		t.Fatalf("a v1 report: %s", joined(problems))
	}
}
