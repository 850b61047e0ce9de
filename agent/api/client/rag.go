package client

// The RAG service contract's five procedures on a corpus meshd serves, under
// POST /v1/rag/<org>/<name>/<procedure>, and GET /v1/rag. The client speaks
// CBOR on the wire, as the contract does (text strings, byte strings for
// signature and raw_bytes, numbers), so nothing passes through base64 or
// JSON numbers on the way.
//
// What is checked here: every reply's binding to the steward key (the
// provider's signed statement over the request sent and the reply got, the
// contract's check 1: Chunk, Document and Sources refuse an unbound reply,
// Describe and Answer return the verdict for the caller to report beside
// its other checks); every answer_query receipt is opened under the
// steward key before it is returned (as for every other receipt this
// package returns); and a describe_corpus reply is read with
// rag.ParseDescription (well formed, under macula's decoding rule). What is
// not: hits are returned as the daemon sent them, so a caller can report a
// hit that fails rag.VerifyHit rather than never seeing it; and a
// description's hash and signature are left to rag.VerifyCorpus, which
// needs the provider the caller believes it called.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/fxamacker/cbor/v2"

	"meshd/rag"
	"meshd/rag/binding"
	"meshd/steward"
)

// ragMaxReply bounds a RAG reply read into memory. get_document_verbatim
// returns a whole file, and a corpus may be configured to hold files larger
// than the default max_file_bytes (1 MiB).
const ragMaxReply = 64 << 20

// The procedures' names, as the contract spells them.
const (
	ProcDescribeCorpus      = "describe_corpus"
	ProcAnswerQuery         = "answer_query"
	ProcGetChunkByID        = "get_chunk_by_id"
	ProcGetDocumentVerbatim = "get_document_verbatim"
	ProcListSourcesPage     = "list_sources_page"
)

var ragEnc = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// ragDec decodes replies into maps with text keys: a reply map with any
// other key is not one the contract describes, and is refused.
var ragDec = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		DefaultMapType: reflect.TypeOf(map[string]any{}),
		DupMapKey:      cbor.DupMapKeyEnforcedAPF,
		IndefLength:    cbor.IndefLengthForbidden,
		TagsMd:         cbor.TagsForbidden,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// ragPath is the URL path of a procedure on org/name.
func ragPath(org, name, proc string) string {
	return "/v1/rag/" + url.PathEscape(org) + "/" + url.PathEscape(name) + "/" + url.PathEscape(proc)
}

// Binding is the verdict of the contract's check 1 on one reply: the
// provider's statement (binding.Header) verified under the steward key
// this client trusts (pinned with Trust, else the one the daemon named at
// /v1/chain/head: then it says only that the reply came from the node that
// address named), over the request this client sent and the reply it got.
type Binding struct {
	// Key is the steward key the reply was checked under.
	Key ed25519.PublicKey
	// Statement is what the provider signed; nil when Err is set.
	Statement *binding.Statement
	// Err is why the reply is not bound to Key (binding.ReasonOf names
	// it: reply_unsigned, reply_signer_not_provider, ...); nil when bound.
	Err error
}

// ragCall posts args (nil for none) as CBOR to a procedure and returns the
// reply's raw CBOR, its headers and the verdict of its binding to the
// steward key. A refusal is an *Error carrying the contract's name for it
// (unknown_corpus, bad_arguments, not_found, dimension_mismatch, no_route,
// ...).
func (c *Client) ragCall(ctx context.Context, org, name, proc string, args map[string]any) ([]byte, http.Header, Binding, error) {
	var body []byte
	if args != nil {
		var err error
		if body, err = ragEnc.Marshal(args); err != nil {
			return nil, nil, Binding{}, fmt.Errorf("meshd: %s: encoding the arguments: %w", proc, err)
		}
	}
	data, hdr, err := c.ragPost(ctx, org, name, proc, body)
	if err != nil {
		return nil, nil, Binding{}, err
	}
	key, err := c.Steward(ctx)
	if err != nil {
		return nil, nil, Binding{}, err
	}
	b := Binding{Key: key}
	env, err := base64.StdEncoding.DecodeString(hdr.Get(binding.Header))
	if err != nil {
		b.Err = fmt.Errorf("%w: %s is not base64: %v", binding.RefusedMalformed, binding.Header, err)
	} else {
		b.Statement, b.Err = binding.Verify(env, key, binding.Reply{Corpus: org + "/" + name, Procedure: proc,
			Request: body, Body: data, Type: "application/cbor", Status: http.StatusOK})
	}
	return data, hdr, b, nil
}

// strict turns a binding that failed into the call's error.
func (b Binding) strict(proc string) error {
	if b.Err != nil {
		return fmt.Errorf("meshd: %s: the reply is not bound to steward %x: %w", proc, []byte(b.Key), b.Err)
	}
	return nil
}

// ragPost sends one request body and reads the reply.
func (c *Client) ragPost(ctx context.Context, org, name, proc string, body []byte) ([]byte, http.Header, error) {
	if c.ragVia != nil {
		return c.ragVia(ctx, org, name, proc, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+ragPath(org, name, proc), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/cbor")
	req.Header.Set("Accept", "application/cbor")
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("meshd: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, ragMaxReply+1))
	if err != nil {
		return nil, nil, fmt.Errorf("meshd: %s: reading the reply: %w", proc, err)
	}
	if len(data) > ragMaxReply {
		return nil, nil, fmt.Errorf("meshd: %s: the reply is larger than %d bytes", proc, ragMaxReply)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode/100 != 2 {
		return nil, nil, ragError(resp.StatusCode, ct, data)
	}
	if ct != "application/cbor" || resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("meshd: %s: a CBOR request was answered %d %q, not 200 application/cbor", proc, resp.StatusCode, ct)
	}
	return data, resp.Header, nil
}

// ragError reads a refusal: the contract's {"error": name, "message"} in
// CBOR, or in JSON (flat, or nested as the rest of the API answers) from
// anything in front of the procedures.
func ragError(status int, ct string, data []byte) error {
	if ct == "application/cbor" {
		var m map[string]any
		if ragDec.Unmarshal(data, &m) == nil {
			code, _ := m["error"].(string)
			msg, _ := m["message"].(string)
			if code != "" {
				return &Error{Status: status, Code: code, Message: msg}
			}
		}
		return &Error{Status: status, Message: fmt.Sprintf("an unreadable CBOR refusal of %d bytes", len(data))}
	}
	var flat struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &flat) == nil && flat.Error != "" {
		return &Error{Status: status, Code: flat.Error, Message: flat.Message}
	}
	return errorFrom(&http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(data))})
}

// decodeRAGReply decodes a reply's CBOR into a text-keyed map.
func decodeRAGReply(proc string, data []byte) (map[string]any, error) {
	var m map[string]any
	if err := ragDec.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("meshd: %s: the reply is not a CBOR map with text keys: %w", proc, err)
	}
	return m, nil
}

// Describe runs describe_corpus on org/name and reads the reply with
// rag.ParseDescription, so a malformed one is a *rag.Refusal with the reason
// malformed_description. The reply's binding to the steward key is
// returned for the caller to report (Binding.Err set when it is not bound);
// the hash and the operator's signature are rag.VerifyCorpus's, for the
// provider the caller called.
func (c *Client) Describe(ctx context.Context, org, name string) (rag.Description, Binding, error) {
	data, _, b, err := c.ragCall(ctx, org, name, ProcDescribeCorpus, nil)
	if err != nil {
		return rag.Description{}, Binding{}, err
	}
	d, err := rag.ParseDescription(data)
	if err != nil {
		return rag.Description{}, b, fmt.Errorf("meshd: %s of %s/%s: %w", ProcDescribeCorpus, org, name, err)
	}
	return d, b, nil
}

// Query is answer_query's arguments. Exactly one of Text and Vector is set;
// a Vector must be in the corpus's embedding (describe_corpus's dim).
type Query struct {
	Text   *string
	Vector []float64
	// TopK is 1..100; 0 leaves the contract's default (10).
	TopK   int
	Topics []string
	// The mesh/1 fields an answer may carry; zero values leave the
	// daemon's configured defaults.
	FidelityFloor  *uint8
	JouleCeilingUJ uint64
	// Grant is the grant's COSE envelope.
	Grant []byte
}

// Answer is an answer_query reply with its verified receipt.
type Answer struct {
	// CorpusHash is the corpus the provider says answered; compare it with
	// the hash recomputed from describe_corpus.
	CorpusHash string
	// Hits are as the daemon sent them, best first; check each with
	// rag.VerifyHit.
	Hits []rag.Hit
	// Receipt is the answer's receipt, opened under the steward key.
	Receipt *steward.Opened
	// Envelope is the receipt's envelope as received (x_receipt).
	Envelope []byte
	// Binding is the reply's binding to the steward key (check 1);
	// Binding.Err is set when the reply is not bound to it.
	Binding Binding
}

// Answer runs answer_query on org/name. The receipt (x_receipt) is opened
// under the daemon's steward key (Steward, or the one pinned with Trust)
// and, when the daemon names the receipt in its Mesh-Receipt-Id header,
// must be that receipt. A reply that is not the contract's shape (no text
// corpus_hash, a hit of the wrong types) is an error; a hit of the right
// types whose content does not hash to its provenance is returned, for the
// caller's rag.VerifyHit to report.
func (c *Client) Answer(ctx context.Context, org, name string, q Query) (*Answer, error) {
	args := map[string]any{}
	if q.Text != nil {
		args["query_text"] = *q.Text
	}
	if q.Vector != nil {
		args["query_vector"] = q.Vector
	}
	if q.TopK != 0 {
		args["top_k"] = q.TopK
	}
	if q.Topics != nil {
		args["topics"] = q.Topics
	}
	if q.FidelityFloor != nil {
		args["fidelity_floor"] = *q.FidelityFloor
	}
	if q.JouleCeilingUJ != 0 {
		args["joule_ceiling_uj"] = q.JouleCeilingUJ
	}
	if q.Grant != nil {
		args["grant"] = q.Grant
	}
	data, hdr, b, err := c.ragCall(ctx, org, name, ProcAnswerQuery, args)
	if err != nil {
		return nil, err
	}
	m, err := decodeRAGReply(ProcAnswerQuery, data)
	if err != nil {
		return nil, err
	}
	a := &Answer{Binding: b}
	var ok bool
	if a.CorpusHash, ok = m["corpus_hash"].(string); !ok {
		return nil, fmt.Errorf("meshd: %s: the reply has no text corpus_hash", ProcAnswerQuery)
	}
	rawHits, ok := m["hits"].([]any)
	if !ok {
		return nil, fmt.Errorf("meshd: %s: the reply has no list of hits", ProcAnswerQuery)
	}
	for i, rh := range rawHits {
		hm, ok := rh.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("meshd: %s: hit %d is not a map", ProcAnswerQuery, i)
		}
		h, err := ParseHit(hm)
		if err != nil {
			return nil, fmt.Errorf("meshd: %s: hit %d: %w", ProcAnswerQuery, i, err)
		}
		a.Hits = append(a.Hits, h)
	}
	if a.Envelope, ok = m["x_receipt"].([]byte); !ok {
		return nil, fmt.Errorf("meshd: %s: the reply carries no receipt (x_receipt)", ProcAnswerQuery)
	}
	if a.Receipt, err = c.open(ctx, a.Envelope); err != nil {
		// A reply relayed from another node fails both: say both.
		return nil, errors.Join(b.strict(ProcAnswerQuery), fmt.Errorf("meshd: %s: %w", ProcAnswerQuery, err))
	}
	if id := hdr.Get("Mesh-Receipt-Id"); id != "" && id != a.Receipt.ID.String() {
		return nil, fmt.Errorf("meshd: %s: the header names receipt %s, the reply carries %s", ProcAnswerQuery, id, a.Receipt.ID)
	}
	return a, nil
}

// Chunk runs get_chunk_by_id: the hit without a score. Check it with
// rag.VerifyHit.
func (c *Client) Chunk(ctx context.Context, org, name, chunkID string) (rag.Hit, error) {
	data, _, b, err := c.ragCall(ctx, org, name, ProcGetChunkByID, map[string]any{"chunk_id": chunkID})
	if err != nil {
		return rag.Hit{}, err
	}
	if err := b.strict(ProcGetChunkByID); err != nil {
		return rag.Hit{}, err
	}
	m, err := decodeRAGReply(ProcGetChunkByID, data)
	if err != nil {
		return rag.Hit{}, err
	}
	h, err := ParseHit(m)
	if err != nil {
		return rag.Hit{}, fmt.Errorf("meshd: %s: %w", ProcGetChunkByID, err)
	}
	return h, nil
}

// Document is a get_document_verbatim reply.
type Document struct {
	SourcePath string
	// Raw is the file's bytes; Provenance.ContentSHA256 is their hash.
	Raw        []byte
	Provenance rag.Provenance
}

// Verify checks the document's bytes against its provenance, as
// rag.VerifyHit checks a hit's text (and with its caveat: ok is not corpus
// membership).
func (d *Document) Verify() error {
	return rag.VerifyHit(rag.Hit{ChunkID: d.SourcePath, Content: string(d.Raw), Provenance: d.Provenance})
}

// Document runs get_document_verbatim on a source path ("<repo_id>/<path
// in repo>"). Check the bytes with Document.Verify.
func (c *Client) Document(ctx context.Context, org, name, sourcePath string) (*Document, error) {
	data, _, b, err := c.ragCall(ctx, org, name, ProcGetDocumentVerbatim, map[string]any{"source_path": sourcePath})
	if err != nil {
		return nil, err
	}
	if err := b.strict(ProcGetDocumentVerbatim); err != nil {
		return nil, err
	}
	m, err := decodeRAGReply(ProcGetDocumentVerbatim, data)
	if err != nil {
		return nil, err
	}
	d := &Document{}
	var ok bool
	if d.SourcePath, ok = m["source_path"].(string); !ok {
		return nil, fmt.Errorf("meshd: %s: the reply has no text source_path", ProcGetDocumentVerbatim)
	}
	if d.Raw, ok = m["raw_bytes"].([]byte); !ok {
		return nil, fmt.Errorf("meshd: %s: raw_bytes is missing or not a byte string", ProcGetDocumentVerbatim)
	}
	if d.Provenance, err = parseProvenance(m["provenance"]); err != nil {
		return nil, fmt.Errorf("meshd: %s: %w", ProcGetDocumentVerbatim, err)
	}
	return d, nil
}

// Source is one list_sources_page row.
type Source struct {
	SourcePath string
	Provenance rag.Provenance
}

// SourcesPage is a list_sources_page reply.
type SourcesPage struct {
	Offset int
	Rows   []Source
}

// Sources runs list_sources_page: limit rows (at most 200; 0 leaves the
// provider's default) from offset, in source-path order.
func (c *Client) Sources(ctx context.Context, org, name string, offset, limit int) (*SourcesPage, error) {
	args := map[string]any{"offset": offset}
	if limit != 0 {
		args["limit"] = limit
	}
	data, _, b, err := c.ragCall(ctx, org, name, ProcListSourcesPage, args)
	if err != nil {
		return nil, err
	}
	if err := b.strict(ProcListSourcesPage); err != nil {
		return nil, err
	}
	m, err := decodeRAGReply(ProcListSourcesPage, data)
	if err != nil {
		return nil, err
	}
	p := &SourcesPage{}
	if p.Offset, err = ragInt(m["offset"]); err != nil {
		return nil, fmt.Errorf("meshd: %s: offset: %w", ProcListSourcesPage, err)
	}
	rows, ok := m["rows"].([]any)
	if !ok {
		return nil, fmt.Errorf("meshd: %s: the reply has no list of rows", ProcListSourcesPage)
	}
	for i, r := range rows {
		rm, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("meshd: %s: row %d is not a map", ProcListSourcesPage, i)
		}
		var s Source
		if s.SourcePath, ok = rm["source_path"].(string); !ok {
			return nil, fmt.Errorf("meshd: %s: row %d has no text source_path", ProcListSourcesPage, i)
		}
		if s.Provenance, err = parseProvenance(rm["provenance"]); err != nil {
			return nil, fmt.Errorf("meshd: %s: row %d: %w", ProcListSourcesPage, i, err)
		}
		p.Rows = append(p.Rows, s)
	}
	return p, nil
}

// CorpusInfo is one row of GET /v1/rag: a corpus served by the daemon. Its
// SignedBy is a display label, as in a description.
type CorpusInfo struct {
	Org        string `json:"org"`
	Name       string `json:"name"`
	CorpusHash string `json:"corpus_hash"`
	Model      string `json:"model"`
	Dim        int    `json:"dim"`
	Repos      int    `json:"repos"`
	Chunks     int    `json:"chunks"`
	SignedBy   string `json:"signed_by"`
	Procedures string `json:"procedures"`
}

// Corpora lists the corpora the daemon serves (GET /v1/rag).
func (c *Client) Corpora(ctx context.Context) ([]CorpusInfo, error) {
	var v struct {
		Corpora []CorpusInfo `json:"corpora"`
	}
	err := c.getJSON(ctx, "/v1/rag", &v)
	return v.Corpora, err
}

// The keys of a hit and of its provenance the contract names; any other key
// of a hit goes to Hit.Extra.
var hitKeys = map[string]bool{"chunk_id": true, "score": true, "content": true, "provenance": true}

// ParseHit reads a hit in the shape the daemon answers it: chunk_id,
// content, provenance and, except from get_chunk_by_id, score, either as
// decoded from CBOR (integers as uint64 or int64) or from JSON decoded with
// UseNumber (json.Number). It checks types only; the contract's provenance
// rules and the content hash are rag.VerifyHit's. A provenance field of the
// wrong type wraps rag.ErrMalformedHit.
func ParseHit(m map[string]any) (rag.Hit, error) {
	var h rag.Hit
	var ok bool
	if h.ChunkID, ok = m["chunk_id"].(string); !ok {
		return rag.Hit{}, errors.New("hit: chunk_id is missing or not a string")
	}
	if h.Content, ok = m["content"].(string); !ok {
		return rag.Hit{}, fmt.Errorf("hit %q: content is missing or not a string", h.ChunkID)
	}
	if s, present := m["score"]; present {
		f, err := scoreNumber(s)
		if err != nil {
			return rag.Hit{}, fmt.Errorf("hit %q: score: %w", h.ChunkID, err)
		}
		h.Score = &f
	}
	var err error
	if h.Provenance, err = parseProvenance(m["provenance"]); err != nil {
		return rag.Hit{}, fmt.Errorf("hit %q: %w", h.ChunkID, err)
	}
	for k, v := range m {
		if hitKeys[k] {
			continue
		}
		if h.Extra == nil {
			h.Extra = map[string]any{}
		}
		h.Extra[k] = v
	}
	return h, nil
}

// parseProvenance reads a provenance map; absent fields stay zero, as
// rag.Provenance takes them.
func parseProvenance(v any) (rag.Provenance, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return rag.Provenance{}, fmt.Errorf("%w: provenance is missing or not a map", rag.ErrMalformedHit)
	}
	var p rag.Provenance
	for _, f := range []struct {
		key string
		dst *string
	}{{"kind", &p.Kind}, {"path", &p.Path}, {"repo_id", &p.RepoID}, {"commit", &p.Commit},
		{"content_sha256", &p.ContentSHA256}, {"deposited_by", &p.DepositedBy}} {
		x, present := m[f.key]
		if !present {
			continue
		}
		if *f.dst, ok = x.(string); !ok {
			return rag.Provenance{}, fmt.Errorf("%w: provenance %s is not a string", rag.ErrMalformedHit, f.key)
		}
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"start_line", &p.StartLine}, {"end_line", &p.EndLine}} {
		x, present := m[f.key]
		if !present {
			continue
		}
		n, err := ragInt(x)
		if err != nil {
			return rag.Provenance{}, fmt.Errorf("%w: provenance %s: %v", rag.ErrMalformedHit, f.key, err)
		}
		*f.dst = n
	}
	return p, nil
}

// ragInt reads a non-negative integer (a line, an offset).
func ragInt(v any) (int, error) {
	switch x := v.(type) {
	case uint64:
		if x <= math.MaxInt32 {
			return int(x), nil
		}
	case int64:
		if x >= 0 && x <= math.MaxInt32 {
			return int(x), nil
		}
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 32)
		if err == nil && n >= 0 {
			return int(n), nil
		}
	default:
		return 0, fmt.Errorf("%v is not an integer", v)
	}
	return 0, fmt.Errorf("%v is not an integer from 0 to 2^31-1", v)
}

// scoreNumber reads a score: any finite number.
func scoreNumber(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case uint64:
		f = float64(x)
	case int64:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = strconv.ParseFloat(string(x), 64); err != nil {
			return 0, fmt.Errorf("%s is not a number", x)
		}
	default:
		return 0, fmt.Errorf("%v is not a number", v)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%v is not finite", f)
	}
	return f, nil
}

// WireHit is a hit in the shape the daemon answers it (the contract's
// keys, provenance fields absent when empty), for printing as JSON or
// storing: ParseHit reads it back.
func WireHit(h rag.Hit) map[string]any {
	pv := h.Provenance
	prov := map[string]any{"kind": pv.Kind, "path": pv.Path, "content_sha256": pv.ContentSHA256}
	for k, v := range map[string]string{"repo_id": pv.RepoID, "commit": pv.Commit, "deposited_by": pv.DepositedBy} {
		if v != "" {
			prov[k] = v
		}
	}
	if pv.StartLine != 0 {
		prov["start_line"] = pv.StartLine
	}
	if pv.EndLine != 0 {
		prov["end_line"] = pv.EndLine
	}
	m := map[string]any{}
	for k, v := range h.Extra {
		m[k] = v
	}
	m["chunk_id"], m["content"], m["provenance"] = h.ChunkID, h.Content, prov
	if h.Score != nil {
		m["score"] = *h.Score
	}
	return m
}

// CorpusRef splits "org/name" as -corpus flags give it.
func CorpusRef(ref string) (org, name string, err error) {
	org, name, ok := strings.Cut(ref, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("corpus %q: want org/name", ref)
	}
	return org, name, nil
}
