// Package client speaks meshd's HTTP API, over TCP or the unix socket. It
// checks what it is given: every receipt it returns has been opened under
// the steward key the daemon names, so a caller holds verified receipts,
// not JSON it has to trust.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"meshd/auth"
	"meshd/steward"
)

// DefaultAddr is where meshd listens unless configured otherwise.
const DefaultAddr = "127.0.0.1:8477"

// Client is a meshd API client. It is safe for concurrent use.
type Client struct {
	base string
	hc   *http.Client
	// token, when set, is presented as a bearer token on every request.
	token string

	mu      sync.Mutex
	steward ed25519.PublicKey
	// ragVia, when set, carries the RAG procedures instead of HTTP
	// (NewRAGOverNATS).
	ragVia func(ctx context.Context, org, name, proc string, body []byte) ([]byte, http.Header, error)
}

// WithTransport returns c using rt for its requests (a pool sized for many
// concurrent callers, say). rt replaces c's dialing too: for a unix socket
// it must dial the socket itself.
func (c *Client) WithTransport(rt http.RoundTripper) *Client {
	return &Client{base: c.base, hc: &http.Client{Transport: rt}, steward: c.steward, token: c.token}
}

// Credentials are what a client presents to meshd and how it trusts the
// server: a bearer token, and for https the server's CA or certificate
// pin and a client certificate.
type Credentials struct {
	Token string
	TLS   auth.ClientFiles
}

// NewWith is New presenting cr. TLS settings need an https:// address.
func NewWith(addr string, cr Credentials) (*Client, error) {
	c, err := New(addr)
	if err != nil {
		return nil, err
	}
	c.token = cr.Token
	if !cr.TLS.Empty() {
		if !strings.HasPrefix(c.base, "https://") {
			return nil, fmt.Errorf("meshd address %q: a CA, a certificate pin or a client certificate needs an https:// address", addr)
		}
		tc, err := auth.ClientTLS(cr.TLS)
		if err != nil {
			return nil, err
		}
		c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	}
	return c, nil
}

// authorize sets the bearer token on req.
func (c *Client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

// New returns a client for addr: "host:port", "http://host:port", or a
// unix socket as "unix:/run/meshd/meshd.sock" or an absolute path.
func New(addr string) (*Client, error) {
	switch {
	case strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "/"):
		path := strings.TrimPrefix(addr, "unix:")
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &Client{base: "http://meshd", hc: &http.Client{Transport: tr}}, nil
	case strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil {
			return nil, fmt.Errorf("meshd address %q: %w", addr, err)
		}
		return &Client{base: strings.TrimRight(u.String(), "/"), hc: &http.Client{}}, nil
	case addr == "":
		addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("meshd address %q: want host:port, http://host:port or unix:PATH", addr)
	}
	return &Client{base: "http://" + addr, hc: &http.Client{}}, nil
}

// Error is a refusal or failure answered by meshd.
type Error struct {
	Status  int
	Code    string
	Message string
	Param   string
	// Route is the router's justification when routing refused the serve.
	Route string
}

func (e *Error) Error() string {
	return fmt.Sprintf("meshd: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("meshd: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	return resp, nil
}

func errorFrom(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e struct {
		Error struct {
			Message, Code, Param, Route string
		}
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
		return &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(data))}
	}
	return &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Param: e.Error.Param, Route: e.Error.Route}
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("meshd: decoding %s: %w", path, err)
	}
	return nil
}

// Head is the chain's head.
type Head struct {
	Steward  string `json:"steward"`
	Receipts uint64 `json:"receipts"`
	Head     string `json:"head"`
	Sequence uint64 `json:"sequence"`
}

// Head fetches the chain head.
func (c *Client) Head(ctx context.Context) (*Head, error) {
	var h Head
	if err := c.getJSON(ctx, "/v1/chain/head", &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Steward returns the daemon's steward key (fetched once). Pin it with
// Trust to verify against a key known beforehand instead.
func (c *Client) Steward(ctx context.Context) (ed25519.PublicKey, error) {
	c.mu.Lock()
	k := c.steward
	c.mu.Unlock()
	if k != nil {
		return k, nil
	}
	h, err := c.Head(ctx)
	if err != nil {
		return nil, err
	}
	k, err = steward.ParsePublicKey(h.Steward)
	if err != nil {
		return nil, fmt.Errorf("meshd names its steward %q: %w", h.Steward, err)
	}
	c.Trust(k)
	return k, nil
}

// Trust pins the steward key receipts must be signed with.
func (c *Client) Trust(k ed25519.PublicKey) {
	c.mu.Lock()
	c.steward = k
	c.mu.Unlock()
}

// open verifies an envelope under the steward key.
func (c *Client) open(ctx context.Context, env []byte) (*steward.Opened, error) {
	k, err := c.Steward(ctx)
	if err != nil {
		return nil, err
	}
	o, err := steward.OpenEnvelope(env, k)
	if err != nil {
		return nil, fmt.Errorf("meshd returned a receipt that does not verify: %w", err)
	}
	return o, nil
}

type wireReceipt struct {
	ID       string `json:"id"`
	Sequence uint64 `json:"sequence"`
	Envelope string `json:"envelope"`
}

func (c *Client) openWire(ctx context.Context, w *wireReceipt) (*steward.Opened, error) {
	env, err := base64.StdEncoding.DecodeString(w.Envelope)
	if err != nil {
		return nil, fmt.Errorf("receipt %d: envelope: %w", w.Sequence, err)
	}
	o, err := c.open(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("receipt %d: %w", w.Sequence, err)
	}
	if o.ID.String() != w.ID || o.Receipt.Sequence != w.Sequence {
		return nil, fmt.Errorf("receipt %d: the envelope is %s at %d, not what meshd said", w.Sequence, o.ID, o.Receipt.Sequence)
	}
	return o, nil
}

// ServeRequest is a mesh/1 serve.
type ServeRequest struct {
	Prompt         string  `json:"prompt"`
	MaxTokens      uint32  `json:"max_tokens,omitempty"`
	PromptTokens   *uint32 `json:"prompt_tokens,omitempty"`
	FidelityFloor  *uint8  `json:"fidelity_floor,omitempty"`
	JouleCeilingUJ uint64  `json:"joule_ceiling_uj,omitempty"`
	// Grant is the grant's COSE envelope.
	Grant []byte `json:"-"`
	// Run names the open run the serve belongs to (PROFILE §22).
	Run *uint64 `json:"-"`
	// TimeFirstToken asks for x_first_token_ns on the receipt although
	// the answer comes back whole (PROFILE §16).
	TimeFirstToken bool `json:"-"`
}

// Served is an answer with its verified receipt.
type Served struct {
	Text    string
	Backend string
	Route   string
	Receipt *steward.Opened
	// SettlingError is set when the serve was sealed but the grant ledger
	// refused to settle it (it settles from the receipt when reopened).
	SettlingError string
}

// Serve runs POST /v1/serve.
func (c *Client) Serve(ctx context.Context, r ServeRequest) (*Served, error) {
	body := map[string]any{"prompt": r.Prompt}
	if r.MaxTokens != 0 {
		body["max_tokens"] = r.MaxTokens
	}
	if r.PromptTokens != nil {
		body["prompt_tokens"] = *r.PromptTokens
	}
	if r.FidelityFloor != nil {
		body["fidelity_floor"] = *r.FidelityFloor
	}
	if r.JouleCeilingUJ != 0 {
		body["joule_ceiling_uj"] = r.JouleCeilingUJ
	}
	if r.Grant != nil {
		body["grant"] = base64.StdEncoding.EncodeToString(r.Grant)
	}
	if r.Run != nil {
		body["run"] = *r.Run
	}
	if r.TimeFirstToken {
		body["time_first_token"] = true
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/serve", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var sr struct {
		Text     string      `json:"text"`
		Backend  string      `json:"backend"`
		Route    string      `json:"route"`
		Receipt  wireReceipt `json:"receipt"`
		Settling string      `json:"settling_error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sr); err != nil {
		return nil, fmt.Errorf("meshd: decoding the serve reply: %w", err)
	}
	o, err := c.openWire(ctx, &sr.Receipt)
	if err != nil {
		return nil, err
	}
	return &Served{Text: sr.Text, Backend: sr.Backend, Route: sr.Route, Receipt: o, SettlingError: sr.Settling}, nil
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Extra are the mesh/1 fields an OpenAI-shaped call may add; zero values
// leave the daemon's configured defaults.
type Extra struct {
	FidelityFloor  *uint8
	JouleCeilingUJ uint64
	Grant          []byte
	Run            *uint64 // the open run the call belongs to (PROFILE §22)
}

// Completion asks /v1/completions (messages nil) or /v1/chat/completions,
// streaming when onPiece is set (it sees each piece as it arrives), and
// returns the whole text with the verified receipt.
func (c *Client) Completion(ctx context.Context, prompt string, messages []Message, maxTokens uint32, x Extra, onPiece func(string)) (*Served, error) {
	body := map[string]any{"model": "meshd", "stream": onPiece != nil}
	if maxTokens != 0 { // 0 leaves the daemon's configured default
		body["max_tokens"] = maxTokens
	}
	if x.FidelityFloor != nil {
		body["fidelity_floor"] = *x.FidelityFloor
	}
	if x.JouleCeilingUJ != 0 {
		body["joule_ceiling_uj"] = x.JouleCeilingUJ
	}
	if x.Grant != nil {
		body["grant"] = base64.StdEncoding.EncodeToString(x.Grant)
	}
	if x.Run != nil {
		body["run"] = *x.Run
	}
	path := "/v1/completions"
	if messages != nil {
		body["messages"], path = messages, "/v1/chat/completions"
	} else {
		body["prompt"] = prompt
	}
	resp, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	type choice struct {
		Text    string                   `json:"text"`
		Message struct{ Content string } `json:"message"`
		Delta   struct{ Content string } `json:"delta"`
	}
	type reply struct {
		Model   string       `json:"model"`
		Choices []choice     `json:"choices"`
		Receipt *wireReceipt `json:"receipt"`
		Error   *struct {
			Message, Code string
		} `json:"error"`
	}
	if onPiece == nil {
		var r reply
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) == 0 || r.Receipt == nil {
			return nil, fmt.Errorf("meshd: malformed completion reply (%v)", err)
		}
		o, err := c.openWire(ctx, r.Receipt)
		if err != nil {
			return nil, err
		}
		text := r.Choices[0].Text
		if messages != nil {
			text = r.Choices[0].Message.Content
		}
		return &Served{Text: text, Backend: r.Model, Route: o.Receipt.Route, Receipt: o}, nil
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			break
		}
		var r reply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("meshd: malformed event %q: %w", line, err)
		}
		if r.Error != nil {
			return nil, &Error{Status: http.StatusOK, Code: r.Error.Code, Message: r.Error.Message}
		}
		if len(r.Choices) > 0 {
			piece := r.Choices[0].Text + r.Choices[0].Delta.Content
			if piece != "" {
				text.WriteString(piece)
				onPiece(piece)
			}
		}
		if r.Receipt != nil {
			o, err := c.openWire(ctx, r.Receipt)
			if err != nil {
				return nil, err
			}
			return &Served{Text: text.String(), Backend: r.Model, Route: o.Receipt.Route, Receipt: o}, drain(resp.Body)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("meshd: stream: %w", err)
	}
	return nil, errors.New("meshd: the stream ended without a receipt (nothing was sealed for it)")
}

func drain(r io.Reader) error {
	_, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20))
	return err
}

// Receipts returns up to limit verified receipts after sequence after (-1
// for the start), and the sequence to continue after.
func (c *Client) Receipts(ctx context.Context, after int64, limit int) ([]*steward.Opened, int64, error) {
	var page struct {
		Receipts  []wireReceipt `json:"receipts"`
		NextAfter int64         `json:"next_after"`
	}
	q := "/v1/receipts?limit=" + strconv.Itoa(limit)
	if after >= 0 {
		q += "&after=" + strconv.FormatInt(after, 10)
	}
	if err := c.getJSON(ctx, q, &page); err != nil {
		return nil, after, err
	}
	out := make([]*steward.Opened, 0, len(page.Receipts))
	for i := range page.Receipts {
		o, err := c.openWire(ctx, &page.Receipts[i])
		if err != nil {
			return nil, after, err
		}
		out = append(out, o)
	}
	if len(out) == 0 {
		return nil, after, nil
	}
	return out, page.NextAfter, nil
}

// Envelope fetches the raw envelope of receipt seq.
func (c *Client) Envelope(ctx context.Context, seq uint64) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/receipts/"+strconv.FormatUint(seq, 10), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// Table is a list endpoint's rows (backends, meters), as the daemon
// describes them.
type Table []map[string]any

// Backends fetches GET /v1/backends.
func (c *Client) Backends(ctx context.Context) (Table, error) {
	var v struct{ Backends Table }
	err := c.getJSON(ctx, "/v1/backends", &v)
	return v.Backends, err
}

// Meters fetches GET /v1/meters.
func (c *Client) Meters(ctx context.Context) (Table, error) {
	var v struct{ Meters Table }
	err := c.getJSON(ctx, "/v1/meters", &v)
	return v.Meters, err
}

// Refusal turns a daemon's refusal into an error naming what was asked
// and the daemon's reason (and the router's justification when routing
// refused), so a script can match on the code and a person sees why. The
// *Error stays reachable with errors.As; an error that is not the
// daemon's answer is wrapped with what as its context.
func Refusal(what string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%s: %w", what, err)
	}
	code := e.Code
	if code == "" {
		code = "HTTP " + strconv.Itoa(e.Status)
	}
	msg := fmt.Sprintf("%s refused: %s: %s", what, code, e.Message)
	if e.Route != "" && !strings.Contains(e.Message, e.Route) {
		msg += " (route: " + e.Route + ")"
	}
	return &refusedError{msg: msg, err: err}
}

// refusedError says what the daemon refused once, rather than again in
// the wrapped client error's own words.
type refusedError struct {
	msg string
	err error
}

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return e.err }
