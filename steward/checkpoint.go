package steward

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
	// Witness is the value of the log's rollback witness (a counter
	// outside the state directory that only goes up) that this checkpoint
	// is bound to; absent when the log has no witness (PROFILE.md §8, "Rollback witness").
	Witness *uint64 `cbor:"witness,omitempty"`
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

// A Witness is a counter kept outside the log's state directory that only
// goes up (a TPM NV counter: package steward/witness). A log opened with
// one binds every checkpoint it seals to the counter's next value, so an
// older copy of the state directory, whose newest checkpoint is bound to a
// smaller value, is refused (PROFILE.md §8, "Rollback witness").
type Witness interface {
	// Read returns the counter's value; written is false for a counter
	// that was never advanced and so has no value yet.
	Read(ctx context.Context) (value uint64, written bool, err error)
	// Advance raises the counter to at least to (at least once if it was
	// never written) and returns its value.
	Advance(ctx context.Context, to uint64) (uint64, error)
	// String names the counter in messages (its index and device).
	String() string
}

// ErrRolledBack is wrapped when a log is older than its rollback witness:
// the state directory was replaced by an older copy.
var ErrRolledBack = errors.New("receipt log is older than its rollback witness")

// WitnessReport says what an open found comparing a log with its witness.
type WitnessReport struct {
	Name string
	// Value is the counter after the open; Written is false while no
	// checkpoint was ever bound to it.
	Value   uint64
	Written bool
	// Bound is the value the newest checkpoint is bound to (nil: none is).
	Bound *uint64
	// CaughtUp is set when the newest checkpoint was ahead of the counter
	// (a crash between sealing it and advancing the counter) and the open
	// advanced the counter to it.
	CaughtUp bool
}

// checkWitness compares the verified log's newest checkpoint latest with the
// witness w. Sealing writes a checkpoint bound to value v durably before it
// advances the counter to v, so a log may be ahead of its counter (a crash
// in between: caught up here) but never behind it: a log behind it is an
// older copy, refused with ErrRolledBack naming the counter and both values.
func checkWitness(ctx context.Context, w Witness, latest *SignedCheckpoint, records uint64) (*WitnessReport, error) {
	v, written, err := w.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("rollback witness: %w", err)
	}
	wr := &WitnessReport{Name: w.String(), Value: v, Written: written}
	var bound *uint64
	if latest != nil {
		bound = latest.Witness
	}
	wr.Bound = bound
	switch {
	case !written:
		// No checkpoint was ever bound to it: this log is adopted, and
		// its next checkpoint binds it.
		return wr, nil
	case bound == nil:
		what := "the log holds no checkpoint"
		if latest != nil {
			what = fmt.Sprintf("its newest checkpoint (%d receipts) is bound to none", latest.Count)
		}
		return nil, fmt.Errorf("%w: %s reads %d, but %s (%d receipts in the log): the state directory is older than the counter, its checkpoints file was removed or replaced, or it never ran with this counter; to adopt this state on purpose, configure a fresh counter index", ErrRolledBack, w, v, what, records)
	case *bound < v:
		return nil, fmt.Errorf("%w: %s reads %d, but the newest checkpoint (%d receipts, sealed at unix ms %d) is bound to %d: the state directory is an older copy (%d checkpoint(s) behind)", ErrRolledBack, w, v, latest.Count, latest.SealedMs, *bound, v-*bound)
	case *bound > v:
		got, err := w.Advance(ctx, *bound)
		if err != nil {
			return nil, fmt.Errorf("rollback witness: catching up to the newest checkpoint (%d): %w", *bound, err)
		}
		wr.Value, wr.CaughtUp = got, true
	}
	return wr, nil
}

// witnessNext is the value a checkpoint sealed now is bound to: one past
// both the counter and the newest checkpoint's binding.
func witnessNext(ctx context.Context, w Witness, latest *SignedCheckpoint) (uint64, bool, error) {
	v, written, err := w.Read(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("rollback witness: %w", err)
	}
	if latest != nil && latest.Witness != nil && *latest.Witness > v {
		v = *latest.Witness
	}
	return v + 1, written, nil
}

// checkpointsMissing refuses a log whose segments hold receipts while its
// checkpoints file is gone. The file is created with the first segment,
// before any receipt, so it can only be missing because it was removed:
// recreating it silently would hide a truncation behind the newest
// checkpoint. `meshctl log repair -apply` recreates it on purpose.
func checkpointsMissing(dir string, records uint64) error {
	if records == 0 {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(dir, checkpointsName)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("%w: %w: the checkpoints file is missing while the segments hold %d receipts: it was removed (or the state directory replaced), and a truncation behind its newest checkpoint would go unseen; run meshctl log repair -apply to recreate it on purpose", ErrDamaged, ErrCheckpoint, records)
}

// bindWitness sets c's witness binding before it is sealed. The counter is
// advanced after the checkpoint is durable (a crash in between leaves the
// log ahead of its counter, which the next open catches up), except for
// the first binding: a counter never written has no value until its first
// increment, so that increment comes first (advanced is then true). A
// crash in that one window, once in a counter's life, leaves a counter
// that no checkpoint is bound to, which the next open refuses.
func (l *Log) bindWitness(c *Checkpoint, latest *SignedCheckpoint) (advanced bool, err error) {
	if l.witness == nil {
		return false, nil
	}
	ctx := context.Background()
	next, written, err := witnessNext(ctx, l.witness, latest)
	if err != nil {
		return false, fmt.Errorf("receipt log: checkpoint: %w", err)
	}
	if !written {
		if next, err = l.witness.Advance(ctx, 0); err != nil {
			return false, fmt.Errorf("receipt log: checkpoint: first binding of the rollback witness: %w", err)
		}
		advanced = true
	}
	c.Witness = &next
	return advanced, nil
}
