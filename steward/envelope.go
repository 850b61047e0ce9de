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

// SealCore wraps a signed core in a tagged COSE_Sign1 envelope. The
// protected header carries alg = EdDSA (-8) and kid = the raw public key;
// the unprotected header is empty and the external AAD is empty. Ed25519 is
// deterministic, so the envelope is a pure function of key and core.
func SealCore(k *Key, core []byte) ([]byte, error) {
	msg := cose.Sign1Message{
		Headers: cose.Headers{
			Protected: cose.ProtectedHeader{
				cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA,
				cose.HeaderLabelKeyID:     []byte(k.pub),
			},
		},
		Payload: core,
	}
	signer, err := cose.NewSigner(cose.AlgorithmEdDSA, k.priv)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := msg.Sign(nil, nil, signer); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	env, err := msg.MarshalCBOR()
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

// OpenEnvelope verifies one envelope: COSE structure, alg, kid, the
// signature, strict decoding of the core, the §6 field rules and the
// steward field matching the kid. If trusted is non-nil the kid must equal
// it. It does not check the chain; VerifyLog does.
func OpenEnvelope(env []byte, trusted ed25519.PublicKey) (*Opened, error) {
	var msg cose.Sign1Message
	if err := msg.UnmarshalCBOR(env); err != nil {
		return nil, fmt.Errorf("envelope: not a COSE_Sign1 message: %w", err)
	}
	alg, err := msg.Headers.Protected.Algorithm()
	if err != nil || alg != cose.AlgorithmEdDSA {
		return nil, fmt.Errorf("envelope: protected alg must be EdDSA (-8)")
	}
	if len(msg.Headers.Unprotected) != 0 {
		return nil, fmt.Errorf("envelope: unprotected header must be empty")
	}
	kid, ok := msg.Headers.Protected[cose.HeaderLabelKeyID].([]byte)
	if !ok || len(kid) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("envelope: protected kid must be a %d-byte Ed25519 public key", ed25519.PublicKeySize)
	}
	pub := ed25519.PublicKey(kid)
	if trusted != nil && !bytes.Equal(trusted, pub) {
		return nil, fmt.Errorf("envelope: signed by %x, not by the trusted steward %x", []byte(pub), []byte(trusted))
	}
	verifier, err := cose.NewVerifier(cose.AlgorithmEdDSA, pub)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if err := msg.Verify(nil, verifier); err != nil {
		return nil, fmt.Errorf("envelope: %w: %v", ErrSignature, err)
	}
	r, err := DecodeCore(msg.Payload)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("envelope sequence %d: %w", r.Sequence, err)
	}
	if r.Steward != hex.EncodeToString(pub) {
		return nil, fmt.Errorf("envelope sequence %d: %w: steward %s does not match the signing kid", r.Sequence, ErrField, r.Steward)
	}
	return &Opened{Receipt: r, Core: msg.Payload, ID: wire.ContentOf(env), Key: pub}, nil
}
