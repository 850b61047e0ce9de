package llama

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

type namedModel struct {
	name string
	m    *Model
}

// decoderModels are the weight types and architectures the Decoder must
// agree with Eval on: the float types, the 32-value quantised types, the
// K-quants (whose activations take the 256-value form), a K-quant
// mixture whose down projection falls back to 32-value types, and qwen2
// and llama with biases and rope factors.
func decoderModels(t *testing.T) []namedModel {
	var ms []namedModel
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.Q8_0, gguf.Q4_0} {
		s := small
		s.Type = typ
		m, _ := loadSynth(t, s, 51)
		ms = append(ms, namedModel{"llama-" + typ.String(), m})
	}
	k := gguf.Shape{Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FF: 512, Vocab: 400, Ctx: 64, Type: gguf.Q4_K, SeparateOutput: true}
	m, _ := loadSynth(t, k, 52)
	ms = append(ms, namedModel{"llama-q4_k", m})
	k.Mix, k.FF = gguf.MixQ4_K_M, 544 // down falls back to 32-value types
	m, _ = loadSynth(t, k, 53)
	ms = append(ms, namedModel{"llama-q4_k_m", m})
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.Q8_0} {
		s := small
		s.Type = typ
		m, _ := loadVariant(t, s, 54, variant{arch: "qwen2", biases: true})
		ms = append(ms, namedModel{"qwen2-" + typ.String(), m})
	}
	s := small
	s.Type = gguf.Q4_0
	m, _ = loadVariant(t, s, 55, variant{biases: true, ropeFactors: ropeFactors(small)})
	ms = append(ms, namedModel{"llama3-biases-" + s.Type.String(), m})
	return ms
}

// decoderPrompt is state i's prompt: lengths differ, so the states of a
// step sit at different positions, and so do the first tokens.
func decoderPrompt(i, vocab int) []int {
	p := testPrompt(3+2*i, vocab)
	p[0] = 1 + i
	return p
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestDecoderMatchesEval decodes greedily with states batched by a
// Decoder in several schedules and with each state alone through Eval:
// every step's logits must be the same bits. The schedules cover groups
// of two to nine (the multi-token kernels take tokens in groups, leaving
// a remainder to the one-token ones), states joining and leaving at
// different steps, a lone state, and the states in a different order at
// each step.
func TestDecoderMatchesEval(t *testing.T) {
	const nStates, steps = 9, 7
	schedules := []struct {
		name   string
		active func(i, step int) bool
	}{
		{"pair", func(i, _ int) bool { return i < 2 }},
		{"three", func(i, _ int) bool { return i < 3 }},
		{"four", func(i, _ int) bool { return i < 4 }},
		{"five", func(i, _ int) bool { return i < 5 }},
		{"nine", func(i, _ int) bool { return true }},
		{"lone", func(i, _ int) bool { return i == 4 }},
		// State i joins at step i%3 and leaves i%2 steps early.
		{"staggered", func(i, step int) bool { return step >= i%3 && step < steps-i%2 }},
	}
	ctx := context.Background()
	for _, mc := range decoderModels(t) {
		m := mc.m
		pool := kernels.NewPool(3)
		// want[i][k] is state i's logits after its k-th step alone.
		want := make([][][]float32, nStates)
		first := make([]int, nStates)
		for i := range nStates {
			st, _ := m.NewState(40, pool)
			l, err := st.EvalBatch(ctx, decoderPrompt(i, m.Vocab))
			if err != nil {
				t.Fatal(err)
			}
			first[i] = Argmax(l)
			for tok := first[i]; len(want[i]) < steps; {
				l, err := st.Eval(tok)
				if err != nil {
					t.Fatal(err)
				}
				want[i] = append(want[i], slices.Clone(l))
				tok = Argmax(l)
			}
		}
		for _, sc := range schedules {
			dec := m.NewDecoder(pool)
			states := make([]*State, nStates)
			next := slices.Clone(first)
			done := make([]int, nStates)
			for i := range states {
				states[i], _ = m.NewState(40, pool)
				if _, err := states[i].EvalBatch(ctx, decoderPrompt(i, m.Vocab)); err != nil {
					t.Fatal(err)
				}
			}
			for step := range steps {
				var group []*State
				var toks, idx []int
				for i := range nStates {
					if sc.active(i, step) {
						group, toks, idx = append(group, states[i]), append(toks, next[i]), append(idx, i)
					}
				}
				if step%2 == 1 {
					slices.Reverse(group)
					slices.Reverse(toks)
					slices.Reverse(idx)
				}
				out, err := dec.Eval(ctx, group, toks)
				if err != nil {
					t.Fatalf("%s %s step %d: %v", mc.name, sc.name, step, err)
				}
				for g, i := range idx {
					if at := sameBits(out[g], want[i][done[i]]); at >= 0 {
						t.Fatalf("%s %s step %d: state %d (its step %d, %d states) logit %d is %g, alone %g",
							mc.name, sc.name, step, i, done[i], len(group), at, out[g][at], want[i][done[i]][at])
					}
					if &out[g][0] != &states[i].logits[0] {
						t.Fatalf("%s %s: logits of state %d are not its own buffer", mc.name, sc.name, i)
					}
					done[i]++
					next[i] = Argmax(out[g])
				}
			}
		}
		pool.Close()
	}
}

// errAfter is a context whose Err reports cancellation from its n-th
// call on, to end a step between layers at a known point.
type errAfter struct {
	context.Context
	n int
}

func (c *errAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestDecoderRejects checks each refusal of a step (and a step abandoned
// between layers) names what was wrong and changes no state: the tokens
// cached and the logits stay, and the next step gives what it would have
// without the failed one.
func TestDecoderRejects(t *testing.T) {
	s := small
	s.Type = gguf.Q8_0
	m, _ := loadSynth(t, s, 61)
	other, _ := loadSynth(t, s, 61)
	pool := kernels.NewPool(2)
	defer pool.Close()
	ctx := context.Background()
	newStates := func(n, nCtx int) []*State {
		sts := make([]*State, n)
		for i := range sts {
			sts[i], _ = m.NewState(nCtx, pool)
			if _, err := sts[i].EvalBatch(ctx, decoderPrompt(i, m.Vocab)); err != nil {
				t.Fatal(err)
			}
		}
		return sts
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	foreign, _ := other.NewState(16, pool)
	for _, tc := range []struct {
		name string
		// call builds the failing step from three fresh states (of 16
		// positions, the third of 5 filled by its prompt).
		call func(sts []*State) (context.Context, []*State, []int)
		want string
		is   error
	}{
		{"no states", func(sts []*State) (context.Context, []*State, []int) { return ctx, nil, nil }, "no states", nil},
		{"fewer tokens", func(sts []*State) (context.Context, []*State, []int) { return ctx, sts, []int{1, 2} }, "3 states but 2 tokens", nil},
		{"nil state", func(sts []*State) (context.Context, []*State, []int) {
			return ctx, []*State{sts[0], nil}, []int{1, 2}
		}, "state 1 is nil", nil},
		{"another model", func(sts []*State) (context.Context, []*State, []int) {
			return ctx, []*State{sts[0], foreign}, []int{1, 2}
		}, "another model", nil},
		{"same state twice", func(sts []*State) (context.Context, []*State, []int) {
			return ctx, []*State{sts[0], sts[1], sts[0]}, []int{1, 2, 3}
		}, "states 0 and 2 are the same", nil},
		{"full context", func(sts []*State) (context.Context, []*State, []int) {
			return ctx, []*State{sts[0], sts[2]}, []int{1, 2}
		}, "state 1: context of 5 tokens is full", ErrContextExceeded},
		{"token beyond the vocabulary", func(sts []*State) (context.Context, []*State, []int) {
			return ctx, sts, []int{1, m.Vocab, 2}
		}, "state 1: token 300 outside", nil},
		{"negative token", func(sts []*State) (context.Context, []*State, []int) { return ctx, sts, []int{-1, 1, 2} }, "state 0: token -1", nil},
		{"cancelled", func(sts []*State) (context.Context, []*State, []int) { return cancelled, sts[:2], []int{1, 2} }, "", context.Canceled},
		{"cancelled alone", func(sts []*State) (context.Context, []*State, []int) { return cancelled, sts[:1], []int{1} }, "", context.Canceled},
		{"cancelled between layers", func(sts []*State) (context.Context, []*State, []int) {
			return &errAfter{ctx, 2}, sts[:2], []int{7, 8}
		}, "", context.Canceled},
	} {
		sts := newStates(3, 16)
		sts[2].Truncate(0)
		sts[2].EvalBatch(ctx, testPrompt(5, m.Vocab))
		sts[2].nCtx = 5 // full, without a state of another size
		before := make([][]float32, len(sts))
		toks := make([][]int, len(sts))
		for i, st := range sts {
			before[i], toks[i] = slices.Clone(st.logits), slices.Clone(st.Tokens())
		}
		c, group, in := tc.call(sts)
		_, err := m.NewDecoder(pool).Eval(c, group, in)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want an error with %q (%v)", tc.name, err, tc.want, tc.is)
			continue
		}
		for i, st := range sts {
			if !slices.Equal(st.Tokens(), toks[i]) || sameBits(st.logits, before[i]) >= 0 {
				t.Errorf("%s: state %d changed by a failed step", tc.name, i)
			}
		}
		// The failed step left nothing behind: the same states step on
		// as untouched ones do.
		ref := newStates(2, 16)
		got, err := m.NewDecoder(pool).Eval(ctx, sts[:2], []int{7, 8})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			w, _ := ref[i].Eval(7 + i)
			if sameBits(got[i], w) >= 0 {
				t.Errorf("%s: state %d steps on differently after the failed step", tc.name, i)
			}
		}
	}
}

// TestGenerateDecodeHook checks that Generate runs its decode steps
// through Request.Decode when set, here a Decoder's step of the state
// alone, and generates what it does through Eval.
func TestGenerateDecodeHook(t *testing.T) {
	s := small
	s.Type = gguf.Q8_0
	m, _ := loadSynth(t, s, 71)
	pool := kernels.NewPool(2)
	defer pool.Close()
	ctx := context.Background()
	req := Request{Prompt: decoderPrompt(3, m.Vocab), NPredict: 9, IgnoreEOS: true}
	a, _ := m.NewState(40, pool)
	want, err := a.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.NewState(40, pool)
	dec := m.NewDecoder(pool)
	calls := 0
	req.Decode = func(ctx context.Context, tok int) ([]float32, error) {
		calls++
		out, err := dec.Eval(ctx, []*State{b}, []int{tok})
		if err != nil {
			return nil, err
		}
		return out[0], nil
	}
	got, err := b.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want.Tokens) || calls != len(want.Tokens)-1 {
		t.Errorf("through Decode: %v in %d steps, through Eval %v", got.Tokens, calls, want.Tokens)
	}
}
