package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"reflect"
	"strconv"

	"github.com/fxamacker/cbor/v2"

	"meshd/agent"
	"meshd/agent/corpus"
	"meshd/rag"
	"meshd/rag/binding"
	"meshd/steward"
	"meshd/wire"
)

// The RAG service contract's five procedures, under
// POST /v1/rag/{org}/{name}/{procedure}. A CBOR body (application/cbor)
// gets a CBOR reply with the contract's wire types (text strings, byte
// strings for signature and raw_bytes, numbers); a JSON body gets JSON,
// byte strings in base64, for people.

// ragCodec decodes arguments and encodes replies in one encoding, and
// binds each reply to the request it answers (bind, nil before the
// request's body is read).
type ragCodec struct {
	cbor bool
	bind *ragBind
}

// ragBind is what the provider's statement about a reply covers besides
// the reply: the request as received (PROFILE §18, "Replies bound to the
// provider").
type ragBind struct {
	key               *steward.Key
	corpus, procedure string
	request           []byte
}

var ragEnc = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	return em
}()

// ragArgDec decodes CBOR arguments strictly: no duplicate keys, tags or
// indefinite lengths, as the contract's peers decode.
var ragArgDec = func() cbor.DecMode {
	dm, err := cbor.DecOptions{DupMapKey: cbor.DupMapKeyEnforcedAPF, IndefLength: cbor.IndefLengthForbidden, TagsMd: cbor.TagsForbidden}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// ragDec decodes answers into maps with text keys, which JSON can carry.
var ragDec = func() cbor.DecMode {
	dm, err := cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any{})}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

func (c ragCodec) write(w http.ResponseWriter, status int, v map[string]any) {
	var data []byte
	var err error
	ct := "application/cbor"
	if c.cbor {
		data, err = ragEnc.Marshal(v)
	} else {
		ct = "application/json"
		for k, x := range v {
			if b, ok := x.([]byte); ok {
				v[k] = base64.StdEncoding.EncodeToString(b)
			}
		}
		// As writeJSON encodes, so the bytes signed are the bytes sent.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		err = enc.Encode(v)
		data = buf.Bytes()
	}
	if err != nil {
		// Never a reply that does not decode: say so, in the encoding.
		status = http.StatusInternalServerError
		if c.cbor {
			data, _ = ragEnc.Marshal(map[string]any{"error": "unavailable", "message": "the reply does not encode: " + err.Error()})
		} else {
			data, _ = json.Marshal(map[string]any{"error": "unavailable", "message": "the reply does not encode: " + err.Error()})
		}
	}
	h := w.Header()
	if c.bind != nil && c.bind.key != nil {
		env, err := binding.Seal(c.bind.key, binding.Reply{Corpus: c.bind.corpus, Procedure: c.bind.procedure,
			Request: c.bind.request, Body: data, Type: ct, Status: status})
		if err == nil {
			h.Set(binding.Header, base64.StdEncoding.EncodeToString(env))
		}
	}
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// refuse answers a procedure error under its contract name.
func (c ragCodec) refuse(w http.ResponseWriter, status int, name, msg string) {
	c.write(w, status, map[string]any{"error": name, "message": msg})
}

// ragArgs are every procedure's arguments; each reads its own.
type ragArgs struct {
	QueryText   *string   `json:"query_text" cbor:"query_text"`
	QueryVector []float64 `json:"query_vector" cbor:"query_vector"`
	TopK        *int      `json:"top_k" cbor:"top_k"`
	Topics      []string  `json:"topics" cbor:"topics"`
	ChunkID     string    `json:"chunk_id" cbor:"chunk_id"`
	SourcePath  string    `json:"source_path" cbor:"source_path"`
	Offset      *int      `json:"offset" cbor:"offset"`
	Limit       *int      `json:"limit" cbor:"limit"`
	// The mesh/1 fields an answer may carry, as on the serving calls.
	FidelityFloor  *uint8  `json:"fidelity_floor" cbor:"fidelity_floor"`
	JouleCeilingUJ *uint64 `json:"joule_ceiling_uj" cbor:"joule_ceiling_uj"`
	Grant          []byte  `json:"-" cbor:"grant"`
	GrantB64       *string `json:"grant" cbor:"-"`
}

func (s *Server) rag(w http.ResponseWriter, r *http.Request) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	codec := ragCodec{cbor: ct == "application/cbor"}
	// The body is read whole before anything is answered, so that every
	// reply after this point is bound to it; a body that was not read
	// whole has no digest to bind, and its refusal is not signed.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			codec.refuse(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("body exceeds %d bytes", mb.Limit))
			return
		}
		codec.refuse(w, http.StatusBadRequest, "bad_arguments", err.Error())
		return
	}
	codec.bind = &ragBind{key: s.node.Key, corpus: r.PathValue("org") + "/" + r.PathValue("name"), procedure: r.PathValue("procedure"), request: body}
	p, ok := s.node.Provider(r.PathValue("org"), r.PathValue("name"))
	if !ok {
		codec.refuse(w, http.StatusNotFound, "unknown_corpus", fmt.Sprintf("no corpus %s/%s here", r.PathValue("org"), r.PathValue("name")))
		return
	}
	var a ragArgs
	// No body is no arguments; a CBOR body is taken as it is (its
	// whitespace bytes are integers), a JSON one must hold one object.
	if codec.cbor && len(body) > 0 {
		err = ragArgDec.Unmarshal(body, &a)
	} else if !codec.cbor && len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		if err = dec.Decode(&a); err == nil && dec.More() {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		codec.refuse(w, http.StatusBadRequest, "bad_arguments", "arguments: "+err.Error())
		return
	}
	switch proc := r.PathValue("procedure"); proc {
	case "describe_corpus":
		d := p.Description()
		repos := make([]any, len(d.Repos))
		for i, rp := range d.Repos {
			repos[i] = map[string]any{"id": rp.ID, "url": rp.URL, "branch": rp.Branch, "commit": rp.Commit}
		}
		out := map[string]any{"corpus_hash": d.CorpusHash, "model": d.Model, "dim": d.Dim, "repos": repos}
		if d.Signature != nil {
			out["signature"], out["signed_by"] = d.Signature, d.SignedBy
		}
		codec.write(w, http.StatusOK, out)
	case "answer_query":
		s.answerQuery(w, r, codec, p, a)
	case "get_chunk_by_id":
		h, err := p.ChunkByID(a.ChunkID)
		if err != nil {
			codec.refuse(w, http.StatusNotFound, "not_found", err.Error())
			return
		}
		codec.write(w, http.StatusOK, corpus.WireHit(h))
	case "get_document_verbatim":
		data, prov, err := p.Document(a.SourcePath)
		if errors.Is(err, corpus.ErrNotFound) {
			codec.refuse(w, http.StatusNotFound, "not_found", err.Error())
			return
		}
		if err != nil {
			codec.refuse(w, http.StatusInternalServerError, "unavailable", err.Error())
			return
		}
		codec.write(w, http.StatusOK, map[string]any{"source_path": a.SourcePath, "raw_bytes": data,
			"provenance": corpus.WireHit(rag.Hit{Provenance: prov})["provenance"]})
	case "list_sources_page":
		offset, limit := 0, corpus.MaxPage
		if a.Offset != nil {
			offset = *a.Offset
		}
		if a.Limit != nil {
			limit = *a.Limit
		}
		files, err := p.Sources(offset, limit)
		if err != nil {
			codec.refuse(w, http.StatusBadRequest, "bad_arguments", err.Error())
			return
		}
		rows := make([]any, len(files))
		for i, f := range files {
			rows[i] = map[string]any{"source_path": f.SourcePath, "provenance": corpus.WireHit(rag.Hit{Provenance: f.Provenance()})["provenance"]}
		}
		codec.write(w, http.StatusOK, map[string]any{"rows": rows, "offset": offset})
	default:
		codec.refuse(w, http.StatusNotFound, "unknown_procedure", fmt.Sprintf("%q is not one of describe_corpus, answer_query, get_chunk_by_id, get_document_verbatim, list_sources_page", proc))
	}
}

// answerQuery runs answer_query as a metered serve on the corpus's
// backend and answers with the hits, the corpus hash and the receipt.
func (s *Server) answerQuery(w http.ResponseWriter, r *http.Request, codec ragCodec, p *corpus.Provider, a ragArgs) {
	q := corpus.Query{Text: a.QueryText, TopK: corpus.DefaultTopK, Topics: a.Topics}
	if a.TopK != nil {
		q.TopK = *a.TopK
	}
	// The contract's tables give topics no meaning (no hit carries a
	// topic), so a filter we cannot apply is refused rather than ignored:
	// a caller must not read a topic filter into hits that had none. An
	// empty list asks for no filter, and none is applied.
	if len(a.Topics) > 0 {
		codec.refuse(w, http.StatusBadRequest, "bad_arguments", "topics: this provider applies no topic filter (the contract defines no topic on a hit); leave the field out")
		return
	}
	if a.QueryVector != nil {
		q.Vector = make([]float32, len(a.QueryVector))
		for i, x := range a.QueryVector {
			// Checked after the conversion: a float64 beyond float32's
			// range becomes an infinity, and a search over it scores NaN.
			v := float32(x)
			if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
				codec.refuse(w, http.StatusBadRequest, "bad_arguments", fmt.Sprintf("query_vector[%d] = %g is not a finite float32", i, x))
				return
			}
			q.Vector[i] = v
		}
	}
	if err := q.Check(p.Corpus().Dim); err != nil {
		name := "bad_arguments"
		if errors.Is(err, corpus.ErrDimension) {
			name = "dimension_mismatch"
		}
		codec.refuse(w, http.StatusBadRequest, name, err.Error())
		return
	}
	prompt, err := corpus.EncodeQuery(q)
	if err != nil {
		codec.refuse(w, http.StatusBadRequest, "bad_arguments", err.Error())
		return
	}
	req := wire.ServeRequest{PromptHash: wire.ContentOf(prompt), PromptTokens: uint32(len(prompt) + 1), MaxTokens: uint32(q.TopK),
		FidelityFloor: s.opts.Defaults.FidelityFloor, JouleCeilingUJ: s.opts.Defaults.JouleCeilingUJ}
	if a.FidelityFloor != nil {
		req.FidelityFloor = wire.Fidelity(*a.FidelityFloor)
	}
	if a.JouleCeilingUJ != nil {
		req.JouleCeilingUJ = *a.JouleCeilingUJ
	}
	grantEnv := a.Grant
	if a.GrantB64 != nil {
		if grantEnv, err = base64.StdEncoding.DecodeString(*a.GrantB64); err != nil {
			codec.refuse(w, http.StatusBadRequest, "bad_arguments", "grant: want the grant envelope in standard base64")
			return
		}
	}
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	resp, err := s.run(r.Context(), req, prompt, agent.Options{Grant: grantEnv, Backend: p.BackendName()})
	if resp == nil {
		status, e := serveStatus(err)
		codec.write(w, status, map[string]any{"error": e.Code, "message": e.Message})
		return
	}
	var ans map[string]any
	if err := ragDec.Unmarshal(resp.Output, &ans); err != nil {
		codec.refuse(w, http.StatusInternalServerError, "unavailable", "the answer does not decode: "+err.Error())
		return
	}
	setReceiptHeaders(w.Header(), resp.Sealed)
	if codec.cbor {
		ans["x_receipt"] = resp.Sealed.Envelope
	} else {
		ans["receipt"] = receiptOf(resp.Sealed)
	}
	codec.write(w, http.StatusOK, ans)
}
