package steward

import (
	"crypto/ed25519"
	"slices"
	"testing"
	"time"

	"meshd/wire"
)

// BenchmarkOpenEnvelopeVsVerify: OpenEnvelope against a bare
// ed25519.Verify of the same Sig_structure bytes with the same signature,
// both on one goroutine, in interleaved repetitions so that load from
// elsewhere hits both alike. open/verify is the median over repetitions of
// (bare time / open time), the fraction of the bare verification rate that
// full verification keeps. Target: >= 0.9.
func BenchmarkOpenEnvelopeVsVerify(b *testing.B) {
	const n = 256
	k := testKey(b)
	st := New(k, nil, Options{})
	var envs, msgs, sigs [][]byte
	var prev *wire.ContentID
	for i := 0; i < n; i++ {
		d := draft(i)
		if i%2 == 1 { // half metered, as a real log mixes them
			d.Energy = wire.Measured(uint64(5000+i), 4500)
			d.Metering = hwMetering()
		}
		r, err := st.Build(d, uint64(i), prev, make([]byte, NonceSize), testClock())
		if err != nil {
			b.Fatal(err)
		}
		core, _ := r.EncodeCore()
		env, err := Sign1(k, core)
		if err != nil {
			b.Fatal(err)
		}
		p, _ := parseEnvelope(env)
		envs = append(envs, env)
		msgs = append(msgs, appendSigStructure(nil, p.protected, p.payloadCB))
		sigs = append(sigs, p.sig)
		id := wire.ContentOf(env)
		prev = &id
	}
	pub := k.Public()
	ratios := make([]float64, 0, b.N)
	var bare, open time.Duration
	b.ResetTimer()
	verify := func() time.Duration {
		start := time.Now()
		for j := range msgs {
			if !ed25519.Verify(pub, msgs[j], sigs[j]) {
				b.Fatal("bare verify failed")
			}
		}
		return time.Since(start)
	}
	opens := func() time.Duration {
		start := time.Now()
		for j := range envs {
			if _, err := OpenEnvelope(envs[j], pub); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		// Alternate which runs first, so neither always inherits a warm
		// (or a throttled) core from the other.
		var tb, to time.Duration
		if i%2 == 0 {
			tb, to = verify(), opens()
		} else {
			to, tb = opens(), verify()
		}
		bare += tb
		open += to
		ratios = append(ratios, float64(tb)/float64(to))
	}
	b.StopTimer()
	slices.Sort(ratios)
	b.ReportMetric(float64(bare.Nanoseconds())/float64(n*b.N), "verify-ns/receipt")
	b.ReportMetric(float64(open.Nanoseconds())/float64(n*b.N), "open-ns/receipt")
	b.ReportMetric(ratios[len(ratios)/2], "open/verify")
}
