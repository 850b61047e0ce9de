package bench

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"meshd/agent/api/client"
	"meshd/steward"
)

// bigReport runs a 10 000-serve workload (one cell, 9 999 repetitions and
// a warm-up) against an in-process daemon through Run, so the report is
// built by the same code as every other: 10 002 receipts with the run's
// two records.
func bigReport(b *testing.B) []byte {
	b.Helper()
	s := startBenchStack(b, fmt.Sprintf(benchBackends, ""))
	c, err := client.New(s.addr)
	if err != nil {
		b.Fatal(err)
	}
	w, err := ParseWorkload([]byte(`
name = "ten thousand"
[model]
reference_work = 64
backend = "ref-bench"
[request]
fidelity_floor = 2
joule_ceiling_uj = 10000000
[matrix]
prompt_words = [4]
output_tokens = [2]
repetitions = 9999
warmup = 1
concurrency = 8
`))
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	rep, err := Run(context.Background(), c, w, Options{})
	if err != nil {
		b.Fatal(err)
	}
	data, err := Encode(rep)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("report: %d receipts, %d bytes, built in %v", len(rep.Body.Chain.Envelopes), len(data), time.Since(start).Round(time.Millisecond))
	return data
}

var (
	bigData []byte
	bigSigs []sigInput
)

// sigInput is one envelope's bare signature check: the key, the
// Sig_structure (RFC 9052 §4.4) and the signature.
type sigInput struct {
	key      ed25519.PublicKey
	tbs, sig []byte
}

// sigInputs takes every envelope of the report apart into its
// signature check, outside any timing.
func sigInputs(b *testing.B, data []byte) []sigInput {
	b.Helper()
	rep, err := Decode(data)
	if err != nil {
		b.Fatal(err)
	}
	key, _ := steward.ParsePublicKey(rep.Body.Steward)
	var out []sigInput
	for _, s := range rep.Body.Chain.Envelopes {
		env, _ := base64.StdEncoding.DecodeString(s)
		var tag cbor.Tag
		if err := cbor.Unmarshal(env, &tag); err != nil {
			b.Fatal(err)
		}
		parts, _ := tag.Content.([]any)
		prot, _ := parts[0].([]byte)
		payload, _ := parts[2].([]byte)
		sig, _ := parts[3].([]byte)
		tbs, err := cbor.Marshal([]any{"Signature1", prot, []byte{}, payload})
		if err != nil {
			b.Fatal(err)
		}
		if !ed25519.Verify(key, tbs, sig) {
			b.Fatal("the rebuilt Sig_structure does not verify: the baseline would not be the envelopes' check")
		}
		out = append(out, sigInput{key, tbs, sig})
	}
	return out
}

// BenchmarkVerify10k times bench.Verify of a 10 000-receipt report
// against the bare ed25519.Verify of its envelopes' Sig_structures, both
// on one goroutine, interleaved, and reports the median ratio (target
// under 2). Each iteration runs reps interleaved repetitions, so the
// medians have several samples even when the bench time allows one
// iteration (make bench's 1 s); which of the two goes first alternates,
// so neither always runs on a cache the other warmed. The report is
// built once, outside the timing.
func BenchmarkVerify10k(b *testing.B) {
	if bigData == nil {
		// Built once: the benchmark function runs again for each b.N.
		bigData = bigReport(b)
		bigSigs = sigInputs(b, bigData)
	}
	data, sigs := bigData, bigSigs
	verify := func() float64 {
		t := time.Now()
		_, problems := Verify(data, nil)
		d := float64(time.Since(t))
		if len(problems) > 0 {
			b.Fatalf("the report does not verify: %s", joined(problems))
		}
		return d
	}
	bare := func() float64 {
		t := time.Now()
		for _, s := range sigs {
			if !ed25519.Verify(s.key, s.tbs, s.sig) {
				b.Fatal("bare check failed")
			}
		}
		return float64(time.Since(t))
	}
	const reps = 5
	var ratios, verifyNs, bareNs []float64
	b.ResetTimer()
	for range b.N {
		for i := range reps {
			var v, s float64
			if i%2 == 0 {
				v, s = verify(), bare()
			} else {
				s, v = bare(), verify()
			}
			verifyNs, bareNs, ratios = append(verifyNs, v), append(bareNs, s), append(ratios, v/s)
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 { xs = slices.Clone(xs); slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(med(ratios), "verify/bare-sig")
	b.ReportMetric(med(verifyNs)/1e6, "verify-ms")
	b.ReportMetric(med(bareNs)/1e6, "bare-sig-ms")
	b.ReportMetric(float64(len(sigs)), "receipts")
	b.ReportMetric(float64(len(ratios)), "reps")
}
