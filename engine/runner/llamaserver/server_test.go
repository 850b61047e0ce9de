package llamaserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/llama"
)

type fixture struct {
	srv    *Server
	model  *llama.Model
	states []*llama.State
}

func (f fixture) readyForTest(t *testing.T) { f.srv.Ready(f.model, f.states...) }

// newServer is one slot of 64 positions over a small synthetic model.
func newServer(t *testing.T) (fixture, *httptest.Server, *llama.Model) {
	return newServerN(t, 1, 64, nil)
}

// newServerN builds slots states of nCtx positions sharing one model and
// one pool; configure, if not nil, adjusts the server before it serves.
func newServerN(t *testing.T, slots, nCtx int, configure func(*Server)) (fixture, *httptest.Server, *llama.Model) {
	t.Helper()
	return newServerShape(t, gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 96, Vocab: 400, Ctx: 128, Type: gguf.Q8_0}, slots, nCtx, configure)
}

// newServerShape is newServerN over a synthetic model of another shape.
func newServerShape(t *testing.T, shape gguf.Shape, slots, nCtx int, configure func(*Server)) (fixture, *httptest.Server, *llama.Model) {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, shape, 5); err != nil {
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
	states := make([]*llama.State, slots)
	for i := range states {
		if states[i], err = m.NewState(nCtx, pool); err != nil {
			t.Fatal(err)
		}
	}
	s := &Server{ModelPath: "synthetic.gguf"}
	if configure != nil {
		configure(s)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return fixture{s, m, states}, ts, m
}

func post(t *testing.T, url string, body any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: %v in %s", url, err, raw)
		}
	}
	return resp.StatusCode
}

type errBody struct {
	Error apiError `json:"error"`
}

func TestHealthWhileLoadingThenReady(t *testing.T) {
	s, ts, _ := newServer(t)
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var e errBody
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 503 || e.Error.Code != 503 || e.Error.Message != "Loading model" || e.Error.Type != "unavailable_error" {
		t.Fatalf("loading: %d %+v", resp.StatusCode, e)
	}
	if code := post(t, ts.URL+"/completion", map[string]any{"prompt": "x"}, &e); code != 503 {
		t.Errorf("completion while loading: %d", code)
	}
	s.readyForTest(t)
	resp, _ = http.Get(ts.URL + "/health")
	var ok map[string]string
	json.NewDecoder(resp.Body).Decode(&ok)
	resp.Body.Close()
	if resp.StatusCode != 200 || ok["status"] != "ok" {
		t.Fatalf("ready: %d %v", resp.StatusCode, ok)
	}
}

type compResp struct {
	Content         string `json:"content"`
	Tokens          []int  `json:"tokens"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
	TokensCached    int    `json:"tokens_cached"`
	StopType        string `json:"stop_type"`
	Truncated       *bool  `json:"truncated"`
	Timings         struct {
		CacheN             *int     `json:"cache_n"`
		PromptN            *int     `json:"prompt_n"`
		PromptMS           *float64 `json:"prompt_ms"`
		PredictedN         *int     `json:"predicted_n"`
		PredictedMS        *float64 `json:"predicted_ms"`
		PromptPerSecond    *float64 `json:"prompt_per_second"`
		PredictedPerSecond *float64 `json:"predicted_per_second"`
	} `json:"timings"`
}

func TestCompletionCounts(t *testing.T) {
	s, ts, m := newServer(t)
	s.readyForTest(t)
	var tk struct{ Tokens []int }
	if code := post(t, ts.URL+"/tokenize", map[string]any{"content": "hello there", "add_special": true}, &tk); code != 200 {
		t.Fatal(code)
	}
	if want := m.Tok.Encode("hello there", true, true); !reflect.DeepEqual(tk.Tokens, want) || tk.Tokens[0] != m.Tok.BOS {
		t.Fatalf("tokenize %v, want %v", tk.Tokens, want)
	}
	req := map[string]any{"prompt": "hello there", "n_predict": 6, "temperature": 0, "return_tokens": true, "ignore_eos": true}
	var a compResp
	if code := post(t, ts.URL+"/completion", req, &a); code != 200 {
		t.Fatalf("status %d", code)
	}
	n := len(tk.Tokens)
	if a.TokensPredicted != 6 || len(a.Tokens) != 6 || a.TokensEvaluated != n || a.StopType != "limit" ||
		a.Truncated == nil || *a.Truncated || *a.Timings.CacheN != 0 || *a.Timings.PromptN != n || *a.Timings.PredictedN != 6 ||
		*a.Timings.PromptMS <= 0 || *a.Timings.PredictedMS <= 0 || *a.Timings.PredictedPerSecond <= 0 || *a.Timings.PromptPerSecond <= 0 {
		t.Fatalf("first completion: %+v", a)
	}
	// The last generated token is never fed back, so the cache holds the
	// prompt and all but one generated token.
	if a.TokensCached != n+5 {
		t.Errorf("tokens_cached %d, want %d", a.TokensCached, n+5)
	}
	if a.Content != m.Tok.Decode(a.Tokens) && " "+a.Content != m.Tok.Decode(a.Tokens) {
		t.Errorf("content %q does not spell tokens %v", a.Content, a.Tokens)
	}
	// Same prompt: all but the last prompt token come from the cache and
	// the greedy continuation is unchanged.
	var b compResp
	post(t, ts.URL+"/completion", req, &b)
	if *b.Timings.CacheN != n-1 || *b.Timings.PromptN != 1 || b.TokensEvaluated != n || !reflect.DeepEqual(a.Tokens, b.Tokens) || a.Content != b.Content {
		t.Errorf("cached repeat: %+v vs %+v", b, a)
	}
	// cache_prompt false re-evaluates everything.
	req["cache_prompt"] = false
	var c compResp
	post(t, ts.URL+"/completion", req, &c)
	if *c.Timings.CacheN != 0 || *c.Timings.PromptN != n || !reflect.DeepEqual(a.Tokens, c.Tokens) {
		t.Errorf("uncached: %+v", c)
	}
	// Token-array prompt: no BOS is added.
	var d compResp
	post(t, ts.URL+"/completion", map[string]any{"prompt": []int{1, 50, 60}, "n_predict": 2, "temperature": 0, "cache_prompt": false}, &d)
	if d.TokensEvaluated != 3 || d.TokensPredicted != 2 || len(d.Tokens) != 0 {
		t.Errorf("token prompt: %+v", d)
	}
}

func TestCompletionErrors(t *testing.T) {
	s, ts, _ := newServer(t)
	s.readyForTest(t)
	for name, body := range map[string]string{
		"bad json":     `{"prompt":`,
		"no prompt":    `{"n_predict":1}`,
		"bad token":    `{"prompt":[1,99999]}`,
		"too long":     `{"prompt":"` + strings.Repeat("zq ", 100) + `"}`,
		"empty prompt": `{"prompt":""}`,
		"empty array":  `{"prompt":[]}`,
		"bad stop":     `{"prompt":"a","stop":3}`,
		"bad deadline": `{"prompt":"a","t_max_predict_ms":-1}`,
		"prompt shape": `{"prompt":{"a":1}}`,
	} {
		resp, err := http.Post(ts.URL+"/completion", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e errBody
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Error.Code != 400 || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: %d %+v", name, resp.StatusCode, e)
		}
	}
	resp, _ := http.Get(ts.URL + "/nope")
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("unknown route: %d", resp.StatusCode)
	}
}

func TestProps(t *testing.T) {
	s, ts, _ := newServer(t)
	s.readyForTest(t)
	resp, err := http.Get(ts.URL + "/props")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		NCtx       int    `json:"n_ctx"`
		TotalSlots int    `json:"total_slots"`
		ModelPath  string `json:"model_path"`
		BuildInfo  string `json:"build_info"`
		Default    struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	json.NewDecoder(resp.Body).Decode(&p)
	if p.NCtx != 64 || p.Default.NCtx != 64 || p.TotalSlots != 1 || p.ModelPath != "synthetic.gguf" || p.BuildInfo != BuildInfo {
		t.Errorf("props %+v", p)
	}
}

func TestPropsSlotsAndTemplate(t *testing.T) {
	f, ts, _ := newServerN(t, 3, 32, func(s *Server) { s.ChatTemplate = "{{ messages }}" })
	f.readyForTest(t)
	resp, err := http.Get(ts.URL + "/props")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		NCtx         int    `json:"n_ctx"`
		TotalSlots   int    `json:"total_slots"`
		ChatTemplate string `json:"chat_template"`
		BOS          string `json:"bos_token"`
		EOS          string `json:"eos_token"`
	}
	json.NewDecoder(resp.Body).Decode(&p)
	if p.NCtx != 32 || p.TotalSlots != 3 || p.ChatTemplate != "{{ messages }}" || p.BOS != "<s>" || p.EOS != "</s>" {
		t.Errorf("props %+v", p)
	}
}
