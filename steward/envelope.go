package steward

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/veraison/go-cose"

	"meshd/wire"
)

// ErrSignature is wrapped when an envelope's signature does not verify.
var ErrSignature = errors.New("signature does not verify")

// Sign1 wraps payload in a tagged COSE_Sign1 envelope signed by k: the
// protected header carries alg = EdDSA (-8) and kid = the raw 32-byte
// public key; the unprotected header is empty and the external AAD is
// empty. Ed25519 is deterministic, so the envelope is a pure function of
// key and payload. Receipts and grants share this envelope family.
func Sign1(k *Key, payload []byte) ([]byte, error) {
	msg := cose.Sign1Message{
		Headers: cose.Headers{Protected: k.protected, RawProtected: k.rawProt, RawUnprotected: k.rawUnprot},
		Payload: payload,
	}
	if err := msg.Sign(nil, nil, k.signer); err != nil {
		return nil, fmt.Errorf("cose sign: %w", err)
	}
	env, err := msg.MarshalCBOR()
	if err != nil {
		return nil, fmt.Errorf("cose sign: %w", err)
	}
	return env, nil
}

// Open1 checks a Sign1 envelope's structure and signature and returns its
// payload and signing key. If trusted is non-nil the kid must equal it; use
// OpenTrusted to accept any of a set of keys.
func Open1(env []byte, trusted ed25519.PublicKey) (payload []byte, signer ed25519.PublicKey, err error) {
	return OpenTrusted(env, func(pub ed25519.PublicKey) error {
		if trusted != nil && !bytes.Equal(trusted, pub) {
			return fmt.Errorf("signed by %x, not by the trusted key %x", []byte(pub), []byte(trusted))
		}
		return nil
	})
}

// OpenTrusted is Open1 with a caller-supplied trust decision on the kid,
// made before the signature is checked.
func OpenTrusted(env []byte, trust func(ed25519.PublicKey) error) ([]byte, ed25519.PublicKey, error) {
	var msg cose.Sign1Message
	if err := msg.UnmarshalCBOR(env); err != nil {
		return nil, nil, fmt.Errorf("not a COSE_Sign1 message: %w", err)
	}
	alg, err := msg.Headers.Protected.Algorithm()
	if err != nil || alg != cose.AlgorithmEdDSA {
		return nil, nil, errors.New("protected alg must be EdDSA (-8)")
	}
	if len(msg.Headers.Unprotected) != 0 {
		return nil, nil, errors.New("unprotected header must be empty")
	}
	if len(msg.Headers.Protected) != 2 {
		return nil, nil, errors.New("protected header must hold exactly alg and kid")
	}
	kid, ok := msg.Headers.Protected[cose.HeaderLabelKeyID].([]byte)
	if !ok || len(kid) != ed25519.PublicKeySize {
		return nil, nil, fmt.Errorf("protected kid must be a %d-byte Ed25519 public key", ed25519.PublicKeySize)
	}
	pub := ed25519.PublicKey(kid)
	if err := trust(pub); err != nil {
		return nil, nil, err
	}
	verifier, err := cose.NewVerifier(cose.AlgorithmEdDSA, pub)
	if err != nil {
		return nil, nil, err
	}
	if err := msg.Verify(nil, verifier); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	return msg.Payload, pub, nil
}

// SealCore seals a receipt's signed core.
func SealCore(k *Key, core []byte) ([]byte, error) {
	env, err := Sign1(k, core)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return env, nil
}

// Opened is a verified envelope.
type Opened struct {
	Receipt *Receipt
	// Core is the signed core bytes; ID the content id of the envelope.
	Core []byte
	ID   wire.ContentID
	// Key is the public key that signed it (the COSE kid).
	Key ed25519.PublicKey
}

// OpenEnvelope verifies one receipt envelope: COSE structure, alg, kid,
// the signature, strict decoding of the core, the §6 field rules and the
// steward field matching the kid. If trusted is non-nil the kid must equal
// it. It does not check the chain; Scan does.
func OpenEnvelope(env []byte, trusted ed25519.PublicKey) (*Opened, error) {
	core, pub, err := Open1(env, trusted)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	r, err := DecodeCore(core)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("envelope sequence %d: %w", r.Sequence, err)
	}
	if r.Steward != hex.EncodeToString(pub) {
		return nil, fmt.Errorf("envelope sequence %d: %w: steward %s does not match the signing kid", r.Sequence, ErrField, r.Steward)
	}
	return &Opened{Receipt: r, Core: core, ID: wire.ContentOf(env), Key: pub}, nil
}
