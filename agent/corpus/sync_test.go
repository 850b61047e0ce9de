package corpus

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/rag"
	"meshd/steward"
	"meshd/wire"
)

// A provider that follows a branch moves its pin only when the branch's
// head moved, embeds only the files that changed, serves the new corpus
// signed afresh.
func TestSyncFollowsBranch(t *testing.T) {
	ctx := context.Background()
	g := newGitRepo(t)
	c1 := g.commit(map[string]string{"shunt.md": "the shunt turns current into a voltage\n", "joule.md": "a joule is one watt for one second\n"})
	cfg := Config{Model: "test/words:f32", ChunkLines: 4, Repos: []Repo{
		{Repo: rag.Repo{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "master", Commit: c1}, Path: g.dir}}}
	emb := &wordEmbedder{dim: 32}
	c, _, err := Ingest(ctx, cfg, emb, nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := rag.NewKeyFromSeed(rag.ProfilePQPure, bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProvider(ProviderConfig{Org: "example", Name: "docs", Corpus: c, Embedder: emb, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	// The head has not moved: nothing is ingested or logged.
	calls := emb.calls
	r, err := p.Sync(ctx, cfg)
	if err != nil || r.Moved || emb.calls != calls || p.Corpus() != c {
		t.Fatalf("sync at the same head: %v moved=%v, %d embed calls", err, r.Moved, emb.calls-calls)
	}

	// The branch moves: only shunt.md is embedded again.
	c2 := g.commit(map[string]string{"shunt.md": "the shunt turns current into a small voltage\n"})
	r, err = p.Sync(ctx, cfg)
	if err != nil || !r.Moved || r.Previous != c {
		t.Fatalf("sync after a commit: %v moved=%v", err, r.Moved)
	}
	if r.Stats.Reused != 1 || r.Stats.Embedded != 1 || p.Corpus().Repos[0].Commit != c2 {
		t.Fatalf("stats %+v, pin %s (want %s)", r.Stats, p.Corpus().Repos[0].Commit, c2)
	}
	d := p.Description()
	if d.CorpusHash == c.Hash() || d.CorpusHash != rag.CorpusHash(cfg.Model, 32, []rag.Repo{{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "master", Commit: c2}}) {
		t.Fatalf("served hash %s", d.CorpusHash)
	}
	if res, err := rag.VerifyCorpus(d, signer.NodeID(), rag.ProfilePQPure); err != nil || res != rag.SignedBy(signer.NodeID()) {
		t.Fatalf("the moved corpus is not signed afresh: %v %v", res, err)
	}
	for _, ch := range r.Corpus.Chunks {
		want := c2
		if ch.Provenance.Path == "alpha/joule.md" {
			want = c1 // unchanged: keeps the commit it was ingested at
		}
		if ch.Provenance.Commit != want {
			t.Fatalf("%s names %s, want %s", ch.Provenance.Path, ch.Provenance.Commit, want)
		}
	}
	// A branch that is not there is an error, and the served corpus stays.
	bad := cfg
	bad.Repos = []Repo{cfg.Repos[0]}
	bad.Repos[0].Branch = "nope"
	if _, err := p.Sync(ctx, bad); err == nil || !strings.Contains(err.Error(), `no branch "nope"`) || p.Corpus() != r.Corpus {
		t.Fatalf("sync to a missing branch: %v", err)
	}
}

// Each pin is sealed once in the steward's chain, naming the corpus's
// pin before it: a pin equal to the last seals nothing, a moved one
// exactly one record; the predecessor is found in the chain when the
// index is lost or was left mid-seal, and the chain verifies.
func TestPinsSealInTheChain(t *testing.T) {
	ctx := context.Background()
	key, _ := steward.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	dir := filepath.Join(t.TempDir(), "receipts")
	l, _, err := steward.OpenLog(ctx, dir, steward.LogOptions{Key: key, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	st := steward.New(key, l, steward.Options{})
	pins := Pins{Steward: st, Log: l}
	index := filepath.Join(t.TempDir(), "example__docs.pin")
	corpusAt := func(commit string) *Corpus {
		return &Corpus{Model: "test/words:f32", Dim: 32, Repos: []Repo{{Repo: rag.Repo{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "master", Commit: commit}}}}
	}
	seal := func(c *Corpus, why string) (*steward.Sealed, steward.CorpusPinDoc) {
		t.Helper()
		doc := PinDoc("example", "docs", c, Stats{Embedded: 4, Reused: 1}, why)
		before := l.Next()
		s, err := pins.Seal(ctx, index, doc, RecipeFor(c, "gguf:e5"))
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			if l.Next() != before {
				t.Fatalf("nothing sealed, but the log grew from %d to %d", before, l.Next())
			}
			return nil, doc
		}
		if l.Next() != before+1 {
			t.Fatalf("a pin move sealed %d records", l.Next()-before)
		}
		if s.Receipt.Sequence > 0 {
			prevEnv, _ := l.Range(ctx, *s.Receipt.PinPrev, 1)
			doc.Prev = wire.ContentOf(prevEnv[0]).String()
		}
		if err := steward.CheckRecordDocument(s.Receipt, doc.Encode()); err != nil {
			t.Fatal(err)
		}
		return s, doc
	}
	c1, c2, c3, c4 := corpusAt(strings.Repeat("1", 40)), corpusAt(strings.Repeat("2", 40)), corpusAt(strings.Repeat("3", 40)), corpusAt(strings.Repeat("4", 40))
	first, _ := seal(c1, steward.PinStart)
	if first == nil || first.Receipt.PinPrev != nil || first.Receipt.Backend != "rag:example/docs" || first.Receipt.Recipe != RecipeFor(c1, "gguf:e5") {
		t.Fatalf("first pin: %+v", first)
	}
	if again, _ := seal(c1, steward.PinStart); again != nil {
		t.Fatal("a restart at the same pin sealed it again")
	}
	// A serve between pins does not break the line.
	if _, err := st.Seal(ctx, steward.RunRecordDraft(steward.RecordRunOpen, steward.RunOpenDoc{WorkloadSHA256: strings.Repeat("0", 64), Repetitions: 1, ServesDeclared: 1,
		Harness: "h", Caller: "c", Board: "{}", Version: "v", Meters: "[]"}.Encode(), nil, "run open")); err != nil {
		t.Fatal(err)
	}
	second, doc2 := seal(c2, steward.PinSync)
	if second == nil || *second.Receipt.PinPrev != first.Receipt.Sequence || doc2.Prev != first.ID.String() {
		t.Fatalf("moved pin: %+v %+v", second, doc2)
	}
	// The index lost: the chain is searched, the line kept.
	if err := os.Remove(index); err != nil {
		t.Fatal(err)
	}
	third, _ := seal(c3, steward.PinReload)
	if third == nil || *third.Receipt.PinPrev != second.Receipt.Sequence {
		t.Fatalf("after losing the index: %+v", third)
	}
	// A crash between the seal and the index's update: the index still
	// names the second pin with the third pending; the chain has the third.
	if err := writeIndex(index, pinIndex{Sealed: second.Envelope, Pending: doc2.Encode()}); err != nil {
		t.Fatal(err)
	}
	fourth, _ := seal(c4, steward.PinSync)
	if fourth == nil || *fourth.Receipt.PinPrev != third.Receipt.Sequence {
		t.Fatalf("after a seal left pending: %+v", fourth)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := steward.VerifyLog(ctx, dir, steward.VerifyOptions{Trusted: key.Public()}); err != nil {
		t.Fatal(err)
	}
}
