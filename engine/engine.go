// Package engine owns the serving side of mesh/1 §5: the Backend interface
// every engine implements, and the reference engine used for conformance
// and for machines with no model installed.
package engine

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"meshd/wire"
)

// Backend is one engine the router can choose. An engine advertises its
// fidelity and modelled per-token cost and serves; it never reports energy,
// which is metered around it by the agent.
type Backend interface {
	// Name is the backend's stable name, sealed into the receipt.
	Name() string
	// Recipe names the exact composed model that answers (§4), e.g.
	// "gguf:<hex>" or "reference:v1:<params>".
	Recipe() string
	// Fidelity is the level this backend serves at.
	Fidelity() wire.Fidelity
	// UJPerToken is the modelled energy per token (input or output) used by
	// the router's estimate.
	UJPerToken() uint64
	// Serve runs one request. The prompt payload travels beside the request
	// and never enters the receipt. A failed or interrupted serve returns an
	// error and no outcome: no receipt may claim undelivered tokens.
	Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (Result, error)
}

// Result is what a successful serve delivers.
type Result struct {
	Outcome wire.ServeOutcome
	// Output is the generated text (or token bytes) returned to the caller.
	Output []byte
	// Stopped says generation ended on one of Options.Stop: the output
	// ends before the stop string, which is not delivered.
	Stopped bool
	// Upstream is set by a backend that forwarded the serve to another
	// mesh/1 node: the receipt sealed there, whose energy and evidence the
	// local receipt carries (never better than the upstream's).
	Upstream *Upstream
}

// Upstream is a receipt another steward sealed for a forwarded serve,
// already verified under that steward's key by the backend.
type Upstream struct {
	Receipt  wire.ContentID
	Steward  ed25519.PublicKey
	Recipe   string
	Energy   wire.Energy
	Metering wire.Metering
}

// HealthReporter is a Backend that can tell it cannot serve now (a remote
// node that failed or timed out); the router passes it over with the
// reason until it reports healthy again.
type HealthReporter interface {
	Health() error
}

// Slotted is a Backend that serves one request at a time. The agent
// acquires the slot before it opens the meter window, so time spent
// queueing for the engine is never metered as the serve's energy.
type Slotted interface {
	Backend
	// Acquire waits for the engine's slot and returns a context that
	// carries it: Serve called with that context (or one derived from it)
	// uses the held slot instead of waiting again. release frees the slot;
	// it is idempotent.
	Acquire(ctx context.Context) (held context.Context, release func(), err error)
}

// Options are what a caller may ask of a serve beyond the request itself.
// The zero Options is a plain Serve.
type Options struct {
	// Chat says the prompt is a JSON array of {"role","content"} messages
	// (OpenAI's shape) that the engine renders with its own chat template:
	// meshd never re-implements templating. The receipt's prompt_hash
	// addresses those bytes.
	Chat bool
	// Emit, when set, receives the output as the engine produces it, piece
	// by piece, in order; the pieces concatenate to Result.Output. An error
	// from Emit (the client went away) abandons the serve: the engine's
	// work is cancelled and Serve returns that error, so nothing is sealed
	// for tokens the caller never received.
	Emit func(piece []byte) error
	// Whole says the caller takes the output only whole: an Emit beside
	// it is there to time the first piece, not to deliver pieces. An
	// engine for which producing pieces costs more than answering whole
	// (a child streaming over HTTP) may then answer whole and emit
	// nothing, so no first piece is timed; one that emits in process at
	// no cost emits as before.
	Whole bool
	// Grant is the grant envelope the serve rides on, for a backend that
	// forwards it to another node; engines that serve locally ignore it.
	Grant []byte
	// Stop ends generation at the first occurrence of any of these
	// strings (OpenAI's and llama-server's "stop"): the output ends
	// before it, the stop string itself is never delivered, not even
	// streamed in part, and Result.Stopped is set. At most MaxStop
	// non-empty strings.
	Stop []string
	// Embed says the prompt is a JSON array of texts to embed
	// (ParseEmbedInput) rather than a prompt to continue: Result.Output
	// is then the vectors (EmbedResult). Only an Embedder that Embeds
	// serves it.
	Embed bool
}

// MaxStop is the most stop strings a serve may carry (OpenAI's bound).
const MaxStop = 4

// CheckStop refuses a stop list the engines do not take: more than
// MaxStop strings, or an empty one. Errors wrap wire.ErrBadRequest.
func CheckStop(stop []string) error {
	if len(stop) > MaxStop {
		return fmt.Errorf("%w: %d stop strings, at most %d", wire.ErrBadRequest, len(stop), MaxStop)
	}
	for i, s := range stop {
		if s == "" {
			return fmt.Errorf("%w: stop string %d is empty", wire.ErrBadRequest, i)
		}
	}
	return nil
}

// StopCutter cuts a growing output at the first stop string, holding back
// a tail that may be the start of one, so that a streamed piece never
// carries any part of a stop string.
type StopCutter struct {
	stop []string
	buf  []byte
	sent int // bytes of buf released
	at   int // where a stop string begins, -1 until one is found
}

// NewStopCutter returns a cutter for stop (which may be empty: then every
// byte is released at once).
func NewStopCutter(stop []string) *StopCutter { return &StopCutter{stop: stop, at: -1} }

// Add appends piece and returns the bytes now safe to deliver, and
// whether a stop string has been found (then nothing more is released).
func (c *StopCutter) Add(piece []byte) ([]byte, bool) {
	if c.at >= 0 {
		return nil, true
	}
	// A match may begin in the held-back tail, never before it.
	from := c.sent
	c.buf = append(c.buf, piece...)
	for _, s := range c.stop {
		if i := bytes.Index(c.buf[from:], []byte(s)); i >= 0 && (c.at < 0 || from+i < c.at) {
			c.at = from + i
		}
	}
	if c.at >= 0 {
		out := bytes.Clone(c.buf[c.sent:c.at])
		c.sent = c.at
		return out, true
	}
	hold := 0
	for _, s := range c.stop {
		for n := min(len(s)-1, len(c.buf)-c.sent); n > hold; n-- {
			if bytes.HasSuffix(c.buf, []byte(s[:n])) {
				hold = n
				break
			}
		}
	}
	out := bytes.Clone(c.buf[c.sent : len(c.buf)-hold])
	c.sent = len(c.buf) - hold
	return out, false
}

// Flush releases the held-back tail at the end of generation (none once
// a stop string was found).
func (c *StopCutter) Flush() []byte {
	if c.at >= 0 {
		return nil
	}
	out := bytes.Clone(c.buf[c.sent:])
	c.sent = len(c.buf)
	return out
}

// Output is everything released so far.
func (c *StopCutter) Output() []byte { return c.buf[:c.sent] }

// OptionBackend is a Backend that honours Options: streaming its output
// and rendering chat messages.
type OptionBackend interface {
	Backend
	// ServeWith is Serve with opts. Emit is called from the goroutine
	// that called ServeWith, never after it returns.
	ServeWith(ctx context.Context, req wire.ServeRequest, prompt []byte, opts Options) (Result, error)
}

// ErrNoChat is wrapped when a chat serve reaches a backend whose engine has
// no chat template to render it with.
var ErrNoChat = errors.New("backend cannot render chat messages")

// ErrNoStop is wrapped when a serve with stop strings reaches a backend
// that cannot honour them (one that forwards to another node, whose
// receipt covers the whole output): refused, never silently ignored.
var ErrNoStop = errors.New("backend cannot honour stop strings")

// MaxEngineTokens is the largest max_tokens any engine is handed: the
// llama.cpp family reads n_predict as a signed 32-bit int, so a larger
// value would wrap to a negative one. It is refused, never wrapped.
const MaxEngineTokens = 1<<31 - 1

// TokenCapped is a Backend with a bound on a serve's max_tokens: a local
// engine's context length, or what its configuration allows. The agent
// refuses a serve asking for more before any work is done (PROFILE §16).
type TokenCapped interface {
	// TokenCap is the largest max_tokens the backend serves, at most
	// MaxEngineTokens; 0 means it states no bound of its own.
	TokenCap() uint32
}

// ErrTooManyTokens is wrapped when a serve's max_tokens exceeds what the
// engine can be handed.
var ErrTooManyTokens = errors.New("max_tokens over the engine's cap")
