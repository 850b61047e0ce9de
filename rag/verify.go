package rag

import (
	"errors"
	"fmt"
	"strings"
)

// The reasons VerifyCorpus refuses a description, as macula_rag:verify_corpus/3
// names them.
const (
	// ReasonMalformedDescription: the description does not hold what the hash
	// covers, well typed, or its signature is not bytes.
	ReasonMalformedDescription = "malformed_description"
	// ReasonCorpusHashMismatch: the described repos, model and dim do not
	// hash to the described corpus_hash.
	ReasonCorpusHashMismatch = "corpus_hash_mismatch"
	// ReasonSignature: the signed object was refused; SignatureReason says
	// why (malformed, signature_invalid or alg_mismatch).
	ReasonSignature = "signature"
	// ReasonSignerNotProvider: the key the signature verified with derives
	// another node id than the provider the caller called.
	ReasonSignerNotProvider = "signer_not_provider"
	// ReasonSignatureHashMismatch: the signature is the provider's, over
	// another corpus hash than the one recomputed.
	ReasonSignatureHashMismatch = "signature_hash_mismatch"
)

// Sentinels for errors.Is on a *Refusal, one per reason.
var (
	// ErrMalformedDescription matches a malformed_description refusal.
	ErrMalformedDescription = errors.New("rag: " + ReasonMalformedDescription)
	// ErrCorpusHashMismatch matches a corpus_hash_mismatch refusal.
	ErrCorpusHashMismatch = errors.New("rag: " + ReasonCorpusHashMismatch)
	// ErrSignatureRefused matches a signature refusal; errors.Is also
	// matches the signed-object sentinel (ErrObjectMalformed, ...).
	ErrSignatureRefused = errors.New("rag: " + ReasonSignature)
	// ErrSignerNotProvider matches a signer_not_provider refusal.
	ErrSignerNotProvider = errors.New("rag: " + ReasonSignerNotProvider)
	// ErrSignatureHashMismatch matches a signature_hash_mismatch refusal.
	ErrSignatureHashMismatch = errors.New("rag: " + ReasonSignatureHashMismatch)
)

var reasonSentinels = map[string]error{
	ReasonMalformedDescription:  ErrMalformedDescription,
	ReasonCorpusHashMismatch:    ErrCorpusHashMismatch,
	ReasonSignature:             ErrSignatureRefused,
	ReasonSignerNotProvider:     ErrSignerNotProvider,
	ReasonSignatureHashMismatch: ErrSignatureHashMismatch,
}

// Refusal is VerifyCorpus's (and ParseDescription's) refusal of a
// description, with the contract's reason.
type Refusal struct {
	reason string
	err    error // the detail: a signed-object refusal for ReasonSignature
}

// Reason is the contract's name for the refusal: one of the Reason*
// constants.
func (r *Refusal) Reason() string { return r.reason }

// SignatureReason is, for a signature refusal, macula's reason the object was
// refused ("malformed", "signature_invalid" or "alg_mismatch"); otherwise "".
func (r *Refusal) SignatureReason() string {
	if r.reason != ReasonSignature {
		return ""
	}
	return ObjectRefusalReason(r.err)
}

// Error says the reason, the inner reason for a signature refusal, and the
// detail.
func (r *Refusal) Error() string {
	reason := r.reason
	if inner := r.SignatureReason(); inner != "" {
		reason += " (" + inner + ")"
	}
	if r.err == nil {
		return "rag: verify corpus: " + reason
	}
	return "rag: verify corpus: " + reason + ": " + r.err.Error()
}

// Unwrap gives errors.Is and errors.As both the reason's sentinel and the
// detail.
func (r *Refusal) Unwrap() []error {
	if r.err == nil {
		return []error{reasonSentinels[r.reason]}
	}
	return []error{reasonSentinels[r.reason], r.err}
}

func refuse(reason string, err error) *Refusal { return &Refusal{reason: reason, err: err} }

func malformedDescription(format string, args ...any) error {
	return refuse(ReasonMalformedDescription, fmt.Errorf(format, args...))
}

// Result is what VerifyCorpus concludes about a well-formed description:
// SignedBy(P) or Unsigned.
type Result struct {
	signer string
}

// Unsigned is a well-formed corpus that carries no signature. A caller that
// requires a signature must treat it as not signed.
var Unsigned = Result{}

// SignedBy is the result for a corpus signed by the provider P (a lowercase
// hex node id), for comparison: res == SignedBy(p).
func SignedBy(provider string) Result { return Result{signer: provider} }

// Signed reports whether the corpus counts as signed.
func (r Result) Signed() bool { return r.signer != "" }

// Signer is the node id that signed, "" when unsigned.
func (r Result) Signer() string { return r.signer }

// String is "signed <node id>" or "unsigned".
func (r Result) String() string {
	if r.signer == "" {
		return "unsigned"
	}
	return "signed " + r.signer
}

// VerifyCorpus is exactly checks 2 to 5 of the contract, for a description
// received from provider, a hex node id the caller called itself with
// macula:call/6 and #{provider => P}, P taken from macula:providers/3 (check
// 1, which is the caller's: a caller that does not know who answered must
// treat the corpus as unsigned and not call this with a guess), under the
// caller's profile:
//
//  2. the described repos, model and dim hash to the described corpus_hash;
//  3. the signature, when present, verifies under Label and the profile;
//  4. the node id derived from the key that verification returns is provider;
//  5. the signed corpus_hash is the one recomputed.
//
// It returns SignedBy(provider), Unsigned for a well-formed corpus with no
// signature, or a *Refusal whose Reason is malformed_description,
// corpus_hash_mismatch, signature (SignatureReason says which),
// signer_not_provider or signature_hash_mismatch. d.SignedBy is never read:
// naming provider there proves nothing, and leaving it out changes nothing.
// Only model, dim and each repo's id, url, branch and commit are covered; the
// rest of the description is not vouched for by a SignedBy result.
//
// provider is compared case-insensitively. An unknown profile is
// ErrUnknownProfile, not a refusal.
func VerifyCorpus(d Description, provider string, profile string) (Result, error) {
	if _, err := profileOf(profile); err != nil {
		return Result{}, fmt.Errorf("rag: verify corpus: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Result{}, err
	}
	recomputed := d.Hash()
	if recomputed != d.CorpusHash {
		return Result{}, refuse(ReasonCorpusHashMismatch,
			fmt.Errorf("the description hashes to %s, it claims %q", recomputed, d.CorpusHash))
	}
	if d.Signature == nil {
		return Unsigned, nil
	}
	signed, key, err := Open(profile, d.Signature)
	if err != nil {
		return Result{}, refuse(ReasonSignature, err)
	}
	// The node id comes from the key that verified, never from signed_by: a
	// copy of another operator's signature verifies, but under their id.
	provider = strings.ToLower(provider)
	if signer := NodeID(profile, key); signer != provider {
		return Result{}, refuse(ReasonSignerNotProvider,
			fmt.Errorf("signed by %s, the provider called is %q", signer, provider))
	}
	if signed != recomputed {
		return Result{}, refuse(ReasonSignatureHashMismatch,
			fmt.Errorf("the signature vouches for %q, the description hashes to %s", signed, recomputed))
	}
	return SignedBy(provider), nil
}
