// Package llamaserver owns the HTTP face of the pure-Go GGUF runner: the
// subset of llama-server's API (/health, /completion, /tokenize,
// /detokenize, /props, /embedding, /v1/chat/completions, /apply-template,
// /v1/embeddings)
// with llama-server's field names, defaults, error shapes, streaming
// format and loading behaviour, over one or more slots.
//
// A request never holds a slot while it is read, decoded, tokenized or
// validated: the body is capped (413 past the limit), a string prompt is
// first checked against a cheap lower bound of its token count (no token
// spells more bytes than the longest vocabulary entry), then tokenized and
// checked exactly, all before the request queues for a slot. Each slot is
// its own llama.State (its own KV cache) over the shared weights and the
// shared kernel pool, whose loops take turns. The slots that are
// generating at once share decode steps (decoder): one step evaluates the
// next token of each, reading the weights once for all of them, and each
// gets the logits it would have got alone, bit for bit.
//
// An embedding-only encoder (a BERT model, installed with ReadyEncoder)
// serves /embedding, /v1/embeddings, /tokenize, /detokenize, /health and
// /props the same way; completions and chat answer 501 naming its
// architecture.
package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"meshd/engine/runner/bert"
	"meshd/engine/runner/chat"
	"meshd/engine/runner/llama"
	"meshd/engine/runner/tokenizer"
)

// BuildInfo identifies this runner in /props.
const BuildInfo = "mesh-gguf/1 (pure Go)"

// DefaultMaxBodyBytes caps a request body when Server.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 8 << 20

// Server answers the API. It reports "Loading model" until Ready is
// called, so the listener can be bound before the model is read. The
// exported fields are configuration: set them before Handler is called.
type Server struct {
	ModelPath string
	// MaxBodyBytes caps every request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxPredict, if positive, is the default t_max_predict_ms of every
	// completion: generation stops with stop_type "limit" once this much
	// time has passed since its first generated token.
	MaxPredict time.Duration
	// Embeddings enables /embedding and /v1/embeddings, as llama-server's
	// --embedding does; without it they answer 501.
	Embeddings bool
	// ChatTemplate is the model's tokenizer.chat_template (Jinja),
	// rendered with engine/runner/chat for /v1/chat/completions; empty
	// means ChatML, llama-server's fallback.
	ChatTemplate string
	// SlotPromptSimilarity is llama-server's --slot-prompt-similarity:
	// with several slots, a request goes to the idle slot whose cached
	// tokens share the largest fraction of its prompt when that fraction
	// exceeds this, else to the slot idle the longest. 0 means
	// DefaultSlotPromptSimilarity; a negative value turns the choice off
	// (llama-server's 0).
	SlotPromptSimilarity float64

	ready atomic.Bool
	// Set once by Ready or ReadyEncoder before ready is stored; read-only
	// afterwards.
	info        modelInfo
	slots       *slotPool
	nCtx        int // positions per slot
	maxTokBytes int // the most input bytes one token can stand for
	chatTpl     *chat.Template
	chatErr     error    // why ChatTemplate did not compile
	decoder     *decoder // nil for an encoder
	hooks       hooks

	// drafts are the slots' drafters, by slot id; none without a draft
	// model (Speculate).
	drafts []*llama.Drafter
}

// hooks let tests observe and gate a request at its stages; every field
// may be nil.
type hooks struct {
	// validate runs after the body is decoded and before the prompt is
	// checked or tokenized, with the prompt's size in bytes.
	validate func(ctx context.Context, promptBytes int)
	// queued runs when a request starts waiting for a slot.
	queued func()
	// acquired runs when a request has taken slot id.
	acquired func(ctx context.Context, id int)
	// token runs after each generated token on slot with the count so far.
	token func(ctx context.Context, slot, n int)
	// done runs when the generation on slot ends, with its error (nil
	// when it finished) and the number of tokens generated.
	done func(slot int, err error, n int)
	// now replaces time.Now for generation deadlines.
	now func() time.Time

	// decodeQueued runs when the generation on slot has queued its n-th
	// token for a decode step.
	decodeQueued func(slot, n int)
	// gather runs when a decode step is about to take the queue: holding
	// it lets more sequences join the step.
	gather func()
	// step runs when a decode step has taken its n sequences, before it
	// evaluates them.
	step func(n int)
	// patience, if positive, replaces how long a decode step waits for
	// the sequences of the step before it.
	patience time.Duration
}

func (s *Server) now() time.Time {
	if s.hooks.now != nil {
		return s.hooks.now()
	}
	return time.Now()
}

// modelInfo is what the handlers need to know of the model, whichever
// package runs it.
type modelInfo struct {
	tok                       *tokenizer.Tokenizer
	name                      string
	vocab, ctxTrain, dim, lay int
	poolNone                  bool // one embedding per token
	// encoderArch names the architecture of an embedding-only model ("":
	// a generative one).
	encoderArch string
}

// Ready installs the loaded model and one state per slot (each with its
// own KV cache of the same size) and starts serving. It must be called
// once, with at least one state. The states are meant to share one
// kernel pool: the decode steps that slots share run on the first
// state's.
func (s *Server) Ready(m *llama.Model, slots ...*llama.State) {
	if len(slots) == 0 {
		panic("llamaserver: Ready needs at least one slot")
	}
	sl := make([]*slot, len(slots))
	for i, st := range slots {
		sl[i] = &slot{id: i, state: st, emb: st, ctx: st.Ctx()}
	}
	s.decoder = newDecoder(m.NewDecoder(slots[0].Pool()), &s.hooks)
	s.ready0(modelInfo{tok: m.Tok, name: m.Name, vocab: m.Vocab, ctxTrain: m.CtxTrain, dim: m.Dim, lay: m.Layers,
		poolNone: m.Pooling == llama.PoolNone}, sl)
}

// ReadyEncoder installs an embedding-only encoder and one state per slot
// and starts serving; it is Ready for a BERT model. It must be called
// once, with at least one state.
func (s *Server) ReadyEncoder(m *bert.Model, slots ...*bert.State) {
	if len(slots) == 0 {
		panic("llamaserver: ReadyEncoder needs at least one slot")
	}
	sl := make([]*slot, len(slots))
	for i, st := range slots {
		sl[i] = &slot{id: i, emb: st, ctx: st.Ctx()}
	}
	s.ready0(modelInfo{tok: m.Tok, name: m.Name, vocab: m.Vocab, ctxTrain: m.CtxTrain, dim: m.Dim, lay: m.Layers,
		poolNone: m.Pooling == bert.PoolNone, encoderArch: bert.Arch}, sl)
}

func (s *Server) ready0(info modelInfo, slots []*slot) {
	s.info = info
	s.nCtx = slots[0].ctx
	for _, sl := range slots[1:] {
		s.nCtx = min(s.nCtx, sl.ctx)
	}
	sim := s.SlotPromptSimilarity
	switch {
	case sim == 0:
		sim = DefaultSlotPromptSimilarity
	case sim < 0:
		sim = 0
	}
	s.slots = newSlotPool(slots, sim)
	s.maxTokBytes = maxTokenBytes(info.tok)
	s.parseChatTemplate()
	s.ready.Store(true)
}

// generative answers 501 for an embedding-only model, naming its
// architecture, and reports whether the model can generate.
func (s *Server) generative(w http.ResponseWriter) bool {
	if s.info.encoderArch == "" {
		return true
	}
	writeError(w, http.StatusNotImplemented, "not_supported_error",
		fmt.Sprintf("the model's architecture %q is an embedding-only encoder: it serves /embedding and /v1/embeddings, not completions", s.info.encoderArch))
	return false
}

// maxTokenBytes is an upper bound on the input bytes a single token can
// consume: a byte token one; a control or user-defined token its text
// (matched literally when special tokens are parsed); any other the
// longest of its stored text and its decoded piece (SentencePiece stores
// a space as three bytes, byte-level BPE a byte as one or two). WordPiece
// and unigram vocabularies normalise the text first, and a character of
// up to four bytes can normalise to one ("ệ" to "e"), so theirs is four
// times the longest entry.
func maxTokenBytes(tok *tokenizer.Tokenizer) int {
	n := 1
	for i, t := range tok.Tokens {
		if i < len(tok.Types) && tok.Types[i] == tokenizer.TypeByte {
			continue
		}
		n = max(n, len(t), len(tok.Piece(i)))
	}
	if tok.Model == "bert" || tok.Model == "t5" {
		n *= 4
	}
	return n
}

func (s *Server) maxBody() int64 {
	if s.MaxBodyBytes > 0 {
		return s.MaxBodyBytes
	}
	return DefaultMaxBodyBytes
}

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/health", s.health)
	mux.HandleFunc("POST /completion", s.completion)
	mux.HandleFunc("POST /completions", s.completion)
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletion)
	mux.HandleFunc("POST /chat/completions", s.chatCompletion)
	mux.HandleFunc("POST /apply-template", s.applyTemplate)
	mux.HandleFunc("POST /embedding", s.embedding)
	mux.HandleFunc("POST /embeddings", s.embedding)
	mux.HandleFunc("POST /v1/embeddings", s.embeddingOAI)
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
	// Set on exceed_context_size_error, as llama-server does.
	NPromptTokens int `json:"n_prompt_tokens,omitempty"`
	NCtx          int `json:"n_ctx,omitempty"`
}

// requestError is a client error found while reading or validating a
// request, before any slot is taken.
type requestError struct {
	apiError
}

func (e *requestError) Error() string { return e.Message }

func badRequest(format string, args ...any) *requestError {
	return &requestError{apiError{Code: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	writeAPIError(w, apiError{Code: code, Message: msg, Type: typ})
}

func writeAPIError(w http.ResponseWriter, e apiError) {
	writeJSON(w, e.Code, map[string]apiError{"error": e})
}

// writeErr answers err: a requestError as itself, anything else as a 500.
func writeErr(w http.ResponseWriter, err error) {
	var re *requestError
	if errors.As(err, &re) {
		writeAPIError(w, re.apiError)
		return
	}
	writeError(w, http.StatusInternalServerError, "server_error", err.Error())
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
		idle, busy := s.slots.counts()
		h := map[string]any{"status": "ok", "slots_idle": idle, "slots_processing": busy}
		if d := s.decoder; d != nil {
			// Decode steps run, those shared by several generating slots,
			// and the tokens they decoded: tokens per step is the mean
			// number of slots a step served.
			h["decode_steps"], h["decode_steps_batched"], h["decode_tokens"] = d.steps.Load(), d.batched.Load(), d.tokens.Load()
		}
		writeJSON(w, http.StatusOK, h)
	}
}

// decode reads a JSON body of at most the configured size into v. A body
// declared larger than the limit is refused before any of it is read; one
// that turns out larger is refused as soon as the limit is passed, so a
// request never costs more than the limit in memory.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	limit := s.maxBody()
	tooLarge := func() error {
		return &requestError{apiError{Code: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Message: fmt.Sprintf("request body exceeds the limit of %d bytes", limit)}}
	}
	if r.ContentLength > limit {
		// Do not drain a body we refuse: close the connection after
		// answering.
		w.Header().Set("Connection", "close")
		return tooLarge()
	}
	// The whole body is read (within the limit) before decoding, so that
	// the server watches the connection and cancels the request's context
	// if the client goes away, and so that it is checked whole: JSON text
	// is UTF-8 and one value, as meshd's own API takes it.
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return tooLarge()
	case err != nil:
		return badRequest("reading the body: %v", err)
	}
	return decodeStrict(buf.Bytes(), v)
}

// decodeStrict decodes one JSON value, refusing invalid UTF-8 (which
// encoding/json would turn into U+FFFD) and anything but whitespace after
// the value, each with the byte offset at fault.
func decodeStrict(raw []byte, v any) error {
	if !utf8.Valid(raw) {
		off := 0
		for off < len(raw) {
			r, n := utf8.DecodeRune(raw[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return badRequest("invalid JSON body: not valid UTF-8 at byte %d", off)
	}
	// json.Unmarshal decodes in place (a Decoder would copy the body
	// into a buffer of its own) and refuses trailing data itself.
	var se *json.SyntaxError
	switch err := json.Unmarshal(raw, v); {
	case err == nil:
	case len(bytes.Trim(raw, " \t\r\n")) == 0:
		return badRequest("invalid JSON body: empty")
	case errors.As(err, &se) && strings.HasSuffix(se.Error(), "after top-level value"):
		return badRequest("invalid JSON body: trailing data after the JSON value at byte %d", se.Offset-1)
	default:
		return badRequest("invalid JSON body: %v", err)
	}
	return nil
}

func (s *Server) props(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	m := s.info
	bos, eos := s.specialText()
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": s.nCtx, "params": map[string]any{
			"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": -1,
			"t_max_predict_ms": s.MaxPredict.Milliseconds()}},
		"total_slots":   s.slots.len(),
		"model_path":    s.ModelPath,
		"n_ctx":         s.nCtx,
		"chat_template": s.chatTemplateSource(),
		"bos_token":     bos,
		"eos_token":     eos,
		"build_info":    BuildInfo,
		"embedding":     s.Embeddings,
		"max_body":      s.maxBody(),
		"model": map[string]any{"name": m.name, "n_vocab": m.vocab, "n_ctx_train": m.ctxTrain,
			"n_embd": m.dim, "n_layer": m.lay},
	})
}

// specialText is the text of the BOS and EOS tokens ("" when absent).
func (s *Server) specialText() (bos, eos string) {
	tok := s.info.tok
	if tok.BOS >= 0 && tok.BOS < tok.Len() {
		bos = tok.Tokens[tok.BOS]
	}
	if tok.EOS >= 0 && tok.EOS < tok.Len() {
		eos = tok.Tokens[tok.EOS]
	}
	return bos, eos
}
