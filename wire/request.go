package wire

import (
	"bytes"
	"errors"
	"fmt"
)

// ServeRequest is the content-addressed request of mesh/1 §3.1. The prompt
// itself never appears here, only its content id.
type ServeRequest struct {
	PromptHash     ContentID
	PromptTokens   uint32
	MaxTokens      uint32
	FidelityFloor  Fidelity
	JouleCeilingUJ uint64
}

// requestWire is the sealed identity of a request. Pointers make a missing
// field detectable on decode, which a conforming request must refuse.
type requestWire struct {
	PromptHash     *[]byte `cbor:"prompt_hash"`
	PromptTokens   *uint32 `cbor:"prompt_tokens"`
	MaxTokens      *uint32 `cbor:"max_tokens"`
	FidelityFloor  *uint64 `cbor:"fidelity_floor"`
	JouleCeilingUJ *uint64 `cbor:"joule_ceiling_uj"`
}

// ErrBadRequest is wrapped by every request validation failure.
var ErrBadRequest = errors.New("invalid serve request")

// Validate checks the §3.1 rules a request must satisfy before anything is
// done with it.
func (r ServeRequest) Validate() error {
	if r.PromptHash.IsZero() {
		return fmt.Errorf("%w: prompt_hash is missing", ErrBadRequest)
	}
	if !r.FidelityFloor.Valid() {
		return fmt.Errorf("%w: fidelity_floor %d is outside F0..F4", ErrBadRequest, r.FidelityFloor)
	}
	if r.JouleCeilingUJ == 0 {
		return fmt.Errorf("%w: joule_ceiling_uj is missing (a zero ceiling admits nothing)", ErrBadRequest)
	}
	if r.MaxTokens == 0 {
		return fmt.Errorf("%w: max_tokens is zero", ErrBadRequest)
	}
	return nil
}

// MarshalCBOR encodes the request deterministically.
func (r ServeRequest) MarshalCBOR() ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	h := r.PromptHash[:]
	f := uint64(r.FidelityFloor)
	return EncMode().Marshal(requestWire{&h, &r.PromptTokens, &r.MaxTokens, &f, &r.JouleCeilingUJ})
}

// UnmarshalCBOR decodes and validates a request, naming the first missing
// or malformed field.
func (r *ServeRequest) UnmarshalCBOR(b []byte) error {
	var w requestWire
	if err := DecMode().Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	switch {
	case w.PromptHash == nil:
		return fmt.Errorf("%w: prompt_hash is missing", ErrBadRequest)
	case len(*w.PromptHash) != 32:
		return fmt.Errorf("%w: prompt_hash must be 32 bytes, got %d", ErrBadRequest, len(*w.PromptHash))
	case w.PromptTokens == nil:
		return fmt.Errorf("%w: prompt_tokens is missing", ErrBadRequest)
	case w.MaxTokens == nil:
		return fmt.Errorf("%w: max_tokens is missing", ErrBadRequest)
	case w.FidelityFloor == nil:
		return fmt.Errorf("%w: fidelity_floor is missing", ErrBadRequest)
	case w.JouleCeilingUJ == nil:
		return fmt.Errorf("%w: joule_ceiling_uj is missing", ErrBadRequest)
	}
	fl, err := FidelityFromUint(*w.FidelityFloor)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	out := ServeRequest{PromptTokens: *w.PromptTokens, MaxTokens: *w.MaxTokens, FidelityFloor: fl, JouleCeilingUJ: *w.JouleCeilingUJ}
	copy(out.PromptHash[:], *w.PromptHash)
	if err := out.Validate(); err != nil {
		return err
	}
	// The request id is the hash of the deterministic encoding, so bytes in
	// any other form (unsorted keys, padded integers) would be checked under
	// one id and hashed by a receiver under another.
	again, err := out.MarshalCBOR()
	if err != nil {
		return err
	}
	if !bytes.Equal(again, b) {
		return fmt.Errorf("%w: %w: the request is not its own deterministic re-encoding", ErrBadRequest, ErrNotDeterministic)
	}
	*r = out
	return nil
}

// ID is the request's identity: the content id of its deterministic CBOR.
func (r ServeRequest) ID() (ContentID, error) {
	b, err := r.MarshalCBOR()
	if err != nil {
		return ContentID{}, err
	}
	return ContentOf(b), nil
}
