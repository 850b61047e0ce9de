// Package remote is a backend that is another meshd node, reached over its
// HTTP API. A serve is forwarded as a mesh/1 serve (with the grant, if
// any); the answer comes with the receipt the other node sealed, which is
// verified under that node's pinned steward key and must be for exactly
// the request forwarded. Its energy and evidence become the local
// receipt's, never better. A node that fails is passed over by the router
// until a backoff has passed.
//
// Before the first forward (and again after any failure) the node's key
// is checked: its chain head must verify under the pinned key, so a node
// that answers under another key fails before it is sent a serve, and
// the router falls back within the same request (PROFILE §19).
package remote

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/auth"
	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// Config describes a remote node.
type Config struct {
	// Name is the local backend name.
	Name string
	// URL is the node's API base, e.g. http://10.0.0.7:8477.
	URL string
	// Steward is the node's steward key: its receipts must verify under it.
	Steward ed25519.PublicKey
	// Fidelity and UJPerToken are what the router weighs until the node's
	// receipts teach it better (the agent learns from the energy they carry).
	Fidelity   wire.Fidelity
	UJPerToken uint64
	// Timeout bounds one forwarded serve (default 5 minutes).
	Timeout time.Duration
	// MaxTokens caps a forwarded serve's max_tokens (TokenCap); 0 leaves
	// the bound to the node, which refuses what its own caps do not allow.
	MaxTokens uint32
	// Backoff is how long a node that failed is passed over (default 10 s;
	// it doubles with each consecutive failure up to 5 minutes).
	Backoff time.Duration
	// TokenFile holds the bearer token presented to the node; it is read
	// at each forward, so a rotated token needs no restart.
	TokenFile string
	// TLS trusts the node (its CA or a pin of its certificate) and holds
	// a client certificate; nil is the system's roots.
	TLS *tls.Config
	// Client is the HTTP client; nil is one using TLS.
	Client *http.Client
	// Now is the clock for the backoff; nil is time.Now.
	Now func() time.Time
}

// Backend forwards serves to a remote node. It is safe for concurrent use.
type Backend struct {
	cfg Config

	mu        sync.Mutex
	failures  int
	downUntil time.Time
	lastErr   error
	// keyOK is set once a receipt of the node's (its chain head, or a
	// forwarded serve's) verified under the pinned key; any failure clears
	// it, and gen counts those failures, so that a check which began
	// before one does not set it afterwards.
	keyOK bool
	gen   uint64
}

// keyCheckTimeout bounds the key check's two reads (the backend's own
// timeout, when shorter, bounds them instead).
const keyCheckTimeout = 10 * time.Second

// New checks cfg and returns the backend.
func New(cfg Config) (*Backend, error) {
	if cfg.Name == "" || cfg.URL == "" {
		return nil, errors.New("remote: a name and a URL are required")
	}
	if len(cfg.Steward) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("remote %s: the node's steward key is required (32 bytes), to verify its receipts", cfg.Name)
	}
	if !cfg.Fidelity.Valid() || cfg.UJPerToken == 0 {
		return nil, fmt.Errorf("remote %s: fidelity F0..F4 and a positive µJ/token are required", cfg.Name)
	}
	cfg.URL = strings.TrimRight(cfg.URL, "/")
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 10 * time.Second
	}
	if cfg.Client == nil {
		// A forward asks "Expect: 100-continue" and sends the prompt only
		// once the node has answered that it reads it (or after
		// continueWait of silence): a pooled connection the node closed
		// (it died or restarted) then fails before the node could have the
		// request, which is what lets such a failure fall over.
		cfg.Client = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.TLS, ForceAttemptHTTP2: true,
			MaxIdleConnsPerHost: 16, ExpectContinueTimeout: continueWait}}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Backend{cfg: cfg}, nil
}

// Name implements engine.Backend.
func (b *Backend) Name() string { return b.cfg.Name }

// Recipe implements engine.Backend: the node, until a receipt names what
// answered (the agent seals the upstream's recipe).
func (b *Backend) Recipe() string { return "meshd:" + hex.EncodeToString(b.cfg.Steward) }

// Fidelity implements engine.Backend.
func (b *Backend) Fidelity() wire.Fidelity { return b.cfg.Fidelity }

// UJPerToken implements engine.Backend.
func (b *Backend) UJPerToken() uint64 { return b.cfg.UJPerToken }

// TokenCap implements engine.TokenCapped: the configured cap, never over
// engine.MaxEngineTokens (a node behind this one runs an engine too).
func (b *Backend) TokenCap() uint32 {
	if m := b.cfg.MaxTokens; m > 0 && m < engine.MaxEngineTokens {
		return m
	}
	return engine.MaxEngineTokens
}

// Health implements engine.HealthReporter: an error while the node is
// passed over after a failure.
func (b *Backend) Health() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.cfg.Now(); now.Before(b.downUntil) {
		return fmt.Errorf("remote %s failed (%v); passed over for %v more", b.cfg.Name, b.lastErr, b.downUntil.Sub(now).Round(time.Millisecond))
	}
	return nil
}

func (b *Backend) fail(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	b.keyOK = false
	b.gen++
	wait := b.cfg.Backoff << min(b.failures-1, 10)
	b.downUntil, b.lastErr = b.cfg.Now().Add(min(wait, 5*time.Minute)), err
	return fmt.Errorf("remote %s: %w", b.cfg.Name, err)
}

// continueWait is how long a forward's headers wait for the node's 100
// Continue before the body goes anyway (a node behind a proxy that does
// not answer it).
const continueWait = 2 * time.Second

// failServed is fail for a forward the node may have served: it had the
// whole request (and may have sealed a receipt and charged a grant on its
// own ledger) when the answer failed. The node is passed over all the
// same, but the error says the serve must not be tried again elsewhere
// (MayHaveServed): that would run, and charge, one request twice.
func (b *Backend) failServed(err error) error {
	return &servedError{b.fail(err)}
}

// servedError is a failure after the node may have served the request.
type servedError struct{ err error }

func (e *servedError) Error() string {
	return e.err.Error() + " (the node had the whole request and may have served it: not tried elsewhere)"
}
func (e *servedError) Unwrap() error { return e.err }

// MayHaveServed tells the router not to fall back to another backend
// within the same request.
func (e *servedError) MayHaveServed() bool { return true }

// ok records a forward whose receipt verified under the pinned key: that
// is the key check passed too.
func (b *Backend) ok() {
	b.mu.Lock()
	b.failures, b.downUntil, b.lastErr = 0, time.Time{}, nil
	b.keyOK = true
	b.mu.Unlock()
}

// authorize sets the bearer token from the token file, if any.
func (b *Backend) authorize(hreq *http.Request) error {
	if b.cfg.TokenFile == "" {
		return nil
	}
	tok, err := auth.ReadSecret(b.cfg.TokenFile)
	if err != nil {
		return err
	}
	hreq.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

// errKeyUnknown is a key check that could not decide: the node sealed
// nothing yet, or does not let this backend's credentials read its log.
var errKeyUnknown = errors.New("the node's steward key is not known")

// checkKey makes sure the node's key is the pinned one before a serve is
// sent to it: unless a receipt of the node's already verified since the
// last failure (no request then), it reads the node's chain head (GET
// /v1/chain/head, GET /v1/receipts/{sequence}) and opens that receipt
// under the pinned key. It is a signature by the node's key that decides,
// never what the node says its key is. A head that does not verify, or a
// node that cannot be read (no connection, a TLS handshake refused, a
// 5xx), fails the backend before it was sent anything, so the router may
// fall back. An empty log or a read refused (401, 403, or another 4xx)
// leaves the key unknown: the serve is forwarded, and its receipt is the
// check.
func (b *Backend) checkKey(ctx context.Context) error {
	b.mu.Lock()
	ok, gen := b.keyOK, b.gen
	b.mu.Unlock()
	if ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, min(b.cfg.Timeout, keyCheckTimeout))
	defer cancel()
	var head struct {
		Receipts uint64  `json:"receipts"`
		Sequence *uint64 `json:"sequence"`
	}
	raw, err := b.read(ctx, "/v1/chain/head", 1<<16)
	if err == nil {
		if err = json.Unmarshal(raw, &head); err != nil {
			err = fmt.Errorf("%w: the chain head does not parse: %v", errKeyUnknown, err)
		}
	}
	if err == nil && (head.Receipts == 0 || head.Sequence == nil) {
		err = fmt.Errorf("%w: its log is empty", errKeyUnknown)
	}
	var env []byte
	if err == nil {
		env, err = b.read(ctx, "/v1/receipts/"+strconv.FormatUint(*head.Sequence, 10), 1<<20)
	}
	switch {
	case errors.Is(err, errKeyUnknown):
		return nil
	case err != nil:
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return err // the caller left; the node is not at fault
		}
		return b.fail(fmt.Errorf("checking the node's steward key (not forwarded): %w", err))
	}
	o, err := steward.OpenEnvelope(env, b.cfg.Steward)
	if err == nil && o.Receipt.Sequence != *head.Sequence {
		err = fmt.Errorf("it is receipt %d, not %d", o.Receipt.Sequence, *head.Sequence)
	}
	if err != nil {
		return b.fail(fmt.Errorf("the node's chain head (receipt %d) does not verify under its pinned steward key, not forwarded: %w",
			*head.Sequence, err))
	}
	b.mu.Lock()
	if b.gen == gen {
		b.keyOK = true
	}
	b.mu.Unlock()
	return nil
}

// read GETs path from the node with the backend's credentials: the body of
// a 200 (at most limit bytes); errKeyUnknown for a refusal (4xx).
func (b *Backend) read(ctx context.Context, path string, limit int64) ([]byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.URL+path, nil)
	if err != nil {
		return nil, err
	}
	if err := b.authorize(hreq); err != nil {
		return nil, err
	}
	resp, err := b.cfg.Client.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return raw, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, fmt.Errorf("%w: GET %s: %v", errKeyUnknown, path, answered(resp.StatusCode, raw))
	}
	return nil, fmt.Errorf("GET %s: %w", path, answered(resp.StatusCode, raw))
}

// answered is the error for a node's answer other than 200: its status and
// the API error's code and message.
func answered(status int, raw []byte) error {
	var e struct {
		Error struct{ Message, Code string }
	}
	_ = json.Unmarshal(raw, &e)
	return fmt.Errorf("node answered HTTP %d %s: %s", status, e.Error.Code, e.Error.Message)
}

// Serve implements engine.Backend.
func (b *Backend) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (engine.Result, error) {
	return b.ServeWith(ctx, req, prompt, engine.Options{})
}

// ServeWith implements engine.OptionBackend: the prompt, the request's
// fields and the grant go to the node's /v1/serve; a stream is emitted
// whole when the answer arrives (a forwarded serve is sealed upstream
// before anything can be trusted of it); chat is not forwarded.
func (b *Backend) ServeWith(ctx context.Context, req wire.ServeRequest, prompt []byte, opts engine.Options) (engine.Result, error) {
	if opts.Chat {
		return engine.Result{}, engine.ErrNoChat
	}
	if len(opts.Stop) > 0 {
		// The upstream's receipt covers the output it made; a local cut
		// would deliver less than that receipt claims.
		return engine.Result{}, fmt.Errorf("remote %s: %w", b.cfg.Name, engine.ErrNoStop)
	}
	id, err := req.ID()
	if err != nil {
		return engine.Result{}, err
	}
	body := map[string]any{"prompt": string(prompt), "prompt_tokens": req.PromptTokens, "max_tokens": req.MaxTokens,
		"fidelity_floor": uint8(req.FidelityFloor), "joule_ceiling_uj": req.JouleCeilingUJ}
	if opts.Grant != nil {
		body["grant"] = base64.StdEncoding.EncodeToString(opts.Grant)
	}
	data, _ := json.Marshal(body)
	if err := b.checkKey(ctx); err != nil {
		return engine.Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.URL+"/v1/serve", bytes.NewReader(data))
	if err != nil {
		return engine.Result{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Expect", "100-continue")
	if err := b.authorize(hreq); err != nil {
		return engine.Result{}, b.fail(err)
	}
	// Whether the node got the whole request decides what a failure
	// means: before that (no connection, a TLS handshake refused, the
	// request not sent) it cannot have served, and the serve may go to
	// the next backend; after it, it may have. The body follows the
	// headers only once the node said 100 Continue (or, from a transport
	// that does not wait, at once; or after a silence as long as the
	// transport waits, which counts as sent): a connection that fails
	// while the headers wait for that answer never carried the prompt.
	// Each attempt of the transport's (it retries a request on a fresh
	// connection when nothing was written) starts its own account.
	var wrote, waiting, continued atomic.Bool
	var waitedAt atomic.Int64
	hreq = hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), &httptrace.ClientTrace{
		GetConn: func(string) {
			waiting.Store(false)
			continued.Store(false)
		},
		Wait100Continue: func() {
			waitedAt.Store(time.Now().UnixNano())
			waiting.Store(true)
		},
		Got100Continue: func() { continued.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err != nil {
				return
			}
			sent := !waiting.Load() || continued.Load() ||
				time.Since(time.Unix(0, waitedAt.Load())) >= continueWait/2
			if sent {
				wrote.Store(true)
			}
		},
	}))
	resp, err := b.cfg.Client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return engine.Result{}, err // the caller left; the node is not at fault
		}
		if wrote.Load() {
			return engine.Result{}, b.failServed(err)
		}
		return engine.Result{}, b.fail(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return engine.Result{}, b.failServed(fmt.Errorf("reading the answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		err := answered(resp.StatusCode, raw)
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable:
			// Busy, draining or shutting down: the node says it served
			// nothing (a cut serve seals nothing and releases its hold).
			return engine.Result{}, b.fail(err)
		case resp.StatusCode >= 500:
			return engine.Result{}, b.failServed(err)
		}
		// A refusal (4xx) is the node judging this request, not failing.
		return engine.Result{}, fmt.Errorf("remote %s: %w", b.cfg.Name, err)
	}
	var r struct {
		Text    string `json:"text"`
		Receipt struct {
			Envelope string `json:"envelope"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return engine.Result{}, b.failServed(fmt.Errorf("malformed answer: %w", err))
	}
	env, err := base64.StdEncoding.DecodeString(r.Receipt.Envelope)
	if err != nil {
		return engine.Result{}, b.failServed(fmt.Errorf("the answer's receipt envelope: %w", err))
	}
	up, err := b.upstream(env, id)
	if err != nil {
		return engine.Result{}, b.failServed(err)
	}
	if opts.Emit != nil && r.Text != "" {
		if err := opts.Emit([]byte(r.Text)); err != nil {
			return engine.Result{}, err
		}
	}
	b.ok()
	rc := up.receipt
	o := wire.ServeOutcome{TokensIn: rc.TokensIn, TokensOut: rc.TokensOut, TokensAccepted: rc.TokensAccepted,
		CacheHitTokens: rc.CacheHitTokens, SpecProposed: rc.SpecProposed, SpecAccepted: rc.SpecAccepted}
	return engine.Result{Outcome: o, Output: []byte(r.Text), Upstream: up.Upstream}, nil
}

type verified struct {
	*engine.Upstream
	receipt *steward.Receipt
}

// upstream opens the node's receipt under its pinned key and checks it is
// for exactly the request forwarded: the same request id means the same
// prompt, tokens, floor and ceiling.
func (b *Backend) upstream(env []byte, id wire.ContentID) (verified, error) {
	o, err := steward.OpenEnvelope(env, b.cfg.Steward)
	if err != nil {
		return verified{}, fmt.Errorf("the node's receipt does not verify under its steward key: %w", err)
	}
	if o.Receipt.RequestID != id.String() {
		return verified{}, fmt.Errorf("the node's receipt %s is for request %s, not the one forwarded (%s)", o.ID, o.Receipt.RequestID, id)
	}
	e, err := o.Receipt.Energy()
	if err != nil {
		return verified{}, fmt.Errorf("the node's receipt %s: %w", o.ID, err)
	}
	return verified{Upstream: &engine.Upstream{Receipt: o.ID, Steward: b.cfg.Steward, Recipe: o.Receipt.Recipe, Energy: e,
		Metering: o.Receipt.Metering()}, receipt: o.Receipt}, nil
}
