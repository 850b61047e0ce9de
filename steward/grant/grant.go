// Package grant owns meshd's JCP grants (mesh/1 §2 phase 1): the signed
// statement by an issuer that a holder may perform an action on a resource,
// at the stewards it names, within a joule budget and a validity interval;
// issuing, opening and inspecting such grants; authorising a serve against
// one, which verifies the grant and takes a durable hold of the request's
// joule ceiling on the grant's budget in the ledger before any work is
// done; and reading back from a steward's receipt log what its receipts
// debited, to reconcile the ledger (Collector).
//
// The wire form (PROFILE.md §14) is a deterministic CBOR map with
// text keys and only text and unsigned integer values, signed as a tagged
// COSE_Sign1 with Ed25519 exactly like a receipt; the grant id is the
// BLAKE3 content id of the envelope bytes. An envelope must be in its one
// canonical encoding, so a holder cannot mint a fresh grant id (and a fresh
// budget) by re-encoding a grant it was given. Each steward keeps its own
// ledger, so a grant names its audience: a steward honours only grants
// addressed to it, and a grant cannot be spent in full at every steward
// that trusts its issuer.
package grant

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"meshd/steward"
	"meshd/steward/ledger"
	"meshd/wire"
)

// Profile is the value of the jcp_grant field.
const Profile = "meshd/1"

// ActionInfer is the action a serve needs.
const ActionInfer = "infer"

// AnyResource is the resource that matches every request.
const AnyResource = "*"

// NonceSize is the size in bytes of a grant nonce (hex on the wire).
const NonceSize = 16

const (
	maxHolder = 256
	maxAction = 64
	// MaxAudience bounds the stewards one grant may name: 32 ids of 65
	// bytes on the wire keep the largest grant well inside MaxEnvelope.
	MaxAudience = 32
	// MaxEnvelope bounds a grant envelope; one naming a single steward is
	// about 490 bytes.
	MaxEnvelope = 4096
)

// The sentinel errors of a refused grant. Every refusal wraps exactly one
// of them (a bad signature also wraps steward.ErrSignature).
var (
	ErrMalformed     = errors.New("malformed grant")
	ErrUnknownIssuer = errors.New("grant issuer is not trusted")
	ErrBadSignature  = errors.New("grant signature does not verify")
	ErrNotYetValid   = errors.New("grant is not yet valid")
	ErrExpired       = errors.New("grant has expired")
	ErrWrongAction   = errors.New("grant does not permit this action")
	ErrWrongResource = errors.New("grant does not cover this request")
	ErrWrongAudience = errors.New("grant is not addressed to this steward")
	// ErrBudgetExhausted is the ledger's own sentinel, so a refusal from
	// either package matches both.
	ErrBudgetExhausted = ledger.ErrExhausted
)

// Grant is the content of a grant.
type Grant struct {
	// Issuer is the key that signs the grant (the COSE kid).
	Issuer ed25519.PublicKey
	// Holder names who the grant is for. meshd records and shows it but
	// cannot check it: a serve carries no caller identity, so a grant is a
	// bearer capability.
	Holder string
	// Audience are the stewards (their public keys, the steward ids) that
	// may honour the grant, in ascending order once issued or opened. Each
	// keeps its own ledger, so the issuer's exposure is BudgetUJ at each.
	Audience []ed25519.PublicKey
	// Action is the permitted action; a serve needs ActionInfer.
	Action string
	// Request is the one request the grant covers, unless AnyRequest.
	Request    wire.ContentID
	AnyRequest bool
	// BudgetUJ is the total energy all serves on the grant may charge.
	BudgetUJ uint64
	// The grant is valid for NotBefore <= t < Expires, to the millisecond.
	NotBefore, Expires time.Time
	Nonce              [NonceSize]byte
}

// Resource is the wire form of the resource: a request id or "*".
func (g *Grant) Resource() string {
	if g.AnyRequest {
		return AnyResource
	}
	return g.Request.String()
}

// Signed is an opened (or freshly issued) grant envelope: signed by an
// issuer the caller trusts.
type Signed struct {
	Grant
	Envelope []byte
	// ID is the grant_id: the content id of Envelope.
	ID wire.ContentID
}

// Untrusted is a grant envelope that is well formed and signed by the key
// it names as its issuer, and nothing more: anyone can make one with a key
// of their own. It is a type of its own, not a Signed, so that it cannot
// be mistaken for a grant some trust decision accepted.
type Untrusted struct {
	Grant
	Envelope []byte
	// ID is the grant_id: the content id of Envelope.
	ID wire.ContentID
}

// payload is the signed CBOR map. Pointers make a missing key detectable.
type payload struct {
	Profile   *string `cbor:"jcp_grant"`
	Issuer    *string `cbor:"issuer"`
	Audience  *string `cbor:"audience"`
	Holder    *string `cbor:"holder"`
	Action    *string `cbor:"action"`
	Resource  *string `cbor:"resource"`
	BudgetUJ  *uint64 `cbor:"budget_uj"`
	NotBefore *uint64 `cbor:"not_before_unix_ms"`
	Expires   *uint64 `cbor:"expires_unix_ms"`
	Nonce     *string `cbor:"nonce"`
}

// Check enforces the field rules every grant must satisfy.
func (g *Grant) Check() error {
	switch {
	case len(g.Issuer) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: issuer must be a %d-byte Ed25519 public key", ErrMalformed, ed25519.PublicKeySize)
	case len(g.Audience) == 0 || len(g.Audience) > MaxAudience:
		return fmt.Errorf("%w: audience must name 1..%d stewards, not %d", ErrMalformed, MaxAudience, len(g.Audience))
	case g.Holder == "" || len(g.Holder) > maxHolder || !utf8.ValidString(g.Holder):
		return fmt.Errorf("%w: holder must be 1..%d bytes of UTF-8", ErrMalformed, maxHolder)
	case g.Action == "" || len(g.Action) > maxAction || !utf8.ValidString(g.Action):
		return fmt.Errorf("%w: action must be 1..%d bytes of UTF-8", ErrMalformed, maxAction)
	case !g.AnyRequest && g.Request.IsZero():
		return fmt.Errorf("%w: resource must be a request id or %q", ErrMalformed, AnyResource)
	case g.BudgetUJ == 0:
		return fmt.Errorf("%w: budget_uj is zero", ErrMalformed)
	case g.NotBefore.UnixMilli() < 0:
		return fmt.Errorf("%w: not_before is before 1970", ErrMalformed)
	case g.Expires.UnixMilli() <= g.NotBefore.UnixMilli():
		return fmt.Errorf("%w: expires (%s) is not after not_before (%s)", ErrMalformed,
			g.Expires.UTC().Format(time.RFC3339Nano), g.NotBefore.UTC().Format(time.RFC3339Nano))
	}
	seen := make(map[[ed25519.PublicKeySize]byte]bool, len(g.Audience))
	for i, k := range g.Audience {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("%w: audience entry %d must be a %d-byte Ed25519 public key", ErrMalformed, i, ed25519.PublicKeySize)
		}
		if seen[[ed25519.PublicKeySize]byte(k)] {
			return fmt.Errorf("%w: audience names steward %x twice", ErrMalformed, []byte(k))
		}
		seen[[ed25519.PublicKeySize]byte(k)] = true
	}
	return nil
}

// audienceText is the wire form of the audience: the steward ids in
// ascending order, joined by commas. Fixed-length lower-case hex sorts as
// its bytes do, so the order is that of the keys.
func (g *Grant) audienceText() string {
	ids := make([]string, len(g.Audience))
	for i, k := range g.Audience {
		ids[i] = hex.EncodeToString(k)
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// encode returns the deterministic CBOR payload of g.
func (g *Grant) encode() ([]byte, error) {
	if err := g.Check(); err != nil {
		return nil, err
	}
	profile, issuer, audience, resource, nonce := Profile, hex.EncodeToString(g.Issuer), g.audienceText(), g.Resource(), hex.EncodeToString(g.Nonce[:])
	nb, ex := uint64(g.NotBefore.UnixMilli()), uint64(g.Expires.UnixMilli())
	b, err := wire.EncMode().Marshal(payload{&profile, &issuer, &audience, &g.Holder, &g.Action, &resource, &g.BudgetUJ, &nb, &ex, &nonce})
	if err != nil {
		return nil, fmt.Errorf("encode grant: %w", err)
	}
	return b, nil
}

// Issue signs g with the issuer key k, filling in g.Issuer from k and, if
// the nonce is all zero, a fresh nonce from rand. The audience may be given
// in any order; the returned grant lists it in its signed, ascending order.
func Issue(k *steward.Key, g Grant, rand io.Reader) (*Signed, error) {
	g.Issuer = k.Public()
	g.Audience = slices.Clone(g.Audience)
	slices.SortFunc(g.Audience, func(a, b ed25519.PublicKey) int { return bytes.Compare(a, b) })
	// The wire carries milliseconds; the returned Grant states exactly
	// what was signed.
	g.NotBefore = time.UnixMilli(g.NotBefore.UnixMilli()).UTC()
	g.Expires = time.UnixMilli(g.Expires.UnixMilli()).UTC()
	if g.Nonce == ([NonceSize]byte{}) {
		if _, err := io.ReadFull(rand, g.Nonce[:]); err != nil {
			return nil, fmt.Errorf("issue grant: nonce: %w", err)
		}
	}
	p, err := g.encode()
	if err != nil {
		return nil, fmt.Errorf("issue grant: %w", err)
	}
	env, err := steward.Sign1(k, p)
	if err != nil {
		return nil, fmt.Errorf("issue grant: %w", err)
	}
	return &Signed{Grant: g, Envelope: env, ID: wire.ContentOf(env)}, nil
}

// Open verifies a grant envelope: canonical COSE_Sign1 structure, the trust
// decision on the issuer key (made before the signature is checked: trust
// returns an error wrapping ErrUnknownIssuer for a key it does not trust),
// the signature, and strict decoding of the payload with every field rule.
// It does not judge the audience, the validity interval, the action, the
// resource or the budget: see Addresses, ValidAt and Permits. A nil trust
// is refused; Inspect is for looking at a grant without trusting it.
func Open(env []byte, trust func(ed25519.PublicKey) error) (*Signed, error) {
	if trust == nil {
		return nil, errors.New("open grant: no trust decision given (use Inspect to view a grant from any issuer)")
	}
	if len(env) == 0 || len(env) > MaxEnvelope {
		return nil, fmt.Errorf("%w: envelope of %d bytes (want 1..%d)", ErrMalformed, len(env), MaxEnvelope)
	}
	return open(env, wire.ContentOf(env), trust)
}

// Inspect checks everything Open does except whether the issuer is
// trusted: the signature is verified against the key the envelope itself
// names, which proves only that its holder signed it. It is for showing a
// grant, never for honouring one.
func Inspect(env []byte) (*Untrusted, error) {
	s, err := Open(env, func(ed25519.PublicKey) error { return nil })
	if err != nil {
		return nil, err
	}
	return &Untrusted{Grant: s.Grant, Envelope: s.Envelope, ID: s.ID}, nil
}

// open is Open for an envelope whose size is checked and id computed.
func open(env []byte, id wire.ContentID, trust func(ed25519.PublicKey) error) (*Signed, error) {
	p, pub, err := steward.OpenTrusted(env, trust)
	switch {
	case errors.Is(err, ErrUnknownIssuer):
		return nil, err
	case errors.Is(err, steward.ErrSignature):
		return nil, sigError{err}
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := canonical(env); err != nil {
		return nil, err
	}
	g, err := decode(p)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(g.Issuer, pub) {
		return nil, fmt.Errorf("%w: issuer %x does not match the signing kid %x", ErrMalformed, []byte(g.Issuer), []byte(pub))
	}
	return &Signed{Grant: *g, Envelope: env, ID: id}, nil
}

// sigError is a failed signature: it matches both ErrBadSignature and
// steward.ErrSignature without saying so twice.
type sigError struct{ err error }

func (e sigError) Error() string {
	return ErrBadSignature.Error() + strings.TrimPrefix(e.err.Error(), steward.ErrSignature.Error())
}

func (e sigError) Unwrap() []error { return []error{ErrBadSignature, e.err} }

// canonical refuses an envelope that is not the one deterministic encoding
// of its content: tag 18, a 4-array, and byte strings with shortest-form
// lengths around an empty unprotected map, with nothing after. The
// signature binds the payload and protected header bytes but not this outer
// framing, so without the check a re-encoded copy of a grant (say with a
// padded length) would carry the same signature under a different grant
// id, and with it a fresh budget. OpenTrusted has already checked what the
// header and map hold; only their encoding is judged here.
func canonical(env []byte) error {
	b, ok := bytes.CutPrefix(env, []byte{0xd2, 0x84}) // tag 18, array of 4
	for i := 0; ok && i < 4; i++ {
		if i == 1 {
			b, ok = bytes.CutPrefix(b, []byte{0xa0}) // empty unprotected map
			continue
		}
		var n uint64
		var hdr int
		n, hdr, ok = bstrHead(b)
		if ok && uint64(len(b)-hdr) >= n {
			b = b[hdr+int(n):]
		} else {
			ok = false
		}
	}
	if !ok || len(b) != 0 {
		return fmt.Errorf("%w: envelope is not in canonical (deterministic CBOR) form", ErrMalformed)
	}
	return nil
}

// bstrHead decodes the head of a definite-length byte string, refusing any
// length not in its shortest form.
func bstrHead(b []byte) (n uint64, hdr int, ok bool) {
	if len(b) == 0 || b[0]>>5 != 2 {
		return 0, 0, false
	}
	ai := b[0] & 31
	var least uint64
	switch {
	case ai < 24:
		return uint64(ai), 1, true
	case ai == 24:
		hdr, least = 2, 24
	case ai == 25:
		hdr, least = 3, 1<<8
	case ai == 26:
		hdr, least = 5, 1<<16
	case ai == 27:
		hdr, least = 9, 1<<32
	default:
		return 0, 0, false
	}
	if len(b) < hdr {
		return 0, 0, false
	}
	for _, c := range b[1:hdr] {
		n = n<<8 | uint64(c)
	}
	return n, hdr, n >= least
}

func decode(b []byte) (*Grant, error) {
	var p payload
	if err := wire.DecMode().Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	for _, f := range []struct {
		name    string
		missing bool
	}{
		{"jcp_grant", p.Profile == nil}, {"issuer", p.Issuer == nil}, {"audience", p.Audience == nil}, {"holder", p.Holder == nil},
		{"action", p.Action == nil}, {"resource", p.Resource == nil}, {"budget_uj", p.BudgetUJ == nil},
		{"not_before_unix_ms", p.NotBefore == nil}, {"expires_unix_ms", p.Expires == nil}, {"nonce", p.Nonce == nil},
	} {
		if f.missing {
			return nil, fmt.Errorf("%w: %s is missing", ErrMalformed, f.name)
		}
	}
	if *p.Profile != Profile {
		return nil, fmt.Errorf("%w: jcp_grant is %q, want %q", ErrMalformed, *p.Profile, Profile)
	}
	g := &Grant{Holder: *p.Holder, Action: *p.Action, BudgetUJ: *p.BudgetUJ}
	issuer, err := lowerHex(*p.Issuer, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("%w: issuer: %v", ErrMalformed, err)
	}
	g.Issuer = issuer
	if g.Audience, err = parseAudience(*p.Audience); err != nil {
		return nil, fmt.Errorf("%w: audience: %v", ErrMalformed, err)
	}
	if *p.Resource == AnyResource {
		g.AnyRequest = true
	} else {
		r, err := lowerHex(*p.Resource, len(wire.ContentID{}))
		if err != nil {
			return nil, fmt.Errorf("%w: resource must be %q or a request id: %v", ErrMalformed, AnyResource, err)
		}
		g.Request = wire.ContentID(r)
	}
	n, err := lowerHex(*p.Nonce, NonceSize)
	if err != nil {
		return nil, fmt.Errorf("%w: nonce: %v", ErrMalformed, err)
	}
	g.Nonce = [NonceSize]byte(n)
	const maxMs = 1<<63 - 1
	if *p.NotBefore > maxMs || *p.Expires > maxMs {
		return nil, fmt.Errorf("%w: validity times out of range", ErrMalformed)
	}
	g.NotBefore, g.Expires = time.UnixMilli(int64(*p.NotBefore)), time.UnixMilli(int64(*p.Expires))
	if err := g.Check(); err != nil {
		return nil, err
	}
	// Only a payload that is exactly the deterministic encoding of its
	// content is accepted, so one grant has one byte form.
	again, err := g.encode()
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(again, b) {
		return nil, fmt.Errorf("%w: payload is not in deterministic CBOR form", ErrMalformed)
	}
	return g, nil
}

// parseAudience reads the wire form of the audience, refusing any but the
// one Issue writes: 1..MaxAudience ids, ascending, none repeated.
func parseAudience(s string) ([]ed25519.PublicKey, error) {
	ids := strings.Split(s, ",")
	if len(ids) > MaxAudience {
		return nil, fmt.Errorf("%d steward ids, at most %d allowed", len(ids), MaxAudience)
	}
	keys := make([]ed25519.PublicKey, len(ids))
	for i, id := range ids {
		k, err := lowerHex(id, ed25519.PublicKeySize)
		if err != nil {
			return nil, fmt.Errorf("steward id %d: %v", i, err)
		}
		if i > 0 && id <= ids[i-1] {
			return nil, fmt.Errorf("steward ids must be in ascending order without repeats (id %d is %s after %s)", i, id, ids[i-1])
		}
		keys[i] = k
	}
	return keys, nil
}

func lowerHex(s string, size int) ([]byte, error) { return wire.ParseHex(s, size) }

// ValidAt reports whether the grant is valid at t: NotBefore <= t < Expires.
func (g *Grant) ValidAt(t time.Time) error {
	ms := t.UnixMilli()
	switch {
	case ms < g.NotBefore.UnixMilli():
		return fmt.Errorf("%w: valid from %s, now %s", ErrNotYetValid,
			g.NotBefore.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))
	case ms >= g.Expires.UnixMilli():
		return fmt.Errorf("%w: expired at %s, now %s", ErrExpired,
			g.Expires.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Addresses reports whether the grant's audience includes the steward
// whose public key (steward id) is self: only those stewards may honour it.
func (g *Grant) Addresses(self ed25519.PublicKey) error {
	for _, k := range g.Audience {
		if bytes.Equal(k, self) {
			return nil
		}
	}
	ids := make([]string, len(g.Audience))
	for i, k := range g.Audience {
		ids[i] = hex.EncodeToString(k)
	}
	return fmt.Errorf("%w: it is for stewards [%s], not this steward %x", ErrWrongAudience, strings.Join(ids, " "), []byte(self))
}

// Permits reports whether the grant's capability allows action on the
// request with the given content id.
func (g *Grant) Permits(action string, request wire.ContentID) error {
	if g.Action != action {
		return fmt.Errorf("%w: grant permits %q, the serve needs %q", ErrWrongAction, g.Action, action)
	}
	if !g.AnyRequest && g.Request != request {
		return fmt.Errorf("%w: grant covers request %s, not %s", ErrWrongResource, g.Request, request)
	}
	return nil
}
