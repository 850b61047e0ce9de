package llamaserver

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// chatMessage is one OpenAI message. Content is a string or an array of
// parts, of which the text parts are joined.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func (m chatMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", badRequest("message content must be a string or an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", badRequest("message content part of type %q is not supported", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type chatRequest struct {
	genFields
	Messages      []chatMessage `json:"messages"`
	N             *int          `json:"n"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// roleText is a message reduced to what a template sees.
type roleText struct{ role, text string }

func finishReason(stopType string) string {
	if stopType == "limit" {
		return "length"
	}
	return "stop"
}

type chatUsage struct {
	CompletionTokens int `json:"completion_tokens"`
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails.CachedTokens is timings.cache_n, as
	// llama-server reports it in OpenAI's field.
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// chatMessages reduces OpenAI messages to what a template sees, with the
// total size of their text.
func chatMessages(in []chatMessage) ([]roleText, int, error) {
	if len(in) == 0 {
		return nil, 0, badRequest(`"messages" must be a non-empty array`)
	}
	msgs := make([]roleText, len(in))
	size := 0
	for i, m := range in {
		text, err := m.text()
		if err != nil {
			return nil, 0, err
		}
		if m.Role == "" {
			return nil, 0, badRequest("message %d has no role", i)
		}
		msgs[i] = roleText{m.Role, text}
		size += len(text)
	}
	return msgs, size, nil
}

// applyTemplate is llama-server's /apply-template: {"messages": [...]} is
// rendered with the model's chat template (and the assistant's generation
// prompt) and answered as {"prompt": "..."}, for a client to run through
// /completion. Unlike /v1/chat/completions it does not fall back to
// ChatML: a model without a tokenizer.chat_template (and no
// --chat-template) answers 501 not_supported_error, so that a caller never
// mistakes a template the model was not trained on for the model's own.
func (s *Server) applyTemplate(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req struct {
		Messages []chatMessage `json:"messages"`
	}
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if s.chatErr == nil && s.chatTpl.IsDefault() {
		writeError(w, http.StatusNotImplemented, "not_supported_error", "the model has no chat template")
		return
	}
	msgs, _, err := chatMessages(req.Messages)
	if err != nil {
		writeErr(w, err)
		return
	}
	prompt, err := s.renderChat(msgs)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
}

// chatCompletion is /v1/chat/completions: the messages are rendered with
// the model's chat template and tokenized, both before a slot is taken.
func (s *Server) chatCompletion(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) || !s.generative(w) {
		return
	}
	var req chatRequest
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if len(req.Messages) == 0 {
		writeErr(w, badRequest(`"messages" must be a non-empty array`))
		return
	}
	if req.N != nil && *req.N != 1 {
		writeErr(w, badRequest("only one choice is supported (n = 1)"))
		return
	}
	msgs, size, err := chatMessages(req.Messages)
	if err != nil {
		writeErr(w, err)
		return
	}
	if s.hooks.validate != nil {
		s.hooks.validate(r.Context(), size)
	}
	// The rendered prompt is at least as long as the messages' text: a
	// conversation that cannot fit is refused before rendering.
	if err := s.checkTextSize(size, 0); err != nil {
		writeErr(w, err)
		return
	}
	prompt, err := s.renderChat(msgs)
	if err != nil {
		writeErr(w, err)
		return
	}
	ids, err := s.textTokens(prompt, true)
	if err != nil {
		writeErr(w, err)
		return
	}
	p, err := s.genParams(req.genFields, ids)
	if err != nil {
		writeErr(w, err)
		return
	}
	id := fmt.Sprintf("chatcmpl-%016x", rand.Uint64())
	created := time.Now().Unix()
	model := s.modelName()
	usage := func(g genResult) chatUsage {
		u := chatUsage{CompletionTokens: len(g.res.Tokens), PromptTokens: len(ids), TotalTokens: len(ids) + len(g.res.Tokens)}
		u.PromptTokensDetails.CachedTokens = g.res.CacheN
		return u
	}
	if !req.Stream {
		g, err := s.generate(r.Context(), p, nil)
		switch {
		case r.Context().Err() != nil:
			return
		case err != nil:
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"system_fingerprint": BuildInfo,
			"choices": []map[string]any{{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": g.content},
				"finish_reason": finishReason(g.stopType),
			}},
			"usage": usage(g), "timings": makeTimings(g.res),
		})
		return
	}
	sse := newSSE(w)
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"system_fingerprint": BuildInfo,
			"choices":            []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}},
		}
	}
	first := true
	g, err := s.generate(r.Context(), p, func(delta string, _ []int, _ int) error {
		if first {
			first = false
			if err := sse.send(chunk(map[string]any{"role": "assistant", "content": nil}, nil)); err != nil {
				return err
			}
		}
		if delta == "" {
			return nil
		}
		return sse.send(chunk(map[string]any{"content": delta}, nil))
	})
	switch {
	case r.Context().Err() != nil:
		return
	case err != nil:
		sse.fail(err)
		return
	}
	if first {
		sse.send(chunk(map[string]any{"role": "assistant", "content": nil}, nil))
	}
	last := chunk(map[string]any{}, finishReason(g.stopType))
	last["timings"] = makeTimings(g.res)
	if req.StreamOptions.IncludeUsage {
		last["usage"] = usage(g)
	}
	sse.send(last)
	sse.done()
}
