package corpus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/fxamacker/cbor/v2"

	"meshd/engine"
	"meshd/rag"
	"meshd/wire"
)

// Contract limits (rag-contract-tables.md).
const (
	DefaultTopK = 10
	MaxTopK     = 100
	MaxPage     = 200
)

// Errors of the procedures; the HTTP layer maps them to statuses and the
// contract's names.
var (
	ErrBadArgs = errors.New("bad_arguments")
)

// Provider serves one corpus under <org>/<name>. It is also the engine
// that answer_query runs on, so every answer is routed, metered and sealed
// by the agent like any serve: its recipe names the corpus hash and the
// embedding model, and its outcome counts the query's tokens in and the
// hits out.
type Provider struct {
	Org, Name string
	cur       atomic.Pointer[served]
	emb       Embedder
	embRecipe string
	queryPfx  string
	fidelity  wire.Fidelity
	ujPerTok  uint64
	signer    *rag.PrivateKey
	// syncMu serialises pin moves (Sync).
	syncMu sync.Mutex
}

// served is the corpus served now with the operator's signature over its
// hash, swapped as one so a description never pairs one corpus with
// another's signature.
type served struct {
	c         *Corpus
	signature []byte // the operator's signed object, nil when unsigned
	signedBy  string
}

// ProviderConfig assembles a Provider.
type ProviderConfig struct {
	Org, Name string
	Corpus    *Corpus
	Embedder  Embedder
	// EmbedRecipe is the embedding engine's recipe (its model file's
	// content id), sealed into answer receipts beside the corpus hash.
	EmbedRecipe string
	QueryPrefix string
	Fidelity    wire.Fidelity
	UJPerToken  uint64
	// Signer, when set, signs the corpus hash (the operator's signature).
	Signer *rag.PrivateKey
}

// NewProvider checks cfg and returns the provider.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	if cfg.Org == "" || cfg.Name == "" || cfg.Corpus == nil || cfg.Embedder == nil {
		return nil, errors.New("corpus: a provider needs an org, a name, a corpus and an embedder")
	}
	p := &Provider{Org: cfg.Org, Name: cfg.Name, emb: cfg.Embedder, embRecipe: cfg.EmbedRecipe, queryPfx: cfg.QueryPrefix,
		fidelity: cfg.Fidelity, ujPerTok: cfg.UJPerToken, signer: cfg.Signer}
	if err := p.serve(cfg.Corpus); err != nil {
		return nil, err
	}
	return p, nil
}

// serve makes c the corpus served, signed afresh when there is a signer.
func (p *Provider) serve(c *Corpus) error {
	sv := &served{c: c}
	if p.signer != nil {
		obj, err := rag.Sign(p.signer.Profile(), p.signer, c.Hash())
		if err != nil {
			return fmt.Errorf("corpus %s/%s: signing the corpus hash: %w", p.Org, p.Name, err)
		}
		sv.signature, sv.signedBy = obj, p.signer.NodeID()
	}
	p.cur.Store(sv)
	return nil
}

// Corpus is the corpus served now.
func (p *Provider) Corpus() *Corpus { return p.cur.Load().c }

// backendName is the backend a corpus answer is sealed under.
func (p *Provider) backendName() string { return "rag:" + p.Org + "/" + p.Name }

// BackendName is the name its answers are sealed under: "rag:<org>/<name>".
func (p *Provider) BackendName() string { return p.backendName() }

// Backend is the provider as the agent's engine for answer_query.
func (p *Provider) Backend() engine.Backend { return answerBackend{p} }

// Description is the describe_corpus reply.
func (p *Provider) Description() rag.Description {
	sv := p.cur.Load()
	c := sv.c
	repos := make([]rag.Repo, len(c.Repos))
	for i, r := range c.Repos {
		repos[i] = r.Repo
	}
	return rag.Description{Model: c.Model, Dim: c.Dim, Repos: repos, CorpusHash: c.Hash(), Signature: sv.signature, SignedBy: sv.signedBy}
}

// Query is answer_query's arguments.
type Query struct {
	Text   *string
	Vector []float32
	TopK   int
	Topics []string
}

// EncodeQuery is the deterministic CBOR of q: the bytes an answer's
// prompt_hash addresses.
func EncodeQuery(q Query) ([]byte, error) {
	m := map[string]any{"top_k": q.TopK}
	if q.Text != nil {
		m["query_text"] = *q.Text
	}
	if q.Vector != nil {
		m["query_vector"] = q.Vector
	}
	if len(q.Topics) > 0 {
		m["topics"] = q.Topics
	}
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		return nil, err
	}
	return em.Marshal(m)
}

// Check applies the contract's argument rules.
func (q *Query) Check(dim int) error {
	switch {
	case (q.Text == nil) == (q.Vector == nil):
		return fmt.Errorf("%w: exactly one of query_text and query_vector", ErrBadArgs)
	case q.Text != nil && *q.Text == "":
		return fmt.Errorf("%w: query_text is empty", ErrBadArgs)
	case q.Vector != nil && len(q.Vector) != dim:
		return fmt.Errorf("%w: query_vector has %d values, the corpus embedding has %d", ErrDimension, len(q.Vector), dim)
	case q.TopK < 1 || q.TopK > MaxTopK:
		return fmt.Errorf("%w: top_k %d outside 1..%d", ErrBadArgs, q.TopK, MaxTopK)
	case len(q.Topics) > 0:
		return fmt.Errorf("%w: topics: no topic filter is defined for hits", ErrBadArgs)
	}
	if q.Vector != nil {
		zero := true
		for i, x := range q.Vector {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("%w: query_vector[%d] is not finite", ErrBadArgs, i)
			}
			zero = zero && x == 0
		}
		// A zero vector has no direction: every cosine is undefined, and
		// ranking by it would return chunks in storage order.
		if zero {
			return fmt.Errorf("%w: query_vector is zero: it has no direction to rank by", ErrBadArgs)
		}
	}
	return nil
}

// Answer is answer_query's reply.
type Answer struct {
	CorpusHash string
	Hits       []rag.Hit
}

// answer runs a checked query: embed the text (with the model's query
// prefix) unless a vector came, then search.
func (p *Provider) answer(ctx context.Context, q Query) (Answer, int, error) {
	c := p.Corpus()
	if err := q.Check(c.Dim); err != nil {
		return Answer{}, 0, err
	}
	vec, tokens := q.Vector, 0
	if q.Text != nil {
		vs, n, err := p.emb.Embed(ctx, []string{p.queryPfx + *q.Text})
		if err != nil {
			return Answer{}, 0, fmt.Errorf("embedding the query: %w", err)
		}
		if len(vs) != 1 {
			return Answer{}, 0, fmt.Errorf("embedding the query: %d vectors", len(vs))
		}
		vec, tokens = vs[0], n
	}
	scored, err := c.Search(vec, q.TopK)
	if err != nil {
		return Answer{}, 0, err
	}
	a := Answer{CorpusHash: c.Hash()}
	for _, s := range scored {
		ch := c.Chunks[s.Chunk]
		score := s.Score
		a.Hits = append(a.Hits, rag.Hit{ChunkID: ch.ID, Score: &score, Content: ch.Content, Provenance: ch.Provenance})
	}
	return a, tokens, nil
}

// ChunkByID is get_chunk_by_id: the hit without a score.
func (p *Provider) ChunkByID(id string) (rag.Hit, error) {
	ch, ok := p.Corpus().Chunk(id)
	if !ok {
		return rag.Hit{}, fmt.Errorf("chunk %q: %w", id, ErrNotFound)
	}
	return rag.Hit{ChunkID: ch.ID, Content: ch.Content, Provenance: ch.Provenance}, nil
}

// Document is get_document_verbatim.
func (p *Provider) Document(sourcePath string) ([]byte, rag.Provenance, error) {
	data, f, err := p.Corpus().Document(sourcePath)
	if err != nil {
		return nil, rag.Provenance{}, err
	}
	return data, f.Provenance(), nil
}

// Sources is list_sources_page.
func (p *Provider) Sources(offset, limit int) ([]File, error) {
	if offset < 0 || limit < 1 || limit > MaxPage {
		return nil, fmt.Errorf("%w: offset must be >= 0 and limit 1..%d", ErrBadArgs, MaxPage)
	}
	return p.Corpus().Sources(offset, limit), nil
}

// answerBackend is the provider as an engine.Backend. Its prompt is the
// query's deterministic CBOR (EncodeQuery), its output the answer's.
type answerBackend struct{ p *Provider }

func (b answerBackend) Name() string            { return b.p.backendName() }
func (b answerBackend) Fidelity() wire.Fidelity { return b.p.fidelity }
func (b answerBackend) UJPerToken() uint64      { return b.p.ujPerTok }

// Recipe names what answered: the corpus (its hash) and the embedding.
func (b answerBackend) Recipe() string {
	return "rag/v1:corpus=" + b.p.Corpus().Hash() + ":embed=" + b.p.embRecipe
}

// Acquire implements engine.Slotted when the embedding engine has a slot:
// the agent takes it before opening the meter window.
func (b answerBackend) Acquire(ctx context.Context) (context.Context, func(), error) {
	if s, ok := b.p.emb.(interface {
		Acquire(context.Context) (context.Context, func(), error)
	}); ok {
		return s.Acquire(ctx)
	}
	return ctx, func() {}, nil
}

// Serve implements engine.Backend: tokens in are the query's tokens as the
// embedding model read them (none for a vector query), tokens out and
// accepted are the hits returned.
func (b answerBackend) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (engine.Result, error) {
	if wire.ContentOf(prompt) != req.PromptHash {
		return engine.Result{}, fmt.Errorf("%w: the query's content id is not prompt_hash", wire.ErrBadRequest)
	}
	q, err := DecodeQuery(prompt)
	if err != nil {
		return engine.Result{}, err
	}
	if uint32(q.TopK) > req.MaxTokens {
		return engine.Result{}, fmt.Errorf("%w: top_k %d above max_tokens %d", wire.ErrBadRequest, q.TopK, req.MaxTokens)
	}
	a, tokens, err := b.p.answer(ctx, q)
	if err != nil {
		return engine.Result{}, err
	}
	out, err := EncodeAnswer(a)
	if err != nil {
		return engine.Result{}, err
	}
	n := uint32(len(a.Hits))
	return engine.Result{Outcome: wire.ServeOutcome{TokensIn: uint32(tokens), TokensOut: n, TokensAccepted: n}, Output: out}, nil
}

// DecodeQuery reads EncodeQuery's bytes.
func DecodeQuery(b []byte) (Query, error) {
	var m struct {
		QueryText   *string   `cbor:"query_text"`
		QueryVector []float32 `cbor:"query_vector"`
		TopK        int       `cbor:"top_k"`
		Topics      []string  `cbor:"topics"`
	}
	if err := cbor.Unmarshal(b, &m); err != nil {
		return Query{}, fmt.Errorf("%w: %v", ErrBadArgs, err)
	}
	return Query{Text: m.QueryText, Vector: m.QueryVector, TopK: m.TopK, Topics: m.Topics}, nil
}

// WireHit is a hit as the contract puts it on the wire.
func WireHit(h rag.Hit) map[string]any {
	pv := h.Provenance
	prov := map[string]any{"kind": pv.Kind, "path": pv.Path, "content_sha256": pv.ContentSHA256}
	if pv.Kind == rag.KindCorpus {
		prov["repo_id"], prov["commit"] = pv.RepoID, pv.Commit
	}
	if pv.StartLine > 0 {
		prov["start_line"], prov["end_line"] = pv.StartLine, pv.EndLine
	}
	if pv.DepositedBy != "" {
		prov["deposited_by"] = pv.DepositedBy
	}
	m := map[string]any{"chunk_id": h.ChunkID, "content": h.Content, "provenance": prov}
	if h.Score != nil {
		m["score"] = *h.Score
	}
	return m
}

// EncodeAnswer is an answer's deterministic CBOR: corpus_hash and hits.
func EncodeAnswer(a Answer) ([]byte, error) {
	hits := make([]any, len(a.Hits))
	for i, h := range a.Hits {
		hits[i] = WireHit(h)
	}
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		return nil, err
	}
	return em.Marshal(map[string]any{"corpus_hash": a.CorpusHash, "hits": hits})
}
