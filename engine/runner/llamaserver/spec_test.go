package llamaserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/llama"
)

// specServer serves a synthetic 3-block target over two slots, paired
// with a draft of its first block when withDraft is set.
func specServer(t *testing.T, withDraft bool) *httptest.Server {
	t.Helper()
	var buf bytes.Buffer
	shape := gguf.Shape{Layers: 3, Dim: 64, Heads: 4, KVHeads: 2, FF: 96, Vocab: 400, Ctx: 128, Type: gguf.Q4_0, SeparateOutput: true}
	if err := gguf.Synth(&buf, shape, 9); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := llama.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	t.Cleanup(pool.Close)
	s := &Server{ModelPath: "synthetic.gguf"}
	states := make([]*llama.State, 2)
	drafts := make([]*llama.Drafter, 2)
	var dm *llama.Model
	if withDraft {
		var d bytes.Buffer
		if err := gguf.WriteTruncated(&d, f, 1); err != nil {
			t.Fatal(err)
		}
		df, err := gguf.Parse(d.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if dm, err = llama.Load(df); err != nil {
			t.Fatal(err)
		}
	}
	for i := range states {
		if states[i], err = m.NewState(64, pool); err != nil {
			t.Fatal(err)
		}
		if dm != nil {
			ds, _ := dm.NewState(64, pool)
			if drafts[i], err = llama.NewDrafter(m, ds, llama.SpecParams{Max: 5}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if dm != nil {
		s.Speculate(drafts...)
	}
	s.Ready(m, states...)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

type specTimings struct {
	PredictedN     int  `json:"predicted_n"`
	DraftN         *int `json:"draft_n"`
	DraftNAccepted *int `json:"draft_n_accepted"`
}

type specCompletion struct {
	Content         string      `json:"content"`
	Tokens          []int       `json:"tokens"`
	Stop            bool        `json:"stop"`
	TokensPredicted int         `json:"tokens_predicted"`
	Timings         specTimings `json:"timings"`
}

// TestSpeculativeCompletion checks /completion with a draft model: a
// greedy completion gives the tokens it gives without one and reports
// timings.draft_n and draft_n_accepted (accepted ≤ proposed, < tokens),
// in the plain answer and in the streamed final event alike; a sampled
// one drafts nothing and, like llama-server, leaves both fields out, as
// does a server without a draft.
func TestSpeculativeCompletion(t *testing.T) {
	greedy := map[string]any{"prompt": "the quick brown fox", "n_predict": 30, "temperature": 0, "ignore_eos": true, "return_tokens": true}
	plainTS, specTS := specServer(t, false), specServer(t, true)
	var want specCompletion
	if code := post(t, plainTS.URL+"/completion", greedy, &want); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	if want.Timings.DraftN != nil || want.Timings.DraftNAccepted != nil {
		t.Fatalf("no draft model, timings %+v", want.Timings)
	}
	var got specCompletion
	if code := post(t, specTS.URL+"/completion", greedy, &got); code != 200 {
		t.Fatalf("HTTP %d", code)
	}
	if !reflect.DeepEqual(got.Tokens, want.Tokens) || got.Content != want.Content {
		t.Fatalf("speculative %v, plain %v", got.Tokens, want.Tokens)
	}
	tm := got.Timings
	if tm.DraftN == nil || tm.DraftNAccepted == nil || *tm.DraftN == 0 || *tm.DraftNAccepted > *tm.DraftN || *tm.DraftNAccepted >= got.TokensPredicted {
		t.Fatalf("timings %+v (draft_n %v, accepted %v) for %d tokens", tm, tm.DraftN, tm.DraftNAccepted, got.TokensPredicted)
	}

	// Streamed: the final event carries the same counters.
	stream := map[string]any{}
	for k, v := range greedy {
		stream[k] = v
	}
	stream["stream"] = true
	b, _ := json.Marshal(stream)
	resp, err := http.Post(specTS.URL+"/completion", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := sseEvents(t, raw)
	var last specCompletion
	var toks []int
	for i, ev := range events {
		var c specCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if i < len(events)-1 {
			toks = append(toks, c.Tokens...)
		}
		last = c
	}
	if !last.Stop || !reflect.DeepEqual(toks, want.Tokens) || last.Timings.DraftN == nil ||
		*last.Timings.DraftN != *tm.DraftN || *last.Timings.DraftNAccepted != *tm.DraftNAccepted {
		t.Fatalf("streamed %v, final %+v; plain answer %v %+v", toks, last, got.Tokens, tm)
	}

	sampled := map[string]any{"prompt": "the quick brown fox", "n_predict": 10, "temperature": 0.8, "seed": 3}
	var s specCompletion
	if code := post(t, specTS.URL+"/completion", sampled, &s); code != 200 || s.Timings.DraftN != nil || s.Timings.DraftNAccepted != nil {
		t.Fatalf("sampled with a draft: HTTP %d, timings %+v", code, s.Timings)
	}
}
