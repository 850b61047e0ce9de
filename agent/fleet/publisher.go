package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
)

// Publisher defaults.
const (
	DefaultBatch           = 128
	DefaultCheckpointEvery = 1000
	DefaultPoll            = 2 * time.Second
	DefaultAckTimeout      = 5 * time.Second
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 30 * time.Second
	DefaultLinger          = 2 * time.Millisecond
	DefaultMaxLinger       = 25 * time.Millisecond
)

// lingerTarget is the batch a lingering publisher aims at: below it the
// linger doubles (up to MaxLinger), at or above it halves (down to
// Linger). A batch costs the node wake-ups of the publisher and of the
// client's reader and flusher whatever it holds, so with serves a
// millisecond apart a 2ms linger (two or three receipts a batch) spent
// tens of microseconds of CPU per receipt.
const lingerTarget = 32

// PublisherConfig configures a Publisher. Only URL (in ConnOptions) and
// CursorPath are required.
type PublisherConfig struct {
	ConnOptions
	// Stream is the JetStream stream (DefaultStream when empty).
	Stream string
	// Duplicates is the duplicate window the stream is created with
	// (DefaultDuplicates when zero; at least 100ms).
	Duplicates time.Duration
	// NoStreamSetup leaves the stream to the operator: for accounts that
	// may publish but not manage streams, and for sharded layouts where the
	// server maps the subject into one of several streams (then the
	// publisher does not insist on Stream as the destination either).
	NoStreamSetup bool
	// CursorPath is the file holding the next sequence to publish. It is
	// written only after the server acknowledged, so it never runs ahead
	// of what the stream holds, and in place into one of two checksummed
	// slots, so that a torn write leaves the other.
	CursorPath string
	// Batch is how many receipts are read and published at once (at
	// most; DefaultBatch when zero). A crash can republish at most one
	// batch, so it also bounds the replay the verifier must recognise:
	// keep it below the verifier's Window.
	Batch int
	// CheckpointEvery is how many published receipts apart the newest
	// checkpoint is published (DefaultCheckpointEvery when zero; negative:
	// never). A checkpoint is also published each time the publisher
	// catches up after being behind.
	CheckpointEvery int
	// Poll is how often the log is looked at without a Notify
	// (DefaultPoll when zero).
	Poll time.Duration
	// AckTimeout bounds the wait for the server's acknowledgement
	// (DefaultAckTimeout when zero).
	AckTimeout time.Duration
	// Linger is how long the publisher waits after a Notify before it
	// reads the log, so that the receipts of a burst of serves go out in
	// one batch (one read, one wait for acknowledgements, one cursor
	// write) instead of one each, taking that work off the serves' cores
	// (DefaultLinger when zero; negative: none).
	Linger time.Duration
	// MaxLinger is how far the linger grows while batches come out small
	// (under 32 receipts), so that serves too sparse to fill a batch in
	// Linger still share one: the linger doubles after each small batch
	// and halves after each full one. It bounds how long a durable
	// receipt waits before it is sent: a node serving steadily publishes
	// its receipts up to MaxLinger late, which is what buys the smaller
	// per-receipt cost (DefaultMaxLinger when zero; below Linger: Linger).
	MaxLinger time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential wait
	// between reconnects and between failed publishes.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives state changes; it is wrapped so that the
	// connection's secrets never reach it. Nil discards.
	Logger *slog.Logger
}

// Validate reports what in c can never work, so that a node can refuse its
// configuration at start rather than learn it from Run's error later.
func (c PublisherConfig) Validate() error {
	if c.CursorPath == "" {
		return errors.New("fleet publisher: no cursor path: the publish position must be persisted")
	}
	if strings.TrimSpace(c.URL) == "" {
		return errors.New("fleet publisher: nats: no server URL")
	}
	if _, err := c.options(slog.New(slog.DiscardHandler), 0, 0); err != nil {
		return fmt.Errorf("fleet publisher: %w", err)
	}
	return nil
}

func (c *PublisherConfig) defaults() {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Duplicates == 0 {
		c.Duplicates = DefaultDuplicates
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = DefaultCheckpointEvery
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.MaxLinger == 0 {
		c.MaxLinger = DefaultMaxLinger
	}
	if c.MaxLinger < c.Linger {
		c.MaxLinger = c.Linger
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
}

// Publisher publishes one steward's receipt log to JetStream. The log is
// the outbox: nothing is queued in memory that is not also in the log, so
// a publisher that dies is replaced by one started on the same log and
// cursor file.
type Publisher struct {
	rlog    *steward.Log
	steward string
	cfg     PublisherConfig
	log     *slog.Logger
	notify  chan struct{}

	nc        atomic.Pointer[nats.Conn]
	next      atomic.Uint64 // next sequence to publish, as acknowledged
	saved     atomic.Uint64 // next sequence in the cursor file
	published atomic.Uint64 // checkpoint count last published

	// afterAck, when set (by tests), runs after the server acknowledged a
	// batch ending before next and before the cursor file is written: the
	// window in which a crash makes the next run republish.
	afterAck func(next uint64)
}

// NewPublisher returns a publisher of log's receipts under steward (the
// steward's hex id, which names the subjects). Run starts it.
func NewPublisher(log *steward.Log, steward string, cfg PublisherConfig) *Publisher {
	cfg.defaults()
	if cfg.Name == "" {
		cfg.Name = "meshd " + steward
	}
	return &Publisher{
		rlog:    log,
		steward: steward,
		cfg:     cfg,
		log:     Scrub(cfg.Logger, cfg.secrets()...).With("steward", steward),
		notify:  make(chan struct{}, 1),
	}
}

// Notify tells the publisher a receipt was sealed. It never blocks: a
// pending wake-up already covers this one.
func (p *Publisher) Notify() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// Status is a publisher's progress.
type Status struct {
	// Connected says whether a server connection is up.
	Connected bool
	// Next is the next sequence to publish: every receipt below it has
	// been acknowledged by the server.
	Next uint64
	// Durable is how many receipts the log holds durably.
	Durable uint64
	// Checkpoint is the count covered by the newest checkpoint published.
	Checkpoint uint64
}

// Status reports the publisher's progress; Durable-Next is the backlog.
func (p *Publisher) Status() Status {
	nc := p.nc.Load()
	return Status{
		Connected:  nc != nil && nc.IsConnected(),
		Next:       p.next.Load(),
		Durable:    p.rlog.Durable(),
		Checkpoint: p.published.Load(),
	}
}

// state is what the publisher last logged about its progress, so that a
// line is written on each change and not on every batch.
type state int

const (
	stateStarting state = iota
	stateBehind
	stateCaughtUp
)

// Run publishes until ctx ends, then returns nil. It returns an error only
// for a configuration that can never work (no cursor path, unusable TLS or
// credentials options); outages and refusals are retried with backoff.
// Call it once per Publisher, and run one publisher per cursor file.
func (p *Publisher) Run(ctx context.Context) error {
	if p.cfg.CursorPath == "" {
		return errors.New("fleet publisher: no cursor path: the publish position must be persisted")
	}
	next := p.startAt()
	p.next.Store(next)
	p.saved.Store(next)

	nc, err := Dial(ctx, p.cfg.ConnOptions, p.log, p.cfg.MinBackoff, p.cfg.MaxBackoff)
	if err != nil {
		return fmt.Errorf("fleet publisher: %w", err)
	}
	defer nc.Close()
	p.nc.Store(nc)
	up := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(up)
	// The JetStream API is used to set the stream up; messages go
	// through the publisher's own publish path.
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("fleet publisher: %w", err)
	}
	snd, err := newSender(nc, p.cfg.Batch, p.cfg.AckTimeout)
	if err != nil {
		return fmt.Errorf("fleet publisher: %w", err)
	}
	defer snd.close()

	var (
		streamReady = p.cfg.NoStreamSetup
		failures    int
		st          = stateStarting
		since       uint64 // receipts published since a checkpoint was last taken
		pendingCP   *steward.SignedCheckpoint
		lastErr     error
		poll        = time.NewTicker(p.cfg.Poll)
		// The cursor is written once a batch's worth of receipts or
		// cursorEvery has passed since it was last written, and when Run
		// returns, not after every batch: serves a millisecond apart
		// would otherwise pay a file replacement per receipt. A crash
		// republishes at most what was not saved: under 2×Batch receipts
		// (the verifier's Window) and under cursorEvery old (well inside
		// the server's duplicate window).
		unsaved int
		saved   = time.Now()
		// drained says the last batch held every receipt durable when
		// it was read. Receipts sealed while its acknowledgements were
		// awaited then wait for their notify and a linger like any
		// other, instead of going out at once in a batch of their own:
		// with serves a millisecond apart that halves the batches.
		drained bool
		// linger is the wait after a notify now; lingered says the
		// batch about to be read followed one, and so tells how many
		// receipts a linger of that length gathers.
		linger   = p.cfg.Linger
		lingered bool
	)
	defer poll.Stop()
	// The cursor file stays open while publishing: each save is one
	// write in place.
	var cf *cursorFile
	defer func() {
		if cf != nil {
			cf.close()
		}
	}()
	saveCursor := func() {
		c := cursor{Steward: p.steward, Next: next}
		var err error
		if cf == nil {
			var created bool
			if cf, created, err = openCursor(p.cfg.CursorPath, c); err == nil && !created {
				err = cf.write(c)
			}
		} else {
			err = cf.write(c)
		}
		if err != nil {
			// The stream has them; only a restart would republish.
			p.log.Error("fleet: cursor not saved", "err", err, "next", next)
		}
		// Acked (which a disk budget trusts to drop segments) moves only
		// with the cursor: a restart must find every receipt from the
		// cursor on still in the log.
		p.saved.Store(next)
		unsaved, saved = 0, time.Now()
	}
	cursorTimer := time.NewTimer(cursorEvery)
	defer cursorTimer.Stop()
	// fail records a failed attempt and waits before the next.
	fail := func(what string, err error) bool {
		if ctx.Err() != nil {
			return false // stopping, not failing
		}
		failures++
		wait := backoffDelay(failures, p.cfg.MinBackoff, p.cfg.MaxBackoff)
		if st != stateBehind || failures == 1 {
			p.log.Warn("fleet: "+what, "err", err, "behind", p.rlog.Durable()-next, "retry_in", wait)
		}
		st = stateBehind
		return sleep(ctx, wait)
	}
	for ctx.Err() == nil {
		if !nc.IsConnected() {
			if st == stateCaughtUp {
				st = stateBehind
			}
			// The client retries on its own and reports only a lost
			// connection; why a connection cannot be made (refused, an
			// authorization violation) is logged here, once per cause.
			if err := nc.LastError(); err != nil && (lastErr == nil || err.Error() != lastErr.Error()) {
				p.log.Warn("fleet: cannot connect", "err", err, "behind", p.rlog.Durable()-next)
				lastErr = err
			}
			select {
			case <-up:
			case <-poll.C:
			case <-ctx.Done():
			}
			continue
		}
		if !streamReady {
			// Bounded like an acknowledgement: a request sent just as its
			// server dies is never answered, and the run's context alone
			// would wait for it forever.
			sctx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
			_, err := EnsureStream(sctx, js, StreamConfig(p.cfg.Stream, p.cfg.Duplicates))
			cancel()
			if err != nil {
				if !fail("stream setup failed", err) {
					break
				}
				continue
			}
			streamReady = true
		}
		durable := p.rlog.Durable()
		if backlog := durable - next; backlog > 0 && (st == stateStarting || (st == stateCaughtUp && backlog > uint64(p.cfg.Batch))) {
			p.log.Info("fleet: behind", "behind", backlog, "next", next)
			st = stateBehind
		}
		// A checkpoint is published only once every receipt it covers
		// is in the stream, so a verifier that reaches it can check it.
		if pendingCP != nil && pendingCP.Count <= next {
			if err := p.publishCheckpoint(ctx, snd, pendingCP); err != nil {
				if errors.Is(err, jetstream.ErrNoStreamResponse) {
					streamReady = p.cfg.NoStreamSetup
				}
				if !fail("checkpoint publish failed", err) {
					break
				}
				continue
			}
			pendingCP = nil
		}
		if next < durable && !drained {
			envs, err := p.rlog.Range(ctx, next, int(min(uint64(p.cfg.Batch), durable-next)))
			if err != nil {
				if !fail("read receipt log", err) {
					break
				}
				continue
			}
			acked, err := p.publishBatch(ctx, snd, next, envs)
			if acked > 0 {
				next += uint64(acked)
				since += uint64(acked)
				if p.afterAck != nil {
					p.afterAck(next)
				}
				p.next.Store(next)
				if ctx.Err() != nil {
					break // stopping: the cursor is written on the way out
				}
				if unsaved += acked; unsaved >= p.cfg.Batch || time.Since(saved) >= cursorEvery {
					saveCursor()
				}
			}
			if err != nil {
				if errors.Is(err, jetstream.ErrNoStreamResponse) {
					streamReady = p.cfg.NoStreamSetup
				}
				if !fail("publish failed", err) {
					break
				}
				continue
			}
			failures = 0
			if p.cfg.CheckpointEvery > 0 && since >= uint64(p.cfg.CheckpointEvery) && pendingCP == nil {
				pendingCP, since = p.checkpoint(ctx), 0
			}
			drained = p.cfg.Linger > 0 && len(envs) < p.cfg.Batch
			if lingered {
				linger = nextLinger(linger, len(envs), p.cfg.Linger, p.cfg.MaxLinger)
				lingered = false
			}
			continue
		}
		failures = 0
		if st != stateCaughtUp {
			p.log.Info("fleet: caught up", "next", next)
			st = stateCaughtUp
			if p.cfg.CheckpointEvery > 0 && pendingCP == nil && p.published.Load() < next {
				pendingCP, since = p.checkpoint(ctx), 0
				if pendingCP != nil && pendingCP.Count <= next {
					continue // publish it now
				}
			}
		}
		var flush <-chan time.Time
		if unsaved > 0 {
			// Caught up with receipts not in the cursor yet: write it
			// once cursorEvery has passed, unless more come first.
			cursorTimer.Reset(max(0, cursorEvery-time.Since(saved)))
			flush = cursorTimer.C
		}
		select {
		case <-p.notify:
			if p.cfg.Linger > 0 {
				sleep(ctx, linger) // a stop ends the loop
				lingered = true
				// The notifies of the serves sealed while lingering
				// are covered by the read that follows (Durable is read
				// after this, and a serve notifies only once durable):
				// left pending, each batch would be followed by a
				// wake-up and a linger that find nothing new.
				select {
				case <-p.notify:
				default:
				}
			}
		case <-flush:
			saveCursor()
		case <-poll.C:
		case <-up:
		case <-ctx.Done():
		}
		drained = false
	}
	if unsaved > 0 {
		saveCursor()
	}
	return nil
}

// nextLinger is the linger after one of length l gathered a batch of n
// receipts: doubled while batches stay under lingerTarget, halved once
// they reach it, within [lo, hi].
func nextLinger(l time.Duration, n int, lo, hi time.Duration) time.Duration {
	if n < lingerTarget {
		return min(2*l, hi)
	}
	return max(l/2, lo)
}

// cursorEvery is the longest a running publisher leaves acknowledged
// receipts out of its cursor file.
const cursorEvery = time.Second

// startAt reads the cursor file and decides where publishing resumes.
func (p *Publisher) startAt() uint64 {
	c, err := readCursor(p.cfg.CursorPath)
	if err != nil {
		// Starting over is safe: every republished receipt is a duplicate
		// to the server or the verifier. Only the traffic is wasted.
		p.log.Warn("fleet: cursor unreadable; republishing from the start of the log", "err", err)
		c = cursor{}
	}
	if c.Steward != "" && c.Steward != p.steward {
		p.log.Warn("fleet: cursor belongs to another steward; republishing from the start of the log", "cursor_steward", c.Steward)
		c = cursor{}
	}
	if d := p.rlog.Durable(); c.Next > d {
		// The log holds fewer receipts than were published: it was
		// rolled back. Whatever is sealed again at those sequences is a
		// fork, and the verifier must see it, so publish from the end.
		p.log.Error("fleet: cursor is past the end of the receipt log; the log was rolled back", "cursor", c.Next, "durable", d)
		c.Next = d
		// Saved now: once the log grows past the old cursor again, the
		// old cursor would look valid and skip what lies below it.
		if err := writeCursor(p.cfg.CursorPath, cursor{Steward: p.steward, Next: d}); err != nil {
			p.log.Error("fleet: cursor not saved", "err", err, "next", d)
		}
	}
	return c.Next
}

// publishBatch publishes envs (the receipts from first on) and waits for
// every acknowledgement. It returns how many, from the first, were
// acknowledged in an unbroken run: only those may move the cursor. A
// duplicate acknowledgement counts: the stream has the message.
func (p *Publisher) publishBatch(ctx context.Context, snd *sender, first uint64, envs [][]byte) (int, error) {
	subject := ReceiptSubject(p.steward)
	acked, failed, err := snd.send(ctx, len(envs), func(i int, m *nats.Msg) {
		p.setMsg(m, subject, first+uint64(i), envs[i])
	})
	if err != nil {
		return acked, fmt.Errorf("publish receipt %d: %w", first+uint64(failed), err)
	}
	return acked, nil
}

// setMsg fills m in for env at seq on subject. Unless the operator
// manages the layout, the server is made to refuse a message that would
// land in any stream but the configured one (another stream capturing the
// subject by mistake).
func (p *Publisher) setMsg(m *nats.Msg, subject string, seq uint64, env []byte) {
	setMsg(m, subject, p.steward, seq, env)
	if !p.cfg.NoStreamSetup {
		setHeader(m.Header, jetstream.ExpectedStreamHeader, p.cfg.Stream)
	}
}

// checkpoint asks the log for its newest checkpoint (sealing one if
// receipts were added since the last). A log without its key cannot seal
// one; that is logged and checkpoints are left out.
func (p *Publisher) checkpoint(ctx context.Context) *steward.SignedCheckpoint {
	cp, err := p.rlog.Checkpoint(ctx)
	if err != nil {
		p.log.Warn("fleet: no checkpoint to publish", "err", err)
		return nil
	}
	return cp
}

func (p *Publisher) publishCheckpoint(ctx context.Context, snd *sender, cp *steward.SignedCheckpoint) error {
	_, _, err := snd.send(ctx, 1, func(_ int, m *nats.Msg) {
		p.setMsg(m, CheckpointSubject(p.steward), cp.Count, cp.Envelope)
	})
	if err != nil {
		return fmt.Errorf("publish checkpoint of %d receipts: %w", cp.Count, err)
	}
	p.published.Store(cp.Count)
	p.log.Debug("fleet: checkpoint published", "count", cp.Count, "head", cp.Head)
	return nil
}

// sleep waits d or until ctx ends, reporting whether it waited the whole d.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Acked is how many receipts, from sequence 0, the stream has
// acknowledged and the cursor file records: every receipt below it is
// stored there, and a restart resumes at or beyond it, so a disk budget may
// remove a segment wholly below it (PROFILE.md §8). It trails Status().Next
// by what the cursor does not record yet (less than a batch, for less
// than a second). It is 0 until Run has read the cursor.
func (p *Publisher) Acked() uint64 { return p.saved.Load() }
