package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/steward"
	"meshd/wire"
)

// ollamaDir is the Ollama client conformance script, from this package.
const ollamaDir = "../../test/ollama"

func ollamaPost(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decodeJSON(t *testing.T, r io.Reader) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.NewDecoder(r).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkFinal checks a final message: Ollama's fields, and a mesh_receipt
// that names a receipt the log holds, with the message's own counts.
func checkFinal(t *testing.T, n *node.Node, m map[string]any, tokens int) {
	t.Helper()
	for _, k := range []string{"model", "created_at", "done_reason", "total_duration", "load_duration", "prompt_eval_count",
		"prompt_eval_duration", "eval_count", "eval_duration", "mesh_receipt"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("final message %v lacks %q", m, k)
		}
	}
	if m["done"] != true || m["eval_count"] != float64(tokens) || m["done_reason"] != "length" {
		t.Fatalf("final message %v: want done, %d tokens, length", m, tokens)
	}
	if _, err := time.Parse(time.RFC3339Nano, m["created_at"].(string)); err != nil {
		t.Fatalf("created_at: %v", err)
	}
	r := m["mesh_receipt"].(map[string]any)
	seq := uint64(r["sequence"].(float64))
	envs, err := n.Stores.Log.Range(context.Background(), seq, 1)
	if err != nil || len(envs) != 1 {
		t.Fatalf("receipt %d: %v", seq, err)
	}
	o, err := steward.OpenEnvelope(envs[0], n.Trusted())
	if err != nil {
		t.Fatal(err)
	}
	if r["id"] != o.ID.String() || r["energy_provenance"] != o.Receipt.EnergyProvenance || r["backend"] != o.Receipt.Backend ||
		float64(o.Receipt.TokensOut) != m["eval_count"] || float64(o.Receipt.TokensIn) != m["prompt_eval_count"] {
		t.Fatalf("mesh_receipt %v is not receipt %d (%s, %+v)", r, seq, o.ID, o.Receipt)
	}
}

func TestOllamaWhole(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	for _, tc := range []struct{ path, body, field string }{
		{"/api/generate", `{"model":"ref-tiny","prompt":"a joule","stream":false,"options":{"num_predict":5}}`, "response"},
		{"/api/chat", `{"model":"ref-tiny:latest","messages":[{"role":"user","content":"a watt"}],"stream":false,"options":{"num_predict":5}}`, "message"},
		{"/api/generate", `{"model":"ref-tiny","prompt":"a joule","system":"be brief","stream":false,"options":{"num_predict":5}}`, "response"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp := ollamaPost(t, st.URL+tc.path, tc.body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			m := decodeJSON(t, resp.Body)
			checkFinal(t, st.Node, m, 5)
			if resp.Header.Get("Mesh-Receipt-Id") != m["mesh_receipt"].(map[string]any)["id"] {
				t.Fatalf("Mesh-Receipt-Id %q is not the body's", resp.Header.Get("Mesh-Receipt-Id"))
			}
			var text string
			if tc.field == "message" {
				msg := m["message"].(map[string]any)
				if msg["role"] != "assistant" {
					t.Fatalf("message %v", msg)
				}
				text = msg["content"].(string)
				if _, ok := m["context"]; ok {
					t.Fatal("a chat answer carries generate's context")
				}
			} else {
				text = m["response"].(string)
			}
			if len(strings.Fields(text)) != 5 {
				t.Fatalf("text %q: want 5 tokens", text)
			}
			// The model named is the backend served, pinned.
			if r := m["mesh_receipt"].(map[string]any); r["backend"] != "ref-tiny" || m["model"] == "" {
				t.Fatalf("served by %v as %v", r["backend"], m["model"])
			}
		})
	}
}

// Streaming is the default, as in Ollama: NDJSON lines, one per piece,
// and the final message with the receipt.
func TestOllamaStreamByDefault(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	for _, path := range []string{"/api/generate", "/api/chat"} {
		t.Run(path, func(t *testing.T) {
			body := `{"model":"ref-mid","prompt":"count","options":{"num_predict":4}}`
			if path == "/api/chat" {
				body = `{"model":"ref-mid","messages":[{"role":"user","content":"count"}],"options":{"num_predict":4}}`
			}
			resp := ollamaPost(t, st.URL+path, body)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var lines []map[string]any
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var m map[string]any
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				lines = append(lines, m)
			}
			if len(lines) != 5 {
				t.Fatalf("%d lines, want 4 pieces and the final message: %v", len(lines), lines)
			}
			var text string
			for _, m := range lines[:4] {
				if m["done"] != false || m["model"] != "ref-mid" {
					t.Fatalf("piece %v", m)
				}
				if _, ok := m["mesh_receipt"]; ok {
					t.Fatalf("a piece carries the receipt: %v", m)
				}
				if path == "/api/chat" {
					text += m["message"].(map[string]any)["content"].(string)
				} else {
					text += m["response"].(string)
				}
			}
			checkFinal(t, st.Node, lines[4], 4)
			if len(strings.Fields(text)) != 4 {
				t.Fatalf("pieces %q", text)
			}
			if resp.Trailer.Get("Mesh-Receipt-Id") != lines[4]["mesh_receipt"].(map[string]any)["id"] {
				t.Fatalf("trailer %q", resp.Trailer.Get("Mesh-Receipt-Id"))
			}
		})
	}
}

// Every refusal is Ollama's {"error": "..."} with the status it names,
// including the mux's own 404 and 405; nothing is sealed for one.
func TestOllamaErrors(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/api/generate", `{"prompt":"x"}`, 400, "model: required"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","format":"json"}`, 400, "format: structured output"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","images":["aGk="]}`, 400, "images: only text"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","context":[1,2]}`, 400, "context: meshd keeps no conversation state"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","options":{"num_predict":0}}`, 400, "options.num_predict: 0"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","options":{"stop":["lo"]}}`, 400, "options.stop"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","options":{"num_predict":"many"}}`, 400, "options.num_predict: want int64"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","fidelity_floor":1,"options":{"fidelity_floor":2}}`, 400, "options.fidelity_floor: given at the top level and in options"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","options":{"fidelity_floor":9}}`, 400, "fidelity_floor: 9 is outside"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","stream":false,"options":{"num_predict":2,"fidelity_floor":4}}`, 422, "no admissible backend: none of 1 backends"},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","stream":false,"options":{"num_predict":2,"fidelity_floor":3}}`, 422, ""},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","stream":false,"options":{"num_predict":2,"joule_ceiling_uj":1}}`, 422, ""},
		{"POST", "/api/generate", `{"model":"ref-tiny","prompt":"x","options":{"num_predict":99999}}`, 400, "max_tokens"},
		{"POST", "/api/chat", `{"model":"ref-tiny","messages":[{"role":"wizard","content":"x"}]}`, 400, `messages[0].role: "wizard"`},
		{"POST", "/api/chat", `{"model":"ref-tiny","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, 400, "tools: tool calling"},
		{"POST", "/api/chat", `{"model":"ref-tiny","messages":[{"role":"user","content":"x"}],"think":true}`, 400, "think: thinking"},
		{"POST", "/api/chat", `{"model":"ref-tiny","messages":[`, 400, "reading the body"},
		{"POST", "/api/embed", `{"model":"ref-tiny","input":"a joule"}`, 400, `"ref-tiny" does not support embeddings`},
		{"POST", "/api/embed", `{"model":"ref-tiny","input":7}`, 400, "input: want a string"},
		{"POST", "/api/show", `{"model":"llama3"}`, 404, "model 'llama3' not found"},
		{"GET", "/api/generate", ``, 405, "GET is not allowed on /api/generate (allowed: POST)"},
		{"GET", "/api/ps", ``, 404, "no such endpoint: GET /api/ps"},
	} {
		t.Run(tc.path+" "+tc.msg, func(t *testing.T) {
			r, _ := http.NewRequest(tc.method, st.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e map[string]any
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d %q: not JSON: %v", resp.StatusCode, b, err)
			}
			msg, _ := e["error"].(string)
			if resp.StatusCode != tc.status || msg == "" || !strings.Contains(msg, tc.msg) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s %s: want %d with %q", resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.status, tc.msg)
			}
		})
	}
	if d := st.Node.Stores.Log.Durable(); d != 0 {
		t.Fatalf("refusals sealed %d receipts", d)
	}
}

// The mesh fields are honoured where a client puts them: top level or
// inside options.
func TestOllamaMeshFields(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	for _, body := range []string{
		`{"model":"auto","prompt":"floor","stream":false,"fidelity_floor":3,"joule_ceiling_uj":5000000,"options":{"num_predict":3}}`,
		`{"model":"auto","prompt":"floor","stream":false,"options":{"num_predict":3,"fidelity_floor":3,"joule_ceiling_uj":5000000}}`,
	} {
		resp := ollamaPost(t, st.URL+"/api/generate", body)
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		m := decodeJSON(t, resp.Body)
		r := m["mesh_receipt"].(map[string]any)
		// An unknown model leaves the choice to the router: the floor of
		// F3 passes over ref-tiny (F1).
		if r["backend"] != "ref-mid" || r["fidelity_floor"] != float64(3) || m["model"] != "auto" {
			t.Fatalf("%s: %v", body, m)
		}
		o := openSeq(t, st.Node, uint64(r["sequence"].(float64)))
		if o.Receipt.CeilingUJ == nil || *o.Receipt.CeilingUJ != 5000000 {
			t.Fatalf("ceiling not sealed: %+v", o.Receipt.CeilingUJ)
		}
	}
	// The default num_predict bounds a serve that names none.
	m := decodeJSON(t, ollamaPost(t, st.URL+"/api/generate", `{"model":"ref-tiny","prompt":"long","stream":false,"options":{"num_predict":-1}}`).Body)
	if m["eval_count"] != float64(128) {
		t.Fatalf("num_predict -1 served %v tokens, want the default 128", m["eval_count"])
	}
}

func openSeq(t *testing.T, n *node.Node, seq uint64) *steward.Opened {
	t.Helper()
	return apitest.Logged(t, n, seq)
}

func TestOllamaModels(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	resp, err := http.Get(st.URL + "/api/tags")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tags struct {
		Models []struct {
			Name, Model, Digest string
			ModifiedAt          string `json:"modified_at"`
			Details             map[string]any
			Mesh                map[string]any
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil {
		t.Fatal(err)
	}
	if len(tags.Models) != 2 || tags.Models[0].Name != "ref-tiny" || tags.Models[1].Name != "ref-mid" {
		t.Fatalf("tags %+v", tags)
	}
	for _, m := range tags.Models {
		if len(m.Digest) != 64 || m.Details["format"] != "reference" || m.Mesh["fidelity"] == nil || m.Mesh["recipe"] == "" {
			t.Fatalf("model %+v", m)
		}
	}
	if tags.Models[0].Digest == tags.Models[1].Digest {
		t.Fatal("two recipes, one digest")
	}
	for _, body := range []string{`{"model":"ref-mid"}`, `{"name":"ref-mid:latest"}`} {
		m := decodeJSON(t, ollamaPost(t, st.URL+"/api/show", body).Body)
		if m["details"].(map[string]any)["format"] != "reference" || m["mesh"].(map[string]any)["fidelity"] != float64(3) {
			t.Fatalf("show %s: %v", body, m)
		}
	}
	v, err := http.Get(st.URL + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Body.Close()
	if m := decodeJSON(t, v.Body); m["version"] != api.Version() {
		t.Fatalf("version %v, want %q", m, api.Version())
	}
	// Ollama's "load the model": an empty prompt serves nothing.
	m := decodeJSON(t, ollamaPost(t, st.URL+"/api/generate", `{"model":"ref-tiny"}`).Body)
	if m["done"] != true || m["done_reason"] != "load" || st.Node.Stores.Log.Durable() != 0 {
		t.Fatalf("load: %v, %d receipts", m, st.Node.Stores.Log.Durable())
	}
}

// TestOfficialOllamaClient runs the official Ollama JavaScript client
// (test/ollama/test.mjs) against the real server on a TCP port, and then
// checks that the daemon's log holds exactly the receipts the client was
// given. It runs against an open node and one that requires a bearer
// token, given as the client's Authorization header.
func TestOfficialOllamaClient(t *testing.T) {
	for _, key := range []string{"", "mshd_ollama-client-key"} {
		t.Run(map[bool]string{true: "open", false: "token"}[key == ""], func(t *testing.T) { officialClient(t, ollamaRun, key) })
	}
}

// ollamaRun: generate, generate stream, chat, chat stream, embed.
var ollamaRun = officialRun{client: "Ollama", dir: ollamaDir, module: "ollama", token: "ollama", backends: fieldsBackends, calls: 5}

// /api/embed is the same metered serve as /v1/embeddings: one receipt
// for the texts, sealed in the log, its id in the answer; the vectors are
// the engine's, one per text.
func TestOllamaEmbed(t *testing.T) {
	st := apitest.Start(t, fieldsBackends, node.Options{})
	resp := ollamaPost(t, st.URL+"/api/embed", `{"model":"ref-embed","input":["a joule","a watt"]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	m := decodeJSON(t, resp.Body)
	vecs, ok := m["embeddings"].([]any)
	if !ok || len(vecs) != 2 {
		t.Fatalf("embeddings %v", m["embeddings"])
	}
	a, b := vecs[0].([]any), vecs[1].([]any)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("vectors of %d and %d values", len(a), len(b))
	}
	if fmt.Sprint(a) == fmt.Sprint(b) {
		t.Fatal("two texts embedded alike")
	}
	r := m["mesh_receipt"].(map[string]any)
	if r["backend"] != "ref-embed" || r["tokens_accepted"] != float64(2) || resp.Header.Get("Mesh-Receipt-Id") != r["id"] {
		t.Fatalf("receipt %v (header %q)", r, resp.Header.Get("Mesh-Receipt-Id"))
	}
	seq := uint64(r["sequence"].(float64))
	envs, err := st.Node.Stores.Log.Range(context.Background(), seq, 1)
	if err != nil || len(envs) != 1 || wire.ContentOf(envs[0]).String() != r["id"] {
		t.Fatalf("receipt %d is not the log's: %v", seq, err)
	}
	// A model that does not embed is refused as Ollama refuses one.
	resp = ollamaPost(t, st.URL+"/api/embed", `{"model":"ref-tiny","input":"a joule"}`)
	if m := decodeJSON(t, resp.Body); resp.StatusCode != 400 || !strings.Contains(fmt.Sprint(m["error"]), `"ref-tiny" does not support embeddings`) {
		t.Fatalf("%d %v", resp.StatusCode, m)
	}
}
