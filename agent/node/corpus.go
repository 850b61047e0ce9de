package node

import (
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"meshd/agent/config"
	"meshd/agent/corpus"
	"meshd/agent/fleet"
	"meshd/engine/subprocess"
	"meshd/rag"
	"meshd/shunt"
	"meshd/steward"
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

// corpusConfig is the ingestion configuration of cc.
func corpusConfig(cc config.Corpus) corpus.Config {
	ccfg := corpus.Config{Model: cc.Model, ChunkLines: cc.ChunkLines, Overlap: cc.ChunkOverlap, MaxFileBytes: cc.MaxFileBytes, MaxChunkBytes: cc.MaxChunkBytes,
		PassagePrefix: cc.PassagePrefix, QueryPrefix: cc.QueryPrefix}
	for _, r := range cc.Repos {
		ccfg.Repos = append(ccfg.Repos, corpus.Repo{Repo: rag.Repo{ID: r.ID, URL: r.URL, Branch: r.Branch, Commit: r.Commit}, Path: r.Path})
	}
	return ccfg
}

// corpusPath is where the corpus's state (suffix ".cbor") and the index
// of its last pin record (".pin") are kept.
func (n *Node) corpusPath(cc config.Corpus, suffix string) string {
	return filepath.Join(n.cfg.Steward.StateDir, "corpus", cc.Org+"__"+cc.Name+suffix)
}

// sealPin seals the pin now served as a corpus-pin record in the
// steward's chain (PROFILE §22), unless the corpus's last pin record
// names it already (a restart at the same pin). A pin that cannot be
// sealed is reported and the corpus served regardless: its answers'
// receipts name the corpus hash in their recipe either way.
func (n *Node) sealPin(ctx context.Context, cc config.Corpus, c *corpus.Corpus, st corpus.Stats, recipe, why string) {
	name := cc.Org + "/" + cc.Name
	n.pinMu.Lock()
	defer n.pinMu.Unlock()
	pins := corpus.Pins{Steward: n.Steward, Log: n.Stores.Log}
	s, err := pins.Seal(context.WithoutCancel(ctx), n.corpusPath(cc, ".pin"), corpus.PinDoc(cc.Org, cc.Name, c, st, why), recipe)
	switch {
	case err != nil:
		n.log.Error("corpus pin not sealed", "corpus", name, "hash", c.Hash(), "err", err)
	case s != nil:
		n.log.Info("corpus pin sealed", "corpus", name, "hash", c.Hash(), "why", why, "sequence", s.Receipt.Sequence, "id", s.ID.String())
	}
}

// OnCorpusMoved registers f to be called after a sync moved a corpus's
// pin (the NATS announcement names the corpus hash, and is refreshed so).
func (n *Node) OnCorpusMoved(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.corpusMoved = append(n.corpusMoved, f)
}

// SyncCorpora moves every corpus that follows its branches (sync) to their
// heads now, if they moved: re-ingesting only changed files, saving the
// state, sealing the new pin in the receipt chain. It returns the corpora whose
// pin moved and the first error (a corpus that failed keeps its pin).
func (n *Node) SyncCorpora(ctx context.Context) ([]string, error) {
	n.mu.Lock()
	corpora := slices.Clone(n.corpora)
	hooks := slices.Clone(n.corpusMoved)
	n.mu.Unlock()
	var moved []string
	var first error
	for _, c := range corpora {
		if c.Config.Sync <= 0 {
			continue
		}
		name := c.Config.Org + "/" + c.Config.Name
		r, err := c.Provider.Sync(ctx, corpusConfig(c.Config))
		if err != nil {
			n.log.Warn("corpus sync failed; keeping the pin", "corpus", name, "err", err)
			first = cmp.Or(first, err)
			continue
		}
		if !r.Moved {
			continue
		}
		if err := r.Corpus.Save(n.corpusPath(c.Config, ".cbor")); err != nil {
			n.log.Warn("corpus state not saved after the sync", "corpus", name, "err", err)
		}
		n.log.Info("corpus pin moved", "corpus", name, "from", r.Previous.Hash(), "to", r.Corpus.Hash(),
			"reused", r.Stats.Reused, "embedded", r.Stats.Embedded, "chunks", r.Stats.Chunks)
		n.sealPin(ctx, c.Config, r.Corpus, r.Stats, c.Provider.Recipe(), steward.PinSync)
		moved = append(moved, name)
	}
	if len(moved) > 0 {
		for _, f := range hooks {
			f()
		}
	}
	return moved, first
}

// startCorpusSync starts the sync loop; it runs until Close.
func (n *Node) startCorpusSync(ctx context.Context) {
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	n.stopSync, n.syncDone, n.syncKick = stop, make(chan struct{}), make(chan struct{}, 1)
	go func() {
		defer close(n.syncDone)
		n.runCorpusSync(bg, n.syncKick)
	}()
}

// kickCorpusSync tells the loop the corpora changed (a reload).
func (n *Node) kickCorpusSync() {
	if n.syncKick == nil {
		return
	}
	select {
	case n.syncKick <- struct{}{}:
	default:
	}
}

// runCorpusSync syncs each following corpus every its sync interval, from
// when the node started, until ctx ends; kick wakes it after a reload.
func (n *Node) runCorpusSync(ctx context.Context, kick <-chan struct{}) {
	last := map[*corpus.Provider]time.Time{}
	for {
		n.mu.Lock()
		corpora := slices.Clone(n.corpora)
		n.mu.Unlock()
		now := time.Now()
		var wait time.Duration
		due := false
		for _, c := range corpora {
			iv := time.Duration(c.Config.Sync)
			if iv <= 0 {
				continue
			}
			t, ok := last[c.Provider]
			if !ok {
				last[c.Provider], t = now, now
			}
			left := t.Add(iv).Sub(now)
			if left <= 0 {
				due = true
				last[c.Provider] = now
				left = iv
			}
			if wait == 0 || left < wait {
				wait = left
			}
		}
		if due {
			_, _ = n.SyncCorpora(ctx)
			continue
		}
		var timer <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-kick:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
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
	path := n.corpusPath(cc, ".cbor")
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
	ccfg := corpusConfig(cc)
	if cc.Sync > 0 {
		// A corpus that follows its branches starts at their heads.
		for i := range ccfg.Repos {
			r := &ccfg.Repos[i]
			if r.Commit, err = corpus.BranchHead(r.Path, r.Branch); err != nil {
				return fail(fmt.Errorf("repo %q: %w", r.ID, err))
			}
		}
	}
	cp, st, err := corpus.Ingest(ctx, ccfg, emb, prev)
	if err != nil {
		return fail(err)
	}
	if err := cp.Save(path); err != nil {
		return fail(err)
	}
	why := steward.PinStart
	if old != nil {
		why = steward.PinReload
	}
	n.sealPin(ctx, cc, cp, st, corpus.RecipeFor(cp, e.Recipe()), why)
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
