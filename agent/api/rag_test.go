package api_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/engine/runner/gguf"
	"meshd/internal/testbin"
	"meshd/rag/binding"
	"meshd/steward"
)

// ragDim is the test corpus's embedding length.
const ragDim = 64

// corpusStack serves one corpus, example/docs, of one local git repository
// embedded by the real GGUF runner over a small synthetic BERT encoder.
func corpusStack(t *testing.T, extra string) *apitest.Stack {
	t.Helper()
	st, _ := corpusStackRepo(t, extra, false)
	return st
}

// ragRepo is the corpus's repository, for tests that commit to it.
type ragRepo struct {
	t   *testing.T
	dir string
	wt  *git.Worktree
}

func (g *ragRepo) commit(files map[string]string) string {
	g.t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(g.dir, name), []byte(content), 0o644); err != nil {
			g.t.Fatal(err)
		}
		if _, err := g.wt.Add(name); err != nil {
			g.t.Fatal(err)
		}
	}
	h, err := g.wt.Commit("c", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.org", When: time.Unix(1_767_225_600, 0)}})
	if err != nil {
		g.t.Fatal(err)
	}
	return h.String()
}

// corpusStackRepo is corpusStack returning the repository; with follow the
// corpus follows branch master (sync, an interval no test waits for).
func corpusStackRepo(t *testing.T, extra string, follow bool) (*apitest.Stack, *ragRepo) {
	t.Helper()
	runner := testbin.Build(t, "meshd/cmd/mesh-gguf")
	model := filepath.Join(t.TempDir(), "embed.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.SynthBERT(f, gguf.BERTShape{Layers: 2, Dim: ragDim, Heads: 4, FF: 128, Vocab: 400, Ctx: 128, Type: gguf.F32, Pooling: 1}, 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, _ := repo.Worktree()
	g := &ragRepo{t: t, dir: dir, wt: wt}
	h := g.commit(map[string]string{"shunt.md": "the shunt turns current\ninto a voltage\n", "joule.md": "a joule is\none watt for\none second\n"})
	pin, sync := fmt.Sprintf("branch = \"main\"\ncommit = %q", h), ""
	if follow {
		pin, sync = `branch = "master"`, `sync = "1h"`
	}
	return apitest.Start(t, fmt.Sprintf(`
[[corpus]]
org = "example"
name = "docs"
model = "test/bert-synth:f32"
embedding_model = %q
runner = %q
chunk_lines = 4
uj_per_token = 3
%s

[[corpus.repo]]
id = "alpha"
url = "https://example.org/alpha.git"
path = %q
%s
%s`, model, runner, sync, dir, pin, extra), node.Options{}), g
}

// ragPost calls a procedure with args in CBOR or JSON and returns the
// status, the raw body, its decoded map (nil when it does not decode) and
// the headers.
func ragPost(t *testing.T, st *apitest.Stack, proc string, args any, useCBOR bool) (int, []byte, map[string]any, http.Header) {
	t.Helper()
	var body []byte
	ct := "application/json"
	if useCBOR {
		body, _ = cbor.Marshal(args)
		ct = "application/cbor"
	} else {
		var err error
		if body, err = json.Marshal(args); err != nil {
			t.Fatal(err)
		}
	}
	return ragPostRaw(t, st, proc, ct, body)
}

func ragPostRaw(t *testing.T, st *apitest.Stack, proc, ct string, body []byte) (int, []byte, map[string]any, http.Header) {
	t.Helper()
	resp, err := http.Post(st.URL+"/v1/rag/example/docs/"+proc, ct, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if ct == "application/cbor" {
		dm, _ := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any{})}.DecMode()
		if dm.Unmarshal(data, &out) != nil {
			out = nil
		}
	} else if json.Unmarshal(data, &out) != nil {
		out = nil
	}
	return resp.StatusCode, data, out, resp.Header
}

// vec is a query vector of the corpus's length: fill everywhere, first at 0.
func vec(first, fill float64) []float64 {
	v := make([]float64, ragDim)
	for i := range v {
		v[i] = fill
	}
	v[0] = first
	return v
}

// answer_query refuses, 400 bad_arguments and nothing sealed, a query
// vector that is not finite once it is float32 (a float64 beyond float32's
// range used to be scored as NaN: over JSON a 200 with an empty body and a
// receipt sealed anyway), a vector that is zero in float32 (cosine
// undefined), and a topic filter (the contract gives a hit no topics to
// filter on). A good vector query is answered and sealed, in both encodings.
func TestAnswerQueryVectorRules(t *testing.T) {
	st := corpusStack(t, "")
	sealed := func() uint64 { return st.Node.Stores.Log.Next() }
	for _, useCBOR := range []bool{false, true} {
		enc := map[bool]string{false: "json", true: "cbor"}[useCBOR]
		for _, c := range []struct {
			name string
			args map[string]any
			says string
		}{
			{"beyond float32", map[string]any{"query_vector": vec(1e39, 0.5)}, "query_vector[0] = 1e+39 is not a finite float32"},
			{"beyond float32, negative", map[string]any{"query_vector": vec(0.5, -3.5e38)}, "query_vector[1] = -3.5e+38 is not a finite float32"},
			{"zero", map[string]any{"query_vector": vec(0, 0)}, "query_vector is zero"},
			{"underflows to zero", map[string]any{"query_vector": vec(1e-50, 1e-60)}, "query_vector is zero"},
			{"topics", map[string]any{"query_text": "shunt", "topics": []string{"energy"}}, "topics"},
		} {
			before := sealed()
			status, body, out, _ := ragPost(t, st, "answer_query", c.args, useCBOR)
			msg, _ := out["message"].(string)
			if status != http.StatusBadRequest || out["error"] != "bad_arguments" || !bytes.Contains([]byte(msg), []byte(c.says)) {
				t.Errorf("%s, %s: %d %q, want 400 bad_arguments saying %q", enc, c.name, status, body, c.says)
			}
			if n := sealed(); n != before {
				t.Errorf("%s, %s: %d receipts sealed for a refused query", enc, c.name, n-before)
			}
		}
		// An empty topics list asks for no filter: answered.
		if status, body, _, _ := ragPost(t, st, "answer_query", map[string]any{"query_text": "shunt", "topics": []string{}}, useCBOR); status != http.StatusOK {
			t.Errorf("%s: empty topics: %d %q", enc, status, body)
		}
		// Large but within float32: answered, finite scores, sealed.
		before := sealed()
		status, body, out, _ := ragPost(t, st, "answer_query", map[string]any{"query_vector": vec(3e38, 1e-3), "top_k": 2}, useCBOR)
		hits, _ := out["hits"].([]any)
		if status != http.StatusOK || len(hits) != 2 {
			t.Fatalf("%s: a finite vector: %d %q", enc, status, body)
		}
		for _, h := range hits {
			s, ok := h.(map[string]any)["score"].(float64)
			if !ok || math.IsNaN(s) || s < -1.0001 || s > 1.0001 {
				t.Errorf("%s: score %v is not a cosine", enc, h.(map[string]any)["score"])
			}
		}
		if sealed() != before+1 {
			t.Errorf("%s: the answer sealed %d receipts, want 1", enc, sealed()-before)
		}
	}
	// A NaN can only come over CBOR (JSON has none).
	body, _ := cbor.Marshal(map[string]any{"query_vector": vec(math.NaN(), 1)})
	before := sealed()
	if status, raw, out, _ := ragPostRaw(t, st, "answer_query", "application/cbor", body); status != 400 || out["error"] != "bad_arguments" {
		t.Errorf("cbor NaN: %d %q", status, raw)
	}
	if sealed() != before {
		t.Error("cbor NaN: a receipt was sealed")
	}
}

// Every reply of the procedures, answer or refusal, in CBOR or JSON,
// carries the provider's statement (Mesh-Rag-Reply) binding it to the
// request as sent: it verifies under the node's steward key, and under no
// other, for that request only.
func TestRAGRepliesBound(t *testing.T) {
	st := corpusStack(t, "")
	other, err := steward.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		proc   string
		args   map[string]any
		status int
	}{
		{"describe_corpus", nil, 200},
		{"answer_query", map[string]any{"query_text": "a joule", "top_k": 1}, 200},
		{"list_sources_page", map[string]any{"limit": 1}, 200},
		{"get_document_verbatim", map[string]any{"source_path": "alpha/joule.md"}, 200},
		{"get_chunk_by_id", map[string]any{"chunk_id": "nope"}, 404},
		{"answer_query", map[string]any{"query_vector": vec(0, 0)}, 400},
		{"summon", nil, 404},
	} {
		for _, useCBOR := range []bool{false, true} {
			ct, body := "application/json", []byte(`{}`)
			if c.args != nil {
				body, _ = json.Marshal(c.args)
			}
			if useCBOR {
				ct, body = "application/cbor", nil
				if c.args != nil {
					body, _ = cbor.Marshal(c.args)
				}
			}
			status, data, _, hdr := ragPostRaw(t, st, c.proc, ct, body)
			if status != c.status {
				t.Fatalf("%s %s: %d %q", c.proc, ct, status, data)
			}
			env, err := base64.StdEncoding.DecodeString(hdr.Get(binding.Header))
			if err != nil || len(env) == 0 {
				t.Fatalf("%s %s: no %s header", c.proc, ct, binding.Header)
			}
			r := binding.Reply{Corpus: "example/docs", Procedure: c.proc, Request: body, Body: data, Type: ct, Status: status}
			if _, err := binding.Verify(env, st.Node.Trusted(), r); err != nil {
				t.Errorf("%s %s: %v", c.proc, ct, err)
			}
			if _, err := binding.Verify(env, other.Public(), r); binding.ReasonOf(err) != binding.RefusedSigner {
				t.Errorf("%s %s under another key: %v", c.proc, ct, err)
			}
			r.Request = append(bytes.Clone(body), ' ')
			if _, err := binding.Verify(env, st.Node.Trusted(), r); binding.ReasonOf(err) != binding.RefusedRequest {
				t.Errorf("%s %s for another request: %v", c.proc, ct, err)
			}
		}
	}
}
