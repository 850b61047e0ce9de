// Package llamaserver owns the HTTP face of the pure-Go GGUF runner: the
// subset of llama-server's API (/health, /completion, /tokenize,
// /detokenize, /props) with llama-server's field names, defaults, error
// shapes and loading behaviour, over one slot.
package llamaserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/engine/runner/llama"
)

// BuildInfo identifies this runner in /props.
const BuildInfo = "mesh-gguf/1 (pure Go)"

// Server answers the API. It reports "Loading model" until Ready is
// called, so the listener can be bound before the model is read.
type Server struct {
	ModelPath string

	ready atomic.Bool
	mu    sync.Mutex // one slot: completions run one at a time
	model *llama.Model
	state *llama.State
}

// Ready installs the loaded model and its state and starts serving.
func (s *Server) Ready(m *llama.Model, st *llama.State) {
	s.mu.Lock()
	s.model, s.state = m, st
	s.mu.Unlock()
	s.ready.Store(true)
}

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("POST /completion", s.completion)
	mux.HandleFunc("POST /completions", s.completion)
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("POST /detokenize", s.detokenize)
	mux.HandleFunc("GET /props", s.props)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", "File Not Found")
	})
	return mux
}

type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]apiError{"error": {Code: code, Message: msg, Type: typ}})
}

// loaded answers 503 while loading, as llama-server does on every route.
func (s *Server) loaded(w http.ResponseWriter) bool {
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, "unavailable_error", "Loading model")
		return false
	}
	return true
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.loaded(w) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("invalid JSON body: %v", err))
		return false
	}
	return true
}

type completionRequest struct {
	Prompt       json.RawMessage `json:"prompt"`
	NPredict     *int            `json:"n_predict"`
	MaxTokens    *int            `json:"max_tokens"`
	CachePrompt  *bool           `json:"cache_prompt"`
	Temperature  *float64        `json:"temperature"`
	TopK         *int            `json:"top_k"`
	TopP         *float64        `json:"top_p"`
	MinP         *float64        `json:"min_p"`
	Seed         *int64          `json:"seed"`
	ReturnTokens bool            `json:"return_tokens"`
	IgnoreEOS    bool            `json:"ignore_eos"`
	Stream       bool            `json:"stream"`
	Stop         []string        `json:"stop"`
}

type timings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// CompletionResponse is the non-streaming /completion answer.
type CompletionResponse struct {
	Index              int            `json:"index"`
	Content            string         `json:"content"`
	Tokens             []int          `json:"tokens"`
	IDSlot             int            `json:"id_slot"`
	Stop               bool           `json:"stop"`
	Model              string         `json:"model"`
	TokensPredicted    int            `json:"tokens_predicted"`
	TokensEvaluated    int            `json:"tokens_evaluated"`
	GenerationSettings map[string]any `json:"generation_settings"`
	Prompt             string         `json:"prompt"`
	HasNewLine         bool           `json:"has_new_line"`
	Truncated          bool           `json:"truncated"`
	StopType           string         `json:"stop_type"`
	StoppingWord       string         `json:"stopping_word"`
	TokensCached       int            `json:"tokens_cached"`
	Timings            timings        `json:"timings"`
}

func (s *Server) parsePrompt(raw json.RawMessage) ([]int, string, error) {
	tok := s.model.Tok
	if len(raw) == 0 {
		return nil, "", errors.New(`"prompt" is required`)
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return tok.Encode(text, true, true), text, nil
	}
	// An array mixes token ids and strings, as llama-server allows; only a
	// leading string gets BOS.
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, "", errors.New(`"prompt" must be a string or an array of tokens`)
	}
	var ids []int
	for i, p := range parts {
		var id int
		if err := json.Unmarshal(p, &id); err == nil {
			if id < 0 || id >= tok.Len() {
				return nil, "", fmt.Errorf("prompt token %d out of range [0, %d)", id, tok.Len())
			}
			ids = append(ids, id)
			continue
		}
		var s string
		if err := json.Unmarshal(p, &s); err != nil {
			return nil, "", fmt.Errorf("prompt element %d is neither a token nor a string", i)
		}
		ids = append(ids, tok.Encode(s, i == 0, true)...)
	}
	return ids, tok.Decode(ids), nil
}

func (s *Server) completion(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req completionRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Stream {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "streaming is not supported by this server")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, st := s.model, s.state
	prompt, promptText, err := s.parsePrompt(req.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	// llama-server's defaults.
	samp := llama.Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, Seed: rand.Uint64()}
	if req.Temperature != nil {
		samp.Temperature = *req.Temperature
	}
	if req.TopK != nil {
		samp.TopK = *req.TopK
	}
	if req.TopP != nil {
		samp.TopP = *req.TopP
	}
	if req.MinP != nil {
		samp.MinP = *req.MinP
	}
	if req.Seed != nil && *req.Seed >= 0 && *req.Seed != 0xFFFFFFFF {
		samp.Seed = uint64(*req.Seed)
	}
	nPredict := -1
	if req.NPredict != nil {
		nPredict = *req.NPredict
	} else if req.MaxTokens != nil {
		nPredict = *req.MaxTokens
	}
	greq := llama.Request{Prompt: prompt, NPredict: nPredict, CachePrompt: req.CachePrompt == nil || *req.CachePrompt,
		IgnoreEOS: req.IgnoreEOS, Sampling: samp}
	var stopWord string
	if len(req.Stop) > 0 {
		greq.StopAt = func(gen []int) bool {
			text := m.Tok.Decode(gen)
			for _, w := range req.Stop {
				if w != "" && strings.Contains(text, w) {
					stopWord = w
					return true
				}
			}
			return false
		}
	}
	res, err := st.Generate(r.Context(), greq)
	switch {
	case errors.Is(err, llama.ErrContextExceeded):
		writeError(w, http.StatusBadRequest, "exceed_context_size_error", err.Error())
		return
	case r.Context().Err() != nil:
		return // the client is gone
	case err != nil:
		writeError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	var content []byte
	for _, id := range res.Tokens {
		content = append(content, m.Tok.Piece(id)...)
	}
	text := string(content)
	if stopWord != "" {
		text = text[:strings.Index(text, stopWord)]
	}
	out := CompletionResponse{
		Content: text, Tokens: []int{}, Stop: true, Model: s.ModelPath,
		TokensPredicted: len(res.Tokens), TokensEvaluated: len(prompt),
		GenerationSettings: map[string]any{
			"n_predict": nPredict, "temperature": samp.Temperature, "top_k": samp.TopK, "top_p": samp.TopP,
			"min_p": samp.MinP, "seed": samp.Seed, "ignore_eos": req.IgnoreEOS, "n_ctx": st.Ctx(),
		},
		Prompt: promptText, HasNewLine: strings.Contains(text, "\n"), StopType: string(res.Stop), StoppingWord: stopWord,
		TokensCached: len(st.Tokens()),
		Timings:      makeTimings(res),
	}
	if req.ReturnTokens {
		out.Tokens = res.Tokens
	}
	writeJSON(w, http.StatusOK, out)
}

func makeTimings(res llama.Result) timings {
	t := timings{CacheN: res.CacheN, PromptN: res.PromptN, PredictedN: len(res.Tokens),
		PromptMS: ms(res.PromptDur), PredictedMS: ms(res.PredictDur)}
	if t.PromptN > 0 && t.PromptMS > 0 {
		t.PromptPerTokenMS = t.PromptMS / float64(t.PromptN)
		t.PromptPerSecond = 1e3 * float64(t.PromptN) / t.PromptMS
	}
	if t.PredictedN > 0 && t.PredictedMS > 0 {
		t.PredictedPerTokenMS = t.PredictedMS / float64(t.PredictedN)
		t.PredictedPerSecond = 1e3 * float64(t.PredictedN) / t.PredictedMS
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req struct {
		Content      string `json:"content"`
		AddSpecial   bool   `json:"add_special"`
		ParseSpecial *bool  `json:"parse_special"`
		WithPieces   bool   `json:"with_pieces"`
	}
	if !decode(w, r, &req) {
		return
	}
	tok := s.model.Tok
	ids := tok.Encode(req.Content, req.AddSpecial, req.ParseSpecial == nil || *req.ParseSpecial)
	if !req.WithPieces {
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": ids})
		return
	}
	type piece struct {
		ID    int `json:"id"`
		Piece any `json:"piece"`
	}
	pieces := make([]piece, len(ids))
	for i, id := range ids {
		p := tok.Piece(id)
		if s := string(p); strings.ToValidUTF8(s, "\uFFFD") == s {
			pieces[i] = piece{id, s}
		} else {
			pieces[i] = piece{id, p}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": pieces})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if !decode(w, r, &req) {
		return
	}
	var b []byte
	for _, id := range req.Tokens {
		b = append(b, s.model.Tok.Piece(id)...)
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": string(b)})
}

func (s *Server) props(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	m := s.model
	nCtx := s.state.Ctx()
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": nCtx, "params": map[string]any{
			"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": -1}},
		"total_slots": 1,
		"model_path":  s.ModelPath,
		"n_ctx":       nCtx,
		"build_info":  BuildInfo,
		"model":       map[string]any{"name": m.Name, "n_vocab": m.Vocab, "n_ctx_train": m.CtxTrain, "n_embd": m.Dim, "n_layer": m.Layers},
	})
}
