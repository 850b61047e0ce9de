package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"

	"meshd/agent"
	"meshd/engine"
)

// embeddingBody is OpenAI's embeddings request.
type embeddingBody struct {
	meshFields
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
	Dimensions     json.RawMessage `json:"dimensions"`
}

// embeddings is POST /v1/embeddings in OpenAI's shape: the texts are
// embedded by an embedding backend (routed, or pinned by model) as one
// serve, metered and sealed like any other; its receipt's prompt_hash
// addresses the texts as a JSON array, tokens_out counts the vectors.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var b embeddingBody
	if !decodeBody(w, r, &b) {
		return
	}
	if !refuseUnserved(w, []unservedField{
		{"dimensions", b.Dimensions, "the model's own dimension is served; vectors are not shortened"},
	}) {
		return
	}
	format := "float"
	if b.EncodingFormat != nil {
		format = *b.EncodingFormat
	}
	if format != "float" && format != "base64" {
		badField(w, "encoding_format", fmt.Sprintf("%q: want float or base64", format))
		return
	}
	texts, err := embedInput(b.Input)
	if err != nil {
		badField(w, "input", err.Error())
		return
	}
	prompt, err := json.Marshal(texts)
	if err != nil {
		badField(w, "input", err.Error())
		return
	}
	n := uint32(len(texts))
	req, env, ok := s.request(w, b.meshFields, prompt, &n)
	if !ok || !s.runAllowed(w, r, b.Run) {
		return
	}
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	resp, err := s.run(r.Context(), req, prompt, agent.Options{Grant: env, Run: b.Run, Engine: engine.Options{Embed: true}, Backend: s.pinned(b.Model)})
	if resp == nil {
		status, e := serveStatus(err)
		writeError(w, status, e)
		return
	}
	var vecs [][]float32
	if err := json.Unmarshal(resp.Output, &vecs); err != nil || len(vecs) != len(texts) {
		// Sealed, but not deliverable as asked: say so with the receipt.
		writeError(w, http.StatusBadGateway, apiError{Message: fmt.Sprintf("the engine's embeddings are malformed (%d for %d texts): %v; receipt %s", len(vecs), len(texts), err, resp.Sealed.ID), Code: "engine_failed"})
		return
	}
	data := make([]map[string]any, len(vecs))
	for i, v := range vecs {
		var e any = v
		if format == "base64" {
			// OpenAI's base64: the float32 values little-endian.
			raw := make([]byte, 4*len(v))
			for k, x := range v {
				binary.LittleEndian.PutUint32(raw[4*k:], math.Float32bits(x))
			}
			e = base64.StdEncoding.EncodeToString(raw)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	rc := resp.Sealed.Receipt
	setReceiptHeaders(w.Header(), resp.Sealed)
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": rc.Backend,
		"usage":   map[string]any{"prompt_tokens": rc.TokensIn, "total_tokens": rc.TokensIn},
		"receipt": receiptOf(resp.Sealed),
	})
}

// embedInput reads input: a string or an array of strings (token arrays
// are refused: the engine tokenizes).
func embedInput(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, fmt.Errorf("must not be empty")
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want a string or an array of strings (token arrays are not accepted: the engine tokenizes)")
	}
	if len(many) == 0 || len(many) > engine.MaxEmbedInputs {
		return nil, fmt.Errorf("%d texts, want 1..%d", len(many), engine.MaxEmbedInputs)
	}
	for i, t := range many {
		if t == "" {
			return nil, fmt.Errorf("text %d is empty", i)
		}
	}
	return many, nil
}
