package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api/apitest"
	"meshd/agent/node"
)

const fieldsBackends = apitest.RefBackends + `aliases = ["mid-alias"]

[[backend]]
name = "ref-embed"
kind = "reference"
fidelity = 1
uj_per_token = 5
embedding = true
`

func postJSON(t *testing.T, url string, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: the body is not JSON: %v", url, err)
	}
	return resp, out
}

// TestOpenAIRefusals: what meshd cannot honour is a 400 naming the JSON
// field, never served as if read and never a 5xx a client retries; and
// nothing is sealed for it.
func TestOpenAIRefusals(t *testing.T) {
	st := apitest.Start(t, fieldsBackends, node.Options{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		path, body, param, code string
	}{
		{"/v1/chat/completions", `{` + msgs + `,"n":2}`, "n", "invalid_field"},
		{"/v1/chat/completions", `{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}]}`, "tools", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"tool_choice":"auto"}`, "tool_choice", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"json_object"}}`, "response_format", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"response_format":{"type":"text","json_schema":{}}}`, "response_format", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"logprobs":true}`, "logprobs", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"top_logprobs":2}`, "top_logprobs", "unsupported_field"},
		{"/v1/chat/completions", `{` + msgs + `,"stop":["a","b","c","d","e"]}`, "stop", "invalid_field"},
		{"/v1/chat/completions", `{` + msgs + `,"stop":[""]}`, "stop", "invalid_field"},
		{"/v1/chat/completions", `{` + msgs + `,"stop":3}`, "stop", "invalid_field"},
		{"/v1/chat/completions", `{` + msgs + `,"fidelity_floor":"high"}`, "fidelity_floor", "invalid_field"},
		{"/v1/chat/completions", `{` + msgs + `,"model":"ref-embed"}`, "model", "wrong_backend_kind"},
		{"/v1/completions", `{"prompt":"x","n":3}`, "n", "invalid_field"},
		{"/v1/completions", `{"prompt":"x","logprobs":2}`, "logprobs", "unsupported_field"},
		{"/v1/completions", `{"prompt":"x","echo":true}`, "echo", "unsupported_field"},
		{"/v1/completions", `{"prompt":"x","best_of":2}`, "best_of", "unsupported_field"},
		{"/v1/completions", `{"prompt":"x","suffix":"y"}`, "suffix", "unsupported_field"},
		{"/v1/completions", `{"prompt":"x","joule_ceiling_uj":"lots"}`, "joule_ceiling_uj", "invalid_field"},
		{"/v1/embeddings", `{"input":"x","dimensions":8}`, "dimensions", "unsupported_field"},
		{"/v1/embeddings", `{"input":[1,2]}`, "input", "invalid_field"},
		{"/v1/embeddings", `{"input":[]}`, "input", "invalid_field"},
		{"/v1/embeddings", `{"input":"x","encoding_format":"int8"}`, "encoding_format", "invalid_field"},
		{"/v1/embeddings", `{"input":"x","model":"ref-tiny"}`, "model", "wrong_backend_kind"},
	} {
		resp, body := postJSON(t, st.URL+tc.path, tc.body)
		e, _ := body["error"].(map[string]any)
		if resp.StatusCode != http.StatusBadRequest || e["param"] != tc.param || e["code"] != tc.code || e["type"] != "invalid_request_error" {
			t.Errorf("%s %s: %d %v, want 400 param %s code %s", tc.path, tc.body, resp.StatusCode, body, tc.param, tc.code)
		}
	}
	// The defaults of refused fields are no request for them.
	for _, body := range []string{`{` + msgs + `,"logprobs":false,"response_format":{"type":"text"},"tools":null,"max_tokens":2}`} {
		if resp, b := postJSON(t, st.URL+"/v1/chat/completions", body); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %v, want served", body, resp.StatusCode, b)
		}
	}
	if d := st.Node.Stores.Log.Durable(); d != 1 {
		t.Fatalf("the log holds %d receipts, want only the one served", d)
	}
}

// TestOpenAIStopIdsAndModel: stop cuts the text with finish_reason stop
// and a receipt of what was delivered; ids are unique for identical
// requests; a stream names the model on every chunk.
func TestOpenAIStopIdsAndModel(t *testing.T) {
	st := apitest.Start(t, fieldsBackends, node.Options{})
	_, full := postJSON(t, st.URL+"/v1/completions", `{"prompt":"stop here","max_tokens":6}`)
	_, again := postJSON(t, st.URL+"/v1/completions", `{"prompt":"stop here","max_tokens":6}`)
	if full["id"] == again["id"] {
		t.Fatalf("two serves share the id %v", full["id"])
	}
	choice := func(m map[string]any) map[string]any { return m["choices"].([]any)[0].(map[string]any) }
	text := choice(full)["text"].(string)
	words := strings.Fields(text)
	stop := " " + words[1]
	want := text[:strings.Index(text, stop)]
	wantTokens := float64(len(strings.Fields(want)))
	resp, cut := postJSON(t, st.URL+"/v1/completions", `{"prompt":"stop here","max_tokens":6,"stop":"`+stop+`"}`)
	if resp.StatusCode != 200 || choice(cut)["text"] != want || choice(cut)["finish_reason"] != "stop" {
		t.Fatalf("stop %q: %d %v, want text %q finish stop", stop, resp.StatusCode, cut, want)
	}
	rc := cut["receipt"].(map[string]any)["receipt"].(map[string]any)
	if out := rc["tokens_out"].(float64); out != wantTokens || out == 0 || cut["usage"].(map[string]any)["completion_tokens"].(float64) != out {
		t.Fatalf("stop: receipt tokens_out %v usage %v, want %v (the words delivered)", out, cut["usage"], wantTokens)
	}
	if choice(full)["finish_reason"] != "length" {
		t.Fatalf("unstopped finish_reason %v", choice(full)["finish_reason"])
	}

	// Streamed, pinned by alias: every chunk names ref-mid.
	hr, err := http.Post(st.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"mid-alias","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	sc := bufio.NewScanner(hr.Body)
	n := 0
	var last map[string]any
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c map[string]any
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		n++
		if c["model"] != "ref-mid" {
			t.Fatalf("chunk %d names model %v, want ref-mid: %s", n, c["model"], line)
		}
		last = c
	}
	if n < 3 || last["receipt"] == nil {
		t.Fatalf("%d chunks, last %v", n, last)
	}
	cands := last["receipt"].(map[string]any)["route_candidates"].([]any)
	if len(cands) != 1 || cands[0].(map[string]any)["backend"] != "ref-mid" {
		t.Fatalf("a pinned serve weighed %v", cands)
	}
}

// TestOpenAIEmbeddings: /v1/embeddings is served by the embedding backend
// only, as a sealed serve whose receipt counts the vectors.
func TestOpenAIEmbeddings(t *testing.T) {
	st := apitest.Start(t, fieldsBackends, node.Options{})
	resp, body := postJSON(t, st.URL+"/v1/embeddings", `{"model":"anything","input":["one text","another text"],"encoding_format":"float"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, body)
	}
	data := body["data"].([]any)
	if len(data) != 2 || body["model"] != "ref-embed" {
		t.Fatalf("embeddings %v", body)
	}
	v0 := data[0].(map[string]any)["embedding"].([]any)
	v1 := data[1].(map[string]any)["embedding"].([]any)
	if len(v0) != 32 || len(v1) != 32 || v0[0] == v1[0] && v0[1] == v1[1] {
		t.Fatalf("vectors %v %v", v0, v1)
	}
	rc := body["receipt"].(map[string]any)
	if rc["receipt"].(map[string]any)["tokens_out"].(float64) != 2 || resp.Header.Get("Mesh-Receipt-Id") != rc["id"] {
		t.Fatalf("receipt %v, header %s", rc["receipt"], resp.Header.Get("Mesh-Receipt-Id"))
	}
	cands := rc["route_candidates"].([]any)
	if len(cands) != 1 || cands[0].(map[string]any)["backend"] != "ref-embed" {
		t.Fatalf("an embedding serve weighed %v", cands)
	}
	// A completion never goes to the embedding backend, however cheap.
	_, c := postJSON(t, st.URL+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
	if c["model"] == "ref-embed" {
		t.Fatal("a completion was routed to the embedding backend")
	}
}

// TestJSONEverywhere: a path no route takes, a wrong method, and an empty
// meter table all answer JSON.
func TestJSONEverywhere(t *testing.T) {
	st := apitest.Start(t, fieldsBackends, node.Options{})
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/no-such-endpoint", 404, "not_found", ""},
		{"DELETE", "/v1/completions", 405, "method_not_allowed", "POST"},
		{"GET", "/v1/embeddings", 405, "method_not_allowed", "POST"},
	} {
		req, _ := http.NewRequest(tc.method, st.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error map[string]any `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != tc.status || body.Error["code"] != tc.code || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d %s %v (Allow %q), err %v", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, resp.Header.Get("Allow"), err)
		}
	}
	resp, err := http.Get(st.URL + "/v1/meters")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || string(m["meters"]) != "[]" {
		t.Fatalf("/v1/meters with none: %s, err %v", m["meters"], err)
	}
}
