package steward

import (
	"errors"
	"math/big"
	"path/filepath"
	"strings"
	"testing"

	"meshd/wire"
)

// spanIdleDraft is an idle record of the quiet stretch a span measured
// before a serve: 5000 µJ over its 10 ms window, 500 000 µW.
func spanIdleDraft() Draft {
	doc := IdleDoc{Backend: "ref-mid", DurationMs: 9, Source: IdleSourceSpan}.Encode()
	return RecordDraft(RecordIdle, doc, nil, "ref-mid", IdleRecipe, "idle: 9 ms on ina226@i2c-1:0x40 (span)", wire.Measured(5000, 0), hwMetering())
}

// idleServe is a serve subtracting idle power idle, taken from the idle
// record at sequence rec.
func idleServe(i int, idle, rec uint64) Draft {
	d := hwDraft(i)
	d.Metering.IdleUW = &idle
	d.IdleRecord = &rec
	return d
}

// IdlePowerUW is ⌊charged × 10⁹ ÷ x_window_ns⌋ exactly, whatever the
// provenance, for figures whose product passes 2⁶⁴.
func TestIdlePowerUW(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	for _, c := range []struct {
		name   string
		e      wire.Energy
		window uint64
	}{
		{"HwShunt", wire.Measured(3_700_000, 0), 2_001_000_000},
		{"ModelBased", wire.Modelled(nil, 3_700_001), 2_001_000_000},
		{"product past 2^64", wire.Measured(40_000_000_000, 0), 3_600_000_000_000},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := spanIdleDraft()
			d.Energy = c.e
			d.Metering.WindowNs, d.Metering.ServeNs = c.window, c.window-1000
			d.Metering.Samples = c.window/1_000_000 + 2
			d.Metering.FullScaleUW, d.Metering.ErrorUJ, d.Metering.AccuracyPPM = 0, c.e.UJ()/1000, 5_000
			r, err := st.Build(d, 0, nil, make([]byte, NonceSize), testClock())
			if err != nil {
				t.Fatal(err)
			}
			got, err := IdlePowerUW(r)
			want := new(big.Int).Div(new(big.Int).Mul(new(big.Int).SetUint64(c.e.UJ()), big.NewInt(1e9)), new(big.Int).SetUint64(c.window))
			if err != nil || got != want.Uint64() {
				t.Fatalf("IdlePowerUW %d (%v), want %s", got, err, want)
			}
		})
	}
	serve, err := st.Build(hwDraft(1), 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := IdlePowerUW(serve); err == nil {
		t.Fatal("a serve has an idle power")
	}
}

// x_idle_record travels with x_idle_uw and names an earlier receipt; on
// meshd's own receipts x_idle_uw always names its record. A receipt of
// another implementation may carry x_idle_uw alone.
func TestIdleRecordFieldRules(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	nonce := make([]byte, NonceSize)
	prev := &wire.ContentID{1}
	for _, c := range []struct {
		name string
		d    Draft
		seq  uint64
		mut  func(*Receipt)
		want Reason // "" seals and verifies
		seal bool   // refused by Check (seal) only, CheckConforming passes
	}{
		{"serve naming its idle record", idleServe(1, 500_000, 0), 1, nil, "", false},
		{"x_idle_record without x_idle_uw", idleServe(1, 500_000, 0), 1, func(r *Receipt) { r.IdleUW = nil }, RefusedMissingField, false},
		{"x_idle_record naming itself", idleServe(1, 500_000, 4), 4, nil, RefusedRecord, false},
		{"x_idle_record naming a later receipt", idleServe(1, 500_000, 9), 4, nil, RefusedRecord, false},
		{"x_idle_uw without its record on meshd's receipt", idleServe(1, 500_000, 0), 1, func(r *Receipt) { r.IdleRecord = nil }, RefusedMissingField, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := st.assemble(c.d, c.seq, prev, nonce, testClock())
			if err != nil {
				t.Fatal(err)
			}
			if c.mut != nil {
				c.mut(r)
			}
			sealErr, verifyErr := r.Check(), r.CheckConforming()
			switch {
			case c.want == "":
				if sealErr != nil || verifyErr != nil {
					t.Fatalf("refused: seal %v, verify %v", sealErr, verifyErr)
				}
			case ReasonOf(sealErr) != c.want:
				t.Fatalf("seal: %v, want [%s]", sealErr, c.want)
			case c.seal && verifyErr != nil:
				t.Fatalf("a verifier refuses what only meshd's own seal demands: %v", verifyErr)
			case !c.seal && ReasonOf(verifyErr) != c.want:
				t.Fatalf("verify: %v, want [%s]", verifyErr, c.want)
			}
			if c.want == "" {
				checkRoundTrip(t, r)
				core, _ := r.EncodeCore()
				back, err := DecodeCore(core)
				if err != nil || back.IdleRecord == nil || *back.IdleRecord != *r.IdleRecord || !strings.Contains(string(core), "x_idle_record") {
					t.Fatalf("x_idle_record lost in the core: %v", err)
				}
			}
		})
	}
	// An Estimator figure seals no idle power, so no record either.
	d := idleServe(1, 500_000, 0)
	d.Energy, d.Metering = wire.Estimated(10), wire.Metering{Meter: EstimatorMeter, Kind: wire.KindEstimator, WindowNs: 5, ServeNs: 5, IdleUW: d.Metering.IdleUW}
	r, err := st.Build(d, 1, prev, nonce, testClock())
	if err != nil || r.IdleUW != nil || r.IdleRecord != nil {
		t.Fatalf("Estimator with an idle record: %v, idle %v record %v", err, r.IdleUW, r.IdleRecord)
	}
}

// chainOf builds receipts from drafts at sequences 0, 1, …
func chainOf(t *testing.T, ds ...Draft) map[uint64]*Receipt {
	t.Helper()
	st := New(testKey(t), nil, Options{})
	out := map[uint64]*Receipt{}
	var prev *wire.ContentID
	for i, d := range ds {
		r, err := st.Build(d, uint64(i), prev, make([]byte, NonceSize), testClock())
		if err != nil {
			t.Fatalf("draft %d: %v", i, err)
		}
		out[uint64(i)] = r
		p := wire.ContentOf([]byte{byte(i)})
		prev = &p
	}
	return out
}

// The chain-level rule: x_idle_record names an idle record of the same
// meter whose power is x_idle_uw.
func TestCheckIdleLinks(t *testing.T) {
	other := spanIdleDraft()
	other.Metering.Meter = "ina226@i2c-1:0x41"
	for _, c := range []struct {
		name string
		ds   []Draft
		drop uint64 // a sequence left out of the segment, 0 for none
		from uint64 // the segment starts here
		want Reason
		msg  string
	}{
		{"linked", []Draft{spanIdleDraft(), idleServe(1, 500_000, 0), idleServe(2, 500_000, 0)}, 0, 0, "", ""},
		{"idle power is not the record's", []Draft{spanIdleDraft(), idleServe(1, 499_999, 0)}, 0, 0, RefusedEvidence, "not the power of idle record 0"},
		{"names a serve", []Draft{spanIdleDraft(), hwDraft(1), idleServe(2, 500_000, 1)}, 0, 0, RefusedRecord, "not an idle record"},
		{"names another meter's idle record", []Draft{other, idleServe(1, 500_000, 0)}, 0, 0, RefusedRecord, `of meter "ina226@i2c-1:0x41"`},
		{"names a record missing from the segment", []Draft{hwDraft(0), spanIdleDraft(), idleServe(2, 500_000, 1)}, 1, 0, RefusedRecord, "not in the segment"},
		{"names a record before the segment", []Draft{spanIdleDraft(), hwDraft(1), idleServe(2, 500_000, 0)}, 0, 1, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := chainOf(t, c.ds...)
			if c.drop != 0 {
				delete(rs, c.drop)
			}
			for s := range rs {
				if s < c.from {
					delete(rs, s)
				}
			}
			err := CheckIdleLinks(rs)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ReasonOf(err) != c.want || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%v, want [%s] naming %q", err, c.want, c.msg)
			}
		})
	}
}

// The log's walk follows the links: a log whose serve names its idle
// record verifies and reopens; one whose serve (signed by the steward's
// key, appended past Seal) states another idle power is damaged at that
// serve, for VerifyLog and OpenLog alike.
func TestLogVerifiesIdleLinks(t *testing.T) {
	k := testKey(t)
	for _, c := range []struct {
		name string
		idle uint64
		want Reason
	}{
		{"honest", 500_000, ""},
		{"idle power moved", 400_000, RefusedEvidence},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r")
			st, l, _ := openTestLog(t, dir, k, LogOptions{NoSync: true})
			if _, err := st.Seal(bg, spanIdleDraft()); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Seal(bg, idleServe(1, 500_000, 0)); err != nil {
				t.Fatal(err)
			}
			_, _, err := l.Append(bg, func(seq uint64, prev *wire.ContentID) ([]byte, error) {
				r, err := st.Build(idleServe(2, 500_000, 0), seq, prev, make([]byte, NonceSize), testClock())
				if err != nil {
					return nil, err
				}
				*r.IdleUW = c.idle
				core, err := r.EncodeCore()
				if err != nil {
					return nil, err
				}
				return Sign1(k, core)
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, verr := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
			l2, _, oerr := OpenLog(bg, dir, LogOptions{Key: k, Full: true})
			if oerr == nil {
				l2.Close()
			}
			if c.want == "" {
				if verr != nil || oerr != nil {
					t.Fatalf("verify %v, open %v", verr, oerr)
				}
				return
			}
			for stage, err := range map[string]error{"verify": verr, "open": oerr} {
				var de *DamageError
				if !errors.As(err, &de) || de.Sequence != 2 || ReasonOf(err) != c.want {
					t.Fatalf("%s: %v, want damage at sequence 2 [%s]", stage, err, c.want)
				}
			}
		})
	}
}

// An idle document says who took the window: absent for a client's
// request (the documents sealed before the key existed decode as before),
// "span" for a span's quiet stretch; any other source is refused.
func TestIdleDocSource(t *testing.T) {
	req := IdleDoc{Backend: "b", DurationMs: 2000}
	if strings.Contains(string(req.Encode()), "source") {
		t.Fatal("an on-request idle document carries a source")
	}
	span := IdleDoc{Backend: "b", DurationMs: 1234, Source: IdleSourceSpan}
	got, err := DecodeIdleDoc(span.Encode())
	if err != nil || got.Source != IdleSourceSpan || got.DurationMs != 1234 {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, src := range []string{"request", ""} {
		bad := encodeDoc([]docField{txt("mesh_record", RecordIdle), txt("backend", "b"), num("duration_ms", 1), txt("source", src)})
		if _, err := DecodeIdleDoc(bad); !errors.Is(err, ErrDocument) || !strings.Contains(err.Error(), "source") {
			t.Fatalf("source %q: %v", src, err)
		}
	}
}
