package llama

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// damped is a synthetic model whose blocks from keep on write only eps
// times their usual output into the residual stream (attn_output and
// ffn_down scaled): a draft of its first keep blocks then agrees with it
// more the smaller eps is, all the way at 0. It returns the target and
// that draft.
func damped(t testing.TB, s gguf.Shape, seed uint64, keep int, eps float32) (target, draft *Model) {
	t.Helper()
	f := synthFile(t, s, seed)
	var w gguf.Writer
	for _, kv := range f.KV {
		w.AddKV(kv.Key, kv.Value)
	}
	for _, ti := range f.Tensors {
		data := f.TensorData(ti)
		var layer int
		if n, _ := fmt.Sscanf(ti.Name, "blk.%d.", &layer); n == 1 && layer >= keep &&
			(strings.HasSuffix(ti.Name, ".attn_output.weight") || strings.HasSuffix(ti.Name, ".ffn_down.weight")) {
			x, err := gguf.Decode(ti.Type, data, int(ti.Elements()))
			if err != nil {
				t.Fatal(err)
			}
			for i := range x {
				x[i] *= eps
			}
			if data, err = gguf.Encode(ti.Type, x); err != nil {
				t.Fatal(err)
			}
		}
		w.AddTensor(ti.Name, ti.Type, ti.Dims, func() ([]byte, error) { return data, nil })
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if target, err = Load(g); err != nil {
		t.Fatal(err)
	}
	return target, truncated(t, g, keep)
}

// BenchmarkSpeculative decodes 64 tokens greedily with and without a
// draft of the target's first block, on targets whose later blocks are
// damped by eps (eps 0: the draft is exact; 1: an ordinary truncated
// copy), in interleaved repetitions on the same states. It reports each
// mode's median tokens/s and their ratio (speedup), the share of
// proposals accepted, tokens delivered per target pass, and µJ per
// token at a constant 10 W drawn for the decode's wall time (what a
// simulated meter with a constant load measures): per delivered token for
// both modes, and per accepted proposal, the receipt's wedge under
// speculation (PROFILE §12).
// The tokens of both modes are checked equal each repetition.
func BenchmarkSpeculative(b *testing.B) {
	shape := gguf.Shape{Layers: 8, Dim: 512, Heads: 8, KVHeads: 4, FF: 1536, Vocab: 4096, Ctx: 512, Type: gguf.Q8_0, SeparateOutput: true}
	const reps, nPredict, watts = 5, 64, 10.0
	ctx := context.Background()
	for _, eps := range []float32{0, 0.02, 0.1, 1} {
		b.Run(fmt.Sprintf("eps=%g", eps), func(b *testing.B) {
			target, draft := damped(b, shape, 3, 1, eps)
			pool := kernels.NewPool(0)
			defer pool.Close()
			plainSt, _ := target.NewState(256, pool)
			specSt, _ := target.NewState(256, pool)
			ds, _ := draft.NewState(256, pool)
			d, err := NewDrafter(target, ds, SpecParams{Max: 8, PMin: 0})
			if err != nil {
				b.Fatal(err)
			}
			req := Request{Prompt: testPrompt(16, target.Vocab), NPredict: nPredict, IgnoreEOS: true}
			sreq := req
			sreq.Draft = d
			var plainTPS, specTPS, ratios []float64
			var proposed, accepted, passes, delivered, plainToks, specToks int
			var plainSec, specSec float64
			for b.Loop() {
				for range reps {
					p, err := plainSt.Generate(ctx, req)
					if err != nil {
						b.Fatal(err)
					}
					s, err := specSt.Generate(ctx, sreq)
					if err != nil {
						b.Fatal(err)
					}
					if !slices.Equal(p.Tokens, s.Tokens) {
						b.Fatalf("speculative tokens %v, plain %v", s.Tokens, p.Tokens)
					}
					plainToks, specToks = plainToks+len(p.Tokens), specToks+len(s.Tokens)
					plainSec, specSec = plainSec+p.PredictDur.Seconds(), specSec+s.PredictDur.Seconds()
					pt := float64(len(p.Tokens)) / p.PredictDur.Seconds()
					st := float64(len(s.Tokens)) / s.PredictDur.Seconds()
					plainTPS, specTPS, ratios = append(plainTPS, pt), append(specTPS, st), append(ratios, st/pt)
					// Each pass delivers its accepted proposals and one
					// token of the target's; the first token comes from
					// the prompt.
					proposed, accepted = proposed+s.DraftN, accepted+s.DraftAccepted
					delivered += len(s.Tokens) - 1
					passes += len(s.Tokens) - 1 - s.DraftAccepted
				}
			}
			pt, st := median(plainTPS), median(specTPS)
			b.ReportMetric(pt, "plain-tok/s")
			b.ReportMetric(st, "spec-tok/s")
			b.ReportMetric(median(ratios), "speedup")
			b.ReportMetric(float64(accepted)/float64(max(proposed, 1)), "accept-rate")
			b.ReportMetric(float64(delivered)/float64(max(passes, 1)), "tok/target-pass")
			// µJ at a constant draw over each mode's decoding time.
			b.ReportMetric(watts*1e6*plainSec/float64(plainToks), "plain-uJ/tok")
			b.ReportMetric(watts*1e6*specSec/float64(specToks), "spec-uJ/tok")
			if accepted > 0 {
				// The receipt's wedge: over accepted proposals, not
				// over delivered tokens.
				b.ReportMetric(watts*1e6*specSec/float64(accepted), "spec-uJ/accepted")
			}
			b.ReportMetric(float64(pool.Workers()), "threads")
		})
	}
}
