package llama

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// BenchmarkDecodeMulti compares two ways of decoding four sequences at
// once on the benchmark model (benchShape) with every core (-cpu sets
// them): in turn, each state's Eval after the other's, as slots sharing a
// pool did, and together, one Decoder step for all four. It reports the
// aggregate decode tok/s of each (tokens of all four states over the
// time) and together ÷ in turn. Decode reads every weight once per step,
// so in turn costs about four steps' reading per token of each state and
// together about one.
//
// Each repetition decodes steps tokens per state both ways, in an order
// that alternates between repetitions, from the same cached prompts (the
// states are truncated back to them), so that both see the same share of
// a machine other work runs on and the same attention lengths; each
// b.Loop iteration runs reps repetitions, and the figures are medians
// over all of them (the ratio is the median of each repetition's own).
func BenchmarkDecodeMulti(b *testing.B) {
	const nStates, steps, reps, promptN = 4, 8, 5, 16
	q8File := lazyQ8(b)
	var table []string
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_K} {
		b.Run(typ.String(), func(b *testing.B) {
			m, why := benchModel(b, typ, q8File)
			if m == nil {
				table = append(table, fmt.Sprintf("%-5s skipped: %s", typ, why))
				b.Skipf("%s skipped: %s", typ, why)
			}
			pool := kernels.NewPool(0)
			defer pool.Close()
			ctx := context.Background()
			states := make([]*State, nStates)
			first := make([]int, nStates)
			for i := range states {
				st, err := m.NewState(promptN+steps+1, pool)
				if err != nil {
					b.Fatal(err)
				}
				p := testPrompt(promptN, m.Vocab)
				p[0] = 1 + i
				l, err := st.EvalBatch(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				states[i], first[i] = st, Argmax(l)
			}
			dec := m.NewDecoder(pool)
			toks := make([]int, nStates)
			// inTurn and together each decode steps tokens per state from
			// the prompts and return the seconds taken.
			inTurn := func() float64 {
				copy(toks, first)
				t := time.Now()
				for range steps {
					for i, st := range states {
						l, err := st.Eval(toks[i])
						if err != nil {
							b.Fatal(err)
						}
						toks[i] = Argmax(l)
					}
				}
				el := time.Since(t).Seconds()
				for _, st := range states {
					st.Truncate(promptN)
				}
				return el
			}
			together := func() float64 {
				copy(toks, first)
				t := time.Now()
				for range steps {
					out, err := dec.Eval(ctx, states, toks)
					if err != nil {
						b.Fatal(err)
					}
					for i, l := range out {
						toks[i] = Argmax(l)
					}
				}
				el := time.Since(t).Seconds()
				for _, st := range states {
					st.Truncate(promptN)
				}
				return el
			}
			inTurn() // warm up both, and the Decoder's scratch
			together()
			const tokens = nStates * steps
			var turn, tog, ratio []float64
			rep := 0
			for b.Loop() {
				for range reps {
					var a, c float64
					if rep%2 == 0 {
						a = inTurn()
						c = together()
					} else {
						c = together()
						a = inTurn()
					}
					rep++
					turn, tog = append(turn, tokens/a), append(tog, tokens/c)
					ratio = append(ratio, a/c)
				}
			}
			t, g, r := median(turn), median(tog), median(ratio)
			b.ReportMetric(t, "in-turn-tok/s")
			b.ReportMetric(g, "together-tok/s")
			b.ReportMetric(r, "together/in-turn")
			b.ReportMetric(float64(len(ratio)), "reps")
			table = append(table, fmt.Sprintf("%-5s %10.2f %10.2f %8.2f %5d", typ, t, g, r, len(ratio)))
		})
	}
	// Printed: the log of a benchmark that has sub-benchmarks is not.
	fmt.Printf("%d states, %d decode steps each per repetition after a %d-token prompt, %d threads; medians\n"+
		"type  in-turn/s together/s   ratio  reps\n%s\n",
		nStates, steps, promptN, runtime.GOMAXPROCS(0), strings.Join(table, "\n"))
}
