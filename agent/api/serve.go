package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"meshd/agent"
	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// meshFields are the mesh/1 fields every serving call accepts; the
// OpenAI-shaped calls take them as extra fields, defaulted from config.
type meshFields struct {
	PromptTokens   *uint32 `json:"prompt_tokens"`
	FidelityFloor  *uint8  `json:"fidelity_floor"`
	JouleCeilingUJ *uint64 `json:"joule_ceiling_uj"`
	Grant          *string `json:"grant"`
	// Run names the open run the serve belongs to (PROFILE §22).
	Run *uint64 `json:"run"`
}

// request builds the mesh/1 request for prompt. prompt_tokens defaults to
// the prompt's length in bytes plus one: no byte-level tokenizer makes
// more tokens than bytes (the one is a BOS), so the router's estimate
// never understates the prompt and a ceiling is never passed through an
// optimistic count.
func (s *Server) request(w http.ResponseWriter, f meshFields, prompt []byte, maxTokens *uint32) (wire.ServeRequest, []byte, bool) {
	req := wire.ServeRequest{
		PromptHash:     wire.ContentOf(prompt),
		PromptTokens:   uint32(min(uint64(len(prompt))+1, 1<<31)),
		MaxTokens:      s.opts.Defaults.MaxTokens,
		FidelityFloor:  s.opts.Defaults.FidelityFloor,
		JouleCeilingUJ: s.opts.Defaults.JouleCeilingUJ,
	}
	if f.PromptTokens != nil {
		req.PromptTokens = *f.PromptTokens
	}
	if maxTokens != nil {
		if *maxTokens == 0 {
			badField(w, "max_tokens", "must be at least 1")
			return req, nil, false
		}
		req.MaxTokens = *maxTokens
	}
	if f.FidelityFloor != nil {
		if !wire.Fidelity(*f.FidelityFloor).Valid() {
			badField(w, "fidelity_floor", fmt.Sprintf("%d is outside F0..F%d", *f.FidelityFloor, wire.MaxFidelity))
			return req, nil, false
		}
		req.FidelityFloor = wire.Fidelity(*f.FidelityFloor)
	}
	if f.JouleCeilingUJ != nil {
		if *f.JouleCeilingUJ == 0 {
			badField(w, "joule_ceiling_uj", "must be positive (a zero ceiling admits nothing)")
			return req, nil, false
		}
		req.JouleCeilingUJ = *f.JouleCeilingUJ
	}
	var env []byte
	if f.Grant != nil {
		var err error
		if env, err = base64.StdEncoding.DecodeString(*f.Grant); err != nil || len(env) == 0 {
			badField(w, "grant", "want the grant's COSE envelope in standard base64")
			return req, nil, false
		}
	}
	return req, env, true
}

// run is one serve under the server's deadline and admission.
func (s *Server) run(ctx context.Context, req wire.ServeRequest, prompt []byte, opts agent.Options) (*agent.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ServeTimeout)
	defer cancel()
	ctx, stop := s.cutContext(ctx)
	defer stop()
	resp, err := s.node.Agent.ServeWith(ctx, req, prompt, opts)
	return resp, cutErr(ctx, err)
}

type serveBody struct {
	meshFields
	Prompt    *string `json:"prompt"`
	MaxTokens *uint32 `json:"max_tokens"`
	// TimeFirstToken asks the daemon to time the engine's first output
	// piece (x_first_token_ns) although the answer comes back whole.
	TimeFirstToken bool `json:"time_first_token"`
}

type serveReply struct {
	Text     string         `json:"text"`
	Outcome  map[string]any `json:"outcome"`
	Backend  string         `json:"backend"`
	Route    string         `json:"route"`
	Receipt  *Receipt       `json:"receipt"`
	Settling string         `json:"settling_error,omitempty"`
}

// serve is POST /v1/serve: the mesh/1 call, its answer and its receipt.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	var b serveBody
	if !decodeBody(w, r, &b) {
		return
	}
	if b.Prompt == nil || *b.Prompt == "" {
		badField(w, "prompt", "required, a non-empty string")
		return
	}
	req, env, ok := s.request(w, b.meshFields, []byte(*b.Prompt), b.MaxTokens)
	if !ok || !s.runAllowed(w, r, b.Run) {
		return
	}
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	resp, err := s.run(r.Context(), req, []byte(*b.Prompt), agent.Options{Grant: env, Run: b.Run, TimeFirstToken: b.TimeFirstToken})
	if resp == nil {
		status, e := serveStatus(err)
		writeError(w, status, e)
		return
	}
	setReceiptHeaders(w.Header(), resp.Sealed)
	body, jerr := appendServeReply(make([]byte, 0, 4096), resp, err)
	if jerr != nil {
		// Not expected of a receipt the steward sealed; encoding/json
		// says the same, or better.
		writeJSON(w, http.StatusOK, newServeReply(resp, err))
		return
	}
	writeBody(w, http.StatusOK, body)
}

// newServeReply is the reply to a sealed serve (appendServeReply writes
// its JSON); settling is the error settling its grant's hold, if any.
func newServeReply(resp *agent.Response, settling error) serveReply {
	rc := resp.Sealed.Receipt
	reply := serveReply{
		Text:    string(resp.Output),
		Outcome: map[string]any{"tokens_in": rc.TokensIn, "tokens_out": rc.TokensOut, "tokens_accepted": rc.TokensAccepted},
		Backend: rc.Backend, Route: rc.Route, Receipt: receiptOf(resp.Sealed),
	}
	if settling != nil {
		reply.Settling = settling.Error()
	}
	return reply
}

// completionBody is OpenAI's completions request; fields meshd does not
// use (temperature, top_p, …) are accepted and ignored, as the engine's
// configuration decides sampling.
type completionBody struct {
	meshFields
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	MaxTokens *uint32         `json:"max_tokens"`
	Stream    bool            `json:"stream"`
	N         *int            `json:"n"`
	Stop      json.RawMessage `json:"stop"`
	Echo      json.RawMessage `json:"echo"`
	BestOf    json.RawMessage `json:"best_of"`
	Suffix    json.RawMessage `json:"suffix"`
	Logprobs  json.RawMessage `json:"logprobs"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatBody struct {
	meshFields
	Model     string            `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	MaxTokens *uint32           `json:"max_tokens"`
	// MaxCompletionTokens is the newer name of max_tokens.
	MaxCompletionTokens *uint32         `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	N                   *int            `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Functions           json.RawMessage `json:"functions"`
	FunctionCall        json.RawMessage `json:"function_call"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	Logprobs            json.RawMessage `json:"logprobs"`
	TopLogprobs         json.RawMessage `json:"top_logprobs"`
}

// completions is POST /v1/completions in OpenAI's shape.
func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var b completionBody
	if !decodeBody(w, r, &b) {
		return
	}
	if b.N != nil && *b.N != 1 {
		badField(w, "n", "meshd returns one choice per request (each is metered and receipted on its own)")
		return
	}
	if !refuseUnserved(w, []unservedField{
		{"logprobs", b.Logprobs, "the engines do not report log probabilities"},
		{"echo", falseOr(b.Echo), "the prompt is not echoed"},
		{"best_of", oneOr(b.BestOf), "meshd returns one choice per request"},
		{"suffix", b.Suffix, "insertion (a suffix after the completion) is not served"},
	}) {
		return
	}
	stop, ok := parseStop(w, b.Stop)
	if !ok {
		return
	}
	prompt, err := promptText(b.Prompt)
	if err != nil {
		badField(w, "prompt", err.Error())
		return
	}
	req, env, ok := s.request(w, b.meshFields, []byte(prompt), b.MaxTokens)
	if !ok || !s.runAllowed(w, r, b.Run) {
		return
	}
	s.openAI(w, r, req, []byte(prompt), openAICall{env: env, run: b.Run, stream: b.Stream, mtParam: "max_tokens", stop: stop, model: b.Model})
}

// chat is POST /v1/chat/completions in OpenAI's shape. The messages are
// passed to the engine, which renders them with its own chat template.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var b chatBody
	if !decodeBody(w, r, &b) {
		return
	}
	if b.N != nil && *b.N != 1 {
		badField(w, "n", "meshd returns one choice per request (each is metered and receipted on its own)")
		return
	}
	if !refuseUnserved(w, []unservedField{
		{"tools", b.Tools, "tool calls are not served: the answer would ignore the tools"},
		{"tool_choice", b.ToolChoice, "tool calls are not served"},
		{"functions", b.Functions, "function calls are not served"},
		{"function_call", b.FunctionCall, "function calls are not served"},
		{"response_format", textOr(b.ResponseFormat), "only {\"type\":\"text\"}: the engines do not constrain output to JSON"},
		{"logprobs", falseOr(b.Logprobs), "the engines do not report log probabilities"},
		{"top_logprobs", b.TopLogprobs, "the engines do not report log probabilities"},
	}) {
		return
	}
	stop, ok := parseStop(w, b.Stop)
	if !ok {
		return
	}
	if len(b.Messages) == 0 {
		badField(w, "messages", "required, a non-empty array")
		return
	}
	msgs := make([]chatMessage, len(b.Messages))
	for i, raw := range b.Messages {
		m, err := parseMessage(raw)
		if err != nil {
			badField(w, fmt.Sprintf("messages[%d]", i), err.Error())
			return
		}
		msgs[i] = m
	}
	// The bytes the receipt's prompt_hash addresses: the messages as the
	// engine receives them, in one canonical encoding.
	prompt, err := json.Marshal(msgs)
	if err != nil {
		badField(w, "messages", err.Error())
		return
	}
	mt, mtParam := b.MaxTokens, "max_tokens"
	if b.MaxCompletionTokens != nil {
		mt, mtParam = b.MaxCompletionTokens, "max_completion_tokens"
	}
	req, env, ok := s.request(w, b.meshFields, prompt, mt)
	if !ok || !s.runAllowed(w, r, b.Run) {
		return
	}
	s.openAI(w, r, req, prompt, openAICall{env: env, run: b.Run, chat: true, stream: b.Stream, mtParam: mtParam, stop: stop, model: b.Model})
}

func promptText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("required")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return "", errors.New("must not be empty")
		}
		return one, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err == nil {
		if len(many) != 1 || many[0] == "" {
			return "", errors.New("an array must hold exactly one non-empty string (one choice per request)")
		}
		return many[0], nil
	}
	return "", errors.New("want a string (token arrays are not accepted: the engine tokenizes)")
}

// parseMessage accepts OpenAI's message forms: content as a string or as
// an array of text parts, which are joined.
func parseMessage(raw json.RawMessage) (chatMessage, error) {
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return chatMessage{}, fmt.Errorf("want an object with role and content: %v", err)
	}
	switch m.Role {
	case "system", "user", "assistant", "developer", "tool":
	default:
		return chatMessage{}, fmt.Errorf("role %q is not one of system, developer, user, assistant, tool", m.Role)
	}
	var text string
	if err := json.Unmarshal(m.Content, &text); err == nil {
		return chatMessage{Role: m.Role, Content: text}, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return chatMessage{}, errors.New("content: want a string or an array of text parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return chatMessage{}, fmt.Errorf("content[%d]: only text parts are served, not %q", i, p.Type)
		}
		sb.WriteString(p.Text)
	}
	return chatMessage{Role: m.Role, Content: sb.String()}, nil
}

// openAICall is what a completions or chat body asks beyond the mesh/1
// request.
type openAICall struct {
	env          []byte
	run          *uint64
	chat, stream bool
	// mtParam is the body's name for max_tokens, which a refusal over the
	// cap names.
	mtParam string
	stop    []string
	// model is the body's model: a backend's name or alias pins the serve
	// to it (PROFILE §16).
	model string
}

// openAI runs a completions or chat serve and answers in OpenAI's shape,
// streamed or whole.
func (s *Server) openAI(w http.ResponseWriter, r *http.Request, req wire.ServeRequest, prompt []byte, c openAICall) {
	chat, stream, mtParam := c.chat, c.stream, c.mtParam
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	if _, err := req.ID(); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Message: err.Error(), Code: "bad_request"})
		return
	}
	// Random, never derived from the request: two identical requests are
	// two serves with two receipts, and a client may key on the id.
	id, object := "cmpl-"+randomID(), "text_completion"
	if chat {
		id, object = "chatcmpl-"+randomID(), "chat.completion"
	}
	created := time.Now().Unix()
	opts := agent.Options{Grant: c.env, Engine: engine.Options{Chat: chat, Stop: c.stop}, Run: c.run, Backend: s.pinned(c.model)}
	if !stream {
		resp, err := s.run(r.Context(), req, prompt, opts)
		if resp == nil {
			status, e := serveStatus(err)
			writeError(w, status, renameParam(e, mtParam))
			return
		}
		rc := resp.Sealed.Receipt
		choice := map[string]any{"index": 0, "finish_reason": finish(resp, req.MaxTokens), "logprobs": nil}
		if chat {
			choice["message"] = map[string]any{"role": "assistant", "content": string(resp.Output)}
		} else {
			choice["text"] = string(resp.Output)
		}
		setReceiptHeaders(w.Header(), resp.Sealed)
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": object, "created": created, "model": rc.Backend,
			"choices": []any{choice}, "usage": usage(rc), "receipt": receiptOf(resp.Sealed),
		})
		return
	}

	// Streaming: the status and headers go out with the first piece, so a
	// serve refused before any output still gets its 4xx. The receipt's id
	// comes as trailers and in the last event.
	sse := &eventStream{w: w, rc: http.NewResponseController(w)}
	// The chosen backend is known before the first piece (Chosen), so
	// every chunk names the model, as OpenAI's do.
	model := ""
	opts.Chosen = func(b string) { model = b }
	chunk := func(delta map[string]any, finishReason any) map[string]any {
		c := map[string]any{"index": 0, "finish_reason": finishReason, "logprobs": nil}
		if chat {
			c["delta"] = delta
		} else {
			c["text"] = delta["content"]
		}
		obj := object
		if chat {
			obj = "chat.completion.chunk"
		}
		return map[string]any{"id": id, "object": obj, "created": created, "model": model, "choices": []any{c}}
	}
	first := true
	opts.Engine.Emit = func(piece []byte) error {
		if first {
			first = false
			if chat {
				if err := sse.send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)); err != nil {
					return err
				}
			}
		}
		return sse.send(chunk(map[string]any{"content": string(piece)}, nil))
	}
	resp, err := s.run(r.Context(), req, prompt, opts)
	if resp == nil {
		status, e := serveStatus(err)
		if !sse.started {
			writeError(w, status, renameParam(e, mtParam))
			return
		}
		// Output has begun: the error travels as an event, and no receipt
		// exists for the tokens already sent.
		_ = sse.send(map[string]any{"error": e})
		return
	}
	rc := resp.Sealed.Receipt
	model = rc.Backend
	if first && chat {
		_ = sse.send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	}
	last := chunk(map[string]any{}, finish(resp, req.MaxTokens))
	if !chat {
		last["choices"].([]any)[0].(map[string]any)["text"] = ""
	}
	last["usage"] = usage(rc)
	last["receipt"] = receiptOf(resp.Sealed)
	if err := sse.send(last); err != nil {
		return
	}
	_ = sse.done()
	setReceiptHeaders(w.Header(), resp.Sealed)
}

// finish is OpenAI's finish_reason: "stop" when a stop string or the
// end of generation ended it, "length" when max_tokens did.
func finish(resp *agent.Response, max uint32) string {
	if !resp.Stopped && resp.Sealed.Receipt.TokensOut >= max {
		return "length"
	}
	return "stop"
}

// usage is OpenAI's usage object for a sealed serve. Its
// prompt_tokens_details.cached_tokens is the receipt's cache_hit_tokens:
// the prompt tokens the engine reused from its cache, as OpenAI and
// llama-server report them (0 when none were).
func usage(rc *steward.Receipt) map[string]any {
	return map[string]any{"prompt_tokens": rc.TokensIn, "completion_tokens": rc.TokensOut, "total_tokens": rc.TokensIn + rc.TokensOut,
		"prompt_tokens_details": map[string]any{"cached_tokens": rc.CacheHitTokens}}
}

// eventStream writes server-sent events, flushing each so the client sees
// every piece as it is produced.
type eventStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (e *eventStream) start() {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Trailer", "Mesh-Receipt-Id, Mesh-Receipt-Seq, Mesh-Energy-Provenance")
	e.w.WriteHeader(http.StatusOK)
}

func (e *eventStream) send(v any) error {
	e.start()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", b); err != nil {
		return fmt.Errorf("client gone: %w", err)
	}
	if err := e.rc.Flush(); err != nil {
		return fmt.Errorf("client gone: %w", err)
	}
	return nil
}

func (e *eventStream) done() error {
	if _, err := fmt.Fprint(e.w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	return e.rc.Flush()
}
