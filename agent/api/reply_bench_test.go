package api

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"meshd/agent"
	"meshd/steward"
	"meshd/wire"
)

// sealedForReply seals a receipt shaped as a serve's (route candidates,
// metering, a ceiling) for the reply encoding's tests.
func sealedForReply(t testing.TB) *steward.Sealed {
	t.Helper()
	k, err := steward.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := steward.OpenLog(context.Background(), filepath.Join(t.TempDir(), "r"), steward.LogOptions{Key: k, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	st := steward.New(k, l, steward.Options{})
	sd, err := st.Seal(context.Background(), steward.Draft{
		Request: wire.ContentOf([]byte("request")), Backend: "gguf", Recipe: "mesh-gguf/v1:model=tiny",
		Route: "gguf: cheapest of 1 admissible", Outcome: wire.ServeOutcome{TokensIn: 23, TokensOut: 4, TokensAccepted: 4},
		Floor: wire.F1, Served: wire.F1, Energy: wire.Estimated(1080),
		Metering:   wire.Metering{Meter: steward.EstimatorMeter, Kind: wire.KindEstimator, WindowNs: 210_000, ServeNs: 200_000},
		Candidates: []steward.Candidate{{Backend: "gguf", Fidelity: wire.F1, EstTotalUJ: 1080, Verdict: steward.VerdictAdmissible}},
		CeilingUJ:  5_000_000,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sd
}

// BenchmarkReceiptJSON is the receipt's part of a serve's reply encoded
// as Fields against the same fields as a plain map[string]any (the
// reflective encoding it replaces), in interleaved rounds; reported: each
// one's median and their ratio.
func BenchmarkReceiptJSON(b *testing.B) {
	sd := sealedForReply(b)
	m := ReceiptFields(sd.Receipt)
	enc := func(v any) {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			b.Fatal(err)
		}
	}
	const perRound = 200
	round := func(v any) float64 {
		t := time.Now()
		for range perRound {
			enc(v)
		}
		return float64(time.Since(t).Nanoseconds()) / perRound
	}
	var asMap, asFields []float64
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			asMap, asFields = append(asMap, round(m)), append(asFields, round(Fields(m)))
		} else {
			asFields, asMap = append(asFields, round(Fields(m))), append(asMap, round(m))
		}
	}
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	mm, fm := med(asMap), med(asFields)
	b.ReportMetric(mm/1e3, "µs/map")
	b.ReportMetric(fm/1e3, "µs/fields")
	b.ReportMetric(fm/mm, "fields/map")
}

// BenchmarkServeReply is a serve's reply written straight from the
// receipt (appendServeReply) against encoding/json's encoding of the same
// reply, in interleaved rounds; reported: each one's median and their
// ratio.
func BenchmarkServeReply(b *testing.B) {
	sd := sealedForReply(b)
	resp := &agent.Response{Sealed: sd, Output: []byte("four tokens out")}
	const perRound = 200
	round := func(f func()) float64 {
		t := time.Now()
		for range perRound {
			f()
		}
		return float64(time.Since(t).Nanoseconds()) / perRound
	}
	viaJSON := func() {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(newServeReply(resp, nil)); err != nil {
			b.Fatal(err)
		}
	}
	direct := func() {
		if _, err := appendServeReply(make([]byte, 0, 4096), resp, nil); err != nil {
			b.Fatal(err)
		}
	}
	var js, ds []float64
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			js, ds = append(js, round(viaJSON)), append(ds, round(direct))
		} else {
			ds, js = append(ds, round(direct)), append(js, round(viaJSON))
		}
	}
	med := func(x []float64) float64 { slices.Sort(x); return x[len(x)/2] }
	jm, dm := med(js), med(ds)
	b.ReportMetric(jm/1e3, "µs/encoding-json")
	b.ReportMetric(dm/1e3, "µs/direct")
	b.ReportMetric(dm/jm, "direct/encoding-json")
}
