package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"meshd/engine/runner/gguf"
	"meshd/internal/testbin"
	"meshd/rag"
	"meshd/steward"
)

// meshGGUFBin is the GGUF runner, built once for the package's tests.
func meshGGUFBin(t *testing.T) string { return testbin.Build(t, "meshd/cmd/mesh-gguf") }

type testRepo struct {
	t    *testing.T
	dir  string
	repo *git.Repository
}

func newTestRepo(t *testing.T) *testRepo {
	dir := t.TempDir()
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	return &testRepo{t, dir, r}
}

func (g *testRepo) commit(files map[string]string) string {
	g.t.Helper()
	wt, _ := g.repo.Worktree()
	for name, content := range files {
		p := filepath.Join(g.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
		if _, err := wt.Add(name); err != nil {
			g.t.Fatal(err)
		}
	}
	h, err := wt.Commit("c", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.org", When: time.Unix(1_767_225_600, 0)}})
	if err != nil {
		g.t.Fatal(err)
	}
	return h.String()
}

func ragConfig(model, runner string, a *testRepo, ac string, b *testRepo, bc string) string {
	return fmt.Sprintf(`
[[corpus]]
org = "example"
name = "docs"
model = "test/bert-synth:f32"
embedding_model = %q
runner = %q
query_prefix = "query: "
passage_prefix = "passage: "
chunk_lines = 4
chunk_overlap = 1
uj_per_token = 3

[[corpus.repo]]
id = "alpha"
url = "https://example.org/alpha.git"
path = %q
branch = "main"
commit = %q

[[corpus.repo]]
id = "beta"
url = "/srv/mirrors/beta.git"
path = %q
branch = "trunk"
commit = %q
`, model, runner, a.dir, ac, b.dir, bc)
}

func ragCall(t *testing.T, td *testDaemon, proc string, args map[string]any, useCBOR bool) (int, map[string]any, http.Header) {
	t.Helper()
	var body []byte
	ct := "application/json"
	if useCBOR {
		body, _ = cbor.Marshal(args)
		ct = "application/cbor"
	} else {
		body, _ = json.Marshal(args)
	}
	resp, err := http.Post(td.base+"/v1/rag/example/docs/"+proc, ct, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := map[string]any{}
	if useCBOR {
		if resp.Header.Get("Content-Type") != "application/cbor" {
			t.Fatalf("%s: CBOR request answered as %q", proc, resp.Header.Get("Content-Type"))
		}
		dm, _ := cbor.DecOptions{DefaultMapType: mapType}.DecMode()
		if err := dm.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s: reply is not CBOR: %v", proc, err)
		}
	} else if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: %s", proc, data)
	}
	return resp.StatusCode, out, resp.Header
}

// A corpus of two local git repositories, embedded by the real runner:
// the five procedures over HTTP in CBOR and JSON, hits that verify, a
// metered receipt naming the corpus hash, and provenance that follows a
// pin move.
func TestCorpusOverHTTP(t *testing.T) {
	runner := meshGGUFBin(t)
	model := filepath.Join(t.TempDir(), "embed.gguf")
	f, _ := os.Create(model)
	// A BERT encoder as retrieval models are (e5, bge), small enough to
	// embed the corpus in a moment.
	if err := gguf.SynthBERT(f, gguf.BERTShape{Layers: 2, Dim: 64, Heads: 4, FF: 128, Vocab: 400, Ctx: 128, Type: gguf.F32, Pooling: 1}, 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a, b := newTestRepo(t), newTestRepo(t)
	a1 := a.commit(map[string]string{"shunt.md": "the shunt turns current\ninto a voltage\nthe chip reads it\n", "joule.md": "a joule is\none watt for\none second\n"})
	b1 := b.commit(map[string]string{"receipt.md": "each receipt\nis signed\nand chained\n"})
	td := startDaemon(t, ragConfig(model, runner, a, a1, b, b1), serveHooks{})

	for _, useCBOR := range []bool{true, false} {
		status, d, _ := ragCall(t, td, "describe_corpus", nil, useCBOR)
		if status != 200 {
			t.Fatalf("describe: %d %v", status, d)
		}
		desc := rag.Description{Model: d["model"].(string), Dim: toInt(d["dim"])}
		for _, r := range d["repos"].([]any) {
			m := r.(map[string]any)
			desc.Repos = append(desc.Repos, rag.Repo{ID: m["id"].(string), URL: m["url"].(string), Branch: m["branch"].(string), Commit: m["commit"].(string)})
		}
		if desc.Dim != 64 || len(desc.Repos) != 2 || desc.Hash() != d["corpus_hash"] {
			t.Fatalf("describe: %v (recomputed hash %s)", d, desc.Hash())
		}
	}
	_, d, _ := ragCall(t, td, "describe_corpus", nil, false)
	hash := d["corpus_hash"].(string)

	status, ans, hdr := ragCall(t, td, "answer_query", map[string]any{"query_text": "current into a voltage", "top_k": 3}, true)
	if status != 200 || ans["corpus_hash"] != hash {
		t.Fatalf("answer: %d %v", status, ans)
	}
	hits := ans["hits"].([]any)
	if len(hits) != 3 {
		t.Fatalf("%d hits", len(hits))
	}
	for _, h := range hits {
		hit := toHit(t, h.(map[string]any))
		if err := rag.VerifyHit(hit); err != nil {
			t.Fatalf("hit %s does not verify: %v", hit.ChunkID, err)
		}
		want := map[string]string{"alpha": a1, "beta": b1}[hit.Provenance.RepoID]
		if hit.Provenance.Commit != want {
			t.Fatalf("hit %s names commit %s, want %s", hit.Provenance.Path, hit.Provenance.Commit, want)
		}
	}
	// The answer's receipt verifies and names the corpus and the embedding.
	env := ans["x_receipt"].([]byte)
	_, hb := td.get("/v1/chain/head")
	var head struct{ Steward string }
	json.Unmarshal(hb, &head)
	pub, _ := steward.ParsePublicKey(head.Steward)
	o, err := steward.OpenEnvelope(env, pub)
	if err != nil || o.ID.String() != hdr.Get("Mesh-Receipt-Id") {
		t.Fatalf("answer receipt: %v", err)
	}
	if !strings.HasPrefix(o.Receipt.Recipe, "rag/v1:corpus="+hash+":embed=gguf:") || o.Receipt.Backend != "rag:example/docs" ||
		o.Receipt.TokensOut != 3 || o.Receipt.TokensIn == 0 {
		t.Fatalf("answer receipt: recipe %q backend %q tokens %d/%d", o.Receipt.Recipe, o.Receipt.Backend, o.Receipt.TokensIn, o.Receipt.TokensOut)
	}

	// The other procedures.
	first := toHit(t, hits[0].(map[string]any))
	status, ch, _ := ragCall(t, td, "get_chunk_by_id", map[string]any{"chunk_id": first.ChunkID}, false)
	if status != 200 || ch["content"] != first.Content || ch["score"] != nil {
		t.Fatalf("get_chunk_by_id: %d %v", status, ch)
	}
	status, doc, _ := ragCall(t, td, "get_document_verbatim", map[string]any{"source_path": "alpha/shunt.md"}, true)
	if status != 200 || string(doc["raw_bytes"].([]byte)) != "the shunt turns current\ninto a voltage\nthe chip reads it\n" {
		t.Fatalf("get_document_verbatim: %d %v", status, doc)
	}
	status, page, _ := ragCall(t, td, "list_sources_page", map[string]any{"offset": 0, "limit": 2}, false)
	if rows := page["rows"].([]any); status != 200 || len(rows) != 2 || rows[0].(map[string]any)["source_path"] != "alpha/joule.md" {
		t.Fatalf("list_sources_page: %d %v", status, page)
	}
	// Refusals under the contract's names.
	for _, c := range []struct {
		proc   string
		args   map[string]any
		status int
		name   string
	}{
		{"answer_query", map[string]any{"query_vector": []float64{1, 2, 3}}, 400, "dimension_mismatch"},
		{"answer_query", map[string]any{"query_text": "x", "top_k": 101}, 400, "bad_arguments"},
		{"answer_query", map[string]any{}, 400, "bad_arguments"},
		{"list_sources_page", map[string]any{"limit": 201}, 400, "bad_arguments"},
		{"get_chunk_by_id", map[string]any{"chunk_id": "nope"}, 404, "not_found"},
		{"get_document_verbatim", map[string]any{"source_path": "alpha/nope"}, 404, "not_found"},
		{"summon", nil, 404, "unknown_procedure"},
	} {
		status, out, _ := ragCall(t, td, c.proc, c.args, false)
		if status != c.status || out["error"] != c.name {
			t.Errorf("%s %v: %d %v, want %d %s", c.proc, c.args, status, out, c.status, c.name)
		}
	}

	// Move alpha's pin: joule.md is unchanged and keeps the commit it was
	// ingested at; shunt.md moves to the new commit.
	a2 := a.commit(map[string]string{"shunt.md": "the shunt turns current\ninto a small voltage\n"})
	td.stop()
	td2 := runDaemon(t, td.dir, rewritePin(t, filepath.Join(td.dir, "meshd.toml"), a1, a2), serveHooks{})
	_, page, _ = ragCall(t, td2, "list_sources_page", map[string]any{"limit": 10}, false)
	for _, r := range page["rows"].([]any) {
		row := r.(map[string]any)
		prov := row["provenance"].(map[string]any)
		want := map[string]string{"alpha/joule.md": a1, "alpha/shunt.md": a2, "beta/receipt.md": b1}[row["source_path"].(string)]
		if prov["commit"] != want {
			t.Fatalf("after the pin move %s names %v, want %s", row["source_path"], prov["commit"], want)
		}
	}
	if !strings.Contains(td2.logs.String(), "reused=2") {
		t.Fatalf("unchanged files were not reused:\n%s", td2.logs.String())
	}
}

func rewritePin(t *testing.T, path, from, to string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(from), []byte(to), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func toInt(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case uint64:
		return int(x)
	case int64:
		return int(x)
	}
	return -1
}

func toHit(t *testing.T, m map[string]any) rag.Hit {
	t.Helper()
	p := m["provenance"].(map[string]any)
	h := rag.Hit{ChunkID: m["chunk_id"].(string), Content: m["content"].(string), Provenance: rag.Provenance{
		Kind: p["kind"].(string), Path: p["path"].(string), RepoID: p["repo_id"].(string), Commit: p["commit"].(string),
		StartLine: toInt(p["start_line"]), EndLine: toInt(p["end_line"]), ContentSHA256: p["content_sha256"].(string)}}
	if s, ok := m["score"].(float64); ok {
		h.Score = &s
	}
	return h
}

var mapType = reflect.TypeOf(map[string]any{})
