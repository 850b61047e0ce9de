package llamaserver

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"meshd/engine/runner/llama"
)

// minPatience is the least a step waits for the sequences of the step
// before it to come back: on a small model a step can take less than
// waking a goroutine does on a busy machine.
const minPatience = time.Millisecond

// errStepFailed is what the sequences of a step get when the step ended
// without finishing (a panic, which propagates in the goroutine that ran
// it).
var errStepFailed = errors.New("llamaserver: the decode step did not finish")

// decoder lets the slots that are generating share decode steps: one
// llama.Decoder step evaluates the next token of each, reading every
// weight once for all of them. Where decode is bound by reading the
// weights, as it is on most machines, such a step costs little more than
// one slot's, where steps of their own would split the speed between the
// slots.
//
// There is no loop of its own: a sequence submits its next token and
// waits, and whichever waiting sequence finds the step ready runs it for
// everything queued, its own token included, so no one waits on a
// goroutine that is not working for it. A step is ready when no step is
// running and every sequence of the previous step is back with its next
// token, or has had patience (about a step's time) to come back and not:
// sampling, stop words and writing to the client sit between two steps,
// and running without a sequence that is a moment late would leave it a
// step of its own, so the slots would take turns instead of sharing. A
// sequence that is alone (none other generating) never waits.
type decoder struct {
	dec   *llama.Decoder
	hooks *hooks

	mu      sync.Mutex
	members []*seq // sequences that have submitted a token and not left
	queue   []*seq // waiting for the next step, in order of arrival
	running bool   // a step is running, or about to take the queue
	stepEnd time.Time
	lastDur time.Duration // of the last step

	// Owned by the sequence running the step.
	taken  []*seq
	states []*llama.State
	toks   []int

	steps, batched, tokens atomic.Int64
}

func newDecoder(dec *llama.Decoder, h *hooks) *decoder { return &decoder{dec: dec, hooks: h} }

// seq is one generation's part in the decode steps.
type seq struct {
	d     *decoder
	state *llama.State
	slot  int
	n     int // tokens submitted

	// Set by the step that takes the sequence, before done.
	logits []float32
	err    error
	done   chan struct{} // the step that took the sequence has run
	kick   chan struct{} // the queue may be ready

	// Guarded by d.mu.
	tok      int
	member   bool
	queued   bool
	expected bool // took part in the last step: the next one waits for it
}

// join starts a generation's sequence on state; it joins the steps with
// its first token and must leave once the generation ends.
func (d *decoder) join(state *llama.State, slot int) *seq {
	return &seq{d: d, state: state, slot: slot, done: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
}

// leave ends the sequence's part: no step waits for it any longer.
func (q *seq) leave() {
	d := q.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if !q.member {
		return
	}
	q.member, q.expected = false, false
	d.members = slices.DeleteFunc(d.members, func(m *seq) bool { return m == q })
	d.kickLocked()
}

// eval runs tok at the sequence's next position in a shared step and
// returns its logits (llama.Request.Decode). A sequence whose context
// ends while queued leaves the queue; one already taken by a step waits
// for that step, which cannot stop for it without failing the others,
// and returns what it gave.
func (q *seq) eval(ctx context.Context, tok int) ([]float32, error) {
	d := q.d
	d.mu.Lock()
	q.tok, q.queued = tok, true
	q.logits, q.err = nil, nil
	q.n++
	d.queue = append(d.queue, q)
	if !q.member {
		q.member = true
		d.members = append(d.members, q)
	}
	d.mu.Unlock()
	if h := d.hooks.decodeQueued; h != nil {
		h(q.slot, q.n)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		d.mu.Lock()
		if !q.queued { // taken by a step that another sequence runs
			d.mu.Unlock()
			<-q.done
			return q.logits, q.err
		}
		ready, wait := d.readyLocked(time.Now())
		if ready {
			d.running = true
			d.mu.Unlock()
			d.run() // takes q with the rest
			<-q.done
			return q.logits, q.err
		}
		d.mu.Unlock()
		var expire <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			expire = timer.C
		}
		select {
		case <-q.kick:
		case <-expire:
		case <-q.done:
			return q.logits, q.err
		case <-ctx.Done():
			d.mu.Lock()
			if q.queued {
				q.queued, q.expected = false, false
				d.queue = slices.DeleteFunc(d.queue, func(m *seq) bool { return m == q })
				d.mu.Unlock()
				return nil, ctx.Err()
			}
			d.mu.Unlock()
			<-q.done
			return q.logits, q.err
		}
	}
}

// readyLocked reports whether a step may start now, and if not, how long
// until the patience for the missing sequences runs out (0: wait for a
// kick).
func (d *decoder) readyLocked(now time.Time) (bool, time.Duration) {
	if d.running {
		return false, 0
	}
	missing := false
	for _, m := range d.members {
		if m.expected && !m.queued {
			missing = true
			break
		}
	}
	if !missing {
		return true, 0
	}
	left := d.stepEnd.Add(d.patience()).Sub(now)
	if left <= 0 {
		return true, 0
	}
	return false, left
}

// patience is how long a step waits for the sequences of the last one.
func (d *decoder) patience() time.Duration {
	if d.hooks.patience > 0 {
		return d.hooks.patience
	}
	return max(d.lastDur, minPatience)
}

// kickLocked tells every queued sequence to look at the queue again.
func (d *decoder) kickLocked() {
	for _, m := range d.queue {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// run takes the queue and runs one step for it; the caller has set
// running. A failed step of several states runs them again one at a time,
// so that one state's error (a full context) fails only its own sequence.
func (d *decoder) run() {
	if h := d.hooks.gather; h != nil {
		h()
	}
	d.mu.Lock()
	// Sequences of the last step that are still not back are late: this
	// step goes without them, and the next does not wait for them.
	for _, m := range d.members {
		if m.expected && !m.queued {
			m.expected = false
		}
	}
	d.taken = append(d.taken[:0], d.queue...)
	d.queue = d.queue[:0]
	d.states, d.toks = d.states[:0], d.toks[:0]
	for _, q := range d.taken {
		q.queued, q.expected = false, true
		q.err = errStepFailed
		d.states = append(d.states, q.state)
		d.toks = append(d.toks, q.tok)
	}
	d.mu.Unlock()
	taken := d.taken
	start := time.Now()
	defer func() {
		end := time.Now()
		// Before running is cleared: the next step reuses taken.
		for _, q := range taken {
			q.done <- struct{}{}
		}
		d.mu.Lock()
		d.running = false
		d.stepEnd, d.lastDur = end, end.Sub(start)
		d.kickLocked()
		d.mu.Unlock()
	}()
	if h := d.hooks.step; h != nil {
		h(len(taken))
	}
	// Background: a sequence whose context ends still gets this step, the
	// others' step, and sees its context after it.
	out, err := d.dec.Eval(context.Background(), d.states, d.toks)
	switch {
	case err == nil:
		for i, q := range taken {
			q.logits, q.err = out[i], nil
		}
	case len(taken) == 1:
		taken[0].err = err
	default:
		for i, q := range taken {
			out, err := d.dec.Eval(context.Background(), d.states[i:i+1], d.toks[i:i+1])
			if err == nil {
				q.logits, q.err = out[0], nil
			} else {
				q.err = err
			}
		}
	}
	d.steps.Add(1)
	d.tokens.Add(int64(len(taken)))
	if len(taken) > 1 {
		d.batched.Add(1)
	}
}
