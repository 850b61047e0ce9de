package steward

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// ErrStorage is wrapped when the storage under the log (or the grant
// ledger) refused a write or an fsync: a full disk (ENOSPC), an I/O error
// (EIO), a short write. Nothing that was refused was acknowledged. The log
// heals by itself once writes succeed again (PROFILE.md §8).
var ErrStorage = framelog.ErrStorage

// probeName is the scratch file a heal writes and fsyncs to learn that the
// storage takes writes again; it is removed at once. Names starting with a
// dot are never segments.
const probeName = ".storage-probe"

// probeBytes is what the probe writes: a few receipts' worth, so that a
// disk with a handful of bytes free is not taken for one that heals.
const probeBytes = 16 << 10

// headState is the chain's head, as a heal rolls it back.
type headState struct {
	next    uint64
	head    wire.ContentID
	seg     uint64
	off     int64
	end     int64
	epoch   uint64
	steward bool // l.steward is known (false only for an empty log opened without a key)
}

func (l *Log) headLocked() headState {
	return headState{next: l.next, head: l.head, seg: l.headSeg, off: l.headOff, end: l.headEnd, epoch: l.headEp, steward: l.steward != nil}
}

// notePendingLocked records the head just appended, trimming what the
// writer has since made durable once the list grows, so that it stays
// short without costing the append path a call per record.
func (l *Log) notePendingLocked() {
	if len(l.pend) >= 256 {
		l.trimPendingLocked(l.w.Synced())
	}
	l.pend = append(l.pend, l.headLocked())
}

// trimPendingLocked moves every pending record that ends at or below
// synced into base.
func (l *Log) trimPendingLocked(synced int64) {
	i := 0
	for i < len(l.pend) && l.pend[i].end <= synced {
		i++
	}
	if i > 0 {
		l.base = l.pend[i-1]
		l.pend = append(l.pend[:0], l.pend[i:]...)
	}
}

func (l *Log) wrap(f *os.File) framelog.File {
	ff := framelog.DataSync(f)
	if l.files != nil {
		return l.files(ff)
	}
	return ff
}

// fail records that the storage refused a write (err), failing the log
// until it heals. Errors that are not the storage's are not recorded.
func (l *Log) fail(err error) {
	l.mu.Lock()
	l.failLocked(err)
	l.mu.Unlock()
}

// failWriter is fail for an error that w's Sync returned: it fails the
// log only while w is still failed. Once a heal has cut w back (a new
// epoch) the error is stale, and failing the log again would send the next
// heal hunting for a failure that is gone.
func (l *Log) failWriter(w *framelog.Writer, err error) {
	l.mu.Lock()
	if w.Err() != nil {
		l.failLocked(err)
	}
	l.mu.Unlock()
}

func (l *Log) failLocked(err error) {
	if err == nil || !errors.Is(err, ErrStorage) || l.err != nil {
		return
	}
	l.err = fmt.Errorf("receipt log: %w", err)
	l.down.Store(true)
}

// Storage returns nil while the log takes writes. After the storage
// refused one it tries to heal (see healLocked) and returns why it could
// not, wrapping ErrStorage. It costs one atomic load while healthy, so a
// serve may ask before it does any work, and readiness checks may poll it.
func (l *Log) Storage() error {
	if !l.down.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.err == nil {
		return nil
	}
	return l.healLocked()
}

// healLocked brings a failed log back, called with mu held:
//
//  1. each writer cuts its file back to its last durable frame and makes
//     the cut durable (framelog.Writer.Recover), so no torn frame is left
//     for the next append to follow;
//  2. the head rolls back to the last durable record: every record after
//     it was refused to its sealer (its Sync failed), so none was
//     acknowledged, and the next append takes its sequence again;
//  3. a probe file is written, fsynced and removed: only storage that
//     takes writes again ends the failure.
//
// Any step failing leaves the log failed, with that step's error; the
// next call starts again. Acknowledged records are never touched: they lie
// below the cut.
func (l *Log) healLocked() error {
	cause := l.err
	// The writer is asked whether it failed only once it has cut (or tried
	// to): Recover first waits out any flush in flight, so a flush whose
	// write or fsync fails after this heal began, and whose frames Recover
	// then cuts off, still rolls the head back. (Asking before Recover lets
	// that flush fail unseen: the file is cut while the head keeps the cut
	// records, and the next append is built against a head that is gone,
	// its frame written straight after the cut with a later sequence.)
	cut, rerr := l.w.Recover()
	if cut || l.w.Err() != nil {
		// The segment's writer failed: every frame past its last durable
		// one is lost with it, whether or not the cut succeeded. Synced is
		// settled here: after a cut nothing of the new epoch is enqueued
		// yet (mu is held), and a failed writer flushes nothing more.
		// Frames written but not synced lie past it and roll back too.
		// (When only the checkpoints file or a rotation failed, the records
		// in flight are becoming durable and stay.)
		l.rollBackLocked(l.w.Synced())
	}
	if rerr != nil {
		return fmt.Errorf("receipt log: heal: %w (failed first by: %v)", rerr, cause)
	}
	if _, err := l.ck.Recover(); err != nil {
		return fmt.Errorf("receipt log: heal checkpoints: %w (failed first by: %v)", err, cause)
	}
	if err := l.probe(); err != nil {
		return fmt.Errorf("receipt log: %w: heal: %w (failed first by: %v)", ErrStorage, err, cause)
	}
	l.err = nil
	l.down.Store(false)
	return nil
}

// rollBackLocked sets the head back to the last record that ends at or
// below synced, the writer's durable end.
func (l *Log) rollBackLocked(synced int64) {
	l.trimPendingLocked(synced)
	l.pend = l.pend[:0] // what is left ended past the durable end
	st := l.base
	l.next, l.head, l.headSeg, l.headOff, l.headEnd, l.headEp = st.next, st.head, st.seg, st.off, st.end, st.epoch
	if !st.steward {
		l.steward = nil
	}
	l.index.cut(l.next)
}

// probe writes probeBytes to a scratch file beside the segments, fsyncs
// it and removes it.
func (l *Log) probe() error {
	return framelog.Probe(filepath.Join(l.dir, probeName), probeBytes, l.noSync, l.files)
}
