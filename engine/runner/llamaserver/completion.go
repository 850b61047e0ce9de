package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"meshd/engine/runner/llama"
)

// stopList is llama-server's and OpenAI's "stop": a string or an array of
// strings.
type stopList []string

func (l *stopList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New(`"stop" must be a string or an array of strings`)
	}
	*l = many
	return nil
}

// genFields are the generation parameters /completion and
// /v1/chat/completions share, with llama-server's names.
type genFields struct {
	NPredict            *int     `json:"n_predict"`
	MaxTokens           *int     `json:"max_tokens"`
	MaxCompletionTokens *int     `json:"max_completion_tokens"`
	CachePrompt         *bool    `json:"cache_prompt"`
	Temperature         *float64 `json:"temperature"`
	TopK                *int     `json:"top_k"`
	TopP                *float64 `json:"top_p"`
	MinP                *float64 `json:"min_p"`
	Seed                *int64   `json:"seed"`
	IgnoreEOS           bool     `json:"ignore_eos"`
	Stream              bool     `json:"stream"`
	Stop                stopList `json:"stop"`
	// TMaxPredictMS bounds the generation phase in milliseconds, counted
	// from the first generated token; 0 or absent takes the server's
	// default.
	TMaxPredictMS *int64 `json:"t_max_predict_ms"`
}

type completionRequest struct {
	genFields
	Prompt       json.RawMessage `json:"prompt"`
	ReturnTokens bool            `json:"return_tokens"`
}

// genParams is a validated generation request.
type genParams struct {
	prompt      []int
	nPredict    int
	cachePrompt bool
	ignoreEOS   bool
	samp        llama.Sampling
	stop        []string
	maxPredict  time.Duration // 0: none
}

func (s *Server) genParams(f genFields, prompt []int) (genParams, error) {
	// llama-server's defaults.
	p := genParams{prompt: prompt, nPredict: -1, cachePrompt: f.CachePrompt == nil || *f.CachePrompt,
		ignoreEOS: f.IgnoreEOS, maxPredict: s.MaxPredict,
		samp: llama.Sampling{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, Seed: rand.Uint64()}}
	if f.Temperature != nil {
		p.samp.Temperature = *f.Temperature
	}
	if f.TopK != nil {
		p.samp.TopK = *f.TopK
	}
	if f.TopP != nil {
		p.samp.TopP = *f.TopP
	}
	if f.MinP != nil {
		p.samp.MinP = *f.MinP
	}
	if f.Seed != nil && *f.Seed >= 0 && *f.Seed != 0xFFFFFFFF {
		p.samp.Seed = uint64(*f.Seed)
	}
	switch {
	case f.NPredict != nil:
		p.nPredict = *f.NPredict
	case f.MaxTokens != nil:
		p.nPredict = *f.MaxTokens
	case f.MaxCompletionTokens != nil:
		p.nPredict = *f.MaxCompletionTokens
	}
	if f.TMaxPredictMS != nil {
		if *f.TMaxPredictMS < 0 {
			return p, badRequest(`"t_max_predict_ms" must not be negative`)
		}
		if *f.TMaxPredictMS > 0 {
			p.maxPredict = time.Duration(*f.TMaxPredictMS) * time.Millisecond
		}
	}
	for _, w := range f.Stop {
		if w != "" {
			p.stop = append(p.stop, w)
		}
	}
	return p, nil
}

// exceedContext is llama-server's error for a prompt that cannot fit.
func (s *Server) exceedContext(nTokens int, atLeast bool) *requestError {
	what := fmt.Sprintf("%d tokens", nTokens)
	if atLeast {
		what = "at least " + what
	}
	return &requestError{apiError{Code: http.StatusBadRequest, Type: "exceed_context_size_error",
		Message:       fmt.Sprintf("the request exceeds the available context size: the prompt is %s, the context %d", what, s.nCtx),
		NPromptTokens: nTokens, NCtx: s.nCtx}}
}

// checkTextSize refuses, before tokenizing, text whose token count cannot
// be below the context: no token consumes more than maxTokBytes bytes of
// input, so n bytes make at least ⌈n/maxTokBytes⌉ tokens. Tokenizing what
// passes costs at most a context's worth of the longest tokens.
func (s *Server) checkTextSize(nBytes, extraTokens int) error {
	if lb := (nBytes+s.maxTokBytes-1)/s.maxTokBytes + extraTokens; lb >= s.nCtx {
		return s.exceedContext(lb, true)
	}
	return nil
}

// checkTokens refuses an empty prompt or one that leaves no room to
// generate.
func (s *Server) checkTokens(ids []int) error {
	if len(ids) == 0 {
		return badRequest("the prompt is empty")
	}
	if len(ids) >= s.nCtx {
		return s.exceedContext(len(ids), false)
	}
	return nil
}

// bosExtra is the number of tokens Encode adds with addSpecial (BOS, EOS,
// and BERT's [SEP]).
func (s *Server) bosExtra() int { return s.info.tok.AddedSpecial() }

// textTokens tokenizes a rendered prompt after the size check.
func (s *Server) textTokens(text string, addSpecial bool) ([]int, error) {
	if text == "" {
		return nil, badRequest("the prompt is empty")
	}
	extra := 0
	if addSpecial {
		extra = s.bosExtra()
	}
	if err := s.checkTextSize(len(text), extra); err != nil {
		return nil, err
	}
	ids := s.info.tok.Encode(text, addSpecial, true)
	return ids, s.checkTokens(ids)
}

// promptTokens parses and validates /completion's "prompt": a string, or
// an array mixing token ids and strings as llama-server allows (only a
// leading string gets BOS). It runs before any slot is taken.
func (s *Server) promptTokens(raw json.RawMessage) ([]int, string, error) {
	tok := s.info.tok
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", badRequest(`"prompt" is required`)
	}
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		ids, err := s.textTokens(text, true)
		return ids, text, err
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, "", badRequest(`"prompt" must be a string or an array of tokens`)
	}
	// First pass: the cheap bound over the whole array.
	type part struct {
		id   int
		text string
		isID bool
	}
	ps := make([]part, len(parts))
	lb := 0
	for i, p := range parts {
		if err := json.Unmarshal(p, &ps[i].id); err == nil {
			if ps[i].id < 0 || ps[i].id >= tok.Len() {
				return nil, "", badRequest("prompt token %d out of range [0, %d)", ps[i].id, tok.Len())
			}
			ps[i].isID = true
			lb++
			continue
		}
		if err := json.Unmarshal(p, &ps[i].text); err != nil {
			return nil, "", badRequest("prompt element %d is neither a token nor a string", i)
		}
		lb += (len(ps[i].text) + s.maxTokBytes - 1) / s.maxTokBytes
	}
	if lb >= s.nCtx {
		return nil, "", s.exceedContext(lb, true)
	}
	var ids []int
	for i, p := range ps {
		if p.isID {
			ids = append(ids, p.id)
		} else {
			ids = append(ids, tok.Encode(p.text, i == 0, true)...)
		}
	}
	if err := s.checkTokens(ids); err != nil {
		return nil, "", err
	}
	return ids, tok.Decode(ids), nil
}

// genResult is a finished generation.
type genResult struct {
	res       llama.Result
	content   string // the generated text, cut before a stop word
	stopType  string
	stopWord  string
	timeLimit bool // stopped by t_max_predict_ms
	slotID    int
	cached    int // tokens in the slot's cache afterwards
}

// textTracker turns generated tokens into text that is safe to send: it
// holds back an incomplete UTF-8 sequence and any tail that may be the
// start of a stop word, and finds the first stop word.
type textTracker struct {
	stop    []string
	maxStop int
	buf     []byte
	sent    int
	stopPos int // -1 until a stop word is found
	word    string
}

func newTextTracker(stop []string) *textTracker {
	t := &textTracker{stop: stop, stopPos: -1}
	for _, w := range stop {
		t.maxStop = max(t.maxStop, len(w))
	}
	return t
}

// add appends a token's bytes and returns the text now safe to send and
// whether a stop word has been completed.
func (t *textTracker) add(piece []byte) (string, bool) {
	from := max(0, len(t.buf)-t.maxStop+1)
	t.buf = append(t.buf, piece...)
	for _, w := range t.stop {
		if i := bytes.Index(t.buf[from:], []byte(w)); i >= 0 && (t.stopPos < 0 || from+i < t.stopPos) {
			t.stopPos, t.word = from+i, w
		}
	}
	if t.stopPos >= 0 {
		return t.flushTo(t.stopPos), true
	}
	safe := len(t.buf) - t.partialStop()
	// Hold back an incomplete rune at the end.
	for i := safe - 1; i >= max(0, safe-utf8.UTFMax+1); i-- {
		if utf8.RuneStart(t.buf[i]) {
			if !utf8.FullRune(t.buf[i:safe]) {
				safe = i
			}
			break
		}
	}
	return t.flushTo(safe), false
}

// partialStop is the length of the longest tail of buf that is a proper
// prefix of a stop word.
func (t *textTracker) partialStop() int {
	best := 0
	for _, w := range t.stop {
		for k := min(len(w)-1, len(t.buf)); k > best; k-- {
			if bytes.HasSuffix(t.buf, []byte(w[:k])) {
				best = k
				break
			}
		}
	}
	return best
}

func (t *textTracker) flushTo(n int) string {
	if n <= t.sent {
		return ""
	}
	s := string(t.buf[t.sent:n])
	t.sent = n
	return s
}

// end returns the part not yet sent (up to a stop word).
func (t *textTracker) end() string { return t.flushTo(len(t.content())) }

func (t *textTracker) content() []byte {
	if t.stopPos >= 0 {
		return t.buf[:t.stopPos]
	}
	return t.buf
}

// generate waits for a slot (as long as ctx allows) and runs p on it.
// onText, if not nil, receives text as it becomes safe to send with the
// tokens generated since the last call; an error from it ends the
// generation. The caller has validated p.prompt: this is the only part of
// a request that holds a slot.
func (s *Server) generate(ctx context.Context, p genParams, onText func(delta string, toks []int, slot int) error) (genResult, error) {
	sl, err := s.slots.acquire(ctx, p.prompt, s.hooks.queued)
	if err != nil {
		return genResult{}, err
	}
	defer s.slots.release(sl)
	if s.hooks.acquired != nil {
		s.hooks.acquired(ctx, sl.id)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	tok := s.info.tok
	tr := newTextTracker(p.stop)
	var pending []int
	var started time.Time
	timeLimit := false
	sq := s.decoder.join(sl.state, sl.id)
	defer sq.leave() // after a panic too; leaving twice is harmless
	greq := llama.Request{Prompt: p.prompt, NPredict: p.nPredict, CachePrompt: p.cachePrompt,
		IgnoreEOS: p.ignoreEOS, Sampling: p.samp, Decode: sq.eval, Draft: s.draftOf(sl.id)}
	greq.StopAt = func(gen []int) bool {
		id := gen[len(gen)-1]
		delta, stopped := tr.add(tok.Piece(id))
		pending = append(pending, id)
		if s.hooks.token != nil {
			s.hooks.token(ctx, sl.id, len(gen))
		}
		if onText != nil && delta != "" {
			if err := onText(delta, pending, sl.id); err != nil {
				cancel()
			}
			pending = pending[:0]
		}
		if stopped {
			return true
		}
		if p.maxPredict > 0 {
			now := s.now()
			if len(gen) == 1 {
				started = now
			} else if now.Sub(started) >= p.maxPredict {
				timeLimit = true
				return true
			}
		}
		return false
	}
	res, err := sl.state.Generate(ctx, greq)
	// At once, not when the answer is written: no step waits for a
	// sequence that has ended.
	sq.leave()
	if s.hooks.done != nil {
		s.hooks.done(sl.id, err, len(res.Tokens))
	}
	out := genResult{res: res, stopType: string(res.Stop), stopWord: tr.word, timeLimit: timeLimit,
		slotID: sl.id, cached: len(sl.state.Tokens())}
	switch {
	case tr.word != "":
		out.stopType = string(llama.StopWord)
	case timeLimit:
		out.stopType = string(llama.StopLimit)
	}
	if err == nil && onText != nil {
		if rest := tr.end(); rest != "" || len(pending) > 0 {
			if err := onText(rest, pending, sl.id); err != nil {
				return out, err
			}
		}
	}
	out.content = string(tr.content())
	if errors.Is(err, llama.ErrContextExceeded) {
		err = s.exceedContext(len(p.prompt), false)
	}
	return out, err
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
	// DraftN and DraftNAccepted are the tokens a draft model proposed and
	// those of them the target accepted; like llama-server, both are
	// present only when something was drafted.
	DraftN         *int `json:"draft_n,omitempty"`
	DraftNAccepted *int `json:"draft_n_accepted,omitempty"`
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
	if res.DraftN > 0 {
		n, a := res.DraftN, res.DraftAccepted
		t.DraftN, t.DraftNAccepted = &n, &a
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// CompletionResponse is the non-streaming /completion answer and the
// final event of a streaming one.
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
	// TimeLimitReached says generation was stopped by t_max_predict_ms
	// (stop_type is then "limit", as in llama-server).
	TimeLimitReached bool    `json:"time_limit_reached,omitempty"`
	Timings          timings `json:"timings"`
}

// StreamChunk is one partial event of a streaming /completion.
type StreamChunk struct {
	Index           int    `json:"index"`
	Content         string `json:"content"`
	Tokens          []int  `json:"tokens"`
	Stop            bool   `json:"stop"`
	IDSlot          int    `json:"id_slot"`
	TokensPredicted int    `json:"tokens_predicted"`
	TokensEvaluated int    `json:"tokens_evaluated"`
}

func (s *Server) completion(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) || !s.generative(w) {
		return
	}
	var req completionRequest
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if s.hooks.validate != nil {
		s.hooks.validate(r.Context(), len(req.Prompt))
	}
	prompt, promptText, err := s.promptTokens(req.Prompt)
	if err != nil {
		writeErr(w, err)
		return
	}
	p, err := s.genParams(req.genFields, prompt)
	if err != nil {
		writeErr(w, err)
		return
	}
	final := func(g genResult) CompletionResponse {
		out := CompletionResponse{
			Content: g.content, Tokens: []int{}, IDSlot: g.slotID, Stop: true, Model: s.ModelPath,
			TokensPredicted: len(g.res.Tokens), TokensEvaluated: len(prompt),
			GenerationSettings: map[string]any{
				"n_predict": p.nPredict, "temperature": p.samp.Temperature, "top_k": p.samp.TopK, "top_p": p.samp.TopP,
				"min_p": p.samp.MinP, "seed": p.samp.Seed, "ignore_eos": p.ignoreEOS, "n_ctx": s.nCtx,
				"t_max_predict_ms": p.maxPredict.Milliseconds(), "stop": append([]string{}, p.stop...),
			},
			Prompt: promptText, HasNewLine: strings.Contains(g.content, "\n"), StopType: g.stopType,
			StoppingWord: g.stopWord, TokensCached: g.cached, TimeLimitReached: g.timeLimit,
			Timings: makeTimings(g.res),
		}
		if req.ReturnTokens {
			out.Tokens = g.res.Tokens
		}
		return out
	}
	if !req.Stream {
		g, err := s.generate(r.Context(), p, nil)
		switch {
		case r.Context().Err() != nil:
			return // the client is gone
		case err != nil:
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, final(g))
		return
	}
	sse := newSSE(w)
	predicted := 0
	g, err := s.generate(r.Context(), p, func(delta string, toks []int, slot int) error {
		predicted += len(toks)
		return sse.send(StreamChunk{Content: delta, Tokens: toks, IDSlot: slot, TokensPredicted: predicted,
			TokensEvaluated: len(prompt)})
	})
	switch {
	case r.Context().Err() != nil:
		return
	case err != nil:
		sse.fail(err)
		return
	}
	out := final(g)
	// Sent already in the partial events, as llama-server does: its final
	// event carries neither the content nor the tokens.
	out.Content, out.Tokens = "", []int{}
	sse.send(out)
}
