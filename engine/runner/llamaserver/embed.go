package llamaserver

import (
	"encoding/json"
	"net/http"
)

type embeddingRequest struct {
	Content json.RawMessage `json:"content"`
	Input   json.RawMessage `json:"input"`
	Model   string          `json:"model"`
}

// embedInputs reads "input" (or llama-server's "content"): a string, an
// array of strings, an array of token ids, or an array of such arrays,
// and tokenizes and validates each before any slot is taken.
func (s *Server) embedInputs(req embeddingRequest) ([][]int, error) {
	raw := req.Input
	if len(raw) == 0 || string(raw) == "null" {
		raw = req.Content
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest(`"input" or "content" is required`)
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		ids, err := s.textTokens(one, true)
		return [][]int{ids}, err
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(`"input" must be a string, an array of strings or an array of tokens`)
	}
	if len(parts) == 0 {
		return nil, badRequest("the input is empty")
	}
	// An array of numbers is one tokenized input.
	var first int
	if json.Unmarshal(parts[0], &first) == nil {
		ids, _, err := s.promptTokens(raw)
		return [][]int{ids}, err
	}
	var out [][]int
	for _, p := range parts {
		var text string
		if json.Unmarshal(p, &text) == nil {
			ids, err := s.textTokens(text, true)
			if err != nil {
				return nil, err
			}
			out = append(out, ids)
			continue
		}
		ids, _, err := s.promptTokens(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ids)
	}
	return out, nil
}

// embed validates the request, then computes every input's embedding on
// one slot: one row per input when pooled, one per token with pooling
// none.
func (s *Server) embed(w http.ResponseWriter, r *http.Request, oai bool) (inputs [][]int, rows [][][]float32, ok bool) {
	if !s.loaded(w) {
		return nil, nil, false
	}
	if !s.Embeddings {
		writeError(w, http.StatusNotImplemented, "not_supported_error",
			"This server does not support embeddings. Start it with `--embeddings`")
		return nil, nil, false
	}
	var req embeddingRequest
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return nil, nil, false
	}
	if oai && s.info.poolNone {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Pooling type 'none' is not OAI compatible. Please use a different pooling type")
		return nil, nil, false
	}
	inputs, err := s.embedInputs(req)
	if err != nil {
		writeErr(w, err)
		return nil, nil, false
	}
	var first []int
	if len(inputs) > 0 {
		first = inputs[0]
	}
	sl, err := s.slots.acquire(r.Context(), first, s.hooks.queued)
	if err != nil {
		return nil, nil, false // the client is gone
	}
	defer s.slots.release(sl)
	if s.hooks.acquired != nil {
		s.hooks.acquired(r.Context(), sl.id)
	}
	d := s.info.dim
	for _, ids := range inputs {
		v, err := sl.emb.Embed(r.Context(), ids)
		if err != nil {
			if r.Context().Err() == nil {
				writeError(w, http.StatusInternalServerError, "server_error", err.Error())
			}
			return nil, nil, false
		}
		var rs [][]float32
		for i := 0; i+d <= len(v); i += d {
			rs = append(rs, v[i:i+d])
		}
		rows = append(rows, rs)
	}
	return inputs, rows, true
}

// embedding is llama-server's /embedding: an array of
// {"index", "embedding": [[...], ...]}, one entry per input.
func (s *Server) embedding(w http.ResponseWriter, r *http.Request) {
	_, rows, ok := s.embed(w, r, false)
	if !ok {
		return
	}
	type item struct {
		Index     int         `json:"index"`
		Embedding [][]float32 `json:"embedding"`
	}
	out := make([]item, len(rows))
	for i, rs := range rows {
		out[i] = item{Index: i, Embedding: rs}
	}
	writeJSON(w, http.StatusOK, out)
}

// embeddingOAI is /v1/embeddings in OpenAI's shape.
func (s *Server) embeddingOAI(w http.ResponseWriter, r *http.Request) {
	inputs, rows, ok := s.embed(w, r, true)
	if !ok {
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	data := make([]item, len(rows))
	n := 0
	for i, rs := range rows {
		data[i] = item{Object: "embedding", Index: i, Embedding: rs[0]}
		n += len(inputs[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "model": s.modelName(), "data": data,
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n},
	})
}

// modelName is the name OpenAI-style answers carry.
func (s *Server) modelName() string {
	if s.ModelPath != "" {
		return s.ModelPath
	}
	return s.info.name
}
