package steward

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// ErrDamaged is wrapped when a log fails verification anywhere but a torn
// final frame. A damaged log is never repaired automatically.
var ErrDamaged = errors.New("receipt log damaged")

// DamageError names the first bad record of a damaged log.
type DamageError struct {
	Sequence uint64 // the chain position of the first bad record
	Segment  string // the segment file holding it ("" when not known)
	Offset   int64  // byte offset of its frame in that segment
	Err      error
}

func (e *DamageError) Error() string {
	where := fmt.Sprintf("byte offset %d", e.Offset)
	if e.Segment != "" {
		where = fmt.Sprintf("segment %s, byte offset %d", e.Segment, e.Offset)
	}
	return fmt.Sprintf("%v: first bad record is sequence %d (%s): %v", ErrDamaged, e.Sequence, where, e.Err)
}

func (e *DamageError) Unwrap() []error { return []error{ErrDamaged, e.Err} }

// pending is one frame read but not yet verified.
type pending struct {
	seq      uint64
	off, end int64
	env      []byte
	opened   *Opened
	err      error
}

// chain verifies frames in batches: signatures in parallel (they dominate
// the cost), then sequence and prev links in order.
type chain struct {
	key     ed25519.PublicKey // fixed by the trusted key or the first record
	next    uint64
	head    wire.ContentID
	workers int
	visit   func(*Opened) error
	// at, if set, sees every verified record's position.
	at       func(seq uint64, seg string, off, end int64, id wire.ContentID) error
	seg      string
	segFirst uint64
	lastSeg  uint64 // first sequence of the segment holding the last record
	last     *Receipt
	lastOff  int64
	lastEnd  int64
	batch    []pending
	// prev is the batch being verified while the next one is read.
	prev     []pending
	prevWait func()
	checked  uint64
	// idle follows x_idle_record links to the idle records they name.
	idle IdleLinks
	// pins follows each corpus's corpus-pin records.
	pins PinLinks
}

const verifyBatch = 256

func newChain(key ed25519.PublicKey, workers int, visit func(*Opened) error) *chain {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &chain{key: key, workers: workers, visit: visit}
}

// add queues a frame of the current segment; a full batch goes to the
// verifiers.
func (c *chain) add(off int64, env []byte) error {
	seq := c.next + uint64(len(c.prev)) + uint64(len(c.batch))
	c.batch = append(c.batch, pending{seq: seq, off: off, end: off + framelog.HeaderSize + int64(len(env)), env: env})
	if len(c.batch) == verifyBatch {
		return c.step(false)
	}
	return nil
}

func (c *chain) damage(seq uint64, off int64, err error) *DamageError {
	return &DamageError{Sequence: seq, Segment: c.seg, Offset: off, Err: err}
}

// flush verifies everything queued and advances the chain over it.
func (c *chain) flush() error { return c.step(true) }

// step hands the queued batch to the verifiers and, while they work (and
// the caller reads the next batch), checks the batch before it in order:
// reading and verifying overlap, and errors still surface in chain order.
func (c *chain) step(drain bool) error {
	cur := c.batch
	c.batch = make([]pending, 0, verifyBatch)
	var wait func()
	if len(cur) > 0 {
		if c.key == nil {
			// Fix the key from the first record before verifying in
			// parallel, so every record is held to the same steward.
			o, err := OpenEnvelope(cur[0].env, nil)
			if err != nil {
				return c.damage(cur[0].seq, cur[0].off, err)
			}
			c.key = o.Key
		}
		wait = c.verify(cur)
	}
	if c.prevWait != nil {
		c.prevWait()
		err := c.check(c.prev)
		c.prev, c.prevWait = nil, nil
		if err != nil {
			if wait != nil {
				wait()
			}
			return err
		}
	}
	c.prev, c.prevWait = cur, wait
	if drain && c.prevWait != nil {
		c.prevWait()
		err := c.check(c.prev)
		c.prev, c.prevWait = nil, nil
		return err
	}
	return nil
}

// verify opens every envelope of items, in parallel unless one worker is
// asked for, and returns a function that waits for the result.
func (c *chain) verify(items []pending) func() {
	if c.workers == 1 || len(items) == 1 {
		for i := range items {
			items[i].opened, items[i].err = OpenEnvelope(items[i].env, c.key)
		}
		return func() {}
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	key := c.key
	for w := 0; w < c.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1) - 1)
				if j >= len(items) {
					return
				}
				items[j].opened, items[j].err = OpenEnvelope(items[j].env, key)
			}
		}()
	}
	return wg.Wait
}

// check advances the chain over verified items, in order.
func (c *chain) check(items []pending) error {
	for _, it := range items {
		if it.err != nil {
			return c.damage(it.seq, it.off, it.err)
		}
		rc := it.opened.Receipt
		if rc.Sequence != it.seq {
			return c.damage(it.seq, it.off, fmt.Errorf("record carries sequence %d, want %d (removed or reordered record)", rc.Sequence, it.seq))
		}
		if it.seq > 0 {
			if rc.Prev == nil || *rc.Prev != c.head.String() {
				got := "none"
				if rc.Prev != nil {
					got = *rc.Prev
				}
				return c.damage(it.seq, it.off, fmt.Errorf("prev %s does not match the previous envelope %s", got, c.head))
			}
		}
		if err := c.idle.Add(rc); err != nil {
			return c.damage(it.seq, it.off, err)
		}
		if err := c.pins.Add(rc); err != nil {
			return c.damage(it.seq, it.off, err)
		}
		if c.visit != nil {
			if err := c.visit(it.opened); err != nil {
				return fmt.Errorf("receipt log sequence %d: %w", it.seq, err)
			}
		}
		if c.at != nil {
			if err := c.at(it.seq, c.seg, it.off, it.end, it.opened.ID); err != nil {
				return err
			}
		}
		c.head = it.opened.ID
		c.last = rc
		c.lastOff, c.lastEnd, c.lastSeg = it.off, it.end, c.segFirst
		c.next = it.seq + 1
		c.checked++
	}
	return nil
}
