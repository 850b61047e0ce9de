package llama

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// BenchmarkKVCacheTypes runs a 256-token prompt and 32 decode steps on a
// SmolLM-135M-shaped Q8_0 model with a float32 and a Q8_0 KV cache,
// interleaved, and reports each one's prompt and decode speed (median of
// the repetitions), the Q8_0 cache's speed as a ratio to the float32
// one's in the same run, and both caches' sizes.
func BenchmarkKVCacheTypes(b *testing.B) {
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, gguf.SmolLM135M, 1); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	m, err := Load(f)
	if err != nil {
		b.Fatal(err)
	}
	pool := kernels.NewPool(0)
	defer pool.Close()
	const nPrompt, nDecode, nCtx = 256, 32, 320
	opts := []StateOptions{{}, {CacheK: KVQ8_0, CacheV: KVQ8_0}}
	states := make([]*State, len(opts))
	for i, o := range opts {
		if states[i], err = m.NewStateWith(nCtx, pool, o); err != nil {
			b.Fatal(err)
		}
	}
	prompt := testPrompt(nPrompt, m.Vocab)
	promptT := make([][]time.Duration, len(opts))
	decodeT := make([][]time.Duration, len(opts))
	for b.Loop() {
		for i, st := range states {
			st.Truncate(0)
			t0 := time.Now()
			logits, err := st.EvalBatch(context.Background(), prompt)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			tok := Argmax(logits)
			for range nDecode {
				logits, _ = st.Eval(tok)
				tok = Argmax(logits)
			}
			promptT[i] = append(promptT[i], t1.Sub(t0))
			decodeT[i] = append(decodeT[i], time.Since(t1))
		}
	}
	med := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2].Seconds()
	}
	pf, pq := nPrompt/med(promptT[0]), nPrompt/med(promptT[1])
	df, dq := nDecode/med(decodeT[0]), nDecode/med(decodeT[1])
	b.ReportMetric(pf, "f32-prompt-t/s")
	b.ReportMetric(pq, "q8-prompt-t/s")
	b.ReportMetric(pq/pf, "q8/f32-prompt")
	b.ReportMetric(df, "f32-decode-t/s")
	b.ReportMetric(dq, "q8-decode-t/s")
	b.ReportMetric(dq/df, "q8/f32-decode")
	b.ReportMetric(float64(m.KVBytes(nCtx, opts[0]))/(1<<20), "f32-KV-MiB")
	b.ReportMetric(float64(m.KVBytes(nCtx, opts[1]))/(1<<20), "q8-KV-MiB")
}
