package fleet

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
	"meshd/wire"
)

// The fleet stream is a node's rollback witness where a fleet exists: the
// receipts it acknowledged live outside the node's state directory, so an
// older copy of that directory holds fewer receipts than the stream has
// (PROFILE.md §8, "Rollback witness").

// StreamHead is the newest receipt of one steward that the stream holds.
type StreamHead struct {
	Sequence  uint64
	ID        wire.ContentID
	StreamSeq uint64
}

// NewestReceipt returns the newest receipt the stream holds for the
// steward whose key is pub, checked under that key (a message that does not
// verify is an error, never a reason to refuse a node). ok is false when the
// stream, or the steward's subject in it, is empty or absent.
func NewestReceipt(ctx context.Context, js jetstream.JetStream, stream string, pub ed25519.PublicKey) (head StreamHead, ok bool, err error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return StreamHead{}, false, nil
	}
	if err != nil {
		return StreamHead{}, false, fmt.Errorf("fleet stream %s: %w", stream, err)
	}
	id := fmt.Sprintf("%x", []byte(pub))
	m, err := s.GetLastMsgForSubject(ctx, ReceiptSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// A sharded stream (ShardedStreamConfig) stores the subject as
		// mesh.receipts.<shard>.<steward>.
		m, err = s.GetLastMsgForSubject(ctx, ReceiptPrefix+"*."+id)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return StreamHead{}, false, nil
	}
	if err != nil {
		return StreamHead{}, false, fmt.Errorf("fleet stream %s: newest receipt of %s: %w", stream, id, err)
	}
	o, err := steward.OpenEnvelope(m.Data, pub)
	if err != nil {
		return StreamHead{}, false, fmt.Errorf("fleet stream %s: its newest receipt of %s (stream sequence %d) does not verify: %w", stream, id, m.Sequence, err)
	}
	return StreamHead{Sequence: o.Receipt.Sequence, ID: o.ID, StreamSeq: m.Sequence}, true, nil
}

// ErrRolledBack is wrapped when the local log is older than, or diverges
// from, what the fleet stream acknowledged of it.
var ErrRolledBack = errors.New("receipt log is older than the fleet stream's copy")

// CheckAgainstStream compares the local log l with the stream's newest
// receipt of its steward: the stream holding a receipt at a sequence the log
// has not reached means the log is an older copy; a different receipt at
// that sequence means it was replaced. Both are ErrRolledBack.
func CheckAgainstStream(ctx context.Context, js jetstream.JetStream, stream string, l *steward.Log, pub ed25519.PublicKey) (*StreamHead, error) {
	head, ok, err := NewestReceipt(ctx, js, stream, pub)
	if err != nil || !ok {
		return nil, err
	}
	n := l.Durable()
	if head.Sequence >= n {
		return &head, fmt.Errorf("%w: the fleet stream %s holds receipt %d (%s, stream sequence %d) of steward %x, but the local log holds only %d receipts: the state directory is an older copy", ErrRolledBack, stream, head.Sequence, head.ID, head.StreamSeq, []byte(pub), n)
	}
	envs, err := l.Range(ctx, head.Sequence, 1)
	if err != nil || len(envs) != 1 {
		return &head, fmt.Errorf("read local receipt %d to compare with the fleet stream: %v", head.Sequence, err)
	}
	if id := wire.ContentOf(envs[0]); id != head.ID {
		return &head, fmt.Errorf("%w: the fleet stream %s holds %s as receipt %d of steward %x, the local log %s: the log was replaced by another", ErrRolledBack, stream, head.ID, head.Sequence, []byte(pub), id)
	}
	return &head, nil
}

// CheckRollback dials the fleet, compares the log with the stream
// (CheckAgainstStream) and hangs up. A fleet that cannot be reached before
// ctx ends is not a verdict: the error then does not wrap ErrRolledBack.
func CheckRollback(ctx context.Context, o ConnOptions, stream string, l *steward.Log, pub ed25519.PublicKey, log *slog.Logger) (*StreamHead, error) {
	if stream == "" {
		stream = DefaultStream
	}
	nc, err := Dial(ctx, o, log, 100*time.Millisecond, time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return CheckAgainstStream(ctx, js, stream, l, pub)
}
