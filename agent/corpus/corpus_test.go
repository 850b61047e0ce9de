package corpus

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"meshd/rag"
)

// wordEmbedder is a deterministic stand-in for an embedding model: each
// word adds one to a hashed bucket, so texts sharing words are similar.
// The engine's real embeddings are tested with the engine.
type wordEmbedder struct {
	dim   int
	calls int
}

func (w *wordEmbedder) Dim() int { return w.dim }

func (w *wordEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	w.calls++
	out := make([][]float32, len(texts))
	tokens := 0
	for i, t := range texts {
		v := make([]float32, w.dim)
		for _, word := range strings.Fields(strings.ToLower(t)) {
			h := fnv.New32a()
			h.Write([]byte(strings.Trim(word, ".,:;()")))
			v[h.Sum32()%uint32(w.dim)]++
			tokens++
		}
		out[i] = v
	}
	return out, tokens, nil
}

// gitRepo is a local repository the test commits to.
type gitRepo struct {
	t    *testing.T
	dir  string
	repo *git.Repository
}

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	dir := t.TempDir()
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	return &gitRepo{t: t, dir: dir, repo: r}
}

// commit writes files (nil content deletes) and commits, returning the hash.
func (g *gitRepo) commit(files map[string]string) string {
	g.t.Helper()
	wt, err := g.repo.Worktree()
	if err != nil {
		g.t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(g.dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			g.t.Fatal(err)
		}
		if _, err := wt.Add(name); err != nil {
			g.t.Fatal(err)
		}
	}
	h, err := wt.Commit("test", &git.CommitOptions{Author: &object.Signature{Name: "t", Email: "t@example.org", When: time.Unix(1_767_225_600, 0)}})
	if err != nil {
		g.t.Fatal(err)
	}
	return h.String()
}

func lines(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(prefix)
		b.WriteString(" line ")
		b.WriteString(strings.Repeat("x", i%3))
		b.WriteString("\n")
	}
	return b.String()
}

func TestIngestSearchAndPinMove(t *testing.T) {
	ctx := context.Background()
	a, b := newGitRepo(t), newGitRepo(t)
	a1 := a.commit(map[string]string{
		"docs/shunt.md": "The shunt resistor converts current to a voltage.\nAn INA226 measures it.\n",
		"docs/joule.md": "A joule is a watt for one second.\n" + lines("energy", 60),
		"bin/blob.dat":  "\x00\x01binary",
	})
	b1 := b.commit(map[string]string{"receipts.md": "Every receipt is signed and chained to the one before.\n"})
	cfg := Config{Model: "test/words:f32", ChunkLines: 20, Overlap: 4, PassagePrefix: "passage: ", QueryPrefix: "query: ", Repos: []Repo{
		{Repo: rag.Repo{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: a1}, Path: a.dir},
		{Repo: rag.Repo{ID: "beta", URL: "/srv/beta.git", Branch: "trunk", Commit: b1}, Path: b.dir},
	}}
	emb := &wordEmbedder{dim: 64}
	c, st, err := Ingest(ctx, cfg, emb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 3 || st.Skipped != 1 || st.Reused != 0 || st.Embedded != len(c.Chunks) {
		t.Fatalf("stats %+v", st)
	}
	// joule.md has 61 lines: chunks of 20 overlapping by 4 start at 1, 17, 33, 49.
	var joule []Chunk
	for _, ch := range c.Chunks {
		if ch.Provenance.Path == "alpha/docs/joule.md" {
			joule = append(joule, ch)
		}
	}
	if len(joule) != 4 || joule[1].Provenance.StartLine != 17 || joule[1].Provenance.EndLine != 36 || joule[3].Provenance.EndLine != 61 {
		t.Fatalf("joule.md chunks: %+v", joule)
	}
	hash := c.Hash()
	if want := rag.CorpusHash(cfg.Model, 64, []rag.Repo{cfg.Repos[0].Repo, cfg.Repos[1].Repo}); hash != want || len(hash) != 64 {
		t.Fatalf("corpus hash %s, want %s", hash, want)
	}
	q, _, _ := emb.Embed(ctx, []string{"query: which resistor converts current"})
	hits, err := c.Search(q[0], 3)
	if err != nil || len(hits) != 3 {
		t.Fatal(err, hits)
	}
	top := c.Chunks[hits[0].Chunk]
	if top.Provenance.Path != "alpha/docs/shunt.md" || top.Provenance.Commit != a1 {
		t.Fatalf("top hit %+v", top.Provenance)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Fatalf("hits out of order: %+v", hits)
		}
	}
	score := hits[0].Score
	if err := rag.VerifyHit(rag.Hit{ChunkID: top.ID, Score: &score, Content: top.Content, Provenance: top.Provenance}); err != nil {
		t.Fatalf("hit does not verify: %v", err)
	}
	if _, err := c.Search(make([]float32, 63), 3); err == nil || !strings.Contains(err.Error(), "dimension_mismatch") {
		t.Fatalf("short query vector: %v", err)
	}

	// Move alpha's pin: shunt.md changes, joule.md does not. The unchanged
	// file keeps the commit it was ingested at and its vectors are reused.
	a2 := a.commit(map[string]string{"docs/shunt.md": "The shunt resistor converts current to a small voltage.\n"})
	cfg.Repos[0].Commit = a2
	calls := emb.calls
	c2, st2, err := Ingest(ctx, cfg, emb, c)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Reused != 2 || st2.Embedded != 1 || emb.calls != calls+1 {
		t.Fatalf("after the pin move: %+v (%d embed calls)", st2, emb.calls-calls)
	}
	for _, ch := range c2.Chunks {
		want := map[string]string{"alpha/docs/shunt.md": a2, "alpha/docs/joule.md": a1, "beta/receipts.md": b1}[ch.Provenance.Path]
		if ch.Provenance.Commit != want {
			t.Fatalf("%s provenance commit %s, want %s", ch.Provenance.Path, ch.Provenance.Commit, want)
		}
	}
	if c2.Hash() == hash {
		t.Fatal("moving a pin did not change the corpus hash")
	}
	// The document comes back byte for byte at its ingested commit.
	data, f, err := c2.Document("alpha/docs/joule.md")
	if err != nil || f.Commit != a1 || !strings.HasPrefix(string(data), "A joule is a watt") {
		t.Fatalf("document: %v %+v", err, f)
	}
	if _, _, err := c2.Document("alpha/nope.md"); err == nil {
		t.Fatal("a missing source was found")
	}

	// Save and load give the same answers.
	path := filepath.Join(t.TempDir(), "corpus.cbor")
	if err := c2.Save(path); err != nil {
		t.Fatal(err)
	}
	c3, err := Load(path)
	if err != nil || c3.Hash() != c2.Hash() || len(c3.Chunks) != len(c2.Chunks) {
		t.Fatalf("load: %v", err)
	}
	h2, _ := c2.Search(q[0], 5)
	h3, _ := c3.Search(q[0], 5)
	for i := range h2 {
		if h2[i] != h3[i] {
			t.Fatalf("loaded corpus answers differently: %+v vs %+v", h2, h3)
		}
	}
	if got := c3.Sources(0, 2); len(got) != 2 || got[0].SourcePath != "alpha/docs/joule.md" {
		t.Fatalf("sources page: %+v", got)
	}
}

// A pin the local repository does not have is an error naming it: the
// corpus is never fetched while serving.
func TestIngestRefusesMissingCommit(t *testing.T) {
	a := newGitRepo(t)
	a.commit(map[string]string{"x.md": "x\n"})
	cfg := Config{Model: "m", Repos: []Repo{{Repo: rag.Repo{ID: "a", URL: "u", Branch: "main", Commit: strings.Repeat("ab", 20)}, Path: a.dir}}}
	_, _, err := Ingest(context.Background(), cfg, &wordEmbedder{dim: 8}, nil)
	if err == nil || !strings.Contains(err.Error(), "not in the local repository") {
		t.Fatalf("missing commit: %v", err)
	}
}

func TestChunkLines(t *testing.T) {
	text := "a\nbb\nccc\ndddd\n" + strings.Repeat("e", 30) + "\nf\n"
	cases := []struct {
		n, overlap, maxBytes int
		want                 [][2]int // start, end lines
	}{
		{2, 0, 100, [][2]int{{1, 2}, {3, 4}, {5, 6}}},
		{3, 1, 100, [][2]int{{1, 3}, {3, 5}, {5, 6}}},
		// The byte budget ends chunks early; a line over it stands alone.
		{6, 0, 10, [][2]int{{1, 3}, {4, 4}, {5, 5}, {6, 6}}},
		{6, 2, 10, [][2]int{{1, 3}, {2, 3}, {3, 4}, {4, 4}, {5, 5}, {6, 6}}},
	}
	for _, c := range cases {
		got := chunkLines(text, c.n, c.overlap, c.maxBytes, "r", "f", strings.Repeat("a", 40))
		var spans [][2]int
		for _, ch := range got {
			spans = append(spans, [2]int{ch.Provenance.StartLine, ch.Provenance.EndLine})
			lines := strings.SplitAfter(text, "\n")
			if want := strings.Join(lines[ch.Provenance.StartLine-1:ch.Provenance.EndLine], ""); ch.Content != want {
				t.Fatalf("chunk %v content %q, want %q", spans[len(spans)-1], ch.Content, want)
			}
		}
		if fmt.Sprint(spans) != fmt.Sprint(c.want) {
			t.Errorf("n=%d overlap=%d max=%d: %v, want %v", c.n, c.overlap, c.maxBytes, spans, c.want)
		}
	}
}

// Query.Check refuses what a search could only answer with NaN or chunk
// order: a non-finite or zero vector, and a topic filter it cannot apply.
func TestQueryCheck(t *testing.T) {
	text := "a query"
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	for _, c := range []struct {
		name string
		q    Query
		want error // nil: accepted
		says string
	}{
		{"text", Query{Text: &text, TopK: 1}, nil, ""},
		{"vector", Query{Vector: []float32{0, 1, 0}, TopK: 1}, nil, ""},
		{"both", Query{Text: &text, Vector: []float32{1, 0, 0}, TopK: 1}, ErrBadArgs, "exactly one"},
		{"short vector", Query{Vector: []float32{1}, TopK: 1}, ErrDimension, "1 values"},
		{"infinite", Query{Vector: []float32{1, inf, 0}, TopK: 1}, ErrBadArgs, "query_vector[1] is not finite"},
		{"nan", Query{Vector: []float32{nan, 1, 0}, TopK: 1}, ErrBadArgs, "query_vector[0] is not finite"},
		{"zero", Query{Vector: []float32{0, 0, 0}, TopK: 1}, ErrBadArgs, "zero"},
		{"topics", Query{Text: &text, TopK: 1, Topics: []string{"x"}}, ErrBadArgs, "topics"},
		{"top_k", Query{Text: &text, TopK: 101}, ErrBadArgs, "top_k 101"},
	} {
		err := c.q.Check(3)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.want, c.says)
		}
	}
}
