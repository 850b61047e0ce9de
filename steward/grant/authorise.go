package grant

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"meshd/steward/ledger"
	"meshd/wire"
)

// DefaultCacheSize is how many verified grants an Authoriser remembers.
const DefaultCacheSize = 1024

// Config assembles an Authoriser.
type Config struct {
	// Steward is this steward's public key (its id): only grants whose
	// audience names it are honoured. Required.
	Steward ed25519.PublicKey
	// Trusted are the issuer keys whose grants are honoured.
	Trusted []ed25519.PublicKey
	// Ledger holds the budgets; it must be open (and reconciled).
	Ledger *ledger.Ledger
	// Clock judges validity intervals; nil means time.Now.
	Clock func() time.Time
	// CacheSize bounds the cache of verified grants: 0 means
	// DefaultCacheSize, a negative value disables the cache.
	CacheSize int
}

// Authoriser runs phase 1 of a serve. It is safe for concurrent use.
type Authoriser struct {
	steward ed25519.PublicKey
	trusted map[[ed25519.PublicKeySize]byte]bool
	ledger  *ledger.Ledger
	clock   func() time.Time
	size    int

	mu sync.RWMutex
	// cache maps a grant id to its verified grant. The id is the hash of
	// the exact envelope bytes, so a hit proves these bytes were verified
	// (against the same, immutable, trust set and steward) before.
	cache map[wire.ContentID]*Signed
}

// NewAuthoriser checks cfg and returns an Authoriser.
func NewAuthoriser(cfg Config) (*Authoriser, error) {
	if cfg.Ledger == nil {
		return nil, errors.New("grant authoriser: a ledger is required")
	}
	if len(cfg.Steward) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("grant authoriser: the steward key is %d bytes, want %d", len(cfg.Steward), ed25519.PublicKeySize)
	}
	if len(cfg.Trusted) == 0 {
		return nil, errors.New("grant authoriser: no trusted issuer keys")
	}
	a := &Authoriser{steward: bytes.Clone(cfg.Steward), trusted: map[[ed25519.PublicKeySize]byte]bool{},
		ledger: cfg.Ledger, clock: cfg.Clock, size: cfg.CacheSize}
	for i, k := range cfg.Trusted {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("grant authoriser: trusted key %d is %d bytes, want %d", i, len(k), ed25519.PublicKeySize)
		}
		a.trusted[[ed25519.PublicKeySize]byte(k)] = true
	}
	if a.clock == nil {
		a.clock = time.Now
	}
	if a.size == 0 {
		a.size = DefaultCacheSize
	}
	if a.size > 0 {
		a.cache = make(map[wire.ContentID]*Signed, a.size)
	}
	return a, nil
}

// Steward returns the public key of the steward the Authoriser serves.
func (a *Authoriser) Steward() ed25519.PublicKey { return bytes.Clone(a.steward) }

func (a *Authoriser) trust(pub ed25519.PublicKey) error {
	if !a.trusted[[ed25519.PublicKeySize]byte(pub)] {
		return fmt.Errorf("%w: %x", ErrUnknownIssuer, []byte(pub))
	}
	return nil
}

// Verify opens env against the trusted issuers and checks that the grant is
// addressed to this steward, from the cache when these exact bytes passed
// before. Both checks depend only on the bytes and the Authoriser's fixed
// configuration, so, unlike the clock and the budget, they need judging
// only once per grant.
func (a *Authoriser) Verify(env []byte) (*Signed, error) {
	if len(env) == 0 || len(env) > MaxEnvelope {
		return nil, fmt.Errorf("%w: envelope of %d bytes (want 1..%d)", ErrMalformed, len(env), MaxEnvelope)
	}
	id := wire.ContentOf(env)
	if a.cache != nil {
		a.mu.RLock()
		s := a.cache[id]
		a.mu.RUnlock()
		if s != nil && bytes.Equal(s.Envelope, env) {
			return s, nil
		}
	}
	s, err := open(env, id, a.trust)
	if err != nil {
		return nil, err
	}
	if err := s.Addresses(a.steward); err != nil {
		return nil, fmt.Errorf("grant %s: %w", s.ID, err)
	}
	// Keep a private copy: the caller may reuse its buffer.
	s.Envelope = bytes.Clone(env)
	if a.cache != nil {
		a.mu.Lock()
		if len(a.cache) >= a.size {
			for k := range a.cache { // evict an arbitrary entry
				delete(a.cache, k)
				break
			}
		}
		a.cache[id] = s
		a.mu.Unlock()
	}
	return s, nil
}

// Hold is a durable reservation on a grant's budget for one serve. Exactly
// one of Settle and Release closes it.
type Hold struct {
	Grant    wire.ContentID
	ID       uint64 // the ledger's hold number, sealed as x_grant_hold
	AmountUJ uint64
	led      *ledger.Ledger
	closed   atomic.Bool
}

// Settle closes the hold at the sealed receipt's debit, x_grant_debit_uj:
// the charged figure capped at the hold.
func (h *Hold) Settle(chargedUJ uint64) error {
	if !h.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("grant hold %d: already closed", h.ID)
	}
	return h.led.Settle(h.ID, chargedUJ)
}

// Release closes the hold of a serve that sealed nothing.
func (h *Hold) Release() error {
	if !h.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("grant hold %d: already closed", h.ID)
	}
	return h.led.Release(h.ID)
}

// Authorise is phase 1 of a serve (mesh/1 §2, §7 item 1): it verifies the
// grant envelope against the trusted issuers, checks that its audience
// names this steward, the validity interval at the Authoriser's clock,
// that the grant permits infer on the request with content id request, and
// that its remaining budget covers the request's joule ceiling, and then
// takes a durable hold of the ceiling. The order is PROFILE.md §14's. Every
// refusal wraps one of the package's sentinel errors and leaves the ledger
// unchanged.
func (a *Authoriser) Authorise(ctx context.Context, env []byte, request wire.ContentID, ceilingUJ uint64) (*Hold, error) {
	s, err := a.Verify(env)
	if err != nil {
		return nil, fmt.Errorf("authorise: %w", err)
	}
	if err := s.ValidAt(a.clock()); err != nil {
		return nil, fmt.Errorf("authorise: grant %s: %w", s.ID, err)
	}
	if err := s.Permits(ActionInfer, request); err != nil {
		return nil, fmt.Errorf("authorise: grant %s: %w", s.ID, err)
	}
	if ceilingUJ == 0 {
		return nil, fmt.Errorf("authorise: grant %s: %w: joule_ceiling_uj is zero", s.ID, wire.ErrBadRequest)
	}
	id, err := a.ledger.HoldUntil(ctx, s.ID, s.BudgetUJ, s.Expires, ceilingUJ)
	if err != nil {
		return nil, fmt.Errorf("authorise: %w", err)
	}
	return &Hold{Grant: s.ID, ID: id, AmountUJ: ceilingUJ, led: a.ledger}, nil
}
