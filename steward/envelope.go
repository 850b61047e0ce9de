package steward

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"unsafe"

	"meshd/wire"
)

// ErrSignature is wrapped when an envelope's signature does not verify.
var ErrSignature = errors.New("signature does not verify")

// Reason is the stable name of why verification refused an envelope, a
// receipt or a chain link. The names are part of the conformance vectors
// (conformance/v1/README.md), so a second implementation can be checked
// against the same refusals; never rename one.
type Reason string

// Error makes a Reason usable with errors.Is and errors.As.
func (r Reason) Error() string { return string(r) }

// The refusal reasons. Envelope reasons are judged on the bytes before the
// signature; core reasons after it.
const (
	// RefusedStructure: not tag 18 around a 4-array, or cut short.
	RefusedStructure Reason = "envelope-structure"
	// RefusedProtected: the protected header is not exactly
	// 58 26 a2 01 27 04 58 20 ‖ kid (alg EdDSA then a 32-byte kid).
	RefusedProtected Reason = "protected-header"
	// RefusedUnprotected: the unprotected header is not the empty map a0.
	RefusedUnprotected Reason = "unprotected-header"
	// RefusedPayload: the payload is not a byte string with a
	// shortest-form length.
	RefusedPayload Reason = "payload-encoding"
	// RefusedSignatureField: the signature is not 58 40 ‖ 64 bytes.
	RefusedSignatureField Reason = "signature-encoding"
	// RefusedTrailing: bytes follow the signature.
	RefusedTrailing Reason = "trailing-bytes"
	// RefusedUntrusted: the kid is not a key the caller trusts.
	RefusedUntrusted Reason = "untrusted-key"
	// RefusedSignature: the Ed25519 signature does not verify.
	RefusedSignature Reason = "bad-signature"
	// RefusedCoreEncoding: the signed core is not a deterministic CBOR map
	// with text keys (PROFILE.md §1, §15).
	RefusedCoreEncoding Reason = "core-encoding"
	// RefusedUnknownField: a key that is neither mesh/1 nor starts "x_".
	RefusedUnknownField Reason = "unknown-field"
	// RefusedFieldType: a known field holds the wrong CBOR type.
	RefusedFieldType Reason = "field-type"
	// RefusedMissingField: a required field, or a member of an extension
	// group that is present, is absent.
	RefusedMissingField Reason = "missing-field"
	// RefusedFieldValue: a field holds a value its rule forbids.
	RefusedFieldValue Reason = "field-value"
	// RefusedCoupling: a field's presence contradicts energy_provenance.
	RefusedCoupling Reason = "coupling"
	// RefusedStewardKid: the steward field is not the signing kid.
	RefusedStewardKid Reason = "steward-kid"
	// RefusedChainLink: sequence or prev does not follow the previous
	// envelope, or the steward changed along the chain.
	RefusedChainLink Reason = "chain-link"
)

// ReasonOf returns the reason err was refused for, or "" if err carries
// none.
func ReasonOf(err error) Reason {
	var r Reason
	if errors.As(err, &r) {
		return r
	}
	return ""
}

// refusal pairs a Reason with the error that explains it, so that callers
// can match either (errors.Is(err, ErrField), ReasonOf(err)).
type refusal struct {
	reason Reason
	err    error
}

func (e *refusal) Error() string   { return e.err.Error() + " [" + string(e.reason) + "]" }
func (e *refusal) Unwrap() []error { return []error{e.reason, e.err} }

func refuse(r Reason, err error) error { return &refusal{reason: r, err: err} }

// The canonical envelope is fixed apart from the kid, the payload and the
// signature; see PROFILE.md §7.
const (
	// protectedBstr is the protected header as it appears in both the
	// envelope and the Sig_structure: bstr(38) of {1: -8, 4: bstr(32)},
	// followed by the 32 key bytes.
	protectedBstr = "\x58\x26\xa2\x01\x27\x04\x58\x20"
	protectedLen  = len(protectedBstr) + ed25519.PublicKeySize
	// sigStructHead is ["Signature1", ... : array(4), text(10).
	sigStructHead = "\x84\x6aSignature1"
	sigHead       = "\x58\x40"
)

// envelopeParts are the pieces of a canonical envelope, as sub-slices of it.
type envelopeParts struct {
	protected []byte // the protected header bstr, head included
	kid       []byte
	payload   []byte // the payload content
	payloadCB []byte // the payload bstr, head included
	sig       []byte
}

// parseEnvelope accepts exactly one byte form per (kid, payload,
// signature): the envelope's content id names receipts in the chain and
// grants in the ledger, so any second encoding of the same signature would
// be a second identity. No general CBOR decoder is involved: every byte is
// either fixed or a length that must be in shortest form.
func parseEnvelope(env []byte) (envelopeParts, error) {
	var p envelopeParts
	if len(env) < 2 || env[0] != 0xd2 || env[1] != 0x84 {
		return p, refuse(RefusedStructure, errors.New("not a tagged COSE_Sign1 (want d2 84)"))
	}
	b := env[2:]
	if len(b) < protectedLen {
		return p, refuse(RefusedStructure, errors.New("envelope ends inside the protected header"))
	}
	if string(b[:len(protectedBstr)]) != protectedBstr {
		return p, refuse(RefusedProtected, errors.New("protected header must be exactly {1: -8, 4: <32-byte kid>} in that order (58 26 a2 01 27 04 58 20 ‖ kid)"))
	}
	p.protected, p.kid = b[:protectedLen], b[len(protectedBstr):protectedLen]
	b = b[protectedLen:]
	if len(b) == 0 {
		return p, refuse(RefusedStructure, errors.New("envelope ends before the unprotected header"))
	}
	if b[0] != 0xa0 {
		return p, refuse(RefusedUnprotected, errors.New("unprotected header must be the empty map a0"))
	}
	b = b[1:]
	if len(b) == 0 {
		return p, refuse(RefusedStructure, errors.New("envelope ends before the payload"))
	}
	major, n, off, err := wire.ReadHead(b, 0)
	if err != nil || major != wire.MajorBytes {
		return p, refuse(RefusedPayload, fmt.Errorf("payload must be a byte string with a shortest-form length: %v", err))
	}
	if n > uint64(len(b)-off) {
		return p, refuse(RefusedStructure, errors.New("payload runs past the end of the envelope"))
	}
	end := off + int(n)
	p.payloadCB, p.payload = b[:end], b[off:end]
	b = b[end:]
	if len(b) < len(sigHead)+ed25519.SignatureSize {
		if len(b) == 0 || b[0] == sigHead[0] {
			return p, refuse(RefusedStructure, errors.New("envelope ends inside the signature"))
		}
		return p, refuse(RefusedSignatureField, errors.New("signature must be 58 40 ‖ 64 bytes"))
	}
	if string(b[:len(sigHead)]) != sigHead {
		return p, refuse(RefusedSignatureField, errors.New("signature must be 58 40 ‖ 64 bytes"))
	}
	p.sig = b[len(sigHead) : len(sigHead)+ed25519.SignatureSize]
	if rest := len(b) - len(sigHead) - ed25519.SignatureSize; rest != 0 {
		return p, refuse(RefusedTrailing, fmt.Errorf("%d bytes after the signature", rest))
	}
	return p, nil
}

// appendSigStructure appends the RFC 9052 Sig_structure for a canonical
// envelope: the context "Signature1", the protected bstr, an empty
// external_aad bstr (40) and the payload bstr. Both byte strings are
// copied with their heads, which parseEnvelope has already held to
// shortest form, so the bytes signed are the bytes sent.
func appendSigStructure(dst, protected, payloadCB []byte) []byte {
	dst = append(dst, sigStructHead...)
	dst = append(dst, protected...)
	dst = append(dst, 0x40) // external_aad = h''
	return append(dst, payloadCB...)
}

// Sign1 wraps payload in a tagged COSE_Sign1 envelope signed by k: the
// protected header carries alg = EdDSA (-8) and kid = the raw 32-byte
// public key; the unprotected header is empty and the external AAD is
// empty. Ed25519 is deterministic, so the envelope is a pure function of
// key and payload. Receipts, grants and checkpoints are all sealed here, so
// everything meshd signs is in the one form OpenTrusted accepts.
func Sign1(k *Key, payload []byte) ([]byte, error) {
	if k == nil || len(k.pub) != ed25519.PublicKeySize || len(k.priv) != ed25519.PrivateKeySize {
		return nil, errors.New("sign1: no usable Ed25519 key")
	}
	env := make([]byte, 0, 2+protectedLen+1+9+len(payload)+len(sigHead)+ed25519.SignatureSize)
	env = append(env, 0xd2, 0x84)
	env = append(env, protectedBstr...)
	env = append(env, k.pub...)
	env = append(env, 0xa0)
	pstart := len(env)
	env = wire.AppendBytes(env, payload)
	tbs := appendSigStructure(make([]byte, 0, len(sigStructHead)+protectedLen+1+len(env)-pstart),
		env[2:2+protectedLen], env[pstart:])
	env = append(env, sigHead...)
	return append(env, ed25519.Sign(k.priv, tbs)...), nil
}

// OpenTrusted checks that env is a canonical Sign1 envelope (see
// parseEnvelope), asks trust about its kid before spending a signature
// check on it, verifies the signature with crypto/ed25519 over a Sig_structure
// built by hand, and returns the payload (a sub-slice of env) and the key.
// A nil trust accepts any key.
func OpenTrusted(env []byte, trust func(ed25519.PublicKey) error) ([]byte, ed25519.PublicKey, error) {
	p, err := parseEnvelope(env)
	if err != nil {
		return nil, nil, err
	}
	pub := ed25519.PublicKey(bytes.Clone(p.kid))
	if trust != nil {
		if err := trust(pub); err != nil {
			return nil, nil, refuse(RefusedUntrusted, err)
		}
	}
	// A stack buffer covers every receipt meshd seals; larger payloads
	// fall back to the heap inside append.
	var buf [1024]byte
	tbs := appendSigStructure(buf[:0], p.protected, p.payloadCB)
	if !ed25519.Verify(pub, tbs, p.sig) {
		return nil, nil, refuse(RefusedSignature, fmt.Errorf("%w: kid %x", ErrSignature, p.kid))
	}
	return p.payload, pub, nil
}

// Opened is a verified envelope.
type Opened struct {
	Receipt *Receipt
	// Core is the signed core bytes (a sub-slice of the envelope); ID the
	// content id of the envelope.
	Core []byte
	ID   wire.ContentID
	// Key is the public key that signed it (the COSE kid).
	Key ed25519.PublicKey
}

// OpenEnvelope verifies one mesh/1 receipt envelope from any conforming
// implementation: the canonical envelope bytes, the kid (if trusted is
// non-nil it must equal it), the signature, the deterministic encoding of
// the core, the field rules of PROFILE.md §15 (CheckConforming) and the
// steward field matching the kid. It does not check the chain; CheckLink
// does.
func OpenEnvelope(env []byte, trusted ed25519.PublicKey) (*Opened, error) {
	return openEnvelope(env, trusted, nil)
}

// An Opener opens envelopes as OpenEnvelope does, with the same checks
// and the same errors, for a caller that opens one envelope after another
// (the fleet verifier, where Ed25519 is the only cost that should show):
// it decodes every receipt into the one storage it holds rather than
// allocating a receipt per envelope, and keeps the hex of the last key it
// saw, so that the steward field is compared as text rather than decoded.
//
// The Opened and Receipt that Open returns are reused by the next Open on
// the same Opener: a caller that keeps an envelope keeps Opened.Clone.
// The receipt's strings and extension values are views of a copy of the
// core made for that envelope and never written again, so one kept by
// itself (a map key, a report line) stays valid. The zero Opener is
// ready; it is not safe for concurrent use.
type Opener struct {
	d decoded
	o Opened
	// core is a copy of the last core, fresh per envelope: the
	// receipt's strings and extension values are views of it.
	core   []byte
	key    [ed25519.PublicKeySize]byte
	hexKey [ed25519.PublicKeySize]byte // the key keyHex spells
	keyHex [2 * ed25519.PublicKeySize]byte
	hexSet bool
}

// Open is OpenEnvelope, into op's storage.
func (op *Opener) Open(env []byte, trusted ed25519.PublicKey) (*Opened, error) {
	return openEnvelope(env, trusted, op)
}

// Clone returns a copy of o that owns its receipt, decoded again from
// o.Core (which the Opener did not copy: it is the envelope's), for
// keeping past the next Open.
func (o *Opened) Clone() (*Opened, error) {
	r, err := DecodeCore(o.Core)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return &Opened{Receipt: r, Core: o.Core, ID: o.ID, Key: bytes.Clone(o.Key)}, nil
}

func openEnvelope(env []byte, trusted ed25519.PublicKey, op *Opener) (*Opened, error) {
	p, err := parseEnvelope(env)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	if trusted != nil && !bytes.Equal(trusted, p.kid) {
		return nil, fmt.Errorf("envelope: %w", refuse(RefusedUntrusted,
			fmt.Errorf("signed by %x, not by the trusted key %x", p.kid, []byte(trusted))))
	}
	var pub ed25519.PublicKey
	if op != nil {
		pub = op.key[:copy(op.key[:], p.kid)]
	} else {
		pub = ed25519.PublicKey(bytes.Clone(p.kid))
	}
	// A stack buffer covers every receipt meshd seals; larger payloads
	// fall back to the heap inside append.
	var buf [1024]byte
	tbs := appendSigStructure(buf[:0], p.protected, p.payloadCB)
	if !ed25519.Verify(pub, tbs, p.sig) {
		return nil, fmt.Errorf("envelope: %w", refuse(RefusedSignature, fmt.Errorf("%w: kid %x", ErrSignature, p.kid)))
	}
	core := p.payload
	var r *Receipt
	if op == nil {
		if r, err = DecodeCore(core); err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
	} else {
		// A fresh copy per envelope, never written again: the receipt's
		// strings are views of it, so a string a caller keeps (a map key,
		// a report line) stays valid after the next Open reuses the
		// decoded receipt. Only the receipt itself is recycled.
		op.core = append([]byte(nil), core...)
		all := unsafe.String(unsafe.SliceData(op.core), len(op.core))
		if err := decodeCoreInto(&op.d, op.core, all, true); err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
		r = &op.d.r
	}
	if err := r.CheckConforming(); err != nil {
		return nil, fmt.Errorf("envelope sequence %d: %w", r.Sequence, err)
	}
	if !stewardIs(r.Steward, pub, op) {
		return nil, fmt.Errorf("envelope sequence %d: %w", r.Sequence,
			refuse(RefusedStewardKid, fmt.Errorf("%w: steward %s does not match the signing kid", ErrField, r.Steward)))
	}
	if op == nil {
		return &Opened{Receipt: r, Core: core, ID: wire.ContentOf(env), Key: pub}, nil
	}
	op.o = Opened{Receipt: r, Core: core, ID: wire.ContentOf(env), Key: pub}
	return &op.o, nil
}

// stewardIs reports whether the steward field s names pub. The field is
// lower-case hex (DecodeHex takes nothing else), so with an Opener it is
// compared with the key's hex, spelt once per key, instead of decoded.
func stewardIs(s string, pub ed25519.PublicKey, op *Opener) bool {
	if op == nil {
		var steward [ed25519.PublicKeySize]byte
		return wire.DecodeHex(steward[:], s) == nil && bytes.Equal(steward[:], pub)
	}
	if !op.hexSet || !bytes.Equal(op.hexKey[:], pub) {
		copy(op.hexKey[:], pub)
		hex.Encode(op.keyHex[:], pub)
		op.hexSet = true
	}
	return s == string(op.keyHex[:])
}

// CheckLink checks that next follows prev in one steward's hash chain
// (mesh/1 §6.3): the same key, the next sequence number, and prev naming
// prev's envelope.
func CheckLink(prev, next *Opened) error {
	pr, nr := prev.Receipt, next.Receipt
	switch {
	case !bytes.Equal(prev.Key, next.Key):
		return refuse(RefusedChainLink, fmt.Errorf("sequence %d is signed by %x, the chain by %x", nr.Sequence, []byte(next.Key), []byte(prev.Key)))
	case nr.Sequence != pr.Sequence+1:
		return refuse(RefusedChainLink, fmt.Errorf("sequence %d follows sequence %d", nr.Sequence, pr.Sequence))
	case nr.Prev == nil || *nr.Prev != prev.ID.String():
		return refuse(RefusedChainLink, fmt.Errorf("sequence %d: prev does not name the previous envelope %s", nr.Sequence, prev.ID))
	}
	return nil
}
