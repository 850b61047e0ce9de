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
)

// A provider that follows a branch moves its pin only when the branch's
// head moved, embeds only the files that changed, serves the new corpus
// signed afresh, and each pin it serves is logged as a signed statement
// chained to the one before.
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
	key, _ := steward.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	pins := filepath.Join(t.TempDir(), "example__docs.pins")
	log := func(r SyncResult) bool {
		t.Helper()
		ok, err := AppendPin(pins, key, PinFor("example", "docs", r.Corpus, r.Stats, 1_767_225_600_000))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !log(SyncResult{Corpus: c}) {
		t.Fatal("the first pin was not logged")
	}

	// The head has not moved: nothing is ingested or logged.
	calls := emb.calls
	r, err := p.Sync(ctx, cfg)
	if err != nil || r.Moved || emb.calls != calls || p.Corpus() != c {
		t.Fatalf("sync at the same head: %v moved=%v, %d embed calls", err, r.Moved, emb.calls-calls)
	}
	if log(r) {
		t.Fatal("the same pin was logged twice")
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
	if !log(r) {
		t.Fatal("the moved pin was not logged")
	}
	got, err := ReadPins(pins, key.Public())
	if err != nil || len(got) != 2 || got[0].CorpusHash != c.Hash() || got[1].CorpusHash != d.CorpusHash ||
		got[1].Repos[0].Commit != c2 || got[1].Embedded != 1 || got[1].Reused != 1 || got[0].Prev != nil || len(got[1].Prev) != 32 {
		t.Fatalf("pin log: %v %+v", err, got)
	}

	// The log is the steward's and a chain: another key, an altered byte
	// or a dropped first statement are refused.
	other, _ := steward.NewKeyFromSeed(bytes.Repeat([]byte{4}, 32))
	if _, err := ReadPins(pins, other.Public()); err == nil {
		t.Error("a pin log verified under another key")
	}
	data, _ := os.ReadFile(pins)
	altered := bytes.Clone(data)
	altered[len(altered)-70] ^= 1
	dropped := data[4+len(got[0].Envelope()):]
	for name, b := range map[string][]byte{"altered": altered, "first dropped": dropped, "torn": data[:len(data)-1]} {
		path := filepath.Join(t.TempDir(), "pins")
		os.WriteFile(path, b, 0o600)
		if _, err := ReadPins(path, key.Public()); err == nil {
			t.Errorf("%s pin log verified", name)
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
