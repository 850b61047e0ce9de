package api_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"meshd/agent/api/client"
	"meshd/rag"
	"meshd/rag/binding"
	"meshd/steward"
)

// startNATS runs an embedded nats-server on a free loopback port and
// returns a client connection to it.
func startNATS(t *testing.T) (*server.Server, func() *nats.Conn) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready within 10s")
	}
	t.Cleanup(s.Shutdown)
	return s, func() *nats.Conn {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// Two nodes announce the same corpus on NATS; a caller discovers both by
// corpus name, queries each over NATS, and gets each one's reply bound to
// that node's steward key. A reply from node B, for a caller that pinned
// node A (B answering on A's behalf, as a relay does), is refused; a node
// that withdraws its announcement is no longer found.
func TestRAGOverNATS(t *testing.T) {
	_, connect := startNATS(t)
	a, b := corpusStack(t, ""), corpusStack(t, "")
	ncA := connect()
	annA, err := a.API.AnnounceRAG(ncA)
	if err != nil {
		t.Fatal(err)
	}
	annB, err := b.API.AnnounceRAG(connect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { annA.Stop(); annB.Stop() })
	caller := connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	found, err := client.Discover(ctx, caller, client.ForCorpus("example/docs"), 2)
	if err != nil || len(found) != 2 {
		t.Fatalf("discover: %v, %d providers", err, len(found))
	}
	want := map[string]bool{a.Node.Key.ID(): true, b.Node.Key.ID(): true}
	hashA := a.Node.Providers()[0].Description().CorpusHash
	for _, p := range found {
		if !want[p.StewardID()] || p.Org != "example" || p.Name != "docs" || p.CorpusHash != hashA || p.Dim != ragDim {
			t.Fatalf("discovered %+v", p)
		}
		delete(want, p.StewardID())
	}

	text := "a joule"
	for _, p := range found {
		c := client.NewRAGOverNATS(caller, p)
		// The caller pins the key it knows for that node beforehand.
		st := a
		if p.StewardID() == b.Node.Key.ID() {
			st = b
		}
		c.Trust(st.Node.Trusted())
		before := st.Node.Stores.Log.Next()
		d, bound, err := c.Describe(ctx, "example", "docs")
		if err != nil || bound.Err != nil || d.Hash() != d.CorpusHash || d.CorpusHash != p.CorpusHash {
			t.Fatalf("describe over nats from %s: %v %v", p.StewardID(), err, bound.Err)
		}
		ans, err := c.Answer(ctx, "example", "docs", client.Query{Text: &text, TopK: 2})
		if err != nil || ans.Binding.Err != nil || len(ans.Hits) != 2 || ans.CorpusHash != p.CorpusHash {
			t.Fatalf("answer over nats from %s: %v %+v", p.StewardID(), err, ans)
		}
		if ans.Binding.Statement.Provider != p.StewardID() || !ans.Receipt.Key.Equal(st.Node.Trusted()) {
			t.Fatalf("answer bound to %s, receipt by %x; called %s", ans.Binding.Statement.Provider, []byte(ans.Receipt.Key), p.StewardID())
		}
		if st.Node.Stores.Log.Next() != before+1 {
			t.Fatalf("an answer over nats sealed %d receipts, want 1", st.Node.Stores.Log.Next()-before)
		}
		for _, h := range ans.Hits {
			if err := rag.VerifyHit(h); err != nil {
				t.Fatal(err)
			}
		}
		// Refusals travel with their contract name.
		var ce *client.Error
		if _, err := c.Chunk(ctx, "example", "docs", "nope"); !errors.As(err, &ce) || ce.Code != "not_found" {
			t.Fatalf("chunk nope over nats: %v", err)
		}
	}

	// B answers a caller who pinned A: refused.
	var atB client.Provider
	for _, p := range found {
		if p.StewardID() == b.Node.Key.ID() {
			atB = p
		}
	}
	relayed := client.NewRAGOverNATS(caller, atB)
	relayed.Trust(a.Node.Trusted())
	if _, err := relayed.Document(ctx, "example", "docs", "alpha/joule.md"); !errors.Is(err, binding.RefusedSigner) {
		t.Fatalf("B's reply for a caller that pinned A: %v, want %s", err, binding.RefusedSigner)
	}
	_, bound, err := relayed.Describe(ctx, "example", "docs")
	if err != nil || binding.ReasonOf(bound.Err) != binding.RefusedSigner {
		t.Fatalf("B's description for a caller that pinned A: %v %v", err, bound.Err)
	}

	// A withdraws (the flush: the server has taken its unsubscriptions):
	// only B is found, and nobody answers on A's subject.
	var atA client.Provider
	for _, p := range found {
		if p.StewardID() == a.Node.Key.ID() {
			atA = p
		}
	}
	if err := annA.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ncA.Flush(); err != nil {
		t.Fatal(err)
	}
	found, err = client.Discover(ctx, caller, client.ForCorpus("example/docs"), 1)
	if err != nil || len(found) != 1 || found[0].StewardID() != b.Node.Key.ID() {
		t.Fatalf("after A withdrew: %v %+v", err, found)
	}
	if _, _, err := client.NewRAGOverNATS(caller, atA).Describe(ctx, "example", "docs"); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("A's subject after it withdrew: %v", err)
	}
}

// A corpus that follows its branch (sync) starts at the branch's head,
// moves to it on a sync only when it moved, re-embedding only the changed
// file, seals each pin in the pin log, and the NATS announcement follows
// the new corpus hash.
func TestCorpusFollowsBranch(t *testing.T) {
	_, connect := startNATS(t)
	st, repo := corpusStackRepo(t, "", true)
	ann, err := st.API.AnnounceRAG(connect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ann.Stop() })
	st.Node.OnCorpusMoved(func() {
		if err := ann.Refresh(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := st.Node.Providers()[0]
	first := p.Description()

	if moved, err := st.Node.SyncCorpora(ctx); err != nil || len(moved) != 0 {
		t.Fatalf("sync at the same head: %v %v", moved, err)
	}
	head := repo.commit(map[string]string{"shunt.md": "the shunt turns current\ninto a small voltage\n"})
	moved, err := st.Node.SyncCorpora(ctx)
	if err != nil || len(moved) != 1 || moved[0] != "example/docs" {
		t.Fatalf("sync after a commit: %v %v", moved, err)
	}
	d := p.Description()
	if d.CorpusHash == first.CorpusHash || d.Repos[0].Commit != head || d.Hash() != d.CorpusHash {
		t.Fatalf("after the sync: %+v", d)
	}
	// Each pin served is one corpus-pin record in the chain, the moved one
	// naming the first.
	envs, err := st.Node.Stores.Log.Range(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var logged []*steward.Receipt
	for _, env := range envs {
		o, err := steward.OpenEnvelope(env, st.Node.Trusted())
		if err != nil {
			t.Fatal(err)
		}
		if r := o.Receipt; r.Record != nil && *r.Record == steward.RecordCorpusPin {
			logged = append(logged, r)
		}
	}
	if len(logged) != 2 || !strings.HasPrefix(logged[0].Recipe, "rag/v1:corpus="+first.CorpusHash+":") || logged[0].PinPrev != nil ||
		!strings.HasPrefix(logged[1].Recipe, "rag/v1:corpus="+d.CorpusHash+":") || logged[1].PinPrev == nil || *logged[1].PinPrev != logged[0].Sequence {
		t.Fatalf("pin records: %+v", logged)
	}
	found, err := client.Discover(ctx, connect(), client.ForCorpus("example/docs"), 1)
	if err != nil || len(found) != 1 || found[0].CorpusHash != d.CorpusHash {
		t.Fatalf("the announcement after the move: %v %+v", err, found)
	}
	// An answer names the corpus now served.
	text := "a small voltage"
	c := client.NewRAGOverNATS(connect(), found[0])
	c.Trust(st.Node.Trusted())
	ans, err := c.Answer(ctx, "example", "docs", client.Query{Text: &text, TopK: 1})
	if err != nil || ans.Binding.Err != nil || ans.CorpusHash != d.CorpusHash || !strings.HasPrefix(ans.Receipt.Receipt.Recipe, "rag/v1:corpus="+d.CorpusHash) {
		t.Fatalf("answer after the move: %v %+v", err, ans)
	}
}

// A reply that cannot fit the NATS server's max_payload is refused by
// name, at once, rather than left for the caller to time out on.
func TestRAGOverNATSReplyTooLarge(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 4096 + 64})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready within 10s")
	}
	t.Cleanup(s.Shutdown)
	dial := func() *nats.Conn {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	st := corpusStack(t, "")
	ann, err := st.API.AnnounceRAG(dial())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ann.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	caller := dial()
	found, err := client.Discover(ctx, caller, client.ForCorpus("example/docs"), 1)
	if err != nil || len(found) != 1 {
		t.Fatalf("discover: %v %d", err, len(found))
	}
	var ce *client.Error
	_, _, err = client.NewRAGOverNATS(caller, found[0]).Describe(ctx, "example", "docs")
	if !errors.As(err, &ce) || ce.Status != 413 || ce.Code != "reply_too_large" || !strings.Contains(ce.Message, "over HTTP") {
		t.Fatalf("describe over a small max_payload: %v", err)
	}
}
