package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/wire"
)

// The stream's defaults and the subjects and headers of its messages.
const (
	// DefaultStream is the JetStream stream that holds the fleet's
	// receipts and checkpoints.
	DefaultStream = "MESH_RECEIPTS"
	// DefaultDuplicates is the stream's de-duplication window: a message
	// id seen within it is dropped by the server. Replays beyond it are
	// made harmless by the verifier instead.
	DefaultDuplicates = 2 * time.Minute

	// ReceiptPrefix and CheckpointPrefix start the subjects; the steward
	// id (64 lower-case hex characters) is the last token.
	ReceiptPrefix    = "mesh.receipts."
	CheckpointPrefix = "mesh.checkpoints."

	// HeaderSeq is the receipt's sequence (for a checkpoint: the count it
	// covers), HeaderSteward the steward id. Both are hints for people and
	// tools; the verifier checks them against the signed content.
	HeaderSeq     = "Mesh-Seq"
	HeaderSteward = "Mesh-Steward"
)

// ReceiptSubject is the subject a steward's receipts are published to.
func ReceiptSubject(steward string) string { return ReceiptPrefix + steward }

// CheckpointSubject is the subject a steward's checkpoints are published to.
func CheckpointSubject(steward string) string { return CheckpointPrefix + steward }

// StreamSubjects are the subjects the fleet stream must capture.
var StreamSubjects = []string{ReceiptPrefix + ">", CheckpointPrefix + ">"}

// StreamConfig is the stream a fleet needs: both subject trees, file
// storage (receipts are evidence; memory storage would lose them on a
// restart) and a duplicate window.
func StreamConfig(name string, duplicates time.Duration) jetstream.StreamConfig {
	if name == "" {
		name = DefaultStream
	}
	if duplicates <= 0 {
		duplicates = DefaultDuplicates
	}
	return jetstream.StreamConfig{
		Name:        name,
		Description: "meshd receipts and checkpoints, one subject per steward",
		Subjects:    slices.Clone(StreamSubjects),
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  duplicates,
	}
}

// EnsureStream creates the stream described by want, or, when it exists,
// adds whatever it lacks (the fleet subjects, a duplicate window at least
// want's) while keeping everything else an operator set: replicas,
// retention, limits, placement.
func EnsureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another board created it in between.
			return EnsureStream(ctx, js, want)
		}
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	cfg := s.CachedInfo().Config
	changed := false
	for _, subj := range want.Subjects {
		if !slices.Contains(cfg.Subjects, subj) {
			cfg.Subjects = append(cfg.Subjects, subj)
			changed = true
		}
	}
	if cfg.Duplicates < want.Duplicates && (cfg.MaxAge == 0 || want.Duplicates <= cfg.MaxAge) {
		cfg.Duplicates = want.Duplicates
		changed = true
	}
	if !changed {
		return s, nil
	}
	s, err = js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("update stream %s (subjects %v, duplicates %v): %w", want.Name, cfg.Subjects, cfg.Duplicates, err)
	}
	return s, nil
}

// ReceiptMsg is the message for the receipt at seq: its envelope, its
// content id as the message id (so a republish is a duplicate to the
// server), and the hint headers.
func ReceiptMsg(steward string, seq uint64, env []byte) *nats.Msg {
	m := nats.NewMsg("")
	setMsg(m, ReceiptSubject(steward), steward, seq, env)
	return m
}

// CheckpointMsg is the message for a checkpoint covering count receipts.
func CheckpointMsg(steward string, count uint64, env []byte) *nats.Msg {
	m := nats.NewMsg("")
	setMsg(m, CheckpointSubject(steward), steward, count, env)
	return m
}

// setMsg makes m the message for env at seq on subject, reusing m's
// header map and value slices, so that a publisher sending message after
// message through one nats.Msg allocates only the values.
func setMsg(m *nats.Msg, subject, steward string, seq uint64, env []byte) {
	m.Subject = subject
	m.Data = env
	setHeader(m.Header, jetstream.MsgIDHeader, wire.ContentOf(env).String())
	setHeader(m.Header, HeaderSeq, strconv.FormatUint(seq, 10))
	setHeader(m.Header, HeaderSteward, steward)
}

// setHeader sets key to the single value v like Header.Set, in place when
// key already has one value.
func setHeader(h nats.Header, key, v string) {
	if vs := h[key]; len(vs) == 1 {
		vs[0] = v
		return
	}
	h[key] = []string{v}
}

// splitSubject returns which tree a subject is in and its steward token.
func splitSubject(subject string) (checkpoint bool, steward string, ok bool) {
	switch {
	case strings.HasPrefix(subject, ReceiptPrefix):
		steward = subject[len(ReceiptPrefix):]
	case strings.HasPrefix(subject, CheckpointPrefix):
		checkpoint, steward = true, subject[len(CheckpointPrefix):]
	default:
		return false, "", false
	}
	// A sharded layout (mesh.receipts.<shard>.<steward>) keeps the
	// steward as the last token.
	if i := strings.LastIndexByte(steward, '.'); i >= 0 {
		steward = steward[i+1:]
	}
	return checkpoint, steward, steward != ""
}
