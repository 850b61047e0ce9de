// Package api is meshd's HTTP interface: the mesh/1 serve call with its
// receipt, the OpenAI-shaped completions and chat calls that existing
// clients speak (streaming as server-sent events whose last event carries
// the receipt), the receipt log and chain head, the backend and meter
// tables, health, and Prometheus metrics. It owns no serving logic: every
// request goes through the node's agent.
package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/agent"
	"meshd/agent/api/web"
	"meshd/agent/node"
	"meshd/auth"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/wire"
)

// Defaults fill what a request leaves out.
type Defaults struct {
	// FidelityFloor and JouleCeilingUJ apply to OpenAI-shaped calls that
	// do not name them (such clients cannot know of them).
	FidelityFloor  wire.Fidelity
	JouleCeilingUJ uint64
	// MaxTokens is OpenAI's default for completions when max_tokens is
	// absent (16).
	MaxTokens uint32
}

// Options configure a Server.
type Options struct {
	Defaults Defaults
	// MaxBodyBytes bounds every request body; default 1 MiB.
	MaxBodyBytes int64
	// ServeTimeout bounds one serve, engine included; default 5 minutes.
	ServeTimeout time.Duration
	// MaxInFlight bounds concurrent serves; the excess get 503 at once
	// rather than queueing without limit. Default 256.
	MaxInFlight int
	Logger      *slog.Logger
	// Metrics is served at /metrics; nil serves none.
	Metrics *Metrics
	// Ready is /readyz's check beyond the node's own (nil: none).
	Ready func() error
	// Auth decides who may call each route; nil lets everyone call
	// everything (tests, embedding).
	Auth *auth.Authenticator
	// CORSOrigins are the browser origins allowed to call the API
	// ("*": any); none sends no CORS header (cors.go).
	CORSOrigins []string
}

// Server is the HTTP interface of one node.
type Server struct {
	node     *node.Node
	opts     Options
	log      *slog.Logger
	mux      *http.ServeMux
	cors     *cors // nil: CORS off
	slots    chan struct{}
	draining atomic.Bool
	inflight atomic.Int64
	// started holds the start of every serve in flight, for the
	// watchdog's liveness check (Stuck).
	started  *startSet
	events   events
	done     chan struct{} // closed by Drain: live streams end
	drainOne sync.Once
	cut      cutter // Cut: the serves in flight at the drain deadline
	routes   []Route
}

// New returns the server for n.
func New(n *node.Node, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.ServeTimeout <= 0 {
		opts.ServeTimeout = 5 * time.Minute
	}
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 256
	}
	if opts.Defaults.MaxTokens == 0 {
		opts.Defaults.MaxTokens = 16
	}
	if opts.Defaults.JouleCeilingUJ == 0 {
		opts.Defaults.JouleCeilingUJ = 1_000_000_000 // config.DefaultJouleCeilingUJ
	}
	s := &Server{node: n, opts: opts, log: opts.Logger, mux: http.NewServeMux(), cors: newCORS(opts.CORSOrigins),
		slots: make(chan struct{}, opts.MaxInFlight), started: newStartSet(), done: make(chan struct{}), cut: newCutter()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// Every route names the roles that may call it (PROFILE §16).
	const (
		serve   = auth.Roles(auth.Serve)
		read    = auth.Roles(auth.Read)
		operate = auth.Roles(auth.Operate)
	)
	s.handleFunc(serve, "POST /v1/serve", s.serve)
	s.handleFunc(serve, "POST /v1/completions", s.completions)
	s.handleFunc(serve, "POST /v1/chat/completions", s.chat)
	s.handleFunc(serve, "POST /v1/embeddings", s.embeddings)
	s.handleFunc(read, "GET /v1/receipts", s.receipts)
	s.handleFunc(read, "GET /v1/receipts/{seq}", s.receipt)
	s.handleFunc(read, "GET /v1/chain/head", s.head)
	s.handleFunc(read, "GET /v1/backends", s.backends)
	s.handleFunc(read, "GET /v1/meters", s.meters)
	// An OpenAI client lists models with its serving key.
	s.handleFunc(serve|read, "GET /v1/models", s.models)
	s.handleFunc(serve, "POST /v1/rag/{org}/{name}/{procedure}", s.rag)
	s.handleFunc(serve|read, "GET /v1/rag", s.corpora)
	s.handleFunc(read, "GET /v1/node", s.nodeInfo)
	// Each of these makes the steward sign, or holds a meter.
	s.handleFunc(operate, "GET /v1/chain/checkpoint", s.checkpoint)
	s.handleFunc(operate, "POST /v1/meters/idle", s.idle)
	s.handleFunc(operate, "POST /v1/runs", s.openRun)
	s.handleFunc(operate, "POST /v1/runs/{run}/close", s.closeRun)
	s.handleFunc(read, "GET /v1/live", s.live)
	// Ollama's API (ollama.go): its serving calls are serves, and its
	// clients list models with the key they serve with.
	s.handleFunc(serve, "POST /api/generate", s.ollamaGenerate)
	s.handleFunc(serve, "POST /api/chat", s.ollamaChat)
	s.handleFunc(serve, "POST /api/embed", s.ollamaEmbed)
	s.handleFunc(serve|read, "GET /api/tags", s.ollamaTags)
	s.handleFunc(serve|read, "POST /api/show", s.ollamaShow)
	s.handleFunc(serve|read, "GET /api/version", s.ollamaVersion)
	// Probes carry no chain data; a load balancer has no credentials.
	s.handleFunc(Open, "GET /healthz", s.healthz)
	s.handleFunc(Open, "GET /readyz", s.readyz)
	// Exactly the page and its assets: a catch-all "GET /" would turn a
	// wrong method on an API path into a 404 instead of a 405.
	page := web.Handler()
	s.handle(read, "GET /{$}", page)
	s.handle(read, "GET /static/", page)
	if opts.Metrics != nil {
		s.handle(read, "GET /metrics", opts.Metrics.Handler())
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cors != nil && s.cors.handle(w, r) {
		return // a preflight, answered before any route or authentication
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		// Ollama's clients read {"error": "..."} (ollama.go).
		ow := &ollamaErrors{ResponseWriter: w}
		defer ow.finish()
		w = ow
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	if _, pattern := s.mux.Handler(r); pattern == "" {
		notRouted(w, r, s.mux)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// notRouted answers a request no route takes with the mux's status (404,
// or 405 with its Allow header) in the JSON error shape every other
// answer has, so an OpenAI client shows the reason rather than a page.
func notRouted(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) {
	st := &statusOnly{h: http.Header{}}
	mux.ServeHTTP(st, r)
	if allow := st.h.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	switch st.code {
	case http.StatusMethodNotAllowed:
		writeError(w, st.code, apiError{Message: fmt.Sprintf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, st.h.Get("Allow")), Code: "method_not_allowed"})
	case http.StatusNotFound, 0:
		writeError(w, http.StatusNotFound, apiError{Message: "no such endpoint: " + r.Method + " " + r.URL.Path, Code: "not_found"})
	default:
		// A redirect the mux makes (a cleaned path): as it is.
		for k, v := range st.h {
			w.Header()[k] = v
		}
		w.WriteHeader(st.code)
	}
}

// statusOnly records a handler's headers and status, dropping its body.
type statusOnly struct {
	h    http.Header
	code int
}

func (s *statusOnly) Header() http.Header { return s.h }
func (s *statusOnly) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
}
func (s *statusOnly) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return len(b), nil
}

// HTTPServer returns an http.Server for s with timeouts that keep a slow
// or stalled client from holding a connection: headers within
// readHeader, the whole body within read, idle keep-alives dropped after
// idle. There is no write timeout: a streamed answer is as long as the
// engine takes, bounded by the serve deadline instead.
func (s *Server) HTTPServer(readHeader, read, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeader,
		ReadTimeout:       read,
		IdleTimeout:       idle,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

// Drain makes new serves fail with 503 and /readyz report not ready, so a
// load balancer and clients move away while in-flight serves finish.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.drainOne.Do(func() { close(s.done) })
}

// InFlight is the number of serves running now.
func (s *Server) InFlight() int64 { return s.inflight.Load() }

// Stuck reports a serve that has run longer than the serve deadline plus
// grace: the deadline should have ended it, so the serve path is stalled.
func (s *Server) Stuck(grace time.Duration) error {
	if t, ok := s.started.oldest(); ok && time.Since(t) > s.opts.ServeTimeout+grace {
		return fmt.Errorf("a serve has been running for %v, past its %v deadline", time.Since(t).Round(time.Second), s.opts.ServeTimeout)
	}
	return nil
}

// apiError is the JSON error body, in OpenAI's shape so its clients
// surface the message; Reason is the router's, authoriser's or meter's
// named reason.
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
	Route   string `json:"route,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	// Encoded whole first, so the answer goes out with its length in one
	// write rather than chunked once it outgrows the server's buffer (a
	// serve's reply with its receipt does).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	writeBody(w, status, buf.Bytes())
}

// writeBody sends a JSON body encoded whole.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	if e.Type == "" {
		e.Type = "invalid_request_error"
		if status >= 500 {
			e.Type = "server_error"
		}
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

// fieldError is a request body problem naming its field.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func badField(w http.ResponseWriter, field, msg string) {
	writeError(w, http.StatusBadRequest, apiError{Message: field + ": " + msg, Param: field, Code: "invalid_field"})
}

// decodeBody decodes a JSON object body into v, naming the field at fault
// in a type error, and refusing trailing data and oversized bodies.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			writeError(w, http.StatusRequestEntityTooLarge, apiError{Message: fmt.Sprintf("body exceeds %d bytes", mb.Limit), Code: "body_too_large"})
		case errors.As(err, &te):
			// The JSON name, not the Go path through embedded structs.
			field := strings.TrimPrefix(te.Field, "meshFields.")
			badField(w, field, fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value))
		case errors.As(err, &se):
			writeError(w, http.StatusBadRequest, apiError{Message: fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, err), Code: "malformed_json"})
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			writeError(w, http.StatusRequestTimeout, apiError{Message: "request body not received in time", Code: "timeout"})
		default:
			writeError(w, http.StatusBadRequest, apiError{Message: "reading the body: " + err.Error(), Code: "malformed_json"})
		}
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, apiError{Message: "trailing data after the JSON object", Code: "malformed_json"})
		return false
	}
	return true
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// admit takes a serve slot or answers 503; release it when done.
func (s *Server) admit(w http.ResponseWriter) (func(), bool) {
	if s.draining.Load() {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, apiError{Message: "meshd is shutting down", Code: "draining"})
		return nil, false
	}
	select {
	case s.slots <- struct{}{}:
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, apiError{Message: fmt.Sprintf("%d serves in flight; try again", cap(s.slots)), Code: "busy"})
		return nil, false
	}
	s.inflight.Add(1)
	tok := s.started.add(time.Now())
	return func() {
		s.started.remove(tok)
		s.inflight.Add(-1)
		<-s.slots
	}, true
}

// serveStatus maps a failed serve to its HTTP status and named reason.
func serveStatus(err error) (int, apiError) {
	e := apiError{Message: err.Error()}
	var se *agent.ServeError
	if errors.As(err, &se) {
		e.Route = se.Decision.Justification
	}
	if status, de, ok := drainStatus(err, e); ok {
		return status, de
	}
	if le := (*agent.LimitError)(nil); errors.As(err, &le) {
		return limitStatus(le, e)
	}
	if status, ce, ok := capabilityStatus(err, e); ok {
		return status, ce
	}
	switch {
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, agent.ErrNoBackend):
		e.Code = "bad_request"
		return http.StatusBadRequest, e
	case errors.Is(err, agent.ErrRunNotOpen):
		e.Code, e.Param = "run_not_open", "run"
		return http.StatusConflict, e
	case errors.Is(err, agent.ErrNoRoute):
		e.Code, e.Type = "no_route", "no_route"
		return http.StatusUnprocessableEntity, e
	case errors.Is(err, agent.ErrGrantRequired):
		e.Code, e.Type = "grant_required", "authentication_error"
		return http.StatusUnauthorized, e
	case errors.Is(err, grant.ErrBudgetExhausted):
		e.Code, e.Type = "budget_exhausted", "permission_error"
		return http.StatusPaymentRequired, e
	case errors.Is(err, grant.ErrMalformed):
		e.Code = "grant_malformed"
		return http.StatusBadRequest, e
	case errors.Is(err, grant.ErrUnknownIssuer), errors.Is(err, grant.ErrBadSignature), errors.Is(err, grant.ErrNotYetValid),
		errors.Is(err, grant.ErrExpired), errors.Is(err, grant.ErrWrongAction), errors.Is(err, grant.ErrWrongResource),
		errors.Is(err, grant.ErrWrongAudience):
		e.Code, e.Type = "grant_refused", "permission_error"
		return http.StatusForbidden, e
	case errors.Is(err, steward.ErrStorage):
		// The engine is fine; the node cannot make a receipt durable.
		e.Code, e.Type = "storage_unavailable", "server_error"
		return http.StatusInsufficientStorage, e
	case errors.Is(err, agent.ErrUnmetered):
		e.Code, e.Type = "unmetered", "server_error"
		return http.StatusServiceUnavailable, e
	case errors.Is(err, context.DeadlineExceeded):
		e.Code, e.Type = "timeout", "server_error"
		return http.StatusGatewayTimeout, e
	}
	e.Code, e.Type = "engine_failed", "server_error"
	return http.StatusBadGateway, e
}

// Receipt is a sealed receipt as JSON: the receipt's own field names, the
// envelope in base64, its content id.
type Receipt struct {
	ID       string `json:"id"`
	Sequence uint64 `json:"sequence"`
	Receipt  Fields `json:"receipt"`
	Envelope string `json:"envelope"`
	// RouteCandidates is the receipt's x_route_candidates parsed.
	RouteCandidates []RouteCandidate `json:"route_candidates,omitempty"`
}

func receiptOf(sd *steward.Sealed) *Receipt {
	return &Receipt{ID: sd.ID.String(), Sequence: sd.Receipt.Sequence, Receipt: ReceiptFields(sd.Receipt),
		Envelope: base64.StdEncoding.EncodeToString(sd.Envelope), RouteCandidates: RouteCandidates(sd.Receipt)}
}

// ReceiptFields is r as a map under its CBOR field names, absent optional
// fields left out, foreign extensions included as they were decoded.
func ReceiptFields(r *steward.Receipt) map[string]any {
	out := make(map[string]any, len(receiptFieldNames)+len(r.Foreign))
	v := reflect.ValueOf(r).Elem()
	for _, rf := range receiptFieldNames {
		name := rf.name
		f := v.Field(rf.index)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		out[name] = f.Interface()
	}
	for _, x := range r.Foreign {
		out[x.Key] = x.Value
	}
	return out
}

// Fields are a receipt's fields under their CBOR names (ReceiptFields).
// They encode to exactly the bytes encoding/json makes of a
// map[string]any — keys sorted, strings escaped alike — but write the
// integers, booleans and plain strings a receipt holds without
// reflection: a serve's reply carries one, and the map's reflective
// encoding was a good part of the reply's cost.
type Fields map[string]any

// MarshalJSON implements json.Marshaler. Strings are written unescaped
// for HTML; an encoder that escapes HTML does so over the result, as it
// does over any Marshaler's.
func (f Fields) MarshalJSON() ([]byte, error) {
	if f == nil {
		return []byte("null"), nil
	}
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]byte, 0, 64*len(keys))
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendJSONString(out, k); err != nil {
			return nil, err
		}
		out = append(out, ':')
		if out, err = appendJSONValue(out, f[k]); err != nil {
			return nil, fmt.Errorf("receipt field %s: %w", k, err)
		}
	}
	return append(out, '}'), nil
}

// appendJSONValue appends v's JSON: integers, booleans and strings
// directly, anything else through encoding/json.
func appendJSONValue(out []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return appendJSONString(out, x)
	case uint64:
		return strconv.AppendUint(out, x, 10), nil
	case uint32:
		return strconv.AppendUint(out, uint64(x), 10), nil
	case uint16:
		return strconv.AppendUint(out, uint64(x), 10), nil
	case uint8:
		return strconv.AppendUint(out, uint64(x), 10), nil
	case int64:
		return strconv.AppendInt(out, x, 10), nil
	case int:
		return strconv.AppendInt(out, int64(x), 10), nil
	case bool:
		return strconv.AppendBool(out, x), nil
	case nil:
		return append(out, "null"...), nil
	}
	return appendEncoded(out, v)
}

// appendJSONString appends s quoted; a string with anything but printable
// ASCII other than '"' and '\\' goes through encoding/json, whose escapes
// (control characters, U+2028, invalid UTF-8) it then has exactly.
func appendJSONString(out []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return appendEncoded(out, s)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"'), nil
}

func appendEncoded(out []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return append(out, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
}

// receiptField is a field of steward.Receipt that has a CBOR name.
type receiptField struct {
	index int
	name  string
}

// receiptFieldNames is steward.Receipt's fields under their CBOR names,
// read from its tags once rather than on every reply.
var receiptFieldNames = func() []receiptField {
	var out []receiptField
	t := reflect.TypeFor[steward.Receipt]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("cbor"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, receiptField{i, name})
	}
	return out
}()

// setReceiptHeaders names the receipt in headers (or trailers, after a
// stream), so a client that ignores the body's extra fields can still
// fetch and check it.
func setReceiptHeaders(h http.Header, sd *steward.Sealed) {
	h.Set("Mesh-Receipt-Id", sd.ID.String())
	h.Set("Mesh-Receipt-Seq", strconv.FormatUint(sd.Receipt.Sequence, 10))
	h.Set("Mesh-Energy-Provenance", sd.Receipt.EnergyProvenance)
}
