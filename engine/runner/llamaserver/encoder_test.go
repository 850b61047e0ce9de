package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"meshd/engine/runner/bert"
	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// newEncoderServer serves a small synthetic BERT model with the given
// pooling over two slots of nCtx tokens, and returns a spare state of the
// same model to compute expected vectors with.
func newEncoderServer(t *testing.T, pooling uint32, nCtx int) (*httptest.Server, *bert.Model, *bert.State) {
	t.Helper()
	shape := gguf.BERTShape{Layers: 2, Dim: 64, Heads: 4, FF: 128, Vocab: 400, Ctx: 64, Type: gguf.Q8_0, Pooling: pooling}
	var buf bytes.Buffer
	if err := gguf.SynthBERT(&buf, shape, 9); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := bert.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	t.Cleanup(pool.Close)
	states := make([]*bert.State, 3)
	for i := range states {
		if states[i], err = m.NewState(nCtx, pool); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{ModelPath: "bert.gguf", Embeddings: true}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	s.ReadyEncoder(m, states[:2]...)
	return ts, m, states[2]
}

// TestEncoderEmbedding: /embedding on a BERT model answers llama-server's
// shape, [{"index":0,"embedding":[[...]]}], with exactly the vector the
// encoder computes for the tokenized text ([CLS] text [SEP]), unit length;
// /v1/embeddings gives the same vectors in OpenAI's shape.
func TestEncoderEmbedding(t *testing.T) {
	ts, m, st := newEncoderServer(t, 1, 64)
	texts := []string{"hello world", "the quick brown fox jumps over the lazy dog"}
	var raw []map[string]json.RawMessage
	if code := post(t, ts.URL+"/embedding", map[string]any{"content": texts[0]}, &raw); code != 200 || len(raw) != 1 {
		t.Fatalf("embedding: %d %v", code, raw)
	}
	if len(raw[0]) != 2 || string(raw[0]["index"]) != "0" {
		t.Fatalf("fields %v, want index and embedding", raw[0])
	}
	var rows [][]float32
	if err := json.Unmarshal(raw[0]["embedding"], &rows); err != nil || len(rows) != 1 {
		t.Fatalf("embedding %s: %v", raw[0]["embedding"], err)
	}
	toks := m.Tok.Encode(texts[0], true, true)
	if toks[0] != m.Tok.BOS || toks[len(toks)-1] != m.Tok.SEP {
		t.Fatalf("tokens %v do not run [CLS] … [SEP]", toks)
	}
	want, err := st.Embed(context.Background(), toks)
	if err != nil {
		t.Fatal(err)
	}
	var n2 float64
	for i, v := range rows[0] {
		if v != want[i] {
			t.Fatalf("value %d: %v, the encoder gives %v", i, v, want[i])
		}
		n2 += float64(v) * float64(v)
	}
	if len(rows[0]) != m.Dim || math.Abs(n2-1) > 1e-5 {
		t.Fatalf("%d values, |v|² %g", len(rows[0]), n2)
	}

	var oai struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code := post(t, ts.URL+"/v1/embeddings", map[string]any{"input": texts}, &oai); code != 200 || len(oai.Data) != 2 {
		t.Fatalf("v1: %d %+v", code, oai)
	}
	for i, text := range texts {
		toks := m.Tok.Encode(text, true, true)
		want, err := st.Embed(context.Background(), toks)
		if err != nil {
			t.Fatal(err)
		}
		if oai.Data[i].Index != i || len(oai.Data[i].Embedding) != len(want) {
			t.Fatalf("data %d: %+v", i, oai.Data[i])
		}
		for j := range want {
			if oai.Data[i].Embedding[j] != want[j] {
				t.Fatalf("input %d value %d: %v, want %v", i, j, oai.Data[i].Embedding[j], want[j])
			}
		}
	}
	if n := len(m.Tok.Encode(texts[0], true, true)) + len(m.Tok.Encode(texts[1], true, true)); oai.Usage.PromptTokens != n {
		t.Errorf("usage %d, want %d", oai.Usage.PromptTokens, n)
	}
}

// TestEncoderRefusesGeneration: a BERT model cannot complete or chat;
// both answer 501 naming the architecture, and the rest of the API
// (tokenize, props, health) works.
func TestEncoderRefusesGeneration(t *testing.T) {
	ts, m, _ := newEncoderServer(t, 2, 32)
	for _, tc := range []struct{ path, body string }{
		{"/completion", `{"prompt":"hello","n_predict":4}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`},
	} {
		code, raw := postRaw(t, ts.URL+tc.path, tc.body)
		if e := decodeErr(t, raw); code != 501 || e.Type != "not_supported_error" || !strings.Contains(e.Message, `"bert"`) {
			t.Errorf("%s: %d %+v", tc.path, code, e)
		}
	}
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	if code := post(t, ts.URL+"/tokenize", map[string]any{"content": "hello world", "add_special": true}, &tok); code != 200 ||
		len(tok.Tokens) != 4 || tok.Tokens[0] != 101 || tok.Tokens[3] != 102 {
		t.Fatalf("tokenize: %d %v", code, tok.Tokens)
	}
	var props struct {
		NCtx  int `json:"n_ctx"`
		Model struct {
			NEmbd int `json:"n_embd"`
		} `json:"model"`
	}
	resp, err := http.Get(ts.URL + "/props")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&props)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || props.NCtx != 32 || props.Model.NEmbd != m.Dim {
		t.Fatalf("props: %d %+v %v", resp.StatusCode, props, err)
	}
	// An input longer than a slot is refused before it is run.
	long := strings.Repeat("hello ", 40)
	code, raw := postRaw(t, ts.URL+"/embedding", `{"content":"`+long+`"}`)
	if e := decodeErr(t, raw); code != 400 || e.Type != "exceed_context_size_error" {
		t.Errorf("long input: %d %+v", code, e)
	}
}

// TestEncoderPoolingNone: without pooling /embedding gives one unit row
// per token, and /v1/embeddings refuses, as llama-server does.
func TestEncoderPoolingNone(t *testing.T) {
	ts, m, _ := newEncoderServer(t, 0, 64)
	var out []struct {
		Embedding [][]float32 `json:"embedding"`
	}
	n := len(m.Tok.Encode("hello world", true, true))
	if code := post(t, ts.URL+"/embedding", map[string]any{"content": "hello world"}, &out); code != 200 || len(out) != 1 || len(out[0].Embedding) != n {
		t.Fatalf("embedding: %d, %d rows, want %d", code, len(out[0].Embedding), n)
	}
	for i, row := range out[0].Embedding {
		var n2 float64
		for _, v := range row {
			n2 += float64(v) * float64(v)
		}
		if len(row) != m.Dim || math.Abs(n2-1) > 1e-5 {
			t.Errorf("row %d: %d values, |v|² %g", i, len(row), n2)
		}
	}
	if code, raw := postRaw(t, ts.URL+"/v1/embeddings", `{"input":"hello"}`); code != 400 {
		t.Errorf("v1 with pooling none: %d %s", code, raw)
	}
}
