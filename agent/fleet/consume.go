package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Consumer defaults.
const (
	DefaultDurable   = "meshctl-verify"
	DefaultFetch     = 500
	DefaultFetchWait = time.Second
)

// ConsumeConfig configures Consume.
type ConsumeConfig struct {
	// Stream is the fleet stream (DefaultStream when empty).
	Stream string
	// Durable names the pull consumer (DefaultDurable when empty).
	Durable string
	// FilterSubjects, if set, limits the consumer to those subjects: a
	// shard's (ShardFilters).
	FilterSubjects []string
	// Follow keeps consuming until ctx ends; otherwise Consume returns
	// once it has verified everything the stream held when it looked.
	Follow bool
	// Fetch is how many messages are fetched at once (DefaultFetch when
	// zero); FetchWait how long a fetch waits for them with Follow
	// (DefaultFetchWait).
	Fetch     int
	FetchWait time.Duration
	// Save, if set, runs after each batch is verified and before it is
	// acknowledged: it persists the verifier's state, so that a crash
	// between the two redelivers (harmless duplicates) rather than loses.
	Save func() error
	// OnBatch, if set, runs after each batch (to print new problems).
	OnBatch func()
	// Logger receives retries; nil discards.
	Logger *slog.Logger
}

// Consume feeds v the fleet stream through a durable pull consumer. The
// consumer is positioned from the verifier's state: if the server's
// consumer is missing, or acknowledged up to a different message than the
// state last saved, it is re-created to deliver from just after the
// state's position, so that the state file, not the server, decides what
// has been verified.
func Consume(ctx context.Context, js jetstream.JetStream, v *Verifier, cfg ConsumeConfig) error {
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if cfg.Durable == "" {
		cfg.Durable = DefaultDurable
	}
	if cfg.Fetch <= 0 {
		cfg.Fetch = DefaultFetch
	}
	if cfg.FetchWait <= 0 {
		cfg.FetchWait = DefaultFetchWait
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cons, delivered, err := position(ctx, js, cfg, v.Position())
	if err != nil {
		return err
	}
	// A run to the end reads to the last message the stream held when it
	// began, by the stream's own count: a consumer that has not yet
	// counted a message stored a moment ago answers an empty fetch and
	// NumPending 0 (seen under CPU load), which alone would end the run
	// one message short.
	var end uint64
	if !cfg.Follow {
		if end, err = streamEnd(ctx, js, cfg.Stream, cfg.FilterSubjects); err != nil {
			return err
		}
	}
	failures, idle := 0, 0
	for ctx.Err() == nil {
		n, pending, err := consumeBatch(ctx, cons, v, cfg, &delivered)
		if errors.Is(err, errDeliveryHole) {
			// Messages were delivered to a fetch that had already given
			// up; acknowledging past them would skip them for good. The
			// consumer starts again after the last message verified.
			log.Warn("fleet: "+err.Error()+"; repositioning the consumer", "position", v.Position())
			if cons, delivered, err = position(ctx, js, cfg, v.Position()); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			if !cfg.Follow && failures > 5 {
				return fmt.Errorf("consume stream %s: %w", cfg.Stream, err)
			}
			wait := backoffDelay(failures, 100*time.Millisecond, 5*time.Second)
			log.Warn("fleet: consume failed", "err", err, "retry_in", wait)
			if !sleep(ctx, wait) {
				break
			}
			continue
		}
		failures = 0
		if cfg.OnBatch != nil && n > 0 {
			cfg.OnBatch()
		}
		if cfg.Follow {
			continue
		}
		reached := v.Position() >= end
		if n > 0 && pending == 0 && reached {
			return nil
		}
		if n > 0 {
			idle = 0
			continue
		}
		// Nothing came: ask whether anything is left.
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			if reached {
				return nil
			}
			// The stream held messages past the verifier's position when
			// the run began, and the consumer has none to give yet. Ask
			// again shortly; give up after endPatience (the messages were
			// removed by the stream's limits meanwhile).
			if idle++; time.Duration(idle)*endPoll >= endPatience {
				log.Warn("fleet: the stream's last message never arrived", "position", v.Position(), "end", end)
				return nil
			}
			if !sleep(ctx, endPoll) {
				break
			}
		}
	}
	return nil
}

// endPoll and endPatience pace a run to the end that has not reached the
// stream's last message while its consumer says nothing is pending.
const (
	endPoll     = 20 * time.Millisecond
	endPatience = 5 * time.Second
)

// streamEnd is the stream's last sequence now, or the last of the
// messages on filters when there are any.
func streamEnd(ctx context.Context, js jetstream.JetStream, stream string, filters []string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("stream %s not found: no board has published yet, or -stream is wrong", stream)
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	if len(filters) > 0 {
		end := uint64(0)
		for _, f := range filters {
			m, err := s.GetLastMsgForSubject(ctx, f)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
			case err != nil:
				return 0, fmt.Errorf("stream %s: last message on %s: %w", stream, f, err)
			default:
				end = max(end, m.Sequence)
			}
		}
		return end, nil
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	return info.State.LastSeq, nil
}

// errDeliveryHole: the consumer's delivery sequence skipped, so messages
// went to a fetch that no longer listened.
var errDeliveryHole = errors.New("consumer delivered messages this run never received")

// position returns the durable consumer, re-created where it disagrees
// with the verifier's position (see Consume), and the consumer sequence it
// has delivered up to.
func position(ctx context.Context, js jetstream.JetStream, cfg ConsumeConfig, pos uint64) (jetstream.Consumer, uint64, error) {
	cc := jetstream.ConsumerConfig{
		Durable:        cfg.Durable,
		Description:    "meshctl fleet verify",
		AckPolicy:      jetstream.AckAllPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  4 * cfg.Fetch,
		FilterSubjects: cfg.FilterSubjects,
	}
	if pos > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos+1
	}
	cons, err := js.Consumer(ctx, cfg.Stream, cfg.Durable)
	switch {
	case err == nil:
		ci := cons.CachedInfo()
		if ci.AckFloor.Stream == pos && ci.Delivered.Stream == pos && slices.Equal(ci.Config.FilterSubjects, cfg.FilterSubjects) {
			return cons, ci.Delivered.Consumer, nil
		}
		// The state file and the consumer disagree (a new or restored
		// state file, or a run that stopped between saving and
		// acknowledging): the state file wins.
		if err := js.DeleteConsumer(ctx, cfg.Stream, cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, 0, fmt.Errorf("reposition consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, 0, fmt.Errorf("stream %s not found: no board has published yet, or -stream is wrong", cfg.Stream)
	default:
		return nil, 0, fmt.Errorf("consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
	}
	cons, err = js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return nil, 0, fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, cfg.Stream, err)
	}
	return cons, 0, nil
}

// consumeBatch fetches, verifies, saves and acknowledges one batch. It
// returns how many messages came and how many the server had left after
// the last. delivered is the consumer sequence received so far: a fetch
// that expires under load leaves the messages the server sent it
// undelivered to anyone, and the next fetch's sequence jumps. Only the
// messages before such a hole are verified and acknowledged (all below the
// acknowledged one count as acknowledged), and errDeliveryHole is returned.
func consumeBatch(ctx context.Context, cons jetstream.Consumer, v *Verifier, cfg ConsumeConfig, delivered *uint64) (int, uint64, error) {
	var (
		batch jetstream.MessageBatch
		err   error
	)
	if cfg.Follow {
		batch, err = cons.Fetch(cfg.Fetch, jetstream.FetchMaxWait(cfg.FetchWait))
	} else {
		// A run to the end takes what is there: waiting for a full batch
		// would only add the wait to every run.
		batch, err = cons.FetchNoWait(cfg.Fetch)
	}
	if err != nil {
		return 0, 0, err
	}
	var (
		msgs    []Message
		last    jetstream.Msg
		pending uint64
		hole    error
	)
	for m := range batch.Messages() {
		if hole != nil {
			continue // drained, not used: redelivered after the reposition
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, 0, fmt.Errorf("message on %s: %w", m.Subject(), err)
		}
		if meta.Sequence.Consumer != *delivered+1 {
			hole = fmt.Errorf("%w (delivery %d after %d, stream message %d)", errDeliveryHole, meta.Sequence.Consumer, *delivered, meta.Sequence.Stream)
			continue
		}
		*delivered = meta.Sequence.Consumer
		msgs = append(msgs, Message{Subject: m.Subject(), Header: m.Headers(), Data: m.Data(), StreamSeq: meta.Sequence.Stream})
		last, pending = m, meta.NumPending
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		// What did arrive is still verified and acknowledged below, so
		// that it is not fetched twice; the error shows on the next fetch.
		if len(msgs) == 0 {
			return 0, 0, err
		}
	}
	if len(msgs) == 0 {
		return 0, 0, hole
	}
	v.FeedBatch(msgs)
	if cfg.Save != nil {
		if err := cfg.Save(); err != nil {
			return 0, 0, err
		}
	}
	// AckAll: acknowledging the last acknowledges the batch.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := last.DoubleAck(actx); err != nil {
		return len(msgs), pending, fmt.Errorf("acknowledge stream message %d: %w", msgs[len(msgs)-1].StreamSeq, err)
	}
	return len(msgs), pending, hole
}
