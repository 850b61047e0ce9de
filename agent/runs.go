package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"meshd/agent/board"
	"meshd/rag"
	"meshd/steward"
	"meshd/wire"
)

// A run (PROFILE §22) is a stretch of the chain between a run-open record
// and its run-close. The agent keeps the open runs: a serve or an idle
// window that names one is counted in it when, and only when, its receipt
// is sealed, and the run-close states the count and the sequences. Close
// waits for the run's serves in flight, so no serve of a run is sealed
// after its close and none is missed.

// ErrRunNotOpen is wrapped when a serve, an idle window or a close names a
// run that is not open: unknown, closing or closed.
var ErrRunNotOpen = errors.New("run not open")

// ErrIdleShared is wrapped when an idle window overlapped a serve on its
// span (the shared policy): what it measured is not idle, so it is not
// sealed.
var ErrIdleShared = errors.New("the idle window overlapped a serve")

// DefaultRunTimeout is how long a run may go without a request before the
// agent closes it as abandoned.
const DefaultRunTimeout = 10 * time.Minute

// runState is one open run.
type runState struct {
	declared uint64
	last     time.Time // end of the latest request of the run
	inflight int
	closing  bool
	drained  chan struct{} // closed when inflight drops to 0 while closing
	serves   []uint64
	idle     []uint64
}

type runs struct {
	mu      sync.Mutex
	open    map[uint64]*runState
	closed  map[uint64]string // status of each run closed since start
	timeout time.Duration
}

func (rs *runs) init(timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultRunTimeout
	}
	rs.open, rs.closed, rs.timeout = map[uint64]*runState{}, map[uint64]string{}, timeout
}

// notOpen explains why seq is not an open run; the caller holds mu.
func (rs *runs) notOpen(seq uint64) error {
	if st, ok := rs.closed[seq]; ok {
		return fmt.Errorf("%w: run %d is closed (%s)", ErrRunNotOpen, seq, st)
	}
	if st, ok := rs.open[seq]; ok && st.closing {
		return fmt.Errorf("%w: run %d is closing", ErrRunNotOpen, seq)
	}
	return fmt.Errorf("%w: no run was opened at sequence %d", ErrRunNotOpen, seq)
}

// enterRun admits one request of run seq. leave is called exactly once
// with the sequence of the receipt it sealed (nil when it sealed nothing),
// and whether that was an idle record.
func (a *Agent) enterRun(seq uint64) (leave func(sealed *uint64, idle bool), err error) {
	rs := &a.runs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	st, ok := rs.open[seq]
	if !ok || st.closing {
		return nil, rs.notOpen(seq)
	}
	st.inflight++
	st.last = a.clock()
	return func(sealed *uint64, idle bool) {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if sealed != nil {
			if idle {
				st.idle = append(st.idle, *sealed)
			} else {
				st.serves = append(st.serves, *sealed)
			}
		}
		st.inflight--
		st.last = a.clock()
		if st.inflight == 0 && st.drained != nil {
			close(st.drained)
			st.drained = nil
		}
	}, nil
}

// RunOpen is what a client declares when it opens a run; the node adds
// what only it can vouch for (board, version, meters).
type RunOpen = steward.RunOpenDoc

// maxRunText bounds the client's text in a run document.
const maxRunText = 256

// CheckRunOpen refuses a run-open document with a field out of its
// domain, naming the field (the JSON name).
func CheckRunOpen(d RunOpen) error {
	switch {
	case !wire.IsLowerHex(d.WorkloadSHA256, 32):
		return &FieldError{"workload_sha256", "want the workload's SHA-256 as 64 lower-case hex digits"}
	case d.Repetitions == 0 || d.Repetitions > math.MaxUint32:
		return &FieldError{"repetitions", "want 1..4294967295"}
	case d.ServesDeclared == 0 || d.ServesDeclared > math.MaxUint32:
		return &FieldError{"serves_declared", "want 1..4294967295"}
	case !steward.PrintableLine(d.Harness, maxRunText):
		return &FieldError{"harness", fmt.Sprintf("want a non-empty line of at most %d bytes, no control characters", maxRunText)}
	case !steward.PrintableLine(d.Caller, maxRunText):
		return &FieldError{"caller", fmt.Sprintf("want a non-empty line of at most %d bytes, no control characters", maxRunText)}
	}
	return nil
}

// boardState is the machine state a run's records seal: board.State as
// RFC 8785 canonical JSON, read now under the agent's board root.
func (a *Agent) boardState() (string, error) {
	st, err := board.ReadState(a.boardRoot)
	if err != nil {
		return "", err
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return "", fmt.Errorf("board state: %w", err)
	}
	c, err := rag.Canonical(raw)
	if err != nil {
		return "", fmt.Errorf("board state: %w", err)
	}
	return string(c), nil
}

// FieldError is a request field out of its domain.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// SealedRecord is a record and the document its request_id addresses.
type SealedRecord struct {
	Sealed   *steward.Sealed
	Document []byte
}

// OpenRun seals a run-open record for d and opens the run: its sequence
// is the run's id, which serves and idle windows name.
func (a *Agent) OpenRun(ctx context.Context, d RunOpen) (*SealedRecord, error) {
	if err := CheckRunOpen(d); err != nil {
		return nil, fmt.Errorf("open run: %w", err)
	}
	// The machine state is the daemon's to state, never the client's.
	var err error
	if d.State, err = a.boardState(); err != nil {
		return nil, fmt.Errorf("open run: %w", err)
	}
	doc := d.Encode()
	sealed, err := a.steward.Seal(ctx, steward.RunRecordDraft(steward.RecordRunOpen, doc, nil, steward.RunRoute(steward.RecordRunOpen, &d, nil)))
	if err != nil {
		return nil, fmt.Errorf("open run: %w", err)
	}
	rs := &a.runs
	rs.mu.Lock()
	rs.open[sealed.Receipt.Sequence] = &runState{declared: d.ServesDeclared, last: a.clock()}
	rs.mu.Unlock()
	return &SealedRecord{Sealed: sealed, Document: doc}, nil
}

// CloseRun seals the run-close of run seq once its requests in flight
// have ended: "complete" iff every declared serve was sealed and reason is
// empty, else "incomplete" with the reason (or the shortfall).
func (a *Agent) CloseRun(ctx context.Context, seq uint64, reason string) (*SealedRecord, error) {
	return a.CloseRunWith(ctx, seq, RunClose{Reason: reason})
}

// RunClose is what a client may state when it closes a run.
type RunClose struct {
	// Reason says why the run is incomplete; "" asks for complete.
	Reason string
	// TraceSHA256 is the caller's digest of what it recorded beside the
	// run (64 lower-case hex), sealed in the run-close as its declaration;
	// "" declares none.
	TraceSHA256 string
}

// CloseRunWith is CloseRun with everything a client may state.
func (a *Agent) CloseRunWith(ctx context.Context, seq uint64, c RunClose) (*SealedRecord, error) {
	if c.Reason != "" && !steward.PrintableLine(c.Reason, maxRunText) {
		return nil, fmt.Errorf("close run %d: %w", seq, &FieldError{"reason", fmt.Sprintf("want a line of at most %d bytes, no control characters", maxRunText)})
	}
	if c.TraceSHA256 != "" && !wire.IsLowerHex(c.TraceSHA256, 32) {
		return nil, fmt.Errorf("close run %d: %w", seq, &FieldError{"trace_sha256", "want a SHA-256 as 64 lower-case hex digits"})
	}
	return a.closeRun(ctx, seq, c.Reason, false, c.TraceSHA256)
}

// closeRun closes seq; abandoned closes it only if it is still idle past
// the timeout when the close begins.
func (a *Agent) closeRun(ctx context.Context, seq uint64, reason string, abandoned bool, trace string) (*SealedRecord, error) {
	rs := &a.runs
	rs.mu.Lock()
	st, ok := rs.open[seq]
	if !ok || st.closing {
		err := rs.notOpen(seq)
		rs.mu.Unlock()
		return nil, fmt.Errorf("close run: %w", err)
	}
	if abandoned && (st.inflight > 0 || a.clock().Sub(st.last) < rs.timeout) {
		rs.mu.Unlock()
		return nil, nil
	}
	st.closing = true
	var wait chan struct{}
	if st.inflight > 0 {
		wait = make(chan struct{})
		st.drained = wait
	}
	rs.mu.Unlock()
	reopen := func() {
		rs.mu.Lock()
		st.closing, st.drained = false, nil
		rs.mu.Unlock()
	}
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			reopen()
			return nil, fmt.Errorf("close run %d: waiting for its serves in flight: %w", seq, ctx.Err())
		}
	}
	rs.mu.Lock()
	d := steward.RunCloseDoc{Run: seq, ServesDeclared: st.declared, ServesSealed: uint64(len(st.serves)),
		Serves: slices.Sorted(slices.Values(st.serves)), Idle: slices.Sorted(slices.Values(st.idle)), Status: steward.RunComplete, Reason: reason, TraceSHA256: trace}
	rs.mu.Unlock()
	if d.ServesSealed != d.ServesDeclared && d.Reason == "" {
		d.Reason = fmt.Sprintf("%d of %d declared serves sealed", d.ServesSealed, d.ServesDeclared)
	}
	if d.Reason != "" {
		d.Status = steward.RunIncomplete
	}
	state, err := a.boardState()
	if err != nil {
		reopen()
		return nil, fmt.Errorf("close run %d: %w", seq, err)
	}
	d.State = state
	doc := d.Encode()
	run := seq
	sealed, err := a.steward.Seal(context.WithoutCancel(ctx), steward.RunRecordDraft(steward.RecordRunClose, doc, &run, steward.RunRoute(steward.RecordRunClose, nil, &d)))
	if err != nil {
		reopen()
		return nil, fmt.Errorf("close run %d: %w", seq, err)
	}
	rs.mu.Lock()
	delete(rs.open, seq)
	rs.closed[seq] = d.Status
	rs.mu.Unlock()
	return &SealedRecord{Sealed: sealed, Document: doc}, nil
}

// CloseAbandoned closes, as incomplete, every open run with no request in
// flight and none for the run timeout, by the agent's clock. It returns
// the run-close records it sealed; the node calls it periodically.
func (a *Agent) CloseAbandoned(ctx context.Context) ([]*SealedRecord, error) {
	return a.closeOpenRuns(ctx, fmt.Sprintf("abandoned: no request of the run for %v", a.runs.timeout), true)
}

// CloseRuns closes every open run as incomplete with reason (the daemon
// shutting down), after its requests in flight end.
func (a *Agent) CloseRuns(ctx context.Context, reason string) ([]*SealedRecord, error) {
	return a.closeOpenRuns(ctx, reason, false)
}

// closeOpenRuns passes each open run to closeRun with reason and
// abandoned, gathering the records sealed; a run closed meanwhile by its
// own request is no error.
func (a *Agent) closeOpenRuns(ctx context.Context, reason string, abandoned bool) ([]*SealedRecord, error) {
	var out []*SealedRecord
	var errs []error
	for _, seq := range a.OpenRuns() {
		rec, err := a.closeRun(ctx, seq, reason, abandoned, "")
		switch {
		case err != nil && !errors.Is(err, ErrRunNotOpen):
			errs = append(errs, err)
		case rec != nil:
			out = append(out, rec)
		}
	}
	return out, errors.Join(errs...)
}

// OpenRuns are the sequences of the runs open now, ascending.
func (a *Agent) OpenRuns() []uint64 {
	a.runs.mu.Lock()
	defer a.runs.mu.Unlock()
	out := make([]uint64, 0, len(a.runs.open))
	for seq := range a.runs.open {
		out = append(out, seq)
	}
	slices.Sort(out)
	return out
}

// RunTimeout is the run timeout in force.
func (a *Agent) RunTimeout() time.Duration { return a.runs.timeout }

// Idle measures an idle window of d on backend's span and seals it as an
// idle record, in run when run is set. Under the exclusive policy the
// window holds the span like a serve, so no serve is charged into it; under
// the shared policy a window that overlapped a serve is refused
// (ErrIdleShared). A meter that measured nothing seals nothing
// (ErrUnmetered).
func (a *Agent) Idle(ctx context.Context, backend string, d time.Duration, run *uint64) (*SealedRecord, wire.Reading, error) {
	ms := d.Milliseconds()
	if ms < 1 || time.Duration(ms)*time.Millisecond != d {
		return nil, wire.Reading{}, fmt.Errorf("idle: %w", &FieldError{"seconds", "want a whole number of milliseconds, at least 1"})
	}
	var meter Meter
	for _, bi := range a.Backends() {
		if bi.Backend.Name() == backend {
			meter = bi.Meter
		}
	}
	if meter == nil {
		return nil, wire.Reading{}, fmt.Errorf("idle: %w", &FieldError{"backend", fmt.Sprintf("%q is not a metered backend here", backend)})
	}
	var leave func(*uint64, bool)
	if run != nil {
		var err error
		if leave, err = a.enterRun(*run); err != nil {
			return nil, wire.Reading{}, fmt.Errorf("idle: %w", err)
		}
	}
	var sealedSeq *uint64
	defer func() {
		if leave != nil {
			leave(sealedSeq, true)
		}
	}()
	win, err := meter.Open(ctx)
	if err != nil {
		return nil, wire.Reading{}, fmt.Errorf("idle on %s: %w: %v", backend, ErrUnmetered, err)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	rd, err := win.Close(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		return nil, wire.Reading{}, fmt.Errorf("idle on %s: the caller left before the window closed: %w", backend, ctx.Err())
	}
	if err == nil && rd.Provenance == wire.Estimator {
		err = wire.ErrNoMeasurement
	}
	if err != nil {
		return nil, wire.Reading{}, fmt.Errorf("idle on %s: %w: the meter measured nothing: %v", backend, ErrUnmetered, err)
	}
	if rd.Metering.Shared > 1 {
		return nil, rd, fmt.Errorf("idle on %s: %w (%d windows open at once)", backend, ErrIdleShared, rd.Metering.Shared)
	}
	doc := steward.IdleDoc{Backend: backend, DurationMs: uint64(ms), Run: run}.Encode()
	route := fmt.Sprintf("idle: %d ms on %s", ms, meter.Name())
	sealed, err := a.sealIdle(context.WithoutCancel(ctx), doc, run, backend, route, rd)
	if err != nil {
		return nil, rd, fmt.Errorf("idle on %s: %w", backend, err)
	}
	seq := sealed.Receipt.Sequence
	sealedSeq = &seq
	return &SealedRecord{Sealed: sealed, Document: doc}, rd, nil
}
