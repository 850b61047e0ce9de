package steward

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"

	"meshd/wire"
)

// CheckpointProfile is the value of a checkpoint's mesh_checkpoint field.
const CheckpointProfile = "meshd-checkpoint/1"

// Checkpoint is a signed statement by the steward of where its receipt log
// stood: how many receipts it held, the content id of the last, and where
// that last receipt's frame lies. Opening a log trusts the newest valid
// checkpoint instead of re-verifying from genesis, and a verifier handed a
// checkpoint as its trust anchor can check the rest of a log whose older
// segments were archived.
type Checkpoint struct {
	Profile string `cbor:"mesh_checkpoint"`
	Steward string `cbor:"steward"`
	// Count is the number of receipts covered: sequences 0..Count-1.
	Count uint64 `cbor:"count"`
	// Head is the content id of the envelope at sequence Count-1.
	Head string `cbor:"head"`
	// Segment is the first sequence of the segment holding the head;
	// HeadOffset and End are the byte offsets of the head's frame and just
	// past it in that segment.
	Segment    uint64 `cbor:"segment"`
	HeadOffset uint64 `cbor:"head_offset"`
	End        uint64 `cbor:"end"`
	SealedMs   uint64 `cbor:"sealed_unix_ms"`
	// Ledger is an optional summary of the grant ledger at this point,
	// given by whoever runs the steward.
	Ledger *string `cbor:"ledger,omitempty"`
}

// SignedCheckpoint is a verified or freshly sealed checkpoint.
type SignedCheckpoint struct {
	Checkpoint
	HeadID   wire.ContentID
	Envelope []byte
	Key      ed25519.PublicKey
}

// ErrCheckpoint is wrapped when a checkpoint is malformed or does not match
// the log it describes.
var ErrCheckpoint = errors.New("checkpoint")

func (c *Checkpoint) check() (wire.ContentID, error) {
	if c.Profile != CheckpointProfile {
		return wire.ContentID{}, fmt.Errorf("%w: mesh_checkpoint is %q, want %q", ErrCheckpoint, c.Profile, CheckpointProfile)
	}
	if c.Count == 0 {
		return wire.ContentID{}, fmt.Errorf("%w: covers no receipts", ErrCheckpoint)
	}
	head, err := wire.ParseContentID(c.Head)
	if err != nil {
		return wire.ContentID{}, fmt.Errorf("%w: head: %v", ErrCheckpoint, err)
	}
	if c.Segment >= c.Count || c.HeadOffset >= c.End {
		return wire.ContentID{}, fmt.Errorf("%w: segment %d / offsets %d..%d inconsistent with count %d", ErrCheckpoint, c.Segment, c.HeadOffset, c.End, c.Count)
	}
	return head, nil
}

// sealCheckpoint signs c with k.
func sealCheckpoint(k *Key, c Checkpoint) (*SignedCheckpoint, error) {
	c.Profile, c.Steward = CheckpointProfile, k.ID()
	head, err := c.check()
	if err != nil {
		return nil, err
	}
	b, err := wire.EncMode().Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	env, err := Sign1(k, b)
	if err != nil {
		return nil, fmt.Errorf("seal checkpoint: %w", err)
	}
	return &SignedCheckpoint{Checkpoint: c, HeadID: head, Envelope: env, Key: k.Public()}, nil
}

// OpenCheckpoint verifies a checkpoint envelope: its signature (by trusted
// if non-nil), strict deterministic decoding and its field rules. It does
// not say whether the checkpoint matches a log; opening or verifying the
// log does.
func OpenCheckpoint(env []byte, trusted ed25519.PublicKey) (*SignedCheckpoint, error) {
	payload, pub, err := OpenTrusted(env, func(pub ed25519.PublicKey) error {
		if trusted != nil && !bytes.Equal(trusted, pub) {
			return fmt.Errorf("signed by %x, not by the trusted key %x", []byte(pub), []byte(trusted))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var c Checkpoint
	if err := wire.DecMode().Unmarshal(payload, &c); err != nil {
		return nil, fmt.Errorf("%w: decode: %v", ErrCheckpoint, err)
	}
	again, err := wire.EncMode().Marshal(&c)
	if err != nil || !bytes.Equal(again, payload) {
		return nil, fmt.Errorf("%w: not in deterministic CBOR form", ErrCheckpoint)
	}
	head, err := c.check()
	if err != nil {
		return nil, err
	}
	if c.Steward != hex.EncodeToString(pub) {
		return nil, fmt.Errorf("%w: steward %s does not match the signing kid", ErrCheckpoint, c.Steward)
	}
	return &SignedCheckpoint{Checkpoint: c, HeadID: head, Envelope: bytes.Clone(env), Key: pub}, nil
}
