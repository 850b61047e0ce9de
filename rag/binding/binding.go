// Package binding binds a RAG reply to the provider that gave it: the
// provider signs, with its steward key, a statement it builds itself from
// the request it received and the reply it produced, so a caller that
// pinned the provider's key can check the contract's check 1 (the reply
// comes from the provider that was called) on any transport, and a reply
// relayed by another node, or replayed for another request, is refused.
//
// The statement is a COSE_Sign1 (steward.Sign1, the one envelope form meshd
// signs) over a deterministic CBOR map whose key mesh_rag_reply names its
// purpose. Nothing here signs a digest a caller hands over: Seal
// takes the request's and the reply's bytes and hashes them itself, and the
// map it signs has a shape no receipt, checkpoint, grant or attestation
// opener accepts (and none of theirs passes Open here).
//
// The root rag package stays free of meshd's steward; this package is where
// the two meet.
package binding

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"meshd/steward"
	"meshd/wire"
)

// Purpose is the value of mesh_rag_reply: what the signature is for.
const Purpose = "meshd-rag-reply/v1"

// Header is the HTTP header (and NATS message header) that carries the
// signed statement, in standard base64.
const Header = "Mesh-Rag-Reply"

// Statement is what a provider signs about one reply.
type Statement struct {
	// Purpose is always Purpose.
	Purpose string `cbor:"mesh_rag_reply"`
	// Provider is the signing steward key, 64 lowercase hex (the COSE kid
	// says the same; the statement names it so that it reads alone).
	Provider string `cbor:"provider"`
	// Corpus is "<org>/<name>" and Procedure the contract's procedure, as
	// the request addressed them.
	Corpus    string `cbor:"corpus"`
	Procedure string `cbor:"procedure"`
	// RequestSHA256 is the SHA-256 of the request body exactly as the
	// provider received it; ReplySHA256 of the reply body as it sent it.
	RequestSHA256 []byte `cbor:"request_sha256"`
	ReplySHA256   []byte `cbor:"reply_sha256"`
	// ReplyType is the reply's media type (application/cbor or
	// application/json) and Status its status (HTTP's, 200 for an
	// answer): a refusal is bound like an answer.
	ReplyType string `cbor:"reply_type"`
	Status    uint16 `cbor:"status"`
}

// Reply is one reply as the caller saw it, to check against a statement.
type Reply struct {
	Corpus, Procedure string
	// Request is the body the caller sent; Body the one it received.
	Request, Body []byte
	Type          string
	Status        int
}

// Seal is the provider's side: it builds the statement for the reply it
// produced to the request it received and signs it with k.
func Seal(k *steward.Key, r Reply) ([]byte, error) {
	if r.Status < 100 || r.Status > 599 {
		return nil, fmt.Errorf("rag reply binding: status %d", r.Status)
	}
	req, body := sha256.Sum256(r.Request), sha256.Sum256(r.Body)
	st := Statement{Purpose: Purpose, Provider: k.ID(), Corpus: r.Corpus, Procedure: r.Procedure,
		RequestSHA256: req[:], ReplySHA256: body[:], ReplyType: r.Type, Status: uint16(r.Status)}
	payload, err := wire.EncMode().Marshal(&st)
	if err != nil {
		return nil, fmt.Errorf("rag reply binding: %w", err)
	}
	return steward.Sign1(k, payload)
}

// Refusal names why a reply is not bound to the pinned provider.
type Refusal string

func (r Refusal) Error() string { return "rag reply binding: " + string(r) }

// The refusals Verify returns (errors.Is matches them through the detail).
const (
	// RefusedUnsigned: the reply carries no statement.
	RefusedUnsigned Refusal = "reply_unsigned"
	// RefusedMalformed: the statement is not a canonical envelope over a
	// statement of this purpose, or its signature does not verify.
	RefusedMalformed Refusal = "reply_malformed"
	// RefusedSigner: the statement verifies, under another key than the
	// provider's the caller pinned: the reply was relayed (or the pin is
	// wrong).
	RefusedSigner Refusal = "reply_signer_not_provider"
	// RefusedRequest: the statement is about another request (another
	// body, corpus or procedure): a replay.
	RefusedRequest Refusal = "reply_request_mismatch"
	// RefusedBody: the reply received is not the one signed (its bytes,
	// media type or status changed on the way).
	RefusedBody Refusal = "reply_body_mismatch"
)

type refusal struct {
	r   Refusal
	err error
}

func (e *refusal) Error() string   { return string(e.r) + ": " + e.err.Error() }
func (e *refusal) Unwrap() []error { return []error{e.r, e.err} }

func refuse(r Refusal, format string, args ...any) error {
	return &refusal{r, fmt.Errorf(format, args...)}
}

// ReasonOf is the refusal err carries, "" for none.
func ReasonOf(err error) Refusal {
	var r Refusal
	if errors.As(err, &r) {
		return r
	}
	return ""
}

// Open verifies env's signature and reads its statement, under whichever
// key signed it. It says who signed, nothing about whom to believe: Verify
// is the caller's check.
func Open(env []byte) (*Statement, ed25519.PublicKey, error) {
	if len(env) == 0 {
		return nil, nil, refuse(RefusedUnsigned, "no statement")
	}
	payload, pub, err := steward.OpenTrusted(env, nil)
	if err != nil {
		return nil, nil, refuse(RefusedMalformed, "%v", err)
	}
	var st Statement
	if err := wire.DecMode().Unmarshal(payload, &st); err != nil {
		return nil, nil, refuse(RefusedMalformed, "statement: %v", err)
	}
	if st.Purpose != Purpose {
		return nil, nil, refuse(RefusedMalformed, "mesh_rag_reply is %q, want %q: not a RAG reply statement", st.Purpose, Purpose)
	}
	// One encoding per statement: what was signed is what Seal makes.
	if again, err := wire.EncMode().Marshal(&st); err != nil || !bytes.Equal(again, payload) {
		return nil, nil, refuse(RefusedMalformed, "statement is not in deterministic CBOR")
	}
	if len(st.RequestSHA256) != sha256.Size || len(st.ReplySHA256) != sha256.Size {
		return nil, nil, refuse(RefusedMalformed, "digests of %d and %d bytes, want %d", len(st.RequestSHA256), len(st.ReplySHA256), sha256.Size)
	}
	if st.Provider != hex.EncodeToString(pub) {
		return nil, nil, refuse(RefusedMalformed, "statement names provider %s, signed by %x", st.Provider, []byte(pub))
	}
	return &st, pub, nil
}

// Verify is the caller's check 1: env (the reply's statement) verifies
// under provider, the steward key the caller pinned for the node it
// called, and binds exactly the request it sent to exactly the reply it
// received. A statement by any other key is RefusedSigner, even a valid
// one: that is a reply relayed by a node the caller did not call.
func Verify(env []byte, provider ed25519.PublicKey, r Reply) (*Statement, error) {
	if len(provider) != ed25519.PublicKeySize {
		return nil, errors.New("rag reply binding: no provider key pinned")
	}
	st, pub, err := Open(env)
	if err != nil {
		return nil, err
	}
	if !pub.Equal(provider) {
		return nil, refuse(RefusedSigner, "signed by steward %x, the provider called is %x", []byte(pub), []byte(provider))
	}
	req, body := sha256.Sum256(r.Request), sha256.Sum256(r.Body)
	switch {
	case !bytes.Equal(st.RequestSHA256, req[:]):
		return nil, refuse(RefusedRequest, "signed for a request with sha256 %x, this one has %x", st.RequestSHA256, req[:])
	case st.Corpus != r.Corpus || st.Procedure != r.Procedure:
		return nil, refuse(RefusedRequest, "signed for %s %s, the request was %s %s", st.Corpus, st.Procedure, r.Corpus, r.Procedure)
	case !bytes.Equal(st.ReplySHA256, body[:]):
		return nil, refuse(RefusedBody, "signed a reply with sha256 %x, received %x", st.ReplySHA256, body[:])
	case st.ReplyType != r.Type || int(st.Status) != r.Status:
		return nil, refuse(RefusedBody, "signed a %d %s reply, received %d %s", st.Status, st.ReplyType, r.Status, r.Type)
	}
	return st, nil
}
