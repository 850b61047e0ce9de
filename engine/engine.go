// Package engine owns the serving side of mesh/1 §5: the Backend interface
// every engine implements, and the reference engine used for conformance
// and for machines with no model installed.
package engine

import (
	"context"
	"crypto/ed25519"
	"errors"

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
}

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
