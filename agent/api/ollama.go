package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"meshd/agent"
	"meshd/engine"
	"meshd/steward"
)

// Ollama's API (PROFILE §16, "Ollama's API"): /api/generate, /api/chat,
// /api/embed, /api/tags, /api/show and /api/version in the shapes Ollama
// documents, beside the OpenAI-shaped calls, for the clients and front
// ends that speak Ollama first. Every serve is the same metered, sealed
// serve as /v1/serve; its final message carries the receipt (mesh_receipt).

// ollamaDefaultPredict is num_predict when a request leaves it out (or
// asks for -1/-2, "until the context fills"): Ollama's historical
// default. meshd bounds every serve, so an unbounded one is never run.
const ollamaDefaultPredict = 128

// ollamaOptions are Ollama's model options. Those meshd honours are
// named; the sampling ones (temperature, top_k, top_p, seed, num_ctx, …)
// are accepted and ignored, as the engine's configuration decides
// sampling. The mesh/1 fields may be given here too.
type ollamaOptions struct {
	meshFields
	NumPredict *int64          `json:"num_predict"`
	Stop       json.RawMessage `json:"stop"`
}

type ollamaGenerateBody struct {
	meshFields
	Model     string            `json:"model"`
	Prompt    string            `json:"prompt"`
	Suffix    string            `json:"suffix"`
	System    string            `json:"system"`
	Template  string            `json:"template"`
	Raw       bool              `json:"raw"`
	Images    []json.RawMessage `json:"images"`
	Format    json.RawMessage   `json:"format"`
	Context   []json.RawMessage `json:"context"`
	Stream    *bool             `json:"stream"`
	Think     json.RawMessage   `json:"think"`
	Options   *ollamaOptions    `json:"options"`
	KeepAlive json.RawMessage   `json:"keep_alive"`
}

type ollamaMessage struct {
	Role      string            `json:"role"`
	Content   string            `json:"content"`
	Images    []json.RawMessage `json:"images"`
	ToolCalls []json.RawMessage `json:"tool_calls"`
}

type ollamaChatBody struct {
	meshFields
	Model     string            `json:"model"`
	Messages  []ollamaMessage   `json:"messages"`
	Tools     []json.RawMessage `json:"tools"`
	Format    json.RawMessage   `json:"format"`
	Stream    *bool             `json:"stream"`
	Think     json.RawMessage   `json:"think"`
	Options   *ollamaOptions    `json:"options"`
	KeepAlive json.RawMessage   `json:"keep_alive"`
}

// ollamaServe is what generate and chat have in common once parsed.
type ollamaServe struct {
	model  string // as the client named it
	pin    string // the backend it names, "" for routing to decide
	prompt []byte
	chat   bool
	stream bool
	f      meshFields
	max    *uint32
}

// ollamaGenerate is POST /api/generate. The prompt is completed as it is
// (meshd never re-implements a model's template); with a system message
// the two are a chat serve rendered by the engine's own template.
func (s *Server) ollamaGenerate(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var b ollamaGenerateBody
	if !decodeBody(w, r, &b) {
		return
	}
	switch {
	case b.Suffix != "":
		badField(w, "suffix", "fill-in-the-middle is not served")
		return
	case b.Template != "":
		badField(w, "template", "the engine renders with its own template; a request's template is not served")
		return
	case len(b.Images) > 0:
		badField(w, "images", "only text is served")
		return
	case len(b.Context) > 0:
		badField(w, "context", "meshd keeps no conversation state; send the conversation as messages to /api/chat")
		return
	case b.Raw && b.System != "":
		badField(w, "system", "a raw prompt takes no system message")
		return
	}
	if !ollamaCommon(w, b.Model, b.Format, b.Think) {
		return
	}
	o := ollamaServe{model: b.Model, pin: s.ollamaBackend(b.Model), stream: b.Stream == nil || *b.Stream, prompt: []byte(b.Prompt)}
	if b.Prompt == "" && b.System == "" {
		ollamaLoad(w, b.Model, b.KeepAlive)
		return
	}
	if b.System != "" {
		msgs := []chatMessage{{Role: "system", Content: b.System}, {Role: "user", Content: b.Prompt}}
		p, err := json.Marshal(msgs)
		if err != nil {
			badField(w, "system", err.Error())
			return
		}
		o.prompt, o.chat = p, true
	}
	var ok bool
	if o.f, o.max, ok = ollamaMesh(w, b.meshFields, b.Options); !ok {
		return
	}
	s.ollamaRun(w, r, o, start, false)
}

// ollamaChat is POST /api/chat: the messages rendered by the engine's
// chat template, as /v1/chat/completions serves them.
func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var b ollamaChatBody
	if !decodeBody(w, r, &b) {
		return
	}
	if len(b.Tools) > 0 {
		badField(w, "tools", "tool calling is not served")
		return
	}
	if !ollamaCommon(w, b.Model, b.Format, b.Think) {
		return
	}
	if len(b.Messages) == 0 {
		ollamaLoad(w, b.Model, b.KeepAlive)
		return
	}
	msgs := make([]chatMessage, len(b.Messages))
	for i, m := range b.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		switch {
		case m.Role != "system" && m.Role != "user" && m.Role != "assistant" && m.Role != "tool":
			badField(w, p+".role", fmt.Sprintf("%q is not one of system, user, assistant, tool", m.Role))
			return
		case len(m.Images) > 0:
			badField(w, p+".images", "only text is served")
			return
		case len(m.ToolCalls) > 0:
			badField(w, p+".tool_calls", "tool calling is not served")
			return
		}
		msgs[i] = chatMessage{Role: m.Role, Content: m.Content}
	}
	// The same canonical bytes /v1/chat/completions hashes, so one
	// conversation has one prompt_hash whichever API carried it.
	prompt, err := json.Marshal(msgs)
	if err != nil {
		badField(w, "messages", err.Error())
		return
	}
	o := ollamaServe{model: b.Model, pin: s.ollamaBackend(b.Model), stream: b.Stream == nil || *b.Stream, prompt: prompt, chat: true}
	var ok bool
	if o.f, o.max, ok = ollamaMesh(w, b.meshFields, b.Options); !ok {
		return
	}
	s.ollamaRun(w, r, o, start, true)
}

// ollamaCommon checks what generate and chat share: a model named, no
// structured output, no thinking.
func ollamaCommon(w http.ResponseWriter, model string, format, think json.RawMessage) bool {
	if model == "" {
		badField(w, "model", "required (GET /api/tags lists them)")
		return false
	}
	if f := bytes.TrimSpace(format); len(f) > 0 && string(f) != "null" && string(f) != `""` {
		badField(w, "format", "structured output is not served")
		return false
	}
	if t := bytes.TrimSpace(think); len(t) > 0 && string(t) != "null" && string(t) != "false" {
		badField(w, "think", "thinking is not served")
		return false
	}
	return true
}

// ollamaLoad answers Ollama's "load the model" call (an empty prompt or
// no messages) as Ollama does, without a serve: the engines are started
// with the node and stay loaded, so there is nothing to load or unload,
// and nothing is sealed.
func ollamaLoad(w http.ResponseWriter, model string, keepAlive json.RawMessage) {
	reason := "load"
	if k := strings.Trim(string(bytes.TrimSpace(keepAlive)), `"`); k == "0" || k == "0s" {
		reason = "unload"
	}
	writeJSON(w, http.StatusOK, map[string]any{"model": model, "created_at": ollamaNow(), "response": "", "done": true, "done_reason": reason})
}

// ollamaMesh merges the mesh/1 fields given at the top level and inside
// options (either place; both only when they agree) and reads
// num_predict and stop.
func ollamaMesh(w http.ResponseWriter, top meshFields, o *ollamaOptions) (meshFields, *uint32, bool) {
	if o == nil {
		return top, nil, true
	}
	f := top
	conflict := ""
	merge := func(name string, t, in any) {
		tv, iv := setValue(t), setValue(in)
		if tv != nil && iv != nil && fmt.Sprint(tv) != fmt.Sprint(iv) && conflict == "" {
			conflict = name
		}
	}
	merge("fidelity_floor", top.FidelityFloor, o.FidelityFloor)
	merge("joule_ceiling_uj", top.JouleCeilingUJ, o.JouleCeilingUJ)
	merge("grant", top.Grant, o.Grant)
	merge("run", top.Run, o.Run)
	merge("prompt_tokens", top.PromptTokens, o.PromptTokens)
	if conflict != "" {
		badField(w, "options."+conflict, "given at the top level and in options with different values")
		return f, nil, false
	}
	f.FidelityFloor = firstSet(top.FidelityFloor, o.FidelityFloor)
	f.JouleCeilingUJ = firstSet(top.JouleCeilingUJ, o.JouleCeilingUJ)
	f.Grant = firstSet(top.Grant, o.Grant)
	f.Run = firstSet(top.Run, o.Run)
	f.PromptTokens = firstSet(top.PromptTokens, o.PromptTokens)
	if st := bytes.TrimSpace(o.Stop); len(st) > 0 && string(st) != "null" && string(st) != "[]" && string(st) != `""` {
		badField(w, "options.stop", "stop sequences are not honoured by this node's engines; leave options.stop out")
		return f, nil, false
	}
	var max *uint32
	if o.NumPredict != nil {
		switch n := *o.NumPredict; {
		case n == -1 || n == -2:
		case n < 1:
			badField(w, "options.num_predict", fmt.Sprintf("%d: want at least 1, or -1 for the node's default (%d)", n, ollamaDefaultPredict))
			return f, nil, false
		case n > math.MaxUint32:
			badField(w, "options.num_predict", fmt.Sprintf("%d is over %d", n, uint64(math.MaxUint32)))
			return f, nil, false
		default:
			v := uint32(n)
			max = &v
		}
	}
	return f, max, true
}

// setValue is the value a field pointer holds, nil when unset.
func setValue(p any) any {
	switch v := p.(type) {
	case *uint8:
		if v != nil {
			return *v
		}
	case *uint32:
		if v != nil {
			return *v
		}
	case *uint64:
		if v != nil {
			return *v
		}
	case *string:
		if v != nil {
			return *v
		}
	}
	return nil
}

func firstSet[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// ollamaBackend is the backend model names: a backend's name, or that
// name with Ollama's default tag ":latest". Any other name leaves the
// choice to the router, as the OpenAI-shaped calls do (PROFILE §16).
func (s *Server) ollamaBackend(model string) string {
	name := strings.TrimSuffix(model, ":latest")
	for _, b := range s.node.Backends() {
		if b.Config.Name == name || b.Config.Name == model {
			return b.Config.Name
		}
	}
	return ""
}

func ollamaNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// ollamaReceipt is the mesh_receipt object of a final message: the
// receipt's id and sequence to fetch and check it by, its headline
// figures, and the envelope itself.
func ollamaReceipt(sd *steward.Sealed) map[string]any {
	rc := sd.Receipt
	m := map[string]any{
		"id": sd.ID.String(), "sequence": rc.Sequence, "energy_provenance": rc.EnergyProvenance,
		"estimated_uj": rc.EstimatedUJ, "backend": rc.Backend, "route": rc.Route, "recipe": rc.Recipe,
		"fidelity_floor": rc.FidelityFloor, "fidelity_met": rc.FidelityMet, "tokens_accepted": rc.TokensAccepted,
		"envelope": receiptOf(sd).Envelope,
	}
	if rc.MeasuredUJ != nil {
		m["measured_uj"] = *rc.MeasuredUJ
	}
	if rc.UJPerAcceptedToken != nil {
		m["uj_per_accepted_token"] = *rc.UJPerAcceptedToken
	}
	return m
}

// ollamaRun serves o and answers as Ollama does: one JSON object, or
// NDJSON lines of pieces ending in the final message with the counts,
// durations and receipt.
func (s *Server) ollamaRun(w http.ResponseWriter, r *http.Request, o ollamaServe, start time.Time, chat bool) {
	max := o.max
	if max == nil {
		d := uint32(ollamaDefaultPredict)
		max = &d
	}
	req, env, ok := s.request(w, o.f, o.prompt, max)
	if !ok || !s.runAllowed(w, r, o.f.Run) {
		return
	}
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	opts := agent.Options{Grant: env, Engine: engine.Options{Chat: o.chat}, Run: o.f.Run, Backend: o.pin}
	piece := func(text string) map[string]any {
		m := map[string]any{"model": o.model, "created_at": ollamaNow(), "done": false}
		if chat {
			m["message"] = map[string]any{"role": "assistant", "content": text}
		} else {
			m["response"] = text
		}
		return m
	}
	final := func(resp *agent.Response, text string, serveStart, first time.Time) map[string]any {
		rc := resp.Sealed.Receipt
		m := piece(text)
		end := time.Now()
		// The engine's time: up to the first piece is the prompt's
		// evaluation where the serve streamed, the rest the generation;
		// a whole answer is not split (prompt_eval_duration 0).
		promptEval, eval := time.Duration(0), end.Sub(serveStart)
		if !first.IsZero() {
			promptEval, eval = first.Sub(serveStart), end.Sub(first)
		}
		m["done"] = true
		m["done_reason"] = finish(resp, req.MaxTokens)
		m["total_duration"] = end.Sub(start).Nanoseconds()
		m["load_duration"] = 0
		m["prompt_eval_count"] = rc.TokensIn
		m["prompt_eval_duration"] = promptEval.Nanoseconds()
		m["eval_count"] = rc.TokensOut
		m["eval_duration"] = eval.Nanoseconds()
		if !chat {
			// Ollama's context is token ids to send back; meshd keeps no
			// conversation state, so it is always empty.
			m["context"] = []int{}
		}
		m["mesh_receipt"] = ollamaReceipt(resp.Sealed)
		return m
	}
	serveStart := time.Now()
	if !o.stream {
		resp, err := s.run(r.Context(), req, o.prompt, opts)
		if resp == nil {
			status, e := serveStatus(err)
			writeError(w, status, renameParam(e, "options.num_predict"))
			return
		}
		setReceiptHeaders(w.Header(), resp.Sealed)
		writeJSON(w, http.StatusOK, final(resp, string(resp.Output), serveStart, time.Time{}))
		return
	}
	// The status and headers go out with the first piece, so a serve
	// refused before any output still gets its 4xx.
	nd := &ndjson{w: w, rc: http.NewResponseController(w)}
	var first time.Time
	opts.Engine.Emit = func(p []byte) error {
		if first.IsZero() {
			first = time.Now()
		}
		return nd.send(piece(string(p)))
	}
	resp, err := s.run(r.Context(), req, o.prompt, opts)
	if resp == nil {
		status, e := serveStatus(err)
		if !nd.started {
			writeError(w, status, renameParam(e, "options.num_predict"))
			return
		}
		// Output has begun: the error is the last line, as Ollama sends
		// it, and no receipt exists for the pieces already sent.
		_ = nd.send(map[string]any{"error": e.Message, "code": e.Code})
		return
	}
	if err := nd.send(final(resp, "", serveStart, first)); err != nil {
		return
	}
	setReceiptHeaders(w.Header(), resp.Sealed)
}

// ndjson writes newline-delimited JSON, flushing each line.
type ndjson struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (n *ndjson) send(v any) error {
	if !n.started {
		n.started = true
		h := n.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		h.Set("Trailer", "Mesh-Receipt-Id, Mesh-Receipt-Seq, Mesh-Energy-Provenance")
		n.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("client gone: %w", err)
	}
	if err := n.rc.Flush(); err != nil {
		return fmt.Errorf("client gone: %w", err)
	}
	return nil
}

// ollamaModel is one backend as Ollama lists a model.
func (s *Server) ollamaModels() []map[string]any {
	info := map[string]agent.BackendInfo{}
	for _, bi := range s.node.Agent.Backends() {
		info[bi.Backend.Name()] = bi
	}
	var out []map[string]any
	for _, b := range s.node.Backends() {
		eng := b.Engine
		sum := sha256.Sum256([]byte(eng.Recipe()))
		mesh := map[string]any{"fidelity": uint8(eng.Fidelity()), "configured_uj_per_token": eng.UJPerToken(), "recipe": eng.Recipe(), "state": b.State()}
		if bi, ok := info[b.Config.Name]; ok {
			mesh["routing_uj_per_token"] = bi.CostUJ
		}
		out = append(out, map[string]any{
			"name": b.Config.Name, "model": b.Config.Name,
			// The engines were started with the node; no file date is
			// claimed.
			"modified_at": time.Time{}.Format(time.RFC3339), "size": 0,
			// A changed model (its recipe) shows as a changed digest.
			"digest": hex.EncodeToString(sum[:]),
			"details": map[string]any{"parent_model": "", "format": b.Config.Kind, "family": b.Config.Kind,
				"families": []string{b.Config.Kind}, "parameter_size": "", "quantization_level": ""},
			"mesh": mesh,
		})
	}
	if out == nil {
		out = []map[string]any{}
	}
	return out
}

// ollamaTags is GET /api/tags: the backends, as Ollama lists local models.
func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": s.ollamaModels()})
}

// ollamaShow is POST /api/show: one backend's details; 404 for a name
// that is not a backend.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Model string `json:"model"`
		// Name is the field's older name, which clients still send.
		Name    string `json:"name"`
		Verbose bool   `json:"verbose"`
	}
	if !decodeBody(w, r, &b) {
		return
	}
	model := cmpOr(b.Model, b.Name)
	if model == "" {
		badField(w, "model", "required (GET /api/tags lists them)")
		return
	}
	name := s.ollamaBackend(model)
	for _, m := range s.ollamaModels() {
		if m["name"] != name || name == "" {
			continue
		}
		mesh := m["mesh"].(map[string]any)
		writeJSON(w, http.StatusOK, map[string]any{
			"modelfile": "", "parameters": "", "template": "", "license": "",
			"details":      m["details"],
			"model_info":   map[string]any{"general.architecture": m["details"].(map[string]any)["family"], "mesh.recipe": mesh["recipe"], "mesh.fidelity": mesh["fidelity"]},
			"capabilities": []string{"completion"},
			"modified_at":  m["modified_at"],
			"mesh":         mesh,
		})
		return
	}
	writeError(w, http.StatusNotFound, apiError{Message: fmt.Sprintf("model '%s' not found", model), Code: "not_found", Type: "not_found"})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ollamaVersion is GET /api/version: meshd's own version (Version), not an
// Ollama release number.
func (s *Server) ollamaVersion(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"version": Version()})
}

// ollamaEmbed is POST /api/embed. Its input is read as Ollama sends it (a
// string or an array of strings); no backend of this node embeds as a
// metered serve, so every model is refused as Ollama refuses a model
// without embeddings (400), rather than embedding outside a meter window.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request) {
	var b struct {
		meshFields
		Model     string          `json:"model"`
		Input     json.RawMessage `json:"input"`
		Truncate  *bool           `json:"truncate"`
		Options   *ollamaOptions  `json:"options"`
		KeepAlive json.RawMessage `json:"keep_alive"`
	}
	if !decodeBody(w, r, &b) {
		return
	}
	if b.Model == "" {
		badField(w, "model", "required (GET /api/tags lists them)")
		return
	}
	start := time.Now()
	texts, err := embedInput(b.Input)
	if err != nil {
		badField(w, "input", err.Error())
		return
	}
	if b.Truncate != nil && !*b.Truncate {
		badField(w, "truncate", "false is not served: the engine embeds what fits its context")
		return
	}
	f, _, ok := ollamaMesh(w, b.meshFields, b.Options)
	if !ok {
		return
	}
	pin := s.ollamaBackend(b.Model)
	if pin == "" {
		writeError(w, http.StatusNotFound, apiError{Message: fmt.Sprintf("model '%s' not found", b.Model), Param: "model", Code: "not_found"})
		return
	}
	// The same metered serve as /v1/embeddings: one receipt for the
	// texts, max_tokens the number of texts.
	prompt, err := json.Marshal(texts)
	if err != nil {
		badField(w, "input", err.Error())
		return
	}
	n := uint32(len(texts))
	req, env, ok := s.request(w, f, prompt, &n)
	if !ok || !s.runAllowed(w, r, f.Run) {
		return
	}
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	resp, err := s.run(r.Context(), req, prompt, agent.Options{Grant: env, Run: f.Run, Engine: engine.Options{Embed: true}, Backend: pin})
	if resp == nil {
		status, e := serveStatus(err)
		if errors.Is(err, engine.ErrNoEmbed) {
			status, e = http.StatusBadRequest, apiError{Message: fmt.Sprintf("%q does not support embeddings: %v", b.Model, err), Param: "model", Code: "no_embeddings"}
		}
		writeError(w, status, e)
		return
	}
	var vecs [][]float32
	if err := json.Unmarshal(resp.Output, &vecs); err != nil || len(vecs) != len(texts) {
		writeError(w, http.StatusBadGateway, apiError{Message: fmt.Sprintf("the engine's embeddings are malformed (%d for %d texts): %v; receipt %s", len(vecs), len(texts), err, resp.Sealed.ID), Code: "engine_failed"})
		return
	}
	rc := resp.Sealed.Receipt
	setReceiptHeaders(w.Header(), resp.Sealed)
	writeJSON(w, http.StatusOK, map[string]any{
		"model": b.Model, "embeddings": vecs,
		"total_duration": time.Since(start).Nanoseconds(), "load_duration": 0, "prompt_eval_count": rc.TokensIn,
		"mesh_receipt": ollamaReceipt(resp.Sealed),
	})
}

// ollamaErrors rewrites an error answer on an /api/ path into Ollama's
// shape, {"error": "message"}, whatever wrote it (the decoder, the
// guard, the mux's own 404 and 405), keeping the named reason beside it
// as code, so that Ollama's clients show the message.
type ollamaErrors struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (o *ollamaErrors) WriteHeader(code int) {
	if code >= 400 && o.status == 0 {
		o.status = code
		return
	}
	if o.status == 0 {
		o.status = -1 // passed through
	}
	o.ResponseWriter.WriteHeader(code)
}

func (o *ollamaErrors) Write(b []byte) (int, error) {
	if o.status == 0 {
		o.WriteHeader(http.StatusOK)
	}
	if o.status > 0 {
		return o.buf.Write(b)
	}
	return o.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush a stream through o.
func (o *ollamaErrors) Unwrap() http.ResponseWriter { return o.ResponseWriter }

func (o *ollamaErrors) finish() {
	if o.status <= 0 {
		return
	}
	out := map[string]any{}
	var outer struct {
		Error json.RawMessage `json:"error"`
	}
	body := bytes.TrimSpace(o.buf.Bytes())
	var inner map[string]any
	var msg string
	switch {
	case json.Unmarshal(body, &outer) != nil || len(outer.Error) == 0:
		out["error"] = string(body) // the mux's text
	case json.Unmarshal(outer.Error, &msg) == nil:
		out["error"] = msg
	case json.Unmarshal(outer.Error, &inner) == nil:
		out["error"] = inner["message"]
		for _, k := range []string{"code", "param", "route"} {
			if v, ok := inner[k]; ok && v != nil && v != "" {
				out[k] = v
			}
		}
	default:
		out["error"] = string(outer.Error)
	}
	h := o.ResponseWriter.Header()
	h.Del("Content-Length")
	h.Del("X-Content-Type-Options")
	h.Set("Content-Type", "application/json; charset=utf-8")
	o.ResponseWriter.WriteHeader(o.status)
	enc := json.NewEncoder(o.ResponseWriter)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(out)
}
