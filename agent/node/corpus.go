package node

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"meshd/agent/config"
	"meshd/agent/corpus"
	"meshd/agent/fleet"
	"meshd/engine/subprocess"
	"meshd/rag"
	"meshd/shunt"
	"meshd/wire"
)

// Corpus is one configured corpus: its provider and the embedding engine
// behind it.
type Corpus struct {
	Config   config.Corpus
	Provider *corpus.Provider
	// Span is nil for a corpus without meters.
	Span *shunt.Span
	sub  *subprocess.Engine
}

func (c *Corpus) stop(ctx context.Context) error {
	if c.sub == nil {
		return nil
	}
	return c.sub.Stop(ctx)
}

// Providers are the corpora served, in configuration order.
func (n *Node) Providers() []*corpus.Provider {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*corpus.Provider, len(n.corpora))
	for i, c := range n.corpora {
		out[i] = c.Provider
	}
	return out
}

// Provider is the corpus served under org/name.
func (n *Node) Provider(org, name string) (*corpus.Provider, bool) {
	for _, p := range n.Providers() {
		if p.Org == org && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// sameCorpus says whether b can keep a's embedding engine and ingested
// corpus: every field but the meters, which choose the span.
func sameCorpus(a, b config.Corpus) bool {
	a.Meters, b.Meters = nil, nil
	return reflect.DeepEqual(a, b)
}

// engineEmbedder embeds through an embedding engine; it learns the
// vectors' length from the engine once.
type engineEmbedder struct {
	e   *subprocess.Engine
	dim int
}

func (m *engineEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	return m.e.Embed(ctx, texts)
}

func (m *engineEmbedder) Dim() int { return m.dim }

// Acquire lets the agent take the engine's slot before the meter window.
func (m *engineEmbedder) Acquire(ctx context.Context) (context.Context, func(), error) {
	return m.e.Acquire(ctx)
}

// startCorpus starts the corpus's embedding engine, ingests the corpus
// (reusing the vectors of files unchanged since the saved or the running
// corpus) and saves it for the next start.
func (n *Node) startCorpus(ctx context.Context, stateDir string, cc config.Corpus, old *Node) (*Corpus, error) {
	e, err := subprocess.New(ctx, subprocess.Config{
		Name: "embed:" + cc.Org + "/" + cc.Name, Runner: cc.Runner, Model: cc.EmbeddingModel, Embedding: true,
		ContextSize: cc.Context, Threads: cc.Threads, Fidelity: wire.Fidelity(cc.Fidelity), UJPerToken: cc.UJPerToken,
		Log: n.log.With("corpus", cc.Org+"/"+cc.Name),
	})
	if err != nil {
		return nil, err
	}
	if err := e.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the embedding engine: %w", err)
	}
	c := &Corpus{Config: cc, sub: e}
	fail := func(err error) (*Corpus, error) {
		c.stop(context.WithoutCancel(ctx))
		return nil, err
	}
	probe, _, err := e.Embed(ctx, []string{cc.PassagePrefix + "dimension probe"})
	if err != nil {
		return fail(fmt.Errorf("embedding engine: %w", err))
	}
	emb := &engineEmbedder{e: e, dim: len(probe[0])}
	dir := filepath.Join(stateDir, "corpus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	path := filepath.Join(dir, cc.Org+"__"+cc.Name+".cbor")
	prev, err := corpus.Load(path)
	if err != nil {
		n.log.Warn("corpus state unreadable; ingesting afresh", "corpus", cc.Org+"/"+cc.Name, "err", err)
		prev = nil
	}
	if old != nil {
		for _, oc := range old.corpora {
			if oc.Config.Org == cc.Org && oc.Config.Name == cc.Name {
				prev = oc.Provider.Corpus()
			}
		}
	}
	ccfg := corpus.Config{Model: cc.Model, ChunkLines: cc.ChunkLines, Overlap: cc.ChunkOverlap, MaxFileBytes: cc.MaxFileBytes, MaxChunkBytes: cc.MaxChunkBytes,
		PassagePrefix: cc.PassagePrefix, QueryPrefix: cc.QueryPrefix}
	for _, r := range cc.Repos {
		ccfg.Repos = append(ccfg.Repos, corpus.Repo{Repo: rag.Repo{ID: r.ID, URL: r.URL, Branch: r.Branch, Commit: r.Commit}, Path: r.Path})
	}
	cp, st, err := corpus.Ingest(ctx, ccfg, emb, prev)
	if err != nil {
		return fail(err)
	}
	if err := cp.Save(path); err != nil {
		return fail(err)
	}
	n.log.Info("corpus ingested", "corpus", cc.Org+"/"+cc.Name, "hash", cp.Hash(), "files", st.Files, "reused", st.Reused,
		"embedded", st.Embedded, "chunks", st.Chunks, "skipped", st.Skipped, "vector_bytes", cp.VectorBytes())
	var signer *rag.PrivateKey
	if cc.SigningKey != "" {
		data, err := os.ReadFile(cc.SigningKey)
		if err != nil {
			return fail(fmt.Errorf("signing key: %w", err))
		}
		seed, err := hex.DecodeString(strings.TrimSpace(string(data)))
		if err != nil {
			return fail(fmt.Errorf("signing key %s: want the hex seed: %w", cc.SigningKey, err))
		}
		if signer, err = rag.NewKeyFromSeed(cc.SigningProfile, seed); err != nil {
			return fail(fmt.Errorf("signing key %s: %w", cc.SigningKey, err))
		}
	}
	p, err := corpus.NewProvider(corpus.ProviderConfig{Org: cc.Org, Name: cc.Name, Corpus: cp, Embedder: emb,
		EmbedRecipe: e.Recipe(), QueryPrefix: cc.QueryPrefix, Fidelity: wire.Fidelity(cc.Fidelity), UJPerToken: cc.UJPerToken, Signer: signer})
	if err != nil {
		return fail(err)
	}
	c.Provider = p
	return c, nil
}

// DialRAG connects to the fleet's NATS servers for announcing the node's
// corpora (agent/api's AnnounceRAG), with the [fleet] credentials, on a
// connection of its own: the publisher's connection fails publishes fast
// while disconnected, which a request-reply service does not want shared.
// It returns nil without [fleet] url or without corpora. The connection
// retries in the background, so a NATS server that is down delays
// discovery, never the node's start.
func (n *Node) DialRAG(ctx context.Context) (*nats.Conn, error) {
	n.mu.Lock()
	f, corpora := n.cfg.Fleet, len(n.corpora)
	n.mu.Unlock()
	if f.URL == "" || corpora == 0 {
		return nil, nil
	}
	return fleet.Dial(ctx, fleet.ConnOptions{URL: f.URL, Creds: f.Creds, NKeySeedFile: f.NKeySeedFile, User: f.User, Password: f.Password,
		CAFile: f.CAFile, CertFile: f.CertFile, KeyFile: f.KeyFile, Name: "meshd rag " + n.Key.ID()},
		n.log.With("component", "rag"), time.Second, 30*time.Second)
}
