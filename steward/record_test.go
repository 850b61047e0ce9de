package steward

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"meshd/wire"
)

func u64(v uint64) *uint64 { return &v }

func idleDraft(run *uint64) Draft {
	doc := IdleDoc{Backend: "ref-mid", DurationMs: 2000, Run: run}.Encode()
	m := hwMetering()
	return RecordDraft(RecordIdle, doc, run, "ref-mid", IdleRecipe, "idle: 2000 ms on ina226@i2c-1:0x40", wire.Measured(5000, 0), m)
}

func openDoc() RunOpenDoc {
	return RunOpenDoc{WorkloadSHA256: strings.Repeat("ab", 32), Repetitions: 4, ServesDeclared: 8, Harness: "meshctl v1",
		Caller: "lab-a", Board: `{"arch":"arm64","cores":4}`, Version: "v0.1", Meters: `[{"name":"vdd"}]`}
}

// A chain of records and serves seals, reopens and decodes to the same
// fields: the run's serves and records carry x_run, the run-open none.
func TestRecordsSealAndOpen(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r"), k, LogOptions{NoSync: true})
	defer l.Close()
	ctx := context.Background()
	od := openDoc()
	open, err := st.Seal(ctx, RunRecordDraft(RecordRunOpen, od.Encode(), nil, RunRoute(RecordRunOpen, &od, nil)))
	if err != nil {
		t.Fatal(err)
	}
	run := open.Receipt.Sequence
	serve := hwDraft(1)
	serve.Run = &run
	sv, err := st.Seal(ctx, serve)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := st.Seal(ctx, idleDraft(&run))
	if err != nil {
		t.Fatal(err)
	}
	cd := RunCloseDoc{Run: run, ServesDeclared: 8, ServesSealed: 1, Serves: []uint64{sv.Receipt.Sequence}, Idle: []uint64{idle.Receipt.Sequence},
		Status: RunIncomplete, Reason: "stopped"}
	cl, err := st.Seal(ctx, RunRecordDraft(RecordRunClose, cd.Encode(), &run, RunRoute(RecordRunClose, nil, &cd)))
	if err != nil {
		t.Fatal(err)
	}
	docs := [][]byte{od.Encode(), nil, idleDraftDoc(&run), cd.Encode()}
	for i, s := range []*Sealed{open, sv, idle, cl} {
		o, err := OpenEnvelope(s.Envelope, k.Public())
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		r := o.Receipt
		if (r.Run == nil) != (i == 0) || r.Run != nil && *r.Run != run {
			t.Fatalf("record %d: x_run %v", i, r.Run)
		}
		if docs[i] == nil {
			if r.Record != nil {
				t.Fatalf("a serve carries x_record %q", *r.Record)
			}
			continue
		}
		if r.Record == nil || r.TokensAccepted != 0 || r.UJPerAcceptedToken != nil || r.FidelityMet != 1 {
			t.Fatalf("record %d: %+v", i, r)
		}
		if err := CheckRecordDocument(r, docs[i]); err != nil {
			t.Fatalf("record %d document: %v", i, err)
		}
	}
	if *cl.Receipt.Record != RecordRunClose || cl.Receipt.Route != "run close 0: incomplete, 1 of 8 serves sealed" {
		t.Fatalf("run-close: %q %q", *cl.Receipt.Record, cl.Receipt.Route)
	}
	// A document of another record, or of another run, is not this one's.
	if err := CheckRecordDocument(idle.Receipt, IdleDoc{Backend: "ref-mid", DurationMs: 2000}.Encode()); !errors.Is(err, ErrDocument) {
		t.Fatalf("idle document without its run: %v", err)
	}
	if err := CheckRecordDocument(cl.Receipt, od.Encode()); !errors.Is(err, ErrDocument) {
		t.Fatalf("run-open document for a run-close: %v", err)
	}
}

func idleDraftDoc(run *uint64) []byte {
	return IdleDoc{Backend: "ref-mid", DurationMs: 2000, Run: run}.Encode()
}

// Every record rule refuses with its reason, at seal (Build) and at verify
// (a receipt built, altered, then checked as a verifier does).
func TestRecordRules(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	nonce := make([]byte, NonceSize)
	prev := &wire.ContentID{1}
	run := uint64(3)
	closeDoc := RunCloseDoc{Run: 3, ServesDeclared: 1, ServesSealed: 0, Status: RunIncomplete, Reason: "x"}.Encode()
	runOpen := RunRecordDraft(RecordRunOpen, openDoc().Encode(), nil, "run open")
	runClose := RunRecordDraft(RecordRunClose, closeDoc, &run, "run close")
	for _, tc := range []struct {
		name string
		d    Draft
		seq  uint64
		mut  func(*Receipt)
		want Reason
	}{
		{"idle valid", idleDraft(nil), 5, nil, ""},
		{"idle in a run", idleDraft(&run), 5, nil, ""},
		{"run-open valid", runOpen, 5, nil, ""},
		{"run-close valid", runClose, 5, nil, ""},
		{"serve in a run", func() Draft { d := hwDraft(1); d.Run = &run; return d }(), 5, nil, ""},
		{"unknown kind", idleDraft(nil), 5, func(r *Receipt) { s := "pause"; r.Record = &s }, RefusedFieldValue},
		{"record with tokens", idleDraft(nil), 5, func(r *Receipt) { r.TokensIn = 1 }, RefusedRecord},
		{"record with spec tokens", runOpen, 5, func(r *Receipt) { r.SpecProposed = 2 }, RefusedRecord},
		{"record with a floor", runOpen, 5, func(r *Receipt) { r.FidelityFloor = 1; r.FidelityMet = 1 }, RefusedRecord},
		{"record with fidelity unmet", runOpen, 5, func(r *Receipt) { r.FidelityMet = 0 }, RefusedRecord},
		{"record on a grant", runOpen, 5, func(r *Receipt) { g := strings.Repeat("0", 64); r.GrantID = &g }, RefusedRecord},
		{"idle as Estimator", idleDraft(nil), 5, func(r *Receipt) {
			r.EnergyProvenance, r.MeasuredUJ = "Estimator", nil
			e := EstimatorMeter
			r.Meter, r.MeterKind = &e, &e
			r.ErrorUJ, r.Samples, r.MaxGapNs, r.CoveredPPM, r.PeriodNs, r.AccuracyPPM, r.Shared = nil, nil, nil, nil, nil, nil, nil
			r.FullScaleUW = nil
		}, RefusedRecord},
		{"idle subtracting idle", idleDraft(nil), 5, func(r *Receipt) { r.IdleUW = u64(10) }, RefusedRecord},
		{"idle shared with a serve", func() Draft {
			d := idleDraft(nil)
			d.Energy = wire.Modelled(nil, 5000)
			d.Metering.Shared = 2
			return d
		}(), 5, nil, RefusedRecord},
		{"run-open with energy", runOpen, 5, func(r *Receipt) { r.EstimatedUJ = 1 }, RefusedRecord},
		{"run-open with a window", runOpen, 5, func(r *Receipt) { r.WindowNs, r.ServeNs = u64(10), u64(10) }, RefusedRecord},
		{"run-open with x_run", runOpen, 5, func(r *Receipt) { r.Run = u64(2) }, RefusedRecord},
		{"run-close without x_run", runClose, 5, func(r *Receipt) { r.Run = nil }, RefusedRecord},
		{"x_run not earlier", runClose, 3, nil, RefusedRecord},
		{"serve with a later x_run", func() Draft { d := hwDraft(1); d.Run = u64(9); return d }(), 5, nil, RefusedRecord},
		{"record without metering", runOpen, 5, func(r *Receipt) {
			r.Meter, r.MeterKind, r.WindowNs, r.ServeNs, r.SealedUnixMs = nil, nil, nil, nil, nil
		}, RefusedMissingField},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := st.Build(tc.d, tc.seq, prev, nonce, testClock())
			if tc.mut == nil {
				if got := ReasonOf(err); got != tc.want {
					t.Fatalf("Build: reason %q, want %q (%v)", got, tc.want, err)
				}
				if err == nil {
					checkRoundTrip(t, r)
				}
				return
			}
			if err != nil {
				t.Fatalf("base draft refused: %v", err)
			}
			tc.mut(r)
			if got := ReasonOf(r.CheckConforming()); got != tc.want {
				t.Fatalf("CheckConforming: reason %q, want %q (%v)", got, tc.want, r.CheckConforming())
			}
		})
	}
}

// checkRoundTrip encodes r and decodes it strictly: the new keys sit in
// the table's order, so the decoder reproduces the core byte for byte.
func checkRoundTrip(t *testing.T, r *Receipt) {
	t.Helper()
	core, err := r.EncodeCore()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeCore(core)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	again, _ := back.EncodeCore()
	if !bytes.Equal(core, again) {
		t.Fatal("the core does not re-encode to itself")
	}
	if (back.Record == nil) != (r.Record == nil) || (back.Run == nil) != (r.Run == nil) {
		t.Fatalf("x_record/x_run lost: %+v", back)
	}
}

// Documents decode only from their one deterministic encoding, and a
// run-close must agree with itself.
func TestRecordDocuments(t *testing.T) {
	od := openDoc()
	if got, err := DecodeRunOpenDoc(od.Encode()); err != nil || got != od {
		t.Fatalf("run-open round trip: %+v %v", got, err)
	}
	run := uint64(4)
	id := IdleDoc{Backend: "b", DurationMs: 7, Run: &run}
	if got, err := DecodeIdleDoc(id.Encode()); err != nil || got.Backend != "b" || got.DurationMs != 7 || *got.Run != 4 {
		t.Fatalf("idle round trip: %+v %v", got, err)
	}
	good := RunCloseDoc{Run: 2, ServesDeclared: 2, ServesSealed: 2, Serves: []uint64{3, 5}, Idle: []uint64{4}, Status: RunComplete}
	if got, err := DecodeRunCloseDoc(good.Encode()); err != nil || got.ServesSealed != 2 || len(got.Idle) != 1 {
		t.Fatalf("run-close round trip: %+v %v", got, err)
	}
	// The machine state at open and close is carried as the text the
	// daemon wrote, and is optional: a document without it has no key.
	const state = `{"cpus":[{"cpu":0,"governor":"performance"}],"thermal":[]}`
	od.State = state
	if got, err := DecodeRunOpenDoc(od.Encode()); err != nil || got != od || !bytes.Contains(od.Encode(), []byte("state")) {
		t.Fatalf("run-open with state: %+v %v", got, err)
	}
	withState := good
	withState.State = state
	if got, err := DecodeRunCloseDoc(withState.Encode()); err != nil || got.State != state {
		t.Fatalf("run-close with state: %+v %v", got, err)
	}
	if bytes.Contains(good.Encode(), []byte("state")) {
		t.Fatal("a run-close without state encodes a state key")
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"idle as run-open", id.Encode()},
		{"an empty state", encodeDoc([]docField{txt("mesh_record", RecordRunClose), num("run", 2), num("serves_declared", 0), num("serves_sealed", 0),
			list("serves", nil), list("idle", nil), txt("status", RunComplete), txt("state", "")})},
		{"a state that is not text", encodeDoc([]docField{txt("mesh_record", RecordRunClose), num("run", 2), num("serves_declared", 0), num("serves_sealed", 0),
			list("serves", nil), list("idle", nil), txt("status", RunComplete), num("state", 1)})},
		{"complete short of serves", RunCloseDoc{Run: 2, ServesDeclared: 3, ServesSealed: 2, Serves: []uint64{3, 5}, Status: RunComplete}.Encode()},
		{"complete with a reason", RunCloseDoc{Run: 2, ServesDeclared: 2, ServesSealed: 2, Serves: []uint64{3, 5}, Status: RunComplete, Reason: "r"}.Encode()},
		{"incomplete without a reason", RunCloseDoc{Run: 2, ServesDeclared: 3, ServesSealed: 2, Serves: []uint64{3, 5}, Status: RunIncomplete}.Encode()},
		{"count disagrees with list", RunCloseDoc{Run: 2, ServesDeclared: 3, ServesSealed: 3, Serves: []uint64{3, 5}, Status: RunComplete}.Encode()},
		{"serves out of order", RunCloseDoc{Run: 2, ServesDeclared: 2, ServesSealed: 2, Serves: []uint64{5, 3}, Status: RunComplete}.Encode()},
		{"serve before the run", RunCloseDoc{Run: 2, ServesDeclared: 1, ServesSealed: 1, Serves: []uint64{1}, Status: RunComplete}.Encode()},
		{"unknown status", RunCloseDoc{Run: 2, ServesDeclared: 0, Status: "done"}.Encode()},
		{"trailing byte", append(good.Encode(), 0)},
		{"unknown key", encodeDoc([]docField{txt("mesh_record", RecordRunClose), num("run", 2), num("serves_declared", 0), num("serves_sealed", 0),
			list("serves", nil), list("idle", nil), txt("status", RunComplete), txt("vendor", "x")})},
	} {
		if _, err := DecodeRunCloseDoc(tc.b); !errors.Is(err, ErrDocument) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// A non-shortest integer is a second encoding of the same document.
	b := IdleDoc{Backend: "b", DurationMs: 7}.Encode()
	i := bytes.Index(b, []byte("duration_ms")) + len("duration_ms")
	padded := append(append(append([]byte{}, b[:i]...), 0x18, 7), b[i+1:]...)
	if _, err := DecodeIdleDoc(padded); !errors.Is(err, ErrDocument) {
		t.Errorf("padded integer: %v", err)
	}
}
