package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"unicode/utf8"
)

// Embed returns the engine's embedding of each text, in order, and the
// prompt tokens the engine read, through the OpenAI-shaped /v1/embeddings
// that llama-server and mesh-gguf both serve (with --embedding). It takes
// the engine's slot like a serve, so a caller that metered it holds the
// slot (Acquire) first.
func (e *Engine) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	if !e.cfg.Embedding {
		return nil, 0, fmt.Errorf("embed: backend %s was not started as an embedding engine", e.cfg.Name)
	}
	if len(texts) == 0 {
		return nil, 0, nil
	}
	for i, t := range texts {
		if !utf8.ValidString(t) {
			return nil, 0, fmt.Errorf("embed: text %d is not valid UTF-8", i)
		}
	}
	if held, _ := ctx.Value(slotKey{}).(*Engine); held != e {
		select {
		case e.slot <- struct{}{}:
			defer func() { <-e.slot }()
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("embed: waiting for the engine: %w", ctx.Err())
		}
	}
	in, err := e.ready(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("embed: %w", err)
	}
	body, err := json.Marshal(map[string]any{"input": texts, "encoding_format": "float"})
	if err != nil {
		return nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.base+"/v1/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, 0, e.serveFailed(ctx, in, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, 0, e.serveFailed(ctx, in, err)
	}
	if len(data) > maxResponse {
		return nil, 0, fmt.Errorf("embed: %w: body exceeds %d bytes", ErrBadResponse, maxResponse)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("embed: engine answered HTTP %d: %s", resp.StatusCode, engineError(data))
	}
	var r struct {
		Data []struct {
			Index     *int      `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens count `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, 0, fmt.Errorf("embed: %w: %v", ErrBadResponse, err)
	}
	if len(r.Data) != len(texts) {
		return nil, 0, fmt.Errorf("embed: %w: %d embeddings for %d texts", ErrBadResponse, len(r.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	dim := -1
	for _, d := range r.Data {
		if d.Index == nil || *d.Index < 0 || *d.Index >= len(texts) || out[*d.Index] != nil {
			return nil, 0, fmt.Errorf("embed: %w: embedding index missing, out of range or repeated", ErrBadResponse)
		}
		if dim < 0 {
			dim = len(d.Embedding)
		}
		if len(d.Embedding) == 0 || len(d.Embedding) != dim {
			return nil, 0, fmt.Errorf("embed: %w: embeddings of %d and %d values", ErrBadResponse, dim, len(d.Embedding))
		}
		v := make([]float32, dim)
		for k, x := range d.Embedding {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return nil, 0, fmt.Errorf("embed: %w: a non-finite value", ErrBadResponse)
			}
			v[k] = float32(x)
		}
		out[*d.Index] = v
	}
	tokens := int(r.Usage.PromptTokens.v)
	if !r.Usage.PromptTokens.set || tokens < 0 {
		return nil, 0, fmt.Errorf("embed: %w: usage.prompt_tokens missing", ErrBadResponse)
	}
	return out, tokens, nil
}
